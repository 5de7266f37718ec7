package pacing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
)

func TestSendGate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name     string
		cps      float64
		sends    []int // send times (ms) that must pass at once
		at       int   // next send time
		wantWait time.Duration
	}{
		{"under the limit", 3, []int{0, 10}, 20, 0},
		{"limit reached in the window", 3, []int{0, 10, 20}, 30, 975 * time.Millisecond},
		{"oldest is a window old", 3, []int{0, 10, 20}, 1005, 0},
		{"late send counts from when it left", 2, []int{0, 300}, 900, 105 * time.Millisecond},
		{"fractional cps: one per 1/cps", 0.5, []int{0}, 1000, 1005 * time.Millisecond},
		{"fractional cps above 1 rounds down", 2.5, []int{0, 10}, 20, 985 * time.Millisecond},
		{"fractional cps above 1: the floor passes", 2.5, []int{0}, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newSendGate()
			keys := []GateKey{{"carrier:a", tc.cps}}
			for _, s := range tc.sends {
				d, tk := g.reserve(keys, ms(s), 1)
				if d != 0 {
					t.Fatalf("send at %d ms: wait %v, want 0", s, d)
				}
				g.sent(tk, ms(s))
			}
			if d, _ := g.reserve(keys, ms(tc.at), 1); d != tc.wantWait {
				t.Errorf("send at %d ms: wait = %v, want %v", tc.at, d, tc.wantWait)
			}
		})
	}
}

func TestSendGateStampsRealSendTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := newSendGate()
	keys := []GateKey{{"peer:p", 1}, {"carrier:a", 100}}
	_, tk := g.reserve(keys, t0, 1)
	g.sent(tk, t0.Add(40*time.Millisecond)) // the write left 40 ms after the check
	if d, _ := g.reserve(keys, t0.Add(time.Second), 1); d != 45*time.Millisecond {
		t.Errorf("wait = %v, want 45ms (1.005 s after the real send)", d)
	}
}

func TestSendGateWaitGivesUpOverLimit(t *testing.T) {
	clock := newTestClock()
	g := newSendGate()
	keys := []GateKey{{"carrier:a", 1}}
	if _, err := g.wait(context.Background(), clock, keys, clock.Now().Add(time.Second), nil, 0); err != nil {
		t.Fatalf("first send: %v", err)
	}
	if _, err := g.wait(context.Background(), clock, keys, clock.Now().Add(100*time.Millisecond), nil, 0); !errors.Is(err, errGateFull) {
		t.Fatalf("second send within the window, limit 100ms: err = %v, want errGateFull", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.wait(ctx, clock, keys, clock.Now().Add(2*time.Second), nil, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait cut by its context: err = %v, want Canceled", err)
	}
	if n := clock.Sleeps(); n != 1 {
		t.Errorf("sleeps = %d, want 1 (the one its context cut)", n)
	}
}

// TestSendGateWaitDeadlineOnEveryLoop: a waiter whose first wait fits its
// deadline, but whose room is taken by another send while it sleeps, gives
// up as soon as the next wait would pass the deadline instead of sleeping
// again; without a competitor the same wait ends with a ticket. Fake clock:
// sleeping only advances it.
func TestSendGateWaitDeadlineOnEveryLoop(t *testing.T) {
	for _, competitor := range []bool{true, false} {
		t.Run(fmt.Sprintf("competitor=%v", competitor), func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			clock := newTestClock()
			clock.Set(t0)
			g := newSendGate()
			keys := []GateKey{{"carrier:a", 1}} // one send per 1.005 s
			_, window := admission.LimitFor(1)
			if d, _ := g.reserve(keys, t0, 1); d != 0 {
				t.Fatalf("first send: wait %v", d)
			}
			clock.onSleep = func(ctx context.Context, d time.Duration) error {
				if clock.Sleeps() > 5 {
					return context.Canceled // the old code slept on and on
				}
				if competitor {
					// Another call of this node takes the room first.
					if w, _ := g.reserve(keys, clock.Now(), 1); w != 0 {
						t.Errorf("competitor: wait %v", w)
					}
				}
				return nil
			}
			clock.Set(t0.Add(window - 50*time.Millisecond))
			_, err := g.wait(context.Background(), clock, keys, clock.Now().Add(100*time.Millisecond), nil, 0)
			sleeps := clock.Sleeps()
			if competitor && !errors.Is(err, errGateFull) {
				t.Errorf("room taken while sleeping: err = %v after %d sleeps, want errGateFull after 1", err, sleeps)
			}
			if !competitor && err != nil {
				t.Errorf("room freed while sleeping: err = %v, want a ticket", err)
			}
			if sleeps != 1 {
				t.Errorf("sleeps = %d, want 1", sleeps)
			}
		})
	}
}

// TestSendGateNoLatenessRatchet: sends that follow pacing slots (limit per
// 1 s + admission.WindowGuard) with a few milliseconds of wake-up jitter do not pile up
// lateness. With the stores' own window the gate would hold a send until
// the one limit places back was a full slot span old, and each held send
// would inherit that send's lateness plus its own wake-up delay: a ratchet
// (BENCHMARKS.md, finding F1).
func TestSendGateNoLatenessRatchet(t *testing.T) {
	const cps = 50
	limit, window := admission.LimitFor(cps)
	interval := window / time.Duration(limit) // the pacing slot spacing
	t0 := time.Unix(1000, 0)
	g := newSendGate()
	keys := []GateKey{{"carrier:a", cps}}
	jitter := []time.Duration{0, 3 * time.Millisecond, 1 * time.Millisecond, 2 * time.Millisecond}
	const wake = time.Millisecond
	var worst time.Duration
	for i := 0; i < 20*limit; i++ {
		slot := t0.Add(time.Duration(i) * interval)
		at := slot.Add(jitter[i%len(jitter)])
		for {
			d, tk := g.reserve(keys, at, 1)
			if d == 0 {
				g.sent(tk, at)
				break
			}
			at = at.Add(d + wake) // a held send wakes a little late
		}
		if late := at.Sub(slot); late > worst {
			worst = late
		}
	}
	if max := 3*time.Millisecond + wake; worst > max {
		t.Errorf("worst lateness over %d sends = %v, want <= %v (the largest jitter and one wake-up)", 20*limit, worst, max)
	}
}

// TestSendGateRingGrowsWithSends: a key's history holds the sends it saw,
// not its limit, so a 100,000 CPS carrier that carries a few calls costs a
// few entries; once full it wraps and still enforces the limit.
func TestSendGateRingGrowsWithSends(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := newSendGate()
	big := []GateKey{{"carrier:big", 100000}}
	for i := 0; i < 10; i++ {
		if d, tk := g.reserve(big, t0, 1); d != 0 {
			t.Fatalf("send %d: wait %v", i, d)
		} else {
			g.sent(tk, t0)
		}
	}
	if n := cap(g.rings["carrier:big"].at); n > 64 {
		t.Errorf("ring capacity after 10 sends = %d, want it to grow with the sends", n)
	}
	small := []GateKey{{"carrier:small", 3}}
	for round := 0; round < 3; round++ {
		base := t0.Add(time.Duration(round) * 2 * time.Second)
		for i := 0; i < 3; i++ {
			d, tk := g.reserve(small, base.Add(time.Duration(i)*time.Millisecond), 1)
			if d != 0 {
				t.Fatalf("round %d send %d: wait %v", round, i, d)
			}
			g.sent(tk, base.Add(time.Duration(i)*time.Millisecond))
		}
		if d, _ := g.reserve(small, base.Add(10*time.Millisecond), 1); d == 0 {
			t.Fatalf("round %d: fourth send in the window passed", round)
		}
	}
}

// TestSendGateHoldsTheLimitInForce: after a limit change (setLimit) every
// send of the key is held to the new limit, the calls that started
// before it too (their GateKey says the old one), so the two never
// alternate; the new limit counts the sends from the change on. Setting
// the same limit again keeps the history.
func TestSendGateHoldsTheLimitInForce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	window := time.Second + admission.WindowGuard - gateSlack
	g := newSendGate()
	old, lowered := []GateKey{{"carrier:a", 10}}, []GateKey{{"carrier:a", 4}}
	send := func(keys []GateKey, at int) time.Duration {
		d, tk := g.reserve(keys, ms(at), 1)
		if d == 0 {
			g.sent(tk, ms(at))
		}
		return d
	}
	for i := range 5 {
		if d := send(old, i*100); d != 0 {
			t.Fatalf("old limit, send %d: wait %v", i, d)
		}
	}
	g.setLimit(lowered[0])
	// From the change on, at most 4 in a window, whichever key a call has.
	for i, keys := range [][]GateKey{old, lowered, old, lowered} {
		if d := send(keys, 500+i*10); d != 0 {
			t.Fatalf("send %d after the change: wait %v, want 0 (a fresh history)", i, d)
		}
	}
	if d := send(old, 600); d != ms(500).Add(window).Sub(ms(600)) {
		t.Errorf("a fifth send after the change, with the old key: wait %v, want %v", d, ms(500).Add(window).Sub(ms(600)))
	}
	g.setLimit(lowered[0]) // the same limit: the history stays
	if d := send(lowered, 610); d == 0 {
		t.Error("setting the same limit again emptied the history")
	}
}

