//go:build linux

package ingress

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

var errBatchUnsupported = errors.New("ingress: recvmmsg not supported")

// mmsghdr is struct mmsghdr of <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// batchReader reads many datagrams per system call with recvmmsg(2). It
// is used by one goroutine at a time.
type batchReader struct {
	rc    syscall.RawConn
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	bufs  [][]byte

	// recv is the RawConn.Read callback, made once (a closure made per
	// read, with the results it sets, cost two allocations a read); it
	// leaves its results in n and errno.
	recv  func(fd uintptr) bool
	n     int
	errno syscall.Errno
}

func newBatchReader(conn *net.UDPConn, n, size int) (*batchReader, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &batchReader{rc: rc, hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n), bufs: make([][]byte, n)}
	for i := range n {
		r.bufs[i] = make([]byte, size)
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(size)
		r.hdrs[i].hdr.Iov = &r.iovs[i]
		r.hdrs[i].hdr.SetIovlen(1)
		r.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&r.names[i]))
	}
	r.recv = r.recvmmsg
	return r, nil
}

// recvmmsg is the RawConn.Read callback of read: one recvmmsg(2) without
// waiting, false (wait for the socket) when nothing is there.
func (r *batchReader) recvmmsg(fd uintptr) bool {
	for {
		nn, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])),
			uintptr(len(r.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until the socket is readable
		}
		r.n, r.errno = int(nn), e
		return true
	}
}

// read waits for datagrams and reads as many as are there, up to the
// batch's size.
func (r *batchReader) read() (int, error) {
	for i := range r.hdrs {
		r.hdrs[i].hdr.Namelen = uint32(unsafe.Sizeof(r.names[i]))
		r.hdrs[i].hdr.Flags = 0
		r.hdrs[i].len = 0
	}
	r.n, r.errno = 0, 0
	if err := r.rc.Read(r.recv); err != nil {
		return 0, err
	}
	n, errno := r.n, r.errno
	switch errno {
	case 0:
		return n, nil
	case unix.ENOSYS, unix.EOPNOTSUPP:
		return 0, errBatchUnsupported
	}
	return 0, &net.OpError{Op: "recvmmsg", Net: "udp", Err: errno}
}

// datagram returns the i-th datagram of the last read; false when it was
// cut short by the buffer (too large) or its source is not an IP address.
func (r *batchReader) datagram(i int) ([]byte, netip.AddrPort, bool) {
	h := &r.hdrs[i]
	if h.hdr.Flags&unix.MSG_TRUNC != 0 || int(h.len) >= len(r.bufs[i]) {
		return nil, netip.AddrPort{}, false
	}
	from, ok := sockaddr(&r.names[i])
	return r.bufs[i][:h.len], from, ok
}

// sockaddr decodes an AF_INET or AF_INET6 address.
func sockaddr(sa *unix.RawSockaddrInet6) (netip.AddrPort, bool) {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port), true
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		a := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			a = a.WithZone(zoneName(sa.Scope_id))
		}
		return netip.AddrPortFrom(a, port), true
	}
	return netip.AddrPort{}, false
}

// zones caches interface names by index (a link-local source names its
// interface on every datagram).
var zones sync.Map

// zoneName names an interface index as the net package does.
func zoneName(idx uint32) string {
	if z, ok := zones.Load(idx); ok {
		return z.(string)
	}
	z := strconv.FormatUint(uint64(idx), 10)
	if ifi, err := net.InterfaceByIndex(int(idx)); err == nil {
		z = ifi.Name
	}
	zones.Store(idx, z)
	return z
}
