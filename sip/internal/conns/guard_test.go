package conns

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/sip/internal/ingress"
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
	l := NewGuardedListener(inner, func() Limits { return Limits{Idle: time.Minute, Max: 3, PerSource: 2} },
		func(ip netip.Addr) (bool, ingress.Party, bool) { return ip != stranger, ingress.Party{Addr: ip}, true },
		func(r string) { mu.Lock(); refused = append(refused, r); mu.Unlock() }, nil)
	defer l.Close()
	accepted := acceptAll(l, 16)
	dial := dialFrom(t, inner.Addr().String())
	// closedByServer reports whether the server closed c at once: within
	// 300 ms when it should not (silence is the answer), within 10 s when
	// it should (a close ends the wait at once; 300 ms was all the accept
	// loop had under -race on a loaded machine).
	closedByServer := func(c net.Conn, want bool) bool {
		wait := 300 * time.Millisecond
		if want {
			wait = 10 * time.Second
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
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
		if got := closedByServer(c, tc.closed); got != tc.closed {
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
	if c := dial("127.0.0.4"); closedByServer(c, false) {
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
	l := NewGuardedListener(&failingListener{Listener: inner, fails: 3},
		func() Limits { return Limits{Idle: time.Minute, Max: 10, PerSource: 10} },
		func(ip netip.Addr) (bool, ingress.Party, bool) { return true, ingress.Party{Addr: ip}, true }, func(r string) {
			if r == "accept" {
				accepts++
			}
		}, nil)
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
	l := NewGuardedListener(inner, func() Limits { return Limits{Idle: time.Minute, Max: 8, PerSource: 2} },
		func(ip netip.Addr) (bool, ingress.Party, bool) { return true, ingress.Party{Addr: ip}, ip == peer }, func(string) {}, nil)
	defer l.Close()
	accepted := acceptAll(l, 32)
	dial := dialFrom(t, inner.Addr().String())
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

// acceptHarness serves l, and tells each dial's fate: the connection
// accepted, or the reason it was refused at accept.
type acceptHarness struct {
	t        *testing.T
	l        *GuardedListener
	accepted chan net.Conn
	refused  chan string
}

func newAcceptHarness(t *testing.T, limits Limits, classify func(netip.Addr) (bool, ingress.Party, bool)) *acceptHarness {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &acceptHarness{t: t, accepted: make(chan net.Conn, 256), refused: make(chan string, 256)}
	h.l = NewGuardedListener(inner, func() Limits { return limits }, classify,
		func(r string) { h.refused <- r }, nil)
	t.Cleanup(func() { h.l.Close() })
	go func() {
		for {
			c, err := h.l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			h.accepted <- c
		}
	}()
	return h
}

// dial connects from ip and returns the server's side when it was
// accepted, nil when it was refused.
func (h *acceptHarness) dial(ip string) net.Conn {
	h.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", h.l.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	select {
	case s := <-h.accepted:
		return s
	case <-h.refused:
		return nil
	case <-time.After(10 * time.Second):
		h.t.Fatalf("connection from %s neither accepted nor refused", ip)
		return nil
	}
}

// TestTCPPartyShareAndReserve: a known party holds at most partyMax
// connections however many sources it uses; once big parties have filled
// the known room but its reserve, a second big party is held back while a
// party holding fewer than max_connections_per_source still connects.
func TestTCPPartyShareAndReserve(t *testing.T) {
	lim := Limits{Idle: time.Minute, Max: 20, PerSource: 2, Parties: 4}
	// 20 - 5 for strangers = 15; 2 × 15 / 4 = 7 a party; reserve 2.
	if lim.knownRoom() != 15 || lim.partyMax() != 7 || lim.partyReserve() != 2 {
		t.Fatalf("known room %d, party max %d, reserve %d; want 15, 7, 2", lim.knownRoom(), lim.partyMax(), lim.partyReserve())
	}
	// 127.0.30.0/24 is peer a, 127.0.31.0/24 peer b, 127.0.32.x one
	// address each of peers c and d.
	h := newAcceptHarness(t, lim, func(ip netip.Addr) (bool, ingress.Party, bool) {
		b := ip.As4()
		switch b[2] {
		case 30:
			return true, ingress.Party{Name: "a"}, true
		case 31:
			return true, ingress.Party{Name: "b"}, true
		case 32:
			return true, ingress.Party{Name: "cd" + itoa(int(b[3]))}, true
		}
		return true, ingress.Party{}, false
	})
	flood := func(net int) int {
		n := 0
		for i := 1; i <= 10; i++ {
			for j := 0; j < 2; j++ {
				if h.dial("127.0."+itoa(net)+"."+itoa(i)) != nil {
					n++
				}
			}
		}
		return n
	}
	if n := flood(30); n != 7 {
		t.Errorf("peer a from 10 sources: %d connections, want its share 7", n)
	}
	// b stops where the known room's last 2 places begin: 7 + 6 = 13.
	if n := flood(31); n != 6 {
		t.Errorf("peer b from 10 sources: %d connections, want 6 (the reserve kept)", n)
	}
	for _, ip := range []string{"127.0.32.1", "127.0.32.2"} {
		for j := 0; j < 2; j++ {
			if h.dial(ip) == nil {
				t.Errorf("quiet peer %s: connection %d refused with big peers at their shares", ip, j)
			}
		}
	}
	parties, _ := h.l.partyCounts()
	if parties[ingress.Party{Name: "a"}] != 7 || parties[ingress.Party{Name: "b"}] != 6 || parties[ingress.Party{Name: "cd1"}] != 2 || parties[ingress.Party{Name: "cd2"}] != 2 {
		t.Errorf("connections by party %v", parties)
	}
}

// TestTCPPartyCountsAcrossReload: a connection counts against the party
// its source had at accept until it closes, whatever a reload says of the
// source since: the counts come back to zero, never below, and a second
// Close gives back nothing more.
func TestTCPPartyCountsAcrossReload(t *testing.T) {
	var owner atomic.Value // "p", "r" or "" (a stranger)
	owner.Store("p")
	lim := Limits{Idle: time.Minute, Max: 100, PerSource: 4, Parties: 2}
	h := newAcceptHarness(t, lim, func(netip.Addr) (bool, ingress.Party, bool) {
		o := owner.Load().(string)
		return true, ingress.Party{Name: o}, o != ""
	})
	var before []net.Conn
	for i := 1; i <= 4; i++ {
		c := h.dial("127.0.40." + itoa(i))
		if c == nil {
			t.Fatalf("connection %d refused", i)
		}
		before = append(before, c)
	}
	owner.Store("r") // a reload gives the sources to another peer
	moved := h.dial("127.0.40.1")
	owner.Store("") // and then to nobody
	stranger := h.dial("127.0.40.2")
	if moved == nil || stranger == nil {
		t.Fatal("a connection after the reloads was refused")
	}
	parties, _ := h.l.partyCounts()
	if parties[ingress.Party{Name: "p"}] != 4 || parties[ingress.Party{Name: "r"}] != 1 || len(parties) != 2 {
		t.Errorf("after the reloads: %v, want p 4, r 1", parties)
	}
	if open, strangers, _ := h.l.counts(netip.MustParseAddr("127.0.40.1")); open != 6 || strangers != 1 {
		t.Errorf("after the reloads: open %d, strangers %d; want 6, 1", open, strangers)
	}
	for _, c := range append(before, moved, stranger) {
		c.Close()
		c.Close()
	}
	parties, sources := h.l.partyCounts()
	open, strangers, _ := h.l.counts(netip.MustParseAddr("127.0.40.1"))
	if len(parties) != 0 || sources != 0 || open != 0 || strangers != 0 {
		t.Errorf("all closed: parties %v, sources %d, open %d, strangers %d; want none", parties, sources, open, strangers)
	}
}

// TestHandshakeBucket: one second's worth in hand, refilled at the rate,
// never more than a second's worth, and a rate lowered by a reload caps
// what is in hand at once.
func TestHandshakeBucket(t *testing.T) {
	var b HandshakeBucket
	t0 := time.Unix(1000, 0)
	takes := func(at time.Time, rate, n int) int {
		got := 0
		for i := 0; i < n; i++ {
			if b.take(at, rate) {
				got++
			}
		}
		return got
	}
	if n := takes(t0, 2, 5); n != 2 {
		t.Errorf("at start: %d tokens, want 2", n)
	}
	if n := takes(t0.Add(500*time.Millisecond), 2, 5); n != 1 {
		t.Errorf("after 500ms at 2/s: %d tokens, want 1", n)
	}
	if n := takes(t0.Add(time.Hour), 2, 5); n != 2 {
		t.Errorf("after an hour: %d tokens, want 2 (one second's worth)", n)
	}
	if n := takes(t0.Add(2*time.Hour), 1, 5); n != 1 {
		t.Errorf("at a rate lowered to 1/s: %d tokens, want 1", n)
	}
	if n := takes(t0, 1, 5); n != 0 {
		t.Errorf("a clock read earlier: %d tokens, want 0", n)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// acceptAll accepts l's connections into a channel of capacity n, closed
// when Accept fails.
func acceptAll(l net.Listener, n int) chan net.Conn {
	accepted := make(chan net.Conn, n)
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
	return accepted
}

// dialFrom returns a dialer of TCP connections to addr from a given
// loopback address, each closed when the test ends.
func dialFrom(t *testing.T, addr string) func(ip string) net.Conn {
	return func(ip string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}
