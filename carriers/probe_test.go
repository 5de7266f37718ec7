package carriers

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
)

// gatedProber answers its first probe 200 OK; every later one waits until
// want probes are in flight together (or 5 s pass), then fails unanswered.
// It records the most probes in flight at once.
type gatedProber struct {
	want int

	mu       sync.Mutex
	sent     int
	inflight int
	most     int
	all      chan struct{} // closed once want probes are in flight
}

func (g *gatedProber) Behind() bool { return false }

func (g *gatedProber) Probe(ctx context.Context, _ *config.Carrier, _ time.Duration) ProbeResult {
	g.mu.Lock()
	g.sent++
	if g.sent == 1 {
		g.mu.Unlock()
		return ProbeResult{OK: true, Detail: "answered 200"}
	}
	g.inflight++
	g.most = max(g.most, g.inflight)
	if g.inflight == g.want {
		close(g.all)
	}
	g.mu.Unlock()
	select {
	case <-g.all:
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.inflight--
	g.mu.Unlock()
	return ProbeResult{Unanswered: true, Detail: "no answer in 1s"}
}

func (g *gatedProber) counts() (sent, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sent, g.most
}

func testSet(t *testing.T, cfg *config.Config) *Set {
	t.Helper()
	s, err := New(Options{Config: func() *config.Config { return cfg }, Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil)),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func runSet(t *testing.T, s *Set, p Prober) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, p); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestFailedCallsConfirmedTogether (issue 24, item 4): down_after failed
// calls in a row take the carrier down at once, and the down_after probes
// that confirm it go out together, not one after another.
func TestFailedCallsConfirmedTogether(t *testing.T) {
	cfg := &config.Config{Carriers: []config.Carrier{{Name: "a", URI: "sip:127.0.0.1:5070", CPS: 10, MaxWait: time.Second,
		Probe: &config.Probe{Interval: time.Hour, Timeout: time.Second, DownAfter: 3, UpAfter: 1}}},
		Routes: map[string]config.Route{"default": config.OrderedRoute("a")}}
	s := testSet(t, cfg)
	p := &gatedProber{want: 3, all: make(chan struct{})}
	runSet(t, s, p)
	waitUntil(t, func() bool { sent, _ := p.counts(); return sent == 1 }, "the first probe")
	car := &cfg.Carriers[0]
	for range 3 {
		s.Report(cfg, car, Outcome{Result: TimedOut, Detail: "no ringing within 2s"})
	}
	if s.Usable(cfg, car) != SkipDown || !s.RouteDown(cfg, "default") {
		t.Fatalf("after 3 setup timeouts in a row: usable %q, route down %v; want down at once", s.Usable(cfg, car), s.RouteDown(cfg, "default"))
	}
	waitUntil(t, func() bool {
		st, _ := s.State("a")
		return !st.Up && !s.health.Confirming("a")
	}, "the confirmation decided")
	sent, most := p.counts()
	if most != 3 || sent != 4 {
		t.Errorf("confirming probes: %d sent, at most %d in flight at once; want 3, all together", sent-1, most)
	}
	st, _ := s.State("a")
	if want := "calls: 3 failures in a row (last: no ringing within 2s), confirmed by 3 failed probes (last: no answer in 1s)"; st.Reason != want {
		t.Errorf("reason %q, want %q", st.Reason, want)
	}
}
