package pacing

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A priority call (WithPriority) on a carrier whose queue is full: sent at
// once, with no wait and no sleep, it takes the carrier's next free slot as
// its place, so the next normal reservation waits one interval more; the
// slots already held do not move. On every store.
func TestAcquirePriorityGoesFirst(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		clock := newTestClock()
		p := NewPacerClock(b.store, clock)
		ctx := context.Background()
		// 6 slots of 1.01 s: the sixth is due at +5.05 s, the next at
		// +6.06 s. A max_wait of 5.5 s, not 6, so the seventh is refused
		// whenever less than 560 ms passes on Redis's clock between the
		// first reservation and it. (At 10 CPS the margin was 56 ms, for
		// seven round trips under -race on a loaded machine.)
		c := Carrier{Key: key, CPS: 1, MaxWait: 5500 * time.Millisecond}
		iv := Interval(c.CPS)
		for i := range 6 {
			if s := reserve(t, b.store, key, fmt.Sprintf("call-%d", i), iv, c.MaxWait); !s.OK {
				t.Fatalf("call-%d: got %+v, want a slot", i, s)
			}
		}
		first, _ := b.slotAt(key, "call-0")
		last, _ := b.slotAt(key, "call-5")
		if s := reserve(t, b.store, key, "normal", iv, c.MaxWait); s.OK {
			t.Fatalf("a normal call on the full queue: got %+v, want refused", s)
		}

		var told []Slot
		trace := &Trace{Reserved: func(s Slot, err error) {
			if err != nil {
				t.Errorf("trace: %v", err)
			}
			told = append(told, s)
		}}
		tk, err := p.Acquire(WithPriority(ctx), c, "prio", trace)
		if err != nil || !tk.OK || tk.Paused || tk.Wait != 0 {
			t.Fatalf("priority Acquire on a full queue: got %+v, %v; want OK at once", tk, err)
		}
		if clock.Sleeps() != 0 {
			t.Errorf("priority Acquire slept %d times, want 0", clock.Sleeps())
		}
		if len(told) != 1 || !told[0].OK || told[0].Wait != 0 {
			t.Errorf("trace told %+v, want one granted slot with wait 0", told)
		}
		// Its place: the slot after the last one held.
		at, ok := b.slotAt(key, "prio")
		if !ok || at.Sub(last) != iv {
			t.Fatalf("priority call's place: %v after the last slot (held %v), want one interval (%v)", at.Sub(last), ok, iv)
		}
		if got, _ := b.slotAt(key, "call-0"); !got.Equal(first) {
			t.Errorf("a held slot moved: %v, was %v", got, first)
		}
		// The next normal call waits one interval more than it would have.
		s := reserve(t, b.store, key, "after", iv, time.Minute)
		if got, _ := b.slotAt(key, "after"); !s.OK || got.Sub(first) != 7*iv {
			t.Fatalf("the normal call after it: slot %v after the first, want %v", got.Sub(first), 7*iv)
		}
	})
}

// A priority call is never held by the send gate, and the gate counts its
// send: a normal call of the same limit that would have gone is held.
func TestAcquirePriorityPassesTheGate(t *testing.T) {
	clock := newTestClock()
	store := NewLocalSlots(clock.Now)
	p := NewPacerClock(store, clock)
	ctx := context.Background()
	peer := GateKey{Key: "peer:p", CPS: 1}
	for i := range 3 {
		c := Carrier{Key: fmt.Sprintf("t:{carrier:%d}", i), CPS: 10, MaxWait: 500 * time.Millisecond}
		tk, err := p.Acquire(WithPriority(ctx), c, fmt.Sprintf("prio-%d", i), nil, peer)
		if err != nil || !tk.OK {
			t.Fatalf("priority call %d under a 1 cps gate: got %+v, %v; want OK", i, tk, err)
		}
		tk.Sent(clock.Now())
	}
	if clock.Sleeps() != 0 {
		t.Errorf("priority calls slept %d times, want 0", clock.Sleeps())
	}
	c := Carrier{Key: "t:{carrier:n}", CPS: 10, MaxWait: 500 * time.Millisecond}
	tk, err := p.Acquire(ctx, c, "normal", nil, peer)
	if err != nil || tk.OK {
		t.Fatalf("a normal call after them under the same 1 cps gate: got %+v, %v; want full (held past max_wait)", tk, err)
	}
}

// A paused carrier is skipped by priority calls too: it asked the pool
// to wait.
func TestAcquirePriorityPaused(t *testing.T) {
	p, _, _ := pacerOnLocal()
	ctx := context.Background()
	c := Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: time.Second}
	if _, err := p.Pause(ctx, c, 2*time.Second, "Retry-After 2"); err != nil {
		t.Fatal(err)
	}
	tk, err := p.Acquire(WithPriority(ctx), c, "prio", nil)
	if err != nil || tk.OK || !tk.Paused {
		t.Fatalf("priority Acquire on a paused carrier: got %+v, %v; want paused", tk, err)
	}
}

func TestWithPriority(t *testing.T) {
	ctx := context.Background()
	if IsPriority(ctx) || !IsPriority(WithPriority(ctx)) {
		t.Fatal("IsPriority does not follow WithPriority")
	}
}
