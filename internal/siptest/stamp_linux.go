package siptest

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

// OOBSize is the out-of-band buffer ReadStamped needs: room for one
// SCM_TIMESTAMPNS control message.
const OOBSize = 64

// EnableTimestamps asks the kernel to stamp every datagram c receives with
// its receive time (SO_TIMESTAMPNS), which ReadStamped returns: arrival
// times then leave out the reader's own scheduling delays.
func EnableTimestamps(c *net.UDPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// ReadStamped reads one datagram from c into buf and returns its kernel
// receive time, or the local clock after the read when the kernel gave none
// (EnableTimestamps not called or failed). oob is scratch space of at least
// OOBSize bytes; c must not be read concurrently with the same oob.
func ReadStamped(c *net.UDPConn, buf, oob []byte) (n int, from *net.UDPAddr, at time.Time, err error) {
	n, oobn, _, from, err := c.ReadMsgUDP(buf, oob)
	if err != nil {
		return n, from, time.Time{}, err
	}
	if oobn > 0 {
		if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
					ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
					return n, from, time.Unix(ts.Sec, ts.Nsec), nil
				}
			}
		}
	}
	return n, from, time.Now(), nil
}
