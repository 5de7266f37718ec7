//go:build !linux

package sipbench

import "net"

// listen opens a UDP socket with 8 MiB buffers; siptest.ReadStamped gives
// the read time for its datagrams (no kernel timestamps here).
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
