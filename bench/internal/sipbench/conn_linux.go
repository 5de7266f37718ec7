//go:build linux

package sipbench

import (
	"net"
	"syscall"

	"github.com/cpsguard/cpsguard/internal/siptest"
)

// listen opens a UDP socket with kernel receive timestamps
// (siptest.EnableTimestamps, read back by siptest.ReadStamped) and 8 MiB
// buffers (SO_RCVBUFFORCE when root, else as large as allowed).
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
	_ = siptest.EnableTimestamps(c) // else ReadStamped gives the read time
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 8<<20)
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, 8<<20)
		})
	}
	return c, nil
}
