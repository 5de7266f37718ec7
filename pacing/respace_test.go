package pacing

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestRespaceRemovesTheMembersFutureSlots: a lowered limit removes the
// slots of the node's waiting calls still in the future; a slot due
// already, and every other member's (another node's calls, which do not
// know), stay. The store's time of the removal comes after every slot
// decided before it.
func TestRespaceRemovesTheMembersFutureSlots(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		var last Slot
		for i := range 4 {
			last = reserve(t, b.store, key, fmt.Sprintf("call-%d", i), Interval(10), 5*time.Second)
		}
		// call-0's slot is now; call-3 is another node's.
		at, err := b.store.Respace(ctx, key, []string{"call-0", "call-1", "call-2", "unknown"})
		if err != nil || at.IsZero() || at.Before(last.At) {
			t.Fatalf("Respace = %v, %v; want a time after the last reservation (%v)", at, err, last.At)
		}
		for i, want := range []bool{true, false, false, true} {
			if got := b.held(key, fmt.Sprintf("call-%d", i)); got != want {
				t.Errorf("call-%d held %v after the respace, want %v", i, got, want)
			}
		}
		// Many members: more than one script call's worth on Redis.
		many := make([]string, 2500)
		for i := range many {
			many[i] = fmt.Sprintf("m-%d", i)
		}
		many[2400] = "call-3"
		if _, err := b.store.Respace(ctx, key, many); err != nil {
			t.Fatal(err)
		}
		if b.held(key, "call-3") {
			t.Error("call-3, member 2,400 of 2,500, still holds its future slot")
		}
		if _, err := b.store.Respace(ctx, key, nil); err != nil {
			t.Errorf("Respace with no member: %v", err)
		}
	})
}

// TestAcquireRetakesASlotAfterARespace: calls hold slots spaced for 10
// CPS when the carrier's limit is lowered to 4 (a reload); a call waking
// on such a slot does not send on it but takes one at the new rate,
// though it was asked with the old Carrier, and the send gate holds it to
// the new limit though its GateKey says the old one.
func TestAcquireRetakesASlotAfterARespace(t *testing.T) {
	p, store, clock := pacerOnLocal()
	ctx := context.Background()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: 5 * time.Second}
	oldGate := GateKey{Key: "carrier:a", CPS: 10}
	if _, err := store.Reserve(ctx, c.Key, "first", Share{}, Interval(c.CPS), c.MaxWait); err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	var respaceErr error
	done := false
	trace := &Trace{Queued: func(d int) {
		if d > 0 && !done {
			done = true
			lowered := c
			lowered.CPS = 4
			respaceErr = p.Respace(ctx, lowered, GateKey{Key: "carrier:a", CPS: 4}, true)
		}
	}}
	tk, err := p.Acquire(ctx, c, "second", trace, oldGate)
	if respaceErr != nil {
		t.Fatal(respaceErr)
	}
	if err != nil || !tk.OK {
		t.Fatalf("Acquire = %+v, %v; want sent", tk, err)
	}
	// The first slot (now) stays; the second was at +1/10 s, removed by
	// the respace, and is taken again one 1/4 s interval after the first.
	if got, want := clock.Now().Sub(start), Interval(4); got != want {
		t.Errorf("the call went %v after it started, want %v (one interval at the new rate)", got, want)
	}
	tk.Sent(clock.Now())

	// A call that started before the change (its Carrier and GateKey say
	// 10) reserves at 4 from the start, and the gate counts it at 4.
	tk2, err := p.Acquire(ctx, c, "third", nil, oldGate)
	if err != nil || !tk2.OK {
		t.Fatalf("third Acquire = %+v, %v", tk2, err)
	}
	if got, want := clock.Now().Sub(start), 2*Interval(4); got != want {
		t.Errorf("the third call went %v after the start, want %v (two intervals at the new rate)", got, want)
	}
	p.gate.mu.Lock()
	r := p.gate.rings["carrier:a"]
	p.gate.mu.Unlock()
	if r == nil || r.limit != 4 {
		t.Fatalf("the gate's ring for carrier:a: %+v, want limit 4 (the one in force, not the call's 10)", r)
	}

	// Raised back: no store call, calls reserve at the new rate.
	if err := p.Respace(ctx, Carrier{Key: c.Key, CPS: 10, MaxWait: c.MaxWait}, oldGate, false); err != nil {
		t.Fatal(err)
	}
	if v := p.views.of(c.Key); v.rate != 10 {
		t.Errorf("after the raise the view's rate is %v, want 10", v.rate)
	}
}

// TestAcquireRegistersItsCall: a call is among the node's waiting calls
// while it is inside Acquire, and only then.
func TestAcquireRegistersItsCall(t *testing.T) {
	p, _, _ := pacerOnLocal()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: 5 * time.Second}
	var during []string
	trace := &Trace{Queued: func(d int) {
		if d > 0 {
			during = p.waiting.members(c.Key)
		}
	}}
	if _, err := p.Acquire(context.Background(), c, "x", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire(context.Background(), c, "y", trace); err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || during[0] != "y" {
		t.Errorf("waiting while y waited: %q, want [y]", during)
	}
	if got := p.waiting.members(c.Key); len(got) != 0 {
		t.Errorf("waiting after both sent: %q, want none", got)
	}
}

// TestFirstAskAtTheRateInForce: the reservation made ahead of Acquire
// (admission and the first slot in one store call) is spaced for the
// limit in force, not the one the call started with.
func TestFirstAskAtTheRateInForce(t *testing.T) {
	p, _, _ := pacerOnLocal()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: time.Second}
	if err := p.Respace(context.Background(), Carrier{Key: c.Key, CPS: 4, MaxWait: c.MaxWait}, GateKey{Key: "carrier:a", CPS: 4}, true); err != nil {
		t.Fatal(err)
	}
	a, ok := p.FirstAsk(context.Background(), c, "m")
	if !ok || a.Interval != Interval(4) {
		t.Errorf("FirstAsk = %+v, %v; want the interval of 4 cps (%v)", a, ok, Interval(4))
	}
}
