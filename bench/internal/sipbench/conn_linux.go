//go:build linux

package sipbench

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

// listen opens a UDP socket with kernel receive timestamps (SO_TIMESTAMPNS)
// and 8 MiB buffers (SO_RCVBUFFORCE when root, else as large as allowed).
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
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 8<<20)
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, 8<<20)
		})
	}
	return c, nil
}

// oobSize is enough for one SCM_TIMESTAMPNS control message.
const oobSize = 64

// readStamped reads one datagram and the kernel's receive time (the local
// clock when the kernel gave none).
func readStamped(c *net.UDPConn, buf, oob []byte) (int, *net.UDPAddr, time.Time, error) {
	n, oobn, _, from, err := c.ReadMsgUDP(buf, oob)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	at := time.Time{}
	if oobn > 0 {
		if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
					ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
					at = time.Unix(ts.Sec, ts.Nsec)
				}
			}
		}
	}
	if at.IsZero() {
		at = time.Now()
	}
	return n, from, at, nil
}
