package pacing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Acquire and a carrier's pause or rate decrease (issue 22, item B): a
// paused carrier is skipped at once; a slot reserved before a pause is
// given back at its wake, not sent; after the span one call goes; a slot
// reserved before a decrease is taken again at the new rate. LocalSlots on
// the Pacer's fake clock, so every wait is exact.

func pacerOnLocal() (*Pacer, *LocalSlots, *testClock) {
	clock := newTestClock()
	store := NewLocalSlots(clock.Now)
	return NewPacerClock(store, clock), store, clock
}

// TestAcquirePausedSkipsAtOnce: a paused carrier gets no slot and no wait,
// however long max_wait; once this node knows the pause, not even a store
// call.
func TestAcquirePausedSkipsAtOnce(t *testing.T) {
	p, _, clock := pacerOnLocal()
	ctx := context.Background()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: time.Minute}
	if _, err := p.Pause(ctx, c, 2*time.Second, "Retry-After 2"); err != nil {
		t.Fatal(err)
	}
	var tr traced
	var paused int
	trace := tr.trace()
	trace.Reserved = func(s Slot, err error) {
		if s.Paused {
			paused++
		}
	}
	tk, err := p.Acquire(ctx, c, "call-1", trace)
	if err != nil || tk.OK || !tk.Paused || tk.Wait != 2*time.Second {
		t.Fatalf("Acquire during a pause = %+v, %v; want paused with 2 s left", tk, err)
	}
	if clock.Sleeps() != 0 || paused != 1 {
		t.Errorf("sleeps %d, paused reservations traced %d; want 0 and 1", clock.Sleeps(), paused)
	}
	if lp := p.LocalPause(c); !lp.Paused || lp.Reason != "Retry-After 2" || !lp.Until.Equal(clock.Now().Add(2*time.Second)) {
		t.Errorf("LocalPause = %+v; want the pause, until +2 s", lp)
	}
}

// TestAcquireHerd: ten calls hold slots 100 ms apart when the carrier
// pauses; each gives its slot back at its wake instead of sending. After
// the span exactly one call is let through (the probe) until it is
// answered; then calls go again.
func TestAcquireHerd(t *testing.T) {
	p, store, clock := pacerOnLocal()
	ctx := context.Background()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: 5 * time.Second}
	// Ten calls reserved, as if waiting (the store's own clock decides).
	for i := range 10 {
		if s, err := store.Reserve(ctx, c.Key, fmt.Sprintf("held-%d", i), Share{}, Interval(c.CPS), c.MaxWait); err != nil || !s.OK {
			t.Fatalf("reserve %d: %+v, %v", i, s, err)
		}
	}
	// A call that reserves next waits about 1 s; the carrier pauses as it
	// starts waiting.
	var pausedAtWake int
	var pauseErr error
	trace := &Trace{
		Paused: func(Slot) { pausedAtWake++ },
		Queued: func(d int) {
			if d > 0 {
				_, pauseErr = p.Pause(ctx, c, 2*time.Second, "Retry-After 2")
			}
		},
	}
	tk, err := p.Acquire(ctx, c, "waiting", trace)
	if pauseErr != nil {
		t.Fatal(pauseErr)
	}
	if err != nil || tk.OK || !tk.Paused {
		t.Fatalf("Acquire of a call whose carrier paused while it waited = %+v, %v; want paused, not sent", tk, err)
	}
	if pausedAtWake != 1 {
		t.Errorf("trace.Paused called %d times, want 1", pausedAtWake)
	}
	if heldIn(store, c.Key, "waiting") {
		t.Error("the paused call's slot was not given back")
	}
	for i := 1; i < 10; i++ {
		if heldIn(store, c.Key, fmt.Sprintf("held-%d", i)) {
			t.Errorf("held-%d: a slot in the future survived the pause", i)
		}
	}

	// After the span: one call, the probe; the rest are refused at once.
	clock.Advance(2 * time.Second)
	var sent []string
	var probe string
	for i := range 5 {
		m := fmt.Sprintf("after-%d", i)
		tk, err := p.Acquire(ctx, c, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tk.OK {
			sent = append(sent, m)
			if tk.Probe {
				probe = m
			}
		} else if !tk.Paused {
			t.Fatalf("%s: %+v, want sent or paused", m, tk)
		}
	}
	if len(sent) != 1 || probe != sent[0] {
		t.Fatalf("after the span %v went (probe %q), want exactly one, the probe", sent, probe)
	}
	if _, err := p.ProbeDone(ctx, c, probe, true); err != nil {
		t.Fatal(err)
	}
	if p.LocalPause(c).Paused {
		t.Error("the answered probe did not end the pause on this node")
	}
	for i := range 3 {
		if tk, err := p.Acquire(ctx, c, fmt.Sprintf("later-%d", i), nil); err != nil || !tk.OK || tk.Probe {
			t.Fatalf("call %d after the pause ended = %+v, %v; want sent", i, tk, err)
		}
	}
}

