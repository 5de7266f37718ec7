package siptest

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

// stampConn is a UDP listener that reads the kernel's receive time of each
// datagram (SO_TIMESTAMPNS), so arrival times do not include the test
// process's own scheduling delays.
type stampConn struct {
	*net.UDPConn
	oob    []byte
	onRead func(data []byte, at time.Time)
}

func newStampConn(c *net.UDPConn, onRead func([]byte, time.Time)) net.PacketConn {
	raw, err := c.SyscallConn()
	if err != nil {
		return c
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return c
	}
	return &stampConn{UDPConn: c, oob: make([]byte, 128), onRead: onRead}
}

// ReadFrom is called by sipgo's single read loop of the listener.
func (s *stampConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, oobn, _, addr, err := s.ReadMsgUDP(b, s.oob)
	if err != nil {
		return n, addr, err
	}
	at := time.Now()
	if msgs, perr := syscall.ParseSocketControlMessage(s.oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
				ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
				at = time.Unix(ts.Sec, ts.Nsec)
			}
		}
	}
	s.onRead(b[:n], at)
	return n, addr, err
}
