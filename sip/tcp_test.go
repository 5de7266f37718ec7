package sip

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestGuardedListenerBounds: connections over the per-source or total
// bound, and strangers' when admit refuses them, are closed at accept;
// closing a connection gives its place back.
func TestGuardedListenerBounds(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		refused []string
	)
	stranger := netip.MustParseAddr("127.0.0.9")
	l := newGuardedListener(inner, func() tcpLimits { return tcpLimits{idle: time.Minute, max: 3, perSource: 2} },
		func(ip netip.Addr) (bool, bool) { return ip != stranger, true },
		func(r string) { mu.Lock(); refused = append(refused, r); mu.Unlock() })
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func(ip string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closedByServer reports whether the server closed c at once.
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	for i, tc := range []struct {
		ip     string
		closed bool
	}{
		{"127.0.0.2", false},
		{"127.0.0.2", false},
		{"127.0.0.2", true}, // third from one source: over per_source 2
		{"127.0.0.9", true}, // a stranger
		{"127.0.0.3", false},
		{"127.0.0.4", true}, // fourth in all: over max 3
	} {
		c := dial(tc.ip)
		if got := closedByServer(c); got != tc.closed {
			t.Fatalf("connection %d from %s: closed at accept = %v, want %v", i, tc.ip, got, tc.closed)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"tcp_limit", "unknown_source", "tcp_limit"}; len(refused) != 3 || refused[0] != want[0] || refused[1] != want[1] || refused[2] != want[2] {
		t.Errorf("refusals %v, want %v", refused, want)
	}
	// Closing a served connection frees its place.
	first := <-accepted
	first.Close()
	if open, _, _ := l.counts(netip.MustParseAddr("127.0.0.2")); open != 2 {
		t.Errorf("open after a close = %d, want 2", open)
	}
	if c := dial("127.0.0.4"); closedByServer(c) {
		t.Error("a connection after one closed was refused")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// failingListener fails its first Accepts with a temporary error.
type failingListener struct {
	net.Listener
	fails int
}

func (f *failingListener) Accept() (net.Conn, error) {
	if f.fails > 0 {
		f.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: errors.New("too many open files")}
	}
	return f.Listener.Accept()
}

// TestGuardedListenerSurvivesAcceptErrors: descriptors running out must not
// end TCP serving (sipgo returns on any Accept error): the listener waits
// and accepts again; only a closed listener ends it.
func TestGuardedListenerSurvivesAcceptErrors(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepts int
	l := newGuardedListener(&failingListener{Listener: inner, fails: 3},
		func() tcpLimits { return tcpLimits{idle: time.Minute, max: 10, perSource: 10} },
		func(netip.Addr) (bool, bool) { return true, true }, func(r string) {
			if r == "accept" {
				accepts++
			}
		})
	go func() {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after temporary errors: %v", err)
	}
	c.Close()
	if accepts != 3 {
		t.Errorf("accept errors counted %d, want 3", accepts)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept on a closed listener: %v, want net.ErrClosed", err)
	}
}

// TestStrangersHoldAQuarterOfTCP: strangers (served, not known) hold at
// most a quarter of max_connections whatever the number of their
// addresses; known parties still connect up to the total bound, and a
// stranger's place freed is a stranger's again.
func TestStrangersHoldAQuarterOfTCP(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("127.0.0.2")
	l := newGuardedListener(inner, func() tcpLimits { return tcpLimits{idle: time.Minute, max: 8, perSource: 2} },
		func(ip netip.Addr) (bool, bool) { return true, ip == peer }, func(string) {})
	defer l.Close()
	accepted := make(chan net.Conn, 32)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func(ip string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	open := 0
	for i := 1; i <= 6; i++ {
		if !closedByServer(dial("127.0.1." + itoa(i))) {
			open++
		}
	}
	if open != 2 {
		t.Errorf("strangers from 6 addresses: %d connections served, want 2 (a quarter of 8)", open)
	}
	for i := 0; i < 2; i++ {
		if closedByServer(dial("127.0.0.2")) {
			t.Fatalf("the peer's connection %d was refused with strangers at their share", i)
		}
	}
	if total, strangers, _ := l.counts(peer); total != 4 || strangers != 2 {
		t.Errorf("open %d (strangers %d), want 4 (2)", total, strangers)
	}
	// A stranger's connection closed frees a place for a stranger.
	(<-accepted).Close()
	if closedByServer(dial("127.0.1.9")) {
		t.Error("a stranger was refused after another stranger's connection closed")
	}
}