// TestAcquireProbeReleaseFreesTheClaim: a probe call that does not send
// (cancelled while it waits) gives its claim back with its slot: the next
// call is the probe.
func TestAcquireProbeReleaseFreesTheClaim(t *testing.T) {
	p, store, clock := pacerOnLocal()
	ctx := context.Background()
	// One call every 2 s: the probe waits for its slot.
	c := Carrier{Key: "t:{carrier:a}", CPS: 0.5, MaxWait: 5 * time.Second}
	if _, err := store.Reserve(ctx, c.Key, "before", Share{}, Interval(c.CPS), c.MaxWait); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pause(ctx, c, time.Second, "x"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	cctx, cancel := context.WithCancel(ctx)
	clock.onSleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	if tk, err := p.Acquire(cctx, c, "probe-1", nil); tk.OK || err == nil {
		t.Fatalf("cancelled probe = %+v, %v; want cancelled", tk, err)
	}
	clock.onSleep = nil
	if st, _ := store.Paused(ctx, c.Key); !st.Paused || st.Probing {
		t.Fatalf("after the probe was cancelled: %+v, want half-open, no claim", st)
	}
	if tk, err := p.Acquire(ctx, c, "probe-2", nil); err != nil || !tk.OK || !tk.Probe {
		t.Fatalf("next call = %+v, %v; want the probe", tk, err)
	}
}

// TestAcquireRetakesASlotAfterACut: calls hold slots spaced for 10 CPS
// when the rate is cut to 5; a call waking on such a slot does not send on
// it but takes one at the new rate.
func TestAcquireRetakesASlotAfterACut(t *testing.T) {
	p, store, clock := pacerOnLocal()
	ctx := context.Background()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: 5 * time.Second}
	a := AIMD{Max: 10, Min: 1, Decrease: 0.5, Increase: 0.001, Hold: time.Second}
	if _, err := store.Reserve(ctx, c.Key, "first", Share{}, Interval(c.CPS), c.MaxWait); err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	var cutErr error
	done := false
	trace := &Trace{Queued: func(d int) {
		if d > 0 && !done {
			done = true
			r, err := p.Adapt(ctx, c, a, true)
			if err == nil && (!r.Cut || r.CPS != 5) {
				err = fmt.Errorf("Adapt = %+v, want a cut to 5", r)
			}
			cutErr = err
		}
	}}
	tk, err := p.Acquire(ctx, c, "second", trace)
	if cutErr != nil {
		t.Fatal(cutErr)
	}
	if err != nil || !tk.OK {
		t.Fatalf("Acquire = %+v, %v; want sent", tk, err)
	}
	// The first slot (now) stays; the second was at +1/10 s, removed by
	// the cut, and is taken again one 1/5 s interval after the first.
	if got, want := clock.Now().Sub(start), Interval(5); got != want {
		t.Errorf("the call went %v after it started, want %v (one interval at the new rate)", got, want)
	}
}

