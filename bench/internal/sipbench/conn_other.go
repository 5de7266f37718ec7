//go:build !linux

package sipbench

import (
	"net"
	"time"
)

func listen(addr string) (*net.UDPConn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	c, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	_ = c.SetReadBuffer(8 << 20)
	_ = c.SetWriteBuffer(8 << 20)
	return c, nil
}

const oobSize = 0

// readStamped reads one datagram; without kernel timestamps the local
// clock after the read stands in.
func readStamped(c *net.UDPConn, buf, _ []byte) (int, *net.UDPAddr, time.Time, error) {
	n, from, err := c.ReadFromUDP(buf)
	return n, from, time.Now(), err
}
