package pacing

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRespaceRemovesTheProcessFutureSlots: a lowered limit removes the
// slots still in the future whose members carry the process's prefix; a
// slot due already, and every other process's (another node's calls,
// which do not know), stay. The store's time of the removal comes after
// every slot decided before it. An empty prefix is refused: it would
// remove every node's slots.
func TestRespaceRemovesTheProcessFutureSlots(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		var last Slot
		members := []string{"pA~call-0", "pA~call-1", "pB~call-2", "pA~call-3"}
		for _, m := range members {
			last = reserve(t, b.store, key, m, Interval(10), 5*time.Second)
		}
		// pA~call-0's slot is now: due, it stays.
		at, err := b.store.Respace(ctx, key, "pA~")
		if err != nil || at.IsZero() || at.Before(last.At) {
			t.Fatalf("Respace = %v, %v; want a time after the last reservation (%v)", at, err, last.At)
		}
		for i, want := range []bool{true, false, true, false} {
			if got := b.held(key, members[i]); got != want {
				t.Errorf("%s held %v after the respace, want %v", members[i], got, want)
			}
		}
		if _, err := b.store.Respace(ctx, key, ""); err == nil {
			t.Error("Respace with an empty prefix accepted")
		}
		if !b.held(key, "pB~call-2") {
			t.Error("the refused empty prefix removed another process's slot")
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
	if _, err := store.Reserve(ctx, c.Key, p.MemberOf("first", 0), Share{}, Interval(c.CPS), c.MaxWait); err != nil {
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
	tk, err := p.Acquire(ctx, c, p.MemberOf("second", 0), trace, oldGate)
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
	tk2, err := p.Acquire(ctx, c, p.MemberOf("third", 0), nil, oldGate)
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

// TestMemberOfCarriesThePrefix: a Pacer's members start with its own
// prefix, another Pacer's (another process) with another.
func TestMemberOfCarriesThePrefix(t *testing.T) {
	a, _, _ := pacerOnLocal()
	b, _, _ := pacerOnLocal()
	m := a.MemberOf("call-1/branch/127.0.0.1:5060/UDP", 2)
	if !strings.HasPrefix(m, a.tag) || !strings.HasSuffix(m, "call-1/branch/127.0.0.1:5060/UDP#2") {
		t.Errorf("MemberOf = %q, want %q + the call + #2", m, a.tag)
	}
	if a.tag == b.tag || a.tag == "" || len(a.tag) != tagLen {
		t.Errorf("two Pacers' prefixes: %q and %q, want two different ones of %d bytes", a.tag, b.tag, tagLen)
	}
	if got := CallOfMember(m); got != "call-1/branch/127.0.0.1:5060/UDP" {
		t.Errorf("CallOfMember(%q) = %q, want the call back", m, got)
	}
	if got := CallOfMember("old/branch#0"); got != "old/branch" {
		t.Errorf("CallOfMember of an unprefixed member = %q", got)
	}
}

// TestRespaceFreesTheTailForTheNextCalls: a slot this node holds outside
// Acquire — reserved with a call's admission for a call not yet waiting,
// or a priority call's place — is removed too (h56): left at the old
// queue's tail, it made every call after the change queue behind it.
func TestRespaceFreesTheTailForTheNextCalls(t *testing.T) {
	p, store, clock := pacerOnLocal()
	ctx := context.Background()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: 5 * time.Second}
	for i := range 18 { // the old queue: 1.7 s of slots at 10 cps
		if _, err := store.Reserve(ctx, c.Key, p.MemberOf("old", i), Share{}, Interval(10), c.MaxWait); err != nil {
			t.Fatal(err)
		}
	}
	if tk, err := p.Acquire(WithPriority(ctx), c, p.MemberOf("priority", 0), nil); err != nil || !tk.OK {
		t.Fatal(err)
	}
	lowered := Carrier{Key: c.Key, CPS: 4, MaxWait: c.MaxWait}
	if err := p.Respace(ctx, lowered, GateKey{Key: "carrier:a", CPS: 4}, true); err != nil {
		t.Fatal(err)
	}
	s, err := p.Reserve(ctx, lowered, p.MemberOf("next", 0))
	if err != nil || !s.OK {
		t.Fatalf("the next call's Reserve = %+v, %v", s, err)
	}
	// The first old slot (now) was due and stays; the next call's comes
	// one interval at 4 cps after it, not behind the old tail.
	if s.Wait != Interval(4) {
		t.Errorf("the next call waits %v, want %v (one interval after the slot due now); clock %v", s.Wait, Interval(4), clock.Now())
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
