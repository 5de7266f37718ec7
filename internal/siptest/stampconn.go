package siptest

import (
	"net"
	"time"
)

// stampConn is the Carrier's UDP listener: it hands every datagram and its
// receive time (ReadStamped: the kernel's where available) to onRead before
// sipgo parses it.
type stampConn struct {
	*net.UDPConn
	oob    []byte
	onRead func(data []byte, at time.Time)
}

// newStampConn wraps c; without kernel timestamps the read time stands in.
func newStampConn(c *net.UDPConn, onRead func([]byte, time.Time)) net.PacketConn {
	_ = EnableTimestamps(c)
	return &stampConn{UDPConn: c, oob: make([]byte, OOBSize), onRead: onRead}
}

// ReadFrom is called by sipgo's single read loop of the listener.
func (s *stampConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, at, err := ReadStamped(s.UDPConn, b, s.oob)
	if err != nil {
		return n, nil, err
	}
	s.onRead(b[:n], at)
	return n, addr, nil
}
