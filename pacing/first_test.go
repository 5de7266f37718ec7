package pacing

import (
	"context"
	"slices"
	"testing"
	"time"
)

// A First (the reservation made with the call's admission) is Acquire's
// first reply: no store call for it, the same trace, the same wait, and
// MaxWait counted from when it was asked.
func TestAcquireTakesFirst(t *testing.T) {
	const slotWait = 50 * time.Millisecond
	clock := newTestClock()
	store := &stubSlots{waits: []time.Duration{slotWait}}
	p := NewPacerClock(store, clock)
	c := carrierA
	c.First = &First{Slot: Slot{OK: true, Wait: slotWait, Key: c.Key, Member: "call-1", Reserved: clock.Now()}, Asked: clock.Now()}
	var tr traced
	start := clock.Now()
	tk, err := p.Acquire(context.Background(), c, "call-1", tr.trace())
	if err != nil || !tk.OK || tk.Wait != slotWait {
		t.Fatalf("Acquire = %+v, %v; want OK after %v", tk, err, slotWait)
	}
	if reserved, released := store.counts(); reserved != 0 || released != 0 {
		t.Fatalf("store: %d reservations, %d released; want none (the First was the reservation)", reserved, released)
	}
	if tr.reserved != 1 || tr.maxQueued != 1 || tr.queued != 0 {
		t.Fatalf("trace %+v; want the First traced as one reservation, queued then not", tr)
	}
	if got := clock.Now().Sub(start); got != slotWait {
		t.Fatalf("Acquire returned after %v, want the First's wait %v", got, slotWait)
	}
}

// A First whose slot was missed (a late wake) is given back, and the next
// reservation fits what is left of MaxWait counted from the First's ask.
func TestAcquireFirstLateWake(t *testing.T) {
	const slotWait = 50 * time.Millisecond
	const before = 20 * time.Millisecond // asked this long before Acquire
	lateBy := MaxLate + time.Millisecond
	clock := newTestClock()
	asked := clock.Now()
	clock.Advance(before)
	late := 1
	clock.onSleep = func(context.Context, time.Duration) error {
		if late > 0 {
			late--
			clock.Advance(lateBy)
		}
		return nil
	}
	store := &stubSlots{waits: []time.Duration{slotWait}}
	p := NewPacerClock(store, clock)
	c := carrierA
	c.First = &First{Slot: Slot{OK: true, Wait: slotWait, Key: c.Key, Member: "call-1", Reserved: asked}, Asked: asked}
	tk, err := p.Acquire(context.Background(), c, "call-1", nil)
	if err != nil || !tk.OK {
		t.Fatalf("Acquire = %+v, %v; want OK on the second slot", tk, err)
	}
	if !slices.Equal(store.released, []string{"call-1"}) {
		t.Fatalf("released %v, want the First's slot", store.released)
	}
	// The First was due at asked+50ms; Acquire (20 ms after the ask) slept
	// until then and woke lateBy late: now - asked = 50ms + lateBy.
	if want := carrierA.MaxWait - slotWait - lateBy; len(store.maxWaits) != 1 || store.maxWaits[0] != want {
		t.Fatalf("next reservation's max wait %v, want [%v] (MaxWait from the First's ask)", store.maxWaits, want)
	}
}

// A First Acquire cannot use is given back, never kept: another call's, a
// priority call's (which takes no slot), one on a carrier this node knows
// is paused.
func TestAcquireGivesBackFirst(t *testing.T) {
	for _, tc := range []struct {
		name     string
		member   string // of the First
		priority bool
		paused   bool
		reserved int // store reservations
	}{
		{"another call's", "call-other", false, false, 1},
		{"priority call", "call-1", true, false, 1},
		{"known paused", "call-1", false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newTestClock()
			store := &stubSlots{}
			p := NewPacerClock(store, clock)
			if tc.paused {
				p.views.learn(carrierA.Key, p.onClock(Pause{Paused: true, Left: time.Second}), clock.Now())
			}
			ctx := context.Background()
			if tc.priority {
				ctx = WithPriority(ctx)
			}
			c := carrierA
			c.First = &First{Slot: Slot{OK: true, Key: c.Key, Member: tc.member, Reserved: clock.Now()}, Asked: clock.Now()}
			if _, err := p.Acquire(ctx, c, "call-1", nil); err != nil {
				t.Fatal(err)
			}
			reserved, _ := store.counts()
			if !slices.Contains(store.released, tc.member) || reserved != tc.reserved {
				t.Fatalf("released %v, %d reservations; want %q given back and %d reservations", store.released, reserved, tc.member, tc.reserved)
			}
		})
	}
}

// FirstAsk asks what Acquire's own first Reserve would: MaxWait cut to
// the deadline; none for a priority call or a carrier known paused.
func TestFirstAsk(t *testing.T) {
	clock := newTestClock()
	p := NewPacerClock(&stubSlots{}, clock)
	c := carrierA
	c.Share = Share{Name: "customer:a", Weight: 2}
	a, ok := p.FirstAsk(context.Background(), c, "call-1")
	if !ok || a.Key != c.Key || a.Member != "call-1" || a.Share != c.Share || a.Interval != Interval(c.CPS) || a.MaxWait != c.MaxWait {
		t.Fatalf("FirstAsk = %+v, %v", a, ok)
	}
	// A deadline well beyond any stall of the test (a 200 ms one had
	// passed, and FirstAsk refused, had the test stalled that long), yet
	// well within the carrier's max_wait.
	long := c
	long.MaxWait = time.Hour
	before := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if a, ok = p.FirstAsk(ctx, long, "call-1"); !ok || a.MaxWait > time.Minute || a.MaxWait < time.Minute-time.Since(before) {
		t.Fatalf("FirstAsk with a 1 min deadline = %+v, %v; want max wait cut to it", a, ok)
	}
	if _, ok = p.FirstAsk(WithPriority(context.Background()), c, "call-1"); ok {
		t.Fatalf("FirstAsk for a priority call: want none")
	}
	p.views.learn(c.Key, p.onClock(Pause{Paused: true, Left: time.Second}), clock.Now())
	if _, ok = p.FirstAsk(context.Background(), c, "call-1"); ok {
		t.Fatalf("FirstAsk on a carrier known paused: want none")
	}
}