// fixedCareful is a store that reports a careful span since since among n
// nodes.
type fixedCareful struct {
	since time.Time
	n     int
}

func (c fixedCareful) Careful() (time.Time, int) { return c.since, c.n }

// TestGateHoldsItsShareWhileCareful: while the store may have lost the
// pool's schedule, this node's sends of a key are held to the key's share
// (limit / nodes) over the window; after the span, to the whole limit.
func TestGateHoldsItsShareWhileCareful(t *testing.T) {
	t0 := time.Unix(1000, 0)
	keys := []GateKey{{Key: "carrier:a", CPS: 10}}
	g := newSendGate()
	for i := range 5 {
		if d, tk := g.reserve(keys, t0.Add(time.Duration(i)*time.Millisecond), 1); d != 0 {
			t.Fatalf("send %d: held %v", i, d)
		} else {
			g.sent(tk, t0.Add(time.Duration(i)*time.Millisecond))
		}
	}
	now := t0.Add(100 * time.Millisecond)
	if d, _ := g.reserve(keys, now, 2); d <= 0 {
		t.Fatal("5 sends of a 10 cps key in the window, share 2: the sixth must wait")
	}
	if d, _ := g.reserve(keys, now, 3); d <= 0 {
		t.Fatal("share 3 (limit 3): must wait")
	}
	span := 2 * time.Second
	cs := fixedCareful{since: t0, n: 2}
	if got := shareAt(cs, span, now); got != 2 {
		t.Fatalf("share inside the span: %d, want 2", got)
	}
	if got := shareAt(cs, span, t0.Add(span)); got != 1 {
		t.Fatalf("share at the span's end: %d, want 1", got)
	}
	if got := shareAt(fixedCareful{n: 2}, span, now); got != 1 {
		t.Fatalf("share with nothing lost: %d, want 1", got)
	}
	if got := shareAt(nil, span, now); got != 1 {
		t.Fatalf("share without a careful store: %d, want 1", got)
	}
	if d, _ := g.reserve(keys, now, 1); d != 0 {
		t.Fatalf("share 1: 5 of 10 sent, held %v", d)
	}
}
