package pacing

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// forgetfulSlots is in-process slots that can lose their schedule (a
// Redis restarted empty): Forget swaps in empty slots and marks the loss.
type forgetfulSlots struct {
	mu sync.Mutex
	*LocalSlots
	lost atomic.Int64
	// inReserve makes the next Reserve forget first, as a Redis that
	// answers the reservation's EVALSHA with NOSCRIPT.
	inReserve atomic.Bool
}

func (f *forgetfulSlots) cur() *LocalSlots { f.mu.Lock(); defer f.mu.Unlock(); return f.LocalSlots }

func (f *forgetfulSlots) Forget() {
	f.mu.Lock()
	f.LocalSlots = NewLocalSlots(nil)
	f.mu.Unlock()
	f.lost.Store(time.Now().UnixNano())
}

func (f *forgetfulSlots) Reserve(ctx context.Context, key, member string, share Share, interval, maxWait time.Duration) (Slot, error) {
	if f.inReserve.CompareAndSwap(true, false) {
		f.Forget()
	}
	return f.cur().Reserve(ctx, key, member, share, interval, maxWait)
}

func (f *forgetfulSlots) Release(ctx context.Context, key, member string) error {
	return f.cur().Release(ctx, key, member)
}

func (f *forgetfulSlots) Lost() time.Time {
	if ns := f.lost.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (f *forgetfulSlots) Rebook(ctx context.Context, key string, slots []Waiting) error {
	return f.cur().Rebook(ctx, key, slots)
}

// TestWaitingSlotsGoBackIntoALostSchedule: the calls waiting for slots of
// a schedule the store lost still go at their times; put back, the next
// call's slot comes after them, not at once beside them: the loss seen
// before the call, or while the store gave its slot (a NOSCRIPT reply).
func TestWaitingSlotsGoBackIntoALostSchedule(t *testing.T) {
	for _, during := range []bool{false, true} {
		t.Run(fmt.Sprint("during=", during), func(t *testing.T) { waitingSlotsGoBack(t, during) })
	}
}

func waitingSlotsGoBack(t *testing.T, during bool) {
	store := &forgetfulSlots{LocalSlots: NewLocalSlots(nil)}
	p := NewPacer(store)
	c := Carrier{Key: "carrier:lost", CPS: 5, MaxWait: 3 * time.Second}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if tk, err := p.Acquire(ctx, c, p.MemberOf("waiting", i), nil); err != nil || !tk.OK {
				t.Errorf("waiting call %d: %+v, %v", i, tk, err)
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; n < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		p.waiting.mu.Lock()
		n = len(p.waiting.keys[c.Key])
		p.waiting.mu.Unlock()
	}
	if during {
		store.inReserve.Store(true)
	} else {
		store.Forget()
	}
	start := time.Now()
	tk, err := p.Acquire(ctx, c, p.MemberOf("after", 0), nil)
	if err != nil || !tk.OK {
		t.Fatalf("call after the loss: %+v, %v", tk, err)
	}
	// The waiting slots were due at about 200 and 400 ms: this one's
	// comes 200 ms after the last (at once without them).
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("the call after the loss waited %v: its slot did not come after the waiting calls'", waited)
	}
	wg.Wait()
	// One loss is acted on once.
	if got := p.waiting.done.Load(); got != store.Lost().UnixNano() {
		t.Fatalf("loss acted on %d, want %d", got, store.Lost().UnixNano())
	}
}

// LocalSlots.Rebook keeps the slots in time order and a member's own.
func TestLocalRebookKeepsOrder(t *testing.T) {
	l := NewLocalSlots(nil)
	ctx := context.Background()
	if s, err := l.Reserve(ctx, "k", "first", Share{}, 100*time.Millisecond, time.Second); err != nil || !s.OK {
		t.Fatalf("reserve: %+v, %v", s, err)
	}
	now := time.Now()
	if err := l.Rebook(ctx, "k", []Waiting{
		{Member: "late", Due: now.Add(400 * time.Millisecond), Keep: time.Second},
		{Member: "first", Due: now.Add(time.Hour), Keep: time.Second},
		{Member: "early", Due: now.Add(200 * time.Millisecond), Keep: time.Second},
	}); err != nil {
		t.Fatal(err)
	}
	set := l.sets["k"]
	var order []string
	for _, e := range set.slots {
		order = append(order, e.member)
	}
	if got := order; len(got) != 3 || got[0] != "first" || got[1] != "early" || got[2] != "late" {
		t.Fatalf("slots in order %v, want [first early late] (first keeps its slot)", got)
	}
	s, err := l.Reserve(ctx, "k", "next", Share{}, 100*time.Millisecond, time.Second)
	if err != nil || !s.OK || s.Wait < 450*time.Millisecond {
		t.Fatalf("next slot: %+v, %v; want 100 ms after the last put back", s, err)
	}
}
