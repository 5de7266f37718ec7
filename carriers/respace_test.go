package carriers

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/testlog"
	"github.com/cpsguard/cpsguard/pacing"
)

// respacer records the Respace calls a Set makes, failing them while
// fail is set.
type respacer struct {
	*pacing.Pacer
	mu    sync.Mutex
	calls []respaced
	fail  bool
	// read, when set, is told of every pause read (the refresh's pass).
	read chan struct{}
}

func (r *respacer) Paused(ctx context.Context, c pacing.Carrier) (pacing.Pause, error) {
	if r.read != nil {
		select {
		case r.read <- struct{}{}:
		default:
		}
	}
	return r.Pacer.Paused(ctx, c)
}

type respaced struct {
	key     string
	cps     float64
	gate    float64
	lowered bool
}

func (r *respacer) Respace(ctx context.Context, c pacing.Carrier, gate pacing.GateKey, lowered bool) error {
	r.mu.Lock()
	r.calls = append(r.calls, respaced{c.Key, c.CPS, gate.CPS, lowered})
	fail := r.fail
	r.mu.Unlock()
	if fail && lowered { // a raise makes no store call
		return errors.New("store down")
	}
	return r.Pacer.Respace(ctx, c, gate, lowered)
}

func (r *respacer) take() []respaced {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func respaceConfig(cps float64, adaptive bool) *config.Config {
	return &config.Config{Carriers: []config.Carrier{
		{Name: "a", URI: "sip:127.0.0.1:5070", CPS: cps, MaxWait: time.Second, Probe: &config.Probe{}, Adaptive: adaptive},
	}, Routes: map[string]config.Route{"default": config.OrderedRoute("a")}}
}

// respaceRig is a Set on a respacer whose configuration a test swaps
// through cur, logging into logs.
type respaceRig struct {
	s    *Set
	p    *respacer
	cur  *atomic.Pointer[config.Config]
	logs *testlog.Buffer
}

// newRespaceRig builds a Set whose carrier "a" has cps (adaptive or
// not), and forgets the pacer calls of its start.
func newRespaceRig(t *testing.T, cps float64, adaptive bool, p *respacer) *respaceRig {
	t.Helper()
	r := &respaceRig{p: p, cur: &atomic.Pointer[config.Config]{}, logs: &testlog.Buffer{}}
	r.cur.Store(respaceConfig(cps, adaptive))
	s, err := New(Options{Config: r.cur.Load, Pacer: p, Logger: slog.New(slog.NewTextHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	return r
}

// set makes carrier "a" have cps (adaptive or not) and applies the limits.
func (r *respaceRig) set(cps float64, adaptive bool) {
	r.cur.Store(respaceConfig(cps, adaptive))
	r.s.applyLimits(context.Background(), r.cur.Load())
}

// storeDown makes the respacer's lowerings fail (down) or not.
func (p *respacer) storeDown(down bool) {
	p.mu.Lock()
	p.fail = down
	p.mu.Unlock()
}

// TestApplyLimitsRespacesALoweredCarrier: the carriers' limits reach the
// pacer at start without a store call; one lowered by a reload makes the
// calls waiting take a slot again; a raised one is applied without;
// an unchanged one costs nothing; one removed and added again is applied
// as new.
func TestApplyLimitsRespacesALoweredCarrier(t *testing.T) {
	p := &respacer{Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil))}
	r := newRespaceRig(t, 10, false, p)
	key := r.s.pacingOf(r.cur.Load(), &r.cur.Load().Carriers[0]).Key
	if got := p.take(); len(got) != 1 || got[0] != (respaced{key, 10, 10, false}) {
		t.Fatalf("at start: %+v, want the limit applied, not lowered", got)
	}
	apply := func(cps float64) []respaced { r.set(cps, false); return p.take() }

	if got := apply(10); len(got) != 0 {
		t.Fatalf("unchanged limit: %+v, want nothing", got)
	}
	if got := apply(4); len(got) != 1 || got[0] != (respaced{key, 4, 4, true}) {
		t.Fatalf("lowered 10 -> 4: %+v, want one lowered respace at 4", got)
	}
	if !strings.Contains(r.logs.String(), "its calls are paced at it from now on") {
		t.Errorf("no log line for the change: %s", r.logs.String())
	}
	if got := apply(4); len(got) != 0 {
		t.Fatalf("applied again: %+v, want nothing", got)
	}
	if got := apply(8); len(got) != 1 || got[0] != (respaced{key, 8, 8, false}) {
		t.Fatalf("raised 4 -> 8: %+v, want one raise at 8", got)
	}

	r.cur.Store(&config.Config{Routes: map[string]config.Route{}})
	r.s.applyLimits(context.Background(), r.cur.Load())
	if got := p.take(); len(got) != 0 {
		t.Fatalf("removed: %+v", got)
	}
	if got := apply(2); len(got) != 1 || got[0] != (respaced{key, 2, 2, false}) {
		t.Fatalf("added again at 2: %+v, want it applied, not lowered (nothing of it waits)", got)
	}
}

// TestApplyLimitsRetriesAFailedRespace: with the store down the change is
// kept for the next refresh and logged once; calls that see it do not
// kick the loop again for it.
func TestApplyLimitsRetriesAFailedRespace(t *testing.T) {
	p := &respacer{Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil))}
	r := newRespaceRig(t, 10, false, p)
	s, logs := r.s, r.logs
	p.take() // the start's
	p.storeDown(true)
	cfg := respaceConfig(4, false)
	r.cur.Store(cfg)
	car := &cfg.Carriers[0]
	s.Pacing(cfg, car)
	select {
	case <-s.limits.kick:
	default:
		t.Fatal("a call that saw the lowered limit did not wake the refresh loop")
	}
	for range 3 {
		s.applyLimits(context.Background(), cfg)
	}
	if got := p.take(); len(got) != 3 {
		t.Fatalf("store down: %d respace calls over 3 refreshes, want 3", len(got))
	}
	if n := strings.Count(logs.String(), "keep their slots until the store answers"); n != 1 {
		t.Errorf("the failure was logged %d times, want once:\n%s", n, logs.String())
	}
	s.Pacing(cfg, car)
	select {
	case <-s.limits.kick:
		t.Fatal("a call kicked the loop again for a change whose respace failed (the tick tries it)")
	default:
	}
	p.storeDown(false)
	s.applyLimits(context.Background(), cfg)
	if got := p.take(); len(got) != 1 || !got[0].lowered {
		t.Fatalf("store back: %+v, want the lowered respace", got)
	}
	s.applyLimits(context.Background(), cfg)
	if got := p.take(); len(got) != 0 {
		t.Fatalf("after it succeeded: %+v, want nothing", got)
	}
}

