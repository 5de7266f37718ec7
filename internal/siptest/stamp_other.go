//go:build !linux

package siptest

import (
	"net"
	"time"
)

// newStampConn falls back to the read time where kernel timestamps are not
// wired up.
func newStampConn(c *net.UDPConn, onRead func([]byte, time.Time)) net.PacketConn {
	return &readTimeConn{UDPConn: c, onRead: onRead}
}

type readTimeConn struct {
	*net.UDPConn
	onRead func([]byte, time.Time)
}

func (r *readTimeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := r.UDPConn.ReadFrom(b)
	if err == nil {
		r.onRead(b[:n], time.Now())
	}
	return n, addr, err
}
