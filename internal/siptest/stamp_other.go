//go:build !linux

package siptest

import (
	"errors"
	"net"
	"time"
)

// OOBSize is the out-of-band buffer ReadStamped needs.
const OOBSize = 64

// EnableTimestamps reports errors.ErrUnsupported: kernel receive timestamps
// are only wired up on Linux.
func EnableTimestamps(c *net.UDPConn) error { return errors.ErrUnsupported }

// ReadStamped reads one datagram from c into buf and returns the local
// clock after the read as its arrival time.
func ReadStamped(c *net.UDPConn, buf, _ []byte) (n int, from *net.UDPAddr, at time.Time, err error) {
	n, from, err = c.ReadFromUDP(buf)
	return n, from, time.Now(), err
}
