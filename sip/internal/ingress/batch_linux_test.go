//go:build linux

package ingress

import (
	"net"
	"net/netip"
	"testing"
)

// TestBatchReadAllocatesNothing: a recvmmsg read of a datagram that is
// there allocates nothing (it runs once per datagram at a low rate); the
// datagram and its source come out whole.
func TestBatchReadAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector")
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r, err := newBatchReader(ln, 8, 2048)
	if err != nil {
		t.Skip("recvmmsg:", err)
	}
	from := sender(t, "127.0.0.2")
	to := ln.LocalAddr().(*net.UDPAddr).AddrPort()
	msg := []byte("OPTIONS sip:a@127.0.0.1 SIP/2.0\r\n\r\n")
	readOne := func() {
		if _, err := from.WriteToUDPAddrPort(msg, to); err != nil {
			t.Fatal(err)
		}
		n, err := r.read()
		if err != nil || n != 1 {
			t.Fatalf("read: %d datagrams, %v; want 1", n, err)
		}
		b, src, ok := r.datagram(0)
		if !ok || string(b) != string(msg) || src.Addr() != netip.MustParseAddr("127.0.0.2") {
			t.Fatalf("datagram %q from %v (%v), want %q from 127.0.0.2", b, src, ok, msg)
		}
	}
	readOne()
	if n := testing.AllocsPerRun(100, readOne); n != 0 {
		t.Errorf("got %v allocations per send and read, want 0", n)
	}
}