// TestAcquireFollowsTheTurn: a call beyond its share's part of a carrier
// gets a booking of its share's turn; Acquire waits for it, reserves
// again at the turn, gets the slot there and sends. The booking is traced
// once (not the slot it turns into), the wait counts from the start, and
// a call cancelled while it waits for its turn gives the turn back.
func TestAcquireFollowsTheTurn(t *testing.T) {
	p, store, clock := pacerOnLocal()
	ctx := context.Background()
	a := Share{Name: "customer:a", Weight: 1}
	c := Carrier{Key: "t:{carrier:f}", CPS: 10, MaxWait: 5 * time.Second, Share: a}
	iv := Interval(c.CPS)
	t0 := clock.Now()
	// held-0 takes a slot at t0, held-1 one at +1, held-2 books turn +2:
	// the next call of the share has turn +3.
	for i := range 3 {
		reserveShare(t, store, c.Key, fmt.Sprintf("held-%d", i), a, iv, c.MaxWait)
	}
	var tr traced
	tk, err := p.Acquire(ctx, c, "call", tr.trace())
	if err != nil || !tk.OK || tk.Wait != 3*iv {
		t.Fatalf("Acquire = %+v, %v; want OK after 3 intervals", tk, err)
	}
	if got := clock.Now().Sub(t0); got != 3*iv {
		t.Errorf("sent at +%v, want +%v (its turn)", got, 3*iv)
	}
	if tr.reserved != 1 || tr.full != 0 || tr.queued != 0 || tr.maxQueued != 1 || clock.Sleeps() != 2 {
		t.Errorf("traced %+v, %d sleeps; want one reservation (the booking), queued back to 0, two sleeps (the turn, then its slot)", tr, clock.Sleeps())
	}

	reserveShare(t, store, c.Key, "held-3", a, iv, c.MaxWait) // slot at +4, turns from +5
	cctx, cancel := context.WithCancel(ctx)
	clock.onSleep = func(context.Context, time.Duration) error {
		cancel()
		return context.Canceled
	}
	tr = traced{}
	if _, err := p.Acquire(cctx, c, "cancelled", tr.trace()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v, want context.Canceled", err)
	}
	clock.onSleep = nil
	if tr.queued != 0 {
		t.Errorf("queued %d after the cancel, want 0", tr.queued)
	}
	// The cancelled call slept until lead before its turn: the next call
	// of the share, there, has the same turn, close enough to take its
	// slot at once.
	next := reserveShare(t, store, c.Key, "next", a, iv, c.MaxWait)
	if got := next.At.Add(next.Wait).Sub(t0); next.Booked || got != 5*iv {
		t.Errorf("next call: %+v, slot +%v; want the slot at the cancelled call's turn, +%v", next, got, 5*iv)
	}

	// Another share's call is within its share: a slot, no booking.
	b := c
	b.Share = Share{Name: "customer:b", Weight: 1}
	tr = traced{}
	if tk, err := p.Acquire(ctx, b, "other", tr.trace()); err != nil || !tk.OK || tk.Wait > 2*iv {
		t.Fatalf("other share's Acquire = %+v, %v; want OK within two intervals", tk, err)
	}
	if q, err := store.Queue(ctx, c.Key, iv); err != nil || q.Queued != 1 {
		t.Errorf("Queue = %+v, %v; want 1 queued: held-2's booking (nobody came back for it)", q, err)
	}
}

// TestAcquirePausedAtTheWakeGivesBack: a carrier paused just as a call's
// slot came due (the store keeps a slot that is due: only future ones go
// with a pause) is not sent: the slot is given back and the pause
// traced. At a booked turn paused alike, the call is not sent either and
// does not reserve again (its wake is a little before the turn, so the
// pause drops the booking itself). TestAcquireHerd pauses while the slot
// is still in the future, where the pause itself drops it: it cannot tell
// a slot given back from one the store dropped. These pin what cd6e064
// (one awaitSlot for both waits) kept.
func TestAcquirePausedAtTheWakeGivesBack(t *testing.T) {
	for _, booked := range []bool{false, true} {
		t.Run(fmt.Sprintf("booked=%v", booked), func(t *testing.T) {
			p, store, clock := pacerOnLocal()
			ctx := context.Background()
			a := Share{Name: "customer:a", Weight: 1}
			c := Carrier{Key: "t:{carrier:w}", CPS: 10, MaxWait: 5 * time.Second}
			if booked {
				c.Share = a
			}
			iv := Interval(c.CPS)
			// Three calls ahead: a slot at +3 intervals, or (with the share)
			// a booking of the share's turn at +3.
			for i := range 3 {
				reserveShare(t, store, c.Key, fmt.Sprintf("held-%d", i), c.Share, iv, c.MaxWait)
			}
			t0 := clock.Now()
			var tr traced
			trace := tr.trace()
			queued := trace.Queued
			var pauseErr error
			waits, pausedAtWake := 0, 0
			trace.Queued = func(d int) {
				queued(d)
				if d < 0 {
					waits++
					_, pauseErr = p.Pause(ctx, c, 2*time.Second, "Retry-After 2")
				}
			}
			trace.Paused = func(Slot) { pausedAtWake++ }
			tk, err := p.Acquire(ctx, c, "call", trace)
			if pauseErr != nil {
				t.Fatal(pauseErr)
			}
			if err != nil || tk.OK || !tk.Paused {
				t.Fatalf("Acquire of a call whose carrier paused as it woke = %+v, %v; want paused, not sent", tk, err)
			}
			// The wait for the slot, or for the turn (woken a little before
			// it), counted from the start.
			if woke := clock.Now().Sub(t0); tk.Wait != woke || woke <= 2*iv || woke > 3*iv {
				t.Errorf("woke at +%v with Wait %v; want a Wait of the wake, about +%v", woke, tk.Wait, 3*iv)
			}
			if pausedAtWake != 1 || waits != 1 || tr.reserved+tr.full != 1 {
				t.Errorf("trace.Paused %d times, %d waits, %d reservations; want 1, 1, 1 (nothing reserved after the pause)", pausedAtWake, waits, tr.reserved+tr.full)
			}
			if heldIn(store, c.Key, "call") {
				t.Error("the slot of a call not sent was not given back")
			}
		})
	}
}
