package pacing

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/lua"
)

// TestRespaceRemovesFutureSlotsOnce: a lowered limit removes the slots
// still in the future (spaced for the old rate), once for the pool: a
// second node applying the same change learns the first one's time and
// removes nothing, not even the slots reserved since at the new rate. A
// raised limit removes nothing; lowering it again respaces again.
func TestRespaceRemovesFutureSlotsOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		old, lower := Interval(10), Interval(4)
		var last Slot
		for i := range 3 {
			last = reserve(t, b.store, key, fmt.Sprintf("old-%d", i), old, 5*time.Second)
		}
		at, err := b.store.Respace(ctx, key, lower, true)
		if err != nil || at.IsZero() || at.Before(last.At) {
			t.Fatalf("Respace = %v, %v; want a respace after the last reservation (%v)", at, err, last.At)
		}
		for i, want := range []bool{true, false, false} {
			if got := b.held(key, fmt.Sprintf("old-%d", i)); got != want {
				t.Errorf("old-%d held %v after the respace, want %v (only the slot due now stays)", i, got, want)
			}
		}
		if b.advance != nil {
			b.advance(time.Millisecond)
		}
		reserve(t, b.store, key, "new-0", lower, 5*time.Second)
		reserve(t, b.store, key, "new-1", lower, 5*time.Second)

		// Another node of the pool applies the same change.
		at2, err := b.store.Respace(ctx, key, lower, true)
		if err != nil || !at2.Equal(at) {
			t.Fatalf("second Respace = %v, %v; want the first one's time %v", at2, err, at)
		}
		if !b.held(key, "new-1") {
			t.Error("the second node's respace removed a slot reserved at the new interval")
		}

		// Raised: nothing removed, the time of the last respace kept.
		at3, err := b.store.Respace(ctx, key, old, false)
		if err != nil || !at3.Equal(at) || !b.held(key, "new-1") {
			t.Fatalf("raise: Respace = %v, %v (new-1 held %v); want %v and nothing removed", at3, err, b.held(key, "new-1"), at)
		}
		// Lowered again to the interval of the first respace.
		if b.advance != nil {
			b.advance(time.Millisecond)
		}
		at4, err := b.store.Respace(ctx, key, lower, true)
		if err != nil || !at4.After(at) {
			t.Fatalf("lowered again: Respace = %v, %v; want a new respace after %v", at4, err, at)
		}
		if b.held(key, "new-1") {
			t.Error("lowered again: new-1's future slot is still held")
		}

		if _, err := b.store.Respace(ctx, key, 0, true); err == nil {
			t.Error("Respace with interval 0 accepted")
		}
	})
}

// TestRespaceRecordExpires: the record of a respace is a bounded entry
// per carrier that expires (RespaceKeep), on both stores.
func TestRespaceRecordExpires(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		if _, err := b.store.Respace(context.Background(), key, Interval(4), true); err != nil {
			t.Fatal(err)
		}
		if b.ttl != nil {
			if d := b.ttl(lua.RespaceKey(key)); d <= 0 || d > RespaceKeep {
				t.Errorf("the respace record's TTL is %v, want in (0, %v]", d, RespaceKeep)
			}
			return
		}
		l, ok := b.store.(*LocalSlots)
		if !ok || b.advance == nil {
			t.Fatalf("backend %s: neither a TTL nor an in-process store on a fake clock", b.name)
		}
		b.advance(RespaceKeep + sweepEvery + time.Second)
		l.mu.Lock()
		l.sweep(l.now())
		n := len(l.respaced)
		l.mu.Unlock()
		if n != 0 {
			t.Errorf("%d respace records left after RespaceKeep", n)
		}
	})
}

// TestAcquireRetakesASlotAfterARespace: calls hold slots spaced for 10
// CPS when the carrier's limit is lowered to 4 (a reload); a call waking
// on such a slot does not send on it but takes one at the new rate,
// though it was asked with the old Carrier.
func TestAcquireRetakesASlotAfterARespace(t *testing.T) {
	p, store, clock := pacerOnLocal()
	ctx := context.Background()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: 5 * time.Second}
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
			respaceErr = p.Respace(ctx, lowered, true)
		}
	}}
	tk, err := p.Acquire(ctx, c, "second", trace)
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

	// Raised back: a call that started at 4 and takes a slot again is
	// not held below its own rate, and nothing is removed.
	if err := p.Respace(ctx, Carrier{Key: c.Key, CPS: 10, MaxWait: c.MaxWait}, false); err != nil {
		t.Fatal(err)
	}
	if v := p.views.of(c.Key); v.rate != 10 {
		t.Errorf("after the raise the view's rate is %v, want 10", v.rate)
	}
}