// TestApplyLimitsAdaptiveBelowTheNewLimit: an adaptive carrier already
// pushed back below its new limit has a queue spaced slower than it:
// nothing to take again.
func TestApplyLimitsAdaptiveBelowTheNewLimit(t *testing.T) {
	p := &respacer{Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil))}
	r := newRespaceRig(t, 10, true, p)
	p.take() // the start's
	r.s.rates.set("a", 3)
	r.set(5, true)
	if got := p.take(); len(got) != 1 || got[0].lowered || got[0].cps != 3 {
		t.Fatalf("adaptive at 3, limit 10 -> 5: %+v, want a respace at 3, not lowered", got)
	}
	r.set(2, true)
	if got := p.take(); len(got) != 1 || !got[0].lowered || got[0].cps != 2 {
		t.Fatalf("adaptive at 3, limit 5 -> 2: %+v, want a lowered respace at 2", got)
	}
}

// TestRunRespacesWhenACallSeesTheChange: with the Set running, the first
// call paced after a reload wakes the refresh loop, which respaces the
// carrier's queue without waiting for its tick.
func TestRunRespacesWhenACallSeesTheChange(t *testing.T) {
	old := RefreshEvery
	RefreshEvery = time.Hour // only the call's kick can do it
	t.Cleanup(func() { RefreshEvery = old })
	p := &respacer{Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil)), read: make(chan struct{}, 1)}
	r := newRespaceRig(t, 10, false, p)
	runSet(t, r.s, nil)
	<-p.read // the loop's first pass is over: it now waits for its tick
	p.take() // the start's
	cfg := respaceConfig(4, false)
	r.cur.Store(cfg)
	r.s.Pacing(cfg, &cfg.Carriers[0])
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := p.take(); len(got) > 0 {
			if got[0].cps != 4 || !got[0].lowered {
				t.Fatalf("respace %+v, want lowered at 4", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no respace within 10 s of the call that saw the lowered limit")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestApplyLimitsAdaptiveOff: an adaptive carrier pushed back to 3 and
// reloaded as non-adaptive at the same cps is paced at its cps again: the
// pacer was told nothing, its limit being unchanged, and kept the last
// adaptive rate (h56: 4-5 a second for good at a carrier of 10).
func TestApplyLimitsAdaptiveOff(t *testing.T) {
	p := &respacer{Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil))}
	r := newRespaceRig(t, 10, true, p)
	p.take() // the start's
	r.s.rates.set("a", 3)
	r.set(10, false)
	if got := p.take(); len(got) != 1 || got[0].cps != 10 || got[0].lowered {
		t.Fatalf("adaptive at 3, reloaded non-adaptive at 10: %+v, want the pacer told 10, not lowered", got)
	}
}

// TestApplyLimitsRevertWhileOwed: a lowering whose store call failed is
// owed; the limit going back up meanwhile paces at it again and owes
// nothing (h56: the node stayed at the lowered rate, the revert looking
// like no change).
func TestApplyLimitsRevertWhileOwed(t *testing.T) {
	p := &respacer{Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil))}
	r := newRespaceRig(t, 10, false, p)
	p.take()
	p.storeDown(true)
	r.set(4, false)
	if got := p.take(); len(got) != 1 || !got[0].lowered {
		t.Fatalf("lowered with the store down: %+v", got)
	}
	r.set(10, false)
	if got := p.take(); len(got) != 1 || got[0].cps != 10 || got[0].lowered {
		t.Fatalf("back to 10 while the lowering was owed: %+v, want the pacer told 10, not lowered", got)
	}
	r.set(10, false)
	if got := p.take(); len(got) != 0 {
		t.Fatalf("after the revert: %+v, want nothing owed", got)
	}
}

// TestApplyLimitsPartialRaiseWhileOwed: lowered 10 -> 4 with the store
// down, then raised to 6 before it is back: the slots still there were
// spaced for 10, so the removal is still owed (h57: it was dropped, 6
// being above 4).
func TestApplyLimitsPartialRaiseWhileOwed(t *testing.T) {
	p := &respacer{Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil))}
	r := newRespaceRig(t, 10, false, p)
	p.take()
	p.storeDown(true)
	r.set(4, false)
	r.set(6, false)
	if got := p.take(); len(got) != 2 || !got[1].lowered || got[1].cps != 6 {
		t.Fatalf("10 -> 4 (store down) -> 6: %+v, want the second a lowered respace at 6", got)
	}
	p.storeDown(false)
	r.set(6, false)
	if got := p.take(); len(got) != 1 || !got[0].lowered || got[0].cps != 6 {
		t.Fatalf("store back: %+v, want the owed removal at 6", got)
	}
	r.set(6, false)
	if got := p.take(); len(got) != 0 {
		t.Fatalf("after it: %+v, want nothing owed", got)
	}
}
