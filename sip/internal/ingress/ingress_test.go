package ingress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// listen opens a UDP socket on 127.0.0.1 and runs g's reader on it.
func listen(t testing.TB, g *Ingress) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadBuffer(4 << 20)
	done := make(chan error, 1)
	go func() { done <- g.Read(c) }()
	t.Cleanup(func() {
		_ = c.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read ended with %v, want net.ErrClosed", err)
		}
		g.Close()
	})
	return c
}

// sender opens a UDP socket on ip (a 127.x.y.z address) to send from.
func sender(t testing.TB, ip string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func send(t testing.TB, from *net.UDPConn, to *net.UDPConn, msg string) {
	t.Helper()
	if _, err := from.WriteTo([]byte(msg), to.LocalAddr()); err != nil {
		t.Fatal(err)
	}
}

func bye(callID string, seq int) string {
	return fmt.Sprintf("BYE sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2;branch=z9hG4bK%d\r\nCall-ID: %s\r\nCSeq: %d BYE\r\n\r\n", seq, callID, seq)
}

func inviteOf(callID string, extra string) string {
	return fmt.Sprintf("INVITE sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2;branch=z9hG4bK-%s\r\nCall-ID: %s\r\n%s\r\n", callID, callID, extra)
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A dialog's datagrams are handled in order on one worker; different
// calls spread over the workers.
func TestShardsByCallID(t *testing.T) {
	type seen struct {
		worker int
		seq    []int
	}
	var mu sync.Mutex
	calls := map[string]*seen{}
	workersUsed := map[int]bool{}
	var total atomic.Int64
	g, err := New(Options{
		Workers: 4,
		Party:   func(netip.Addr) (Party, bool) { return Party{Name: "peer"}, true },
		Handle: func(d *Datagram) {
			var seq int
			_, _ = fmt.Sscanf(string(d.Data[strings.Index(string(d.Data), "CSeq: ")+6:]), "%d", &seq)
			mu.Lock()
			defer mu.Unlock()
			s := calls[string(d.Info.CallID)]
			if s == nil {
				s = &seen{worker: d.Worker}
				calls[string(d.Info.CallID)] = s
			}
			if s.worker != d.Worker {
				t.Errorf("call %s on workers %d and %d", d.Info.CallID, s.worker, d.Worker)
			}
			s.seq = append(s.seq, seq)
			workersUsed[d.Worker] = true
			total.Add(1)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t, g)
	from := sender(t, "127.0.0.2")
	const nCalls, perCall = 64, 20
	for i := range perCall {
		for c := range nCalls {
			send(t, from, ln, bye(fmt.Sprintf("call-%d", c), i))
		}
		time.Sleep(time.Millisecond) // stay within the socket's buffer
	}
	waitUntil(t, "every datagram", func() bool { return total.Load() == nCalls*perCall })
	mu.Lock()
	defer mu.Unlock()
	for id, s := range calls {
		for i, seq := range s.seq {
			if seq != i {
				t.Fatalf("call %s handled in the order %v", id, s.seq)
			}
		}
	}
	if len(workersUsed) < 2 {
		t.Errorf("64 calls used %d worker(s), want them spread", len(workersUsed))
	}
}

// harness is an Ingress whose handler blocks until released, so the
// budgets can be filled.
type harness struct {
	g       *Ingress
	release chan struct{}
	handled chan *Datagram
	drops   sync.Map // reason -> *atomic.Int64
	shed    atomic.Int64
}

func newHarness(t testing.TB, budget *Budget, party func(netip.Addr) (Party, bool)) *harness {
	return newHarnessN(t, budget, party, 1)
}

// newHarnessN is newHarness with the given number of workers.
func newHarnessN(t testing.TB, budget *Budget, party func(netip.Addr) (Party, bool), workers int) *harness {
	h := &harness{release: make(chan struct{}), handled: make(chan *Datagram, 1<<16)}
	g, err := New(Options{
		Workers: workers,
		Budget:  budget,
		Party:   party,
		Handle: func(d *Datagram) {
			<-h.release
			c := *d
			c.Data = append([]byte(nil), d.Data...)
			h.handled <- &c
		},
		Shed: func(d *Datagram) bool { h.shed.Add(1); return true },
		Drop: func(reason string) {
			v, _ := h.drops.LoadOrStore(reason, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	t.Cleanup(func() {
		close(h.release)
		g.Close()
	})
	return h
}

func (h *harness) dropped(reason string) int64 {
	v, ok := h.drops.Load(reason)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func byIP(names map[string]string) func(netip.Addr) (Party, bool) {
	return func(ip netip.Addr) (Party, bool) {
		n, ok := names[ip.String()]
		if !ok {
			return Stranger, false
		}
		return Party{Name: n}, true
	}
}

var (
	peerA = netip.MustParseAddrPort("127.0.0.2:5060")
	peerB = netip.MustParseAddrPort("127.0.0.3:5060")
)

// One party's large datagrams take at most its share of the bytes: a
// quiet party's small ones still find room (issue 22, C7).
func TestPartyBytes(t *testing.T) {
	b := DefaultBudget
	b.Bytes, b.PartyBytes, b.QuietBytes, b.ReserveBytes = 1<<20, 256<<10, 64<<10, 256<<10
	h := newHarness(t, &b, byIP(map[string]string{"127.0.0.2": "a", "127.0.0.3": "b"}))
	big := bye("big", 1) + strings.Repeat("x", 15000)
	for i := range 100 {
		h.g.take(nil, []byte(strings.Replace(big, "big", fmt.Sprint("big", i), 1)), peerA, time.Now())
	}
	if got := h.g.QueuedBytes(); got > int64(b.PartyBytes) {
		t.Fatalf("one party holds %d bytes, over its %d", got, b.PartyBytes)
	}
	if h.dropped(DropFull) == 0 {
		t.Fatal("no datagram of the flooding party was refused: the test proves nothing")
	}
	before := h.dropped(DropFull)
	for i := range 20 {
		h.g.take(nil, []byte(bye(fmt.Sprint("quiet", i), i)), peerB, time.Now())
	}
	if got := h.dropped(DropFull) - before; got != 0 {
		t.Fatalf("%d of the quiet party's 20 datagrams refused", got)
	}
}

// A party cannot pile its whole share of a lane on one worker by sending
// everything under one Call-ID (every datagram of a Call-ID goes to the
// same worker): there it would hold the share of every worker, and delay
// the other parties' calls that hash to that worker by all of it. On one
// worker it holds at most twice its even part of the share (Least at
// least); spread over the workers, its whole share; another party still
// queues on the worker it pinned.
func TestShareOfOneWorker(t *testing.T) {
	b := DefaultBudget
	b.Lanes[LaneFast] = LaneBudget{Total: 1000, Share: 400, Least: 10}
	h := newHarnessN(t, &b, byIP(map[string]string{"127.0.0.2": "a", "127.0.0.3": "b"}), 4)
	for i := range 400 {
		h.g.take(nil, []byte(bye("pinned", i)), peerA, time.Now())
	}
	// The one worker that takes "pinned" holds its first datagram in the
	// handler (out of the queue, still in the budget).
	if got := h.g.Queued(LaneFast); got > 2*400/4 {
		t.Fatalf("one Call-ID queued %d datagrams on one worker, want at most %d", got, 2*400/4)
	}
	for i := range 400 {
		h.g.take(nil, []byte(bye(fmt.Sprint("spread", i), i)), peerA, time.Now())
	}
	if got := h.g.Queued(LaneFast); got < 350 {
		t.Fatalf("spread over the workers: %d queued in all, want about the share of 400", got)
	}
	before := h.dropped(DropFull)
	for i := range 5 {
		h.g.take(nil, []byte(bye("pinned", 1000+i)), peerB, time.Now())
	}
	if got := h.dropped(DropFull) - before; got != 0 {
		t.Fatalf("%d of another party's 5 datagrams on the pinned worker refused", got)
	}
}

// Once only the reserve is left, a party holding its Least or more may
// queue no more: a quiet party still finds room behind flooders.
func TestReserveForQuietParties(t *testing.T) {
	b := DefaultBudget
	b.Lanes[LaneFast] = LaneBudget{Total: 100, Share: 40, Least: 5, Reserve: 25}
	names := map[string]string{"127.0.0.9": "quiet"}
	for i := range 3 {
		names[fmt.Sprintf("127.0.1.%d", i)] = fmt.Sprint("flood", i)
	}
	h := newHarness(t, &b, byIP(names))
	for i := range 3 {
		src := netip.MustParseAddrPort(fmt.Sprintf("127.0.1.%d:5060", i))
		for j := range 40 {
			h.g.take(nil, []byte(bye(fmt.Sprint(i, "-", j), j)), src, time.Now())
		}
	}
	// flood0 takes its 40, flood1 35 (to the reserve), flood2 its 5.
	if got := h.g.Queued(LaneFast); got != 80 {
		t.Fatalf("flooders queued %d, want 80", got)
	}
	quiet := netip.MustParseAddrPort("127.0.0.9:5060")
	for j := range 6 {
		h.g.take(nil, []byte(bye(fmt.Sprint("q", j), j)), quiet, time.Now())
	}
	if got := h.g.Queued(LaneFast); got != 85 {
		t.Fatalf("after the quiet party: %d queued, want 85 (5 of its 6)", got)
	}
}

// A party's share of the slow lane is its own: past it, its INVITEs go to
// the shed lane and are answered, and another party's still queue.
func TestSlowShareAndShedLane(t *testing.T) {
	b := DefaultBudget
	b.Lanes[LaneSlow] = LaneBudget{Total: 1000, Share: 10}
	h := newHarness(t, &b, byIP(map[string]string{"127.0.0.2": "a", "127.0.0.3": "b"}))
	for i := range 15 {
		h.g.take(nil, []byte(inviteOf(fmt.Sprint("a", i), "")), peerA, time.Now())
	}
	h.g.take(nil, []byte("OPTIONS sip:a SIP/2.0\r\nCall-ID: o\r\n\r\n"), peerA, time.Now())
	if got := h.g.Queued(LaneSlow); got != 10 {
		t.Fatalf("slow lane: %d, want the share of 10", got)
	}
	// The worker answers sheds at once (the harness holds only Handle):
	// queued or answered, the 5 INVITEs over the share.
	waitUntil(t, "the INVITEs over the share shed", func() bool { return int64(h.g.Queued(LaneShed))+h.shed.Load() == 5 })
	if got := h.dropped(DropFull); got != 1 {
		t.Fatalf("dropped: %d, want the OPTIONS over the share (an INVITE only is shed)", got)
	}
	h.g.take(nil, []byte(inviteOf("b0", "")), peerB, time.Now())
	if got := h.g.Queued(LaneSlow); got != 11 {
		t.Fatalf("another party's INVITE: slow lane %d, want 11", got)
	}
}

// A copy of a waiting INVITE from the same source is not queued twice;
// from another source it is.
func TestSlowDedupe(t *testing.T) {
	entered, release := make(chan struct{}, 8), make(chan struct{})
	g, err := New(Options{
		Workers: 1,
		Party:   byIP(map[string]string{"127.0.0.2": "a", "127.0.0.3": "b"}),
		Handle: func(*Datagram) {
			entered <- struct{}{}
			<-release
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { close(release); g.Close() }()
	// The worker is held on a first datagram, so the INVITEs wait.
	g.take(nil, []byte(bye("blocker", 1)), peerA, time.Now())
	<-entered
	msg := []byte(inviteOf("x", ""))
	g.take(nil, msg, peerA, time.Now())
	g.take(nil, msg, peerA, time.Now())
	g.take(nil, msg, peerB, time.Now())
	if got := g.Queued(LaneSlow); got != 2 {
		t.Fatalf("queued %d, want 2", got)
	}
}

// Strangers are one party: 50,000 source addresses leave no state behind
// (issue 22, C8).
func TestStrangersKeepNoStatePerSource(t *testing.T) {
	h := newHarness(t, nil, byIP(nil))
	for i := range 50000 {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), uint16(1024+i%50000))
		h.g.take(nil, []byte(bye(fmt.Sprint(i), 1)), src, time.Now())
	}
	if got := h.g.Parties(); got != 1 {
		t.Fatalf("parties after 50,000 strangers: %d, want 1", got)
	}
	if got := h.g.Queued(LaneStrange); got != DefaultBudget.Lanes[LaneStrange].Total {
		t.Fatalf("strangers' lane: %d, want its bound %d", got, DefaultBudget.Lanes[LaneStrange].Total)
	}
}

// Datagrams over the bounds or the size are dropped and counted before
// anything is queued.
func TestDrops(t *testing.T) {
	h := newHarness(t, nil, byIP(map[string]string{"127.0.0.2": "a"}))
	h.g.take(nil, []byte("BYE sip:a SIP/2.0\r\nVia: a"+strings.Repeat(";p", 40)+"\r\n\r\n"), peerA, time.Now())
	h.g.take(nil, []byte("BYE sip:a SIP/2.0\r\n"+strings.Repeat("X:a\r\n", 300)+"\r\n"), peerA, time.Now())
	h.g.take(nil, make([]byte, 17<<10), peerA, time.Now())
	h.g.take(nil, []byte("\r\n\r\n"), peerA, time.Now())
	// The size is checked by the reader, the bounds by the worker before
	// the handler (which would block in this harness).
	waitUntil(t, "the drops counted", func() bool {
		return h.dropped(DropParams) == 1 && h.dropped(DropHeaders) == 1 && h.dropped(DropOversized) == 1
	})
	waitUntil(t, "nothing queued (a keepalive is not queued either)", func() bool {
		return h.g.Queued(LaneFast)+h.g.Queued(LaneSlow) == 0
	})
}

// Answers and in-dialog requests go ahead of new calls; a new call still
// gets its turn after FastRun of them; a held INVITE waits while the
// rest flows, and a wake lets it go.
func TestLaneOrderAndHold(t *testing.T) {
	var hold atomic.Bool
	hold.Store(true)
	order := make(chan string, 100)
	g, err := New(Options{
		Workers: 1,
		FastRun: 2,
		Party:   func(netip.Addr) (Party, bool) { return Party{Name: "a"}, true },
		Handle:  func(d *Datagram) { order <- string(d.Info.CallID) },
		Hold: func(d *Datagram, now time.Time) time.Duration {
			if hold.Load() {
				return time.Hour
			}
			return 0
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.take(nil, []byte(inviteOf("inv", "")), peerA, time.Now())
	for i := range 3 {
		g.take(nil, []byte(bye(fmt.Sprint("bye", i), i)), peerA, time.Now())
	}
	for _, want := range []string{"bye0", "bye1", "bye2"} {
		if got := <-order; got != want {
			t.Fatalf("got %s, want %s (the INVITE is held)", got, want)
		}
	}
	select {
	case got := <-order:
		t.Fatalf("%s handled while the INVITE is held", got)
	case <-time.After(50 * time.Millisecond):
	}
	hold.Store(false)
	g.WakeHeld()
	if got := <-order; got != "inv" {
		t.Fatalf("after the wake: %s, want inv", got)
	}

	// FastRun: with a slow datagram ready, one goes after every 2 fast.
	// The worker is held on a first datagram until everything is queued.
	block := make(chan struct{})
	g2, err := New(Options{
		Workers: 1, FastRun: 2,
		Party: func(netip.Addr) (Party, bool) { return Party{Name: "a"}, true },
		Handle: func(d *Datagram) {
			if string(d.Info.CallID) == "first" {
				<-block
			}
			order <- string(d.Info.CallID)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	g2.take(nil, []byte(bye("first", 0)), peerA, time.Now())
	waitUntil(t, "the first datagram taken", func() bool { return g2.Queued(LaneFast) == 1 })
	g2.take(nil, []byte(inviteOf("inv", "")), peerA, time.Now())
	for i := range 4 {
		g2.take(nil, []byte(bye(fmt.Sprint("b", i), i)), peerA, time.Now())
	}
	close(block)
	var got []string
	for range 6 {
		got = append(got, <-order)
	}
	if want := "first b0 inv b1 b2 b3"; strings.Join(got, " ") != want {
		t.Fatalf("order %q, want %q", strings.Join(got, " "), want)
	}
}

// A panic in the handler is reported and the worker goes on.
func TestHandlerPanic(t *testing.T) {
	var panics atomic.Int64
	done := make(chan string, 2)
	g, err := New(Options{
		Workers: 1,
		Party:   func(netip.Addr) (Party, bool) { return Party{Name: "a"}, true },
		Handle: func(d *Datagram) {
			if string(d.Info.CallID) == "boom" {
				panic("boom")
			}
			done <- string(d.Info.CallID)
		},
		Panic: func(string, any) { panics.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.take(nil, []byte(bye("boom", 1)), peerA, time.Now())
	g.take(nil, []byte(bye("after", 1)), peerA, time.Now())
	if got := <-done; got != "after" || panics.Load() != 1 {
		t.Fatalf("after a panic: %s, panics %d", got, panics.Load())
	}
	waitUntil(t, "the budgets given back", func() bool { return g.QueuedBytes() == 0 })
}

// BenchmarkTake is the reader's cost per datagram (classify, bound,
// budget, copy, hand over) with a worker taking them.
func BenchmarkTake(b *testing.B) {
	g, err := New(Options{
		Workers: 2,
		Party:   func(netip.Addr) (Party, bool) { return Party{Name: "a"}, true },
		Handle:  func(*Datagram) {},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	data := []byte(invite)
	scratch := new(Datagram)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// A distinct Call-ID each time would defeat nothing here; the
		// dedupe of a waiting copy may skip some, which is the reader's
		// cost as well.
		g.takeInto(scratch, nil, data, peerA, time.Now())
		if i%256 == 0 {
			for g.Queued(LaneSlow) > 1024 {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}
}

// BenchmarkReadUDP is datagrams through a real socket to the handler.
func BenchmarkReadUDP(b *testing.B) {
	var n atomic.Int64
	g, err := New(Options{
		Party:  func(netip.Addr) (Party, bool) { return Party{Name: "a"}, true },
		Handle: func(*Datagram) { n.Add(1) },
	})
	if err != nil {
		b.Fatal(err)
	}
	ln := listen(b, g)
	from := sender(b, "127.0.0.2")
	msgs := make([][]byte, 1024)
	for i := range msgs {
		msgs[i] = []byte(bye(fmt.Sprint("c", i), i))
	}
	b.ReportAllocs()
	sent := int64(0)
	for i := 0; b.Loop(); i++ {
		if _, err := from.WriteTo(msgs[i%len(msgs)], ln.LocalAddr()); err != nil {
			b.Fatal(err)
		}
		sent++
		if i%64 == 63 {
			for sent-n.Load() > 512 {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}
}

// Congested is told when a lane is full for everyone, not when one party
// holds its whole share.
func TestCongested(t *testing.T) {
	b := DefaultBudget
	b.Lanes[LaneFast] = LaneBudget{Total: 100, Share: 40, Least: 5, Reserve: 25}
	var congested atomic.Int64
	names := map[string]string{}
	for i := range 4 {
		names[fmt.Sprintf("127.0.1.%d", i)] = fmt.Sprint("p", i)
	}
	release := make(chan struct{})
	g, err := New(Options{
		Workers: 1, Budget: &b, Party: byIP(names),
		Handle:    func(*Datagram) { <-release },
		Congested: func(l Lane) { congested.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { close(release); g.Close() }()
	src := func(i int) netip.AddrPort { return netip.MustParseAddrPort(fmt.Sprintf("127.0.1.%d:5060", i)) }
	for j := range 45 {
		g.take(nil, []byte(bye(fmt.Sprint("a", j), j)), src(0), time.Now())
	}
	if got := congested.Load(); got != 0 {
		t.Fatalf("one party over its share: congested told %d times, want 0", got)
	}
	for i := 1; i < 4; i++ {
		for j := range 40 {
			g.take(nil, []byte(bye(fmt.Sprint(i, "-", j), j)), src(i), time.Now())
		}
	}
	if congested.Load() == 0 {
		t.Fatalf("the fast lane full for everyone (%d queued): congested never told", g.Queued(LaneFast))
	}
}

// WakeHeld wakes only the workers holding a new call back: a unit of the
// inflight bound given back (once per call) would otherwise wake every
// worker, on a node with many cores many times per call, for nothing.
func TestWakeHeldWakesOnlyHolders(t *testing.T) {
	g, err := New(Options{
		Workers: 3,
		Party:   func(netip.Addr) (Party, bool) { return Party{Name: "a"}, true },
		Handle:  func(d *Datagram) {},
		Hold:    func(d *Datagram, now time.Time) time.Duration { return time.Hour },
	})
	if err != nil {
		t.Fatal(err)
	}
	g.take(nil, []byte(inviteOf("inv", "")), peerA, time.Now())
	var d Datagram
	d.Info.CallID = []byte("inv")
	holder := g.shardOf(&d)
	deadline := time.Now().Add(10 * time.Second)
	for !holder.held.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the worker given the INVITE never held it")
		}
		time.Sleep(time.Millisecond)
	}
	g.Close() // the workers are gone: what WakeHeld sends stays queued
	for _, s := range g.shards {
		select {
		case <-s.wake:
		default:
		}
	}
	g.WakeHeld()
	for _, s := range g.shards {
		if got, want := len(s.wake), map[bool]int{true: 1}[s == holder]; got != want {
			t.Errorf("worker %d (holding: %v): %d wakes queued, want %d", s.id, s == holder, got, want)
		}
	}
}
