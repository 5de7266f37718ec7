package pacing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// stubSlots is a SlotStore that grants every reservation after waits[i]
// (the last one again when the list runs out), or none when full, or fails
// with err; it records what it was asked.
type stubSlots struct {
	mu       sync.Mutex
	waits    []time.Duration
	full     bool
	err      error
	maxWaits []time.Duration // of each Reserve
	released []string        // members
}

func (s *stubSlots) Reserve(_ context.Context, key, member string, _ Share, _, maxWait time.Duration) (Slot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxWaits = append(s.maxWaits, maxWait)
	if s.err != nil {
		return Slot{}, s.err
	}
	i := min(len(s.maxWaits)-1, len(s.waits)-1)
	wait := time.Duration(0)
	if i >= 0 {
		wait = s.waits[i]
	}
	if s.full || wait > maxWait {
		return Slot{Wait: wait}, nil
	}
	return Slot{OK: true, Wait: wait, Key: key, Member: member}, nil
}

func (s *stubSlots) Release(_ context.Context, _, member string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, member)
	return nil
}

func (s *stubSlots) Pause(context.Context, string, time.Duration, string) (Pause, error) {
	return Pause{}, nil
}

func (s *stubSlots) Paused(context.Context, string) (Pause, error) { return Pause{}, nil }

func (s *stubSlots) ProbeDone(context.Context, string, string, bool) (Pause, error) {
	return Pause{}, nil
}

func (s *stubSlots) OpenPause(context.Context, string, time.Duration) (Pause, error) {
	return Pause{}, nil
}

func (s *stubSlots) Unpause(context.Context, string) (Pause, error) { return Pause{}, nil }

func (s *stubSlots) Evidence(context.Context, string, string, bool, EvidenceWindows) (Evidence, error) {
	return Evidence{}, nil
}

func (s *stubSlots) Adapt(context.Context, string, AIMD, bool) (Rate, error) { return Rate{}, nil }

func (s *stubSlots) Respace(context.Context, string, string) (time.Time, error) {
	return time.Time{}, nil
}

func (s *stubSlots) Queue(context.Context, string, time.Duration) (QueueState, error) {
	return QueueState{}, nil
}

func (s *stubSlots) counts() (reserved, released int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.maxWaits), len(s.released)
}

// traced counts what a Trace is told.
type traced struct {
	reserved, full, failed, late int
	queued, maxQueued            int
}

func (tr *traced) trace() *Trace {
	return &Trace{
		Reserved: func(s Slot, err error) {
			switch {
			case err != nil:
				tr.failed++
			case !s.OK:
				tr.full++
			default:
				tr.reserved++
			}
		},
		Queued: func(d int) { tr.queued += d; tr.maxQueued = max(tr.maxQueued, tr.queued) },
		Late:   func(Slot, time.Duration) { tr.late++ },
	}
}

var carrierA = Carrier{Key: "t:{carrier:a}", CPS: 10, MaxWait: time.Second}

// TestAcquireLateWakes: a wake more than MaxLate after the slot gives the
// slot back and takes the next, in what is left of max_wait; MaxLate
// itself is on time; after three late wakes in a row the carrier is full
// for the call. Fake clock: a sleep moves it, a late wake moves it more.
func TestAcquireLateWakes(t *testing.T) {
	const slotWait = 50 * time.Millisecond
	for _, tc := range []struct {
		name      string
		lateWakes int
		lateBy    time.Duration
		ok        bool
		reserved  int // reservations
		released  int
	}{
		{"on time", 0, 0, true, 1, 0},
		{"exactly MaxLate late", 3, MaxLate, true, 1, 0},
		{"one late wake", 1, MaxLate + time.Microsecond, true, 2, 1},
		{"two late wakes", 2, 30 * time.Millisecond, true, 3, 2},
		{"three late wakes: full", 3, 30 * time.Millisecond, false, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newTestClock()
			lateWakes := tc.lateWakes
			clock.onSleep = func(context.Context, time.Duration) error {
				if lateWakes > 0 {
					lateWakes--
					clock.Advance(tc.lateBy)
				}
				return nil
			}
			store := &stubSlots{waits: []time.Duration{slotWait}}
			p := NewPacerClock(store, clock)
			var tr traced
			start := clock.Now()
			tk, err := p.Acquire(context.Background(), carrierA, "call-1", tr.trace())
			if err != nil || tk.OK != tc.ok || tk.Wait != slotWait {
				t.Fatalf("Acquire = %+v, %v; want OK %v, wait %v", tk, err, tc.ok, slotWait)
			}
			reserved, released := store.counts()
			if reserved != tc.reserved || released != tc.released {
				t.Errorf("reservations %d, released %d; want %d and %d", reserved, released, tc.reserved, tc.released)
			}
			if tr.reserved != tc.reserved || tr.late != tc.released || tr.queued != 0 || tr.maxQueued != 1 {
				t.Errorf("trace: %+v; want %d reserved, %d late, queued back to 0 from 1", tr, tc.reserved, tc.released)
			}
			// Every reservation after the first fits what is left of max_wait.
			for i, mw := range store.maxWaits {
				elapsed := time.Duration(i) * (slotWait + tc.lateBy)
				if want := carrierA.MaxWait - elapsed; mw != want {
					t.Errorf("reservation %d: max wait %v, want %v", i, mw, want)
				}
			}
			// The clock moved by the slots' waits and the late wakes only.
			wakes := min(tc.lateWakes, tc.reserved)
			if got, want := clock.Now().Sub(start), time.Duration(tc.reserved)*slotWait+time.Duration(wakes)*tc.lateBy; got != want {
				t.Errorf("Acquire returned %v after it started, want %v", got, want)
			}
		})
	}
}

// TestAcquireOutcomes: what each way out of Acquire returns and holds.
func TestAcquireOutcomes(t *testing.T) {
	storeDown := errors.New("store down")
	for _, tc := range []struct {
		name     string
		store    *stubSlots
		cancel   bool // the caller's context ends during the slot's wait
		ok       bool
		wait     time.Duration
		err      error
		released int
	}{
		{"slot within max_wait", &stubSlots{waits: []time.Duration{200 * time.Millisecond}}, false, true, 200 * time.Millisecond, nil, 0},
		{"no slot within max_wait", &stubSlots{waits: []time.Duration{2 * time.Second}}, false, false, 2 * time.Second, nil, 0},
		{"carrier full", &stubSlots{full: true}, false, false, 0, nil, 0},
		{"store failed", &stubSlots{err: storeDown}, false, false, 0, storeDown, 0},
		{"cancelled while waiting", &stubSlots{waits: []time.Duration{200 * time.Millisecond}}, true, false, 200 * time.Millisecond, context.Canceled, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newTestClock()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				clock.onSleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
			}
			p := NewPacerClock(tc.store, clock)
			tk, err := p.Acquire(ctx, carrierA, "call-1", nil)
			if tk.OK != tc.ok || tk.Wait != tc.wait || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("Acquire = %+v, %v; want OK %v, wait %v, err %v", tk, err, tc.ok, tc.wait, tc.err)
			}
			if _, released := tc.store.counts(); released != tc.released {
				t.Errorf("released %d, want %d", released, tc.released)
			}
		})
	}
}

// TestAcquireCancelledAsTheSlotCameDue: a context that ends as the wait
// ends does not send; the slot is given back.
func TestAcquireCancelledAsTheSlotCameDue(t *testing.T) {
	clock := newTestClock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock.onSleep = func(context.Context, time.Duration) error { cancel(); return nil }
	store := &stubSlots{waits: []time.Duration{100 * time.Millisecond}}
	tk, err := NewPacerClock(store, clock).Acquire(ctx, carrierA, "call-1", nil)
	if tk.OK || !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire = %+v, %v; want not OK, Canceled", tk, err)
	}
	if _, released := store.counts(); released != 1 {
		t.Errorf("released %d, want 1", released)
	}
}

// TestAcquireGate: the send gate holds a send until the node's own last
// sends of each key leave room, within what is left of max_wait; past it
// the carrier is full for the call and the slot is given back. Ticket.Sent
// moves the gate's record to the real send.
func TestAcquireGate(t *testing.T) {
	clock := newTestClock()
	store := &stubSlots{}
	p := NewPacerClock(store, clock)
	ctx := context.Background()
	peer := GateKey{Key: "peer:p", CPS: 1} // one send per 1.005 s
	short := Carrier{Key: carrierA.Key, CPS: carrierA.CPS, MaxWait: 100 * time.Millisecond}

	first, err := p.Acquire(ctx, short, "call-1", nil, peer)
	if err != nil || !first.OK {
		t.Fatalf("first Acquire = %+v, %v; want OK", first, err)
	}
	first.Sent(clock.Now().Add(20 * time.Millisecond)) // the write left 20 ms later

	// Within the peer's window and its max_wait: full, slot given back.
	clock.Advance(500 * time.Millisecond)
	if tk, err := p.Acquire(ctx, short, "call-2", nil, peer); err != nil || tk.OK {
		t.Fatalf("Acquire in the peer's window = %+v, %v; want not OK", tk, err)
	}
	if _, released := store.counts(); released != 1 {
		t.Errorf("released %d, want 1 (the gate's refusal)", released)
	}

	// Room 1.005 s after the real send: a wait that fits max_wait is waited.
	clock.Set(time.Unix(1000, 0).Add(950 * time.Millisecond))
	before := clock.Sleeps()
	tk, err := p.Acquire(ctx, short, "call-3", nil, peer)
	if err != nil || !tk.OK {
		t.Fatalf("Acquire 50 ms before room (max_wait 100 ms) = %+v, %v; want OK", tk, err)
	}
	if got, want := clock.Now(), time.Unix(1000, 0).Add(20*time.Millisecond+time.Second+5*time.Millisecond); !got.Equal(want) {
		t.Errorf("gate let the send go at %v, want %v (1.005 s after the real send)", got, want)
	}
	if n := clock.Sleeps() - before; n != 2 {
		t.Errorf("sleeps = %d, want 2 (the slot's, then the gate's)", n)
	}

	// A caller gone while the gate holds its send: the slot is given back.
	// (call-3 left at the clock's now, unstamped: room 1.005 s later; the
	// slot is due at once, so the one sleep that is not 0 is the gate's.)
	clock.Advance(time.Second)
	ctx2, cancel := context.WithCancel(ctx)
	clock.onSleep = func(_ context.Context, d time.Duration) error {
		if d <= 0 {
			return nil
		}
		cancel()
		return context.Canceled
	}
	_, releasedBefore := store.counts()
	if tk, err := p.Acquire(ctx2, short, "call-4", nil, GateKey{Key: "peer:p", CPS: 1}); tk.OK || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled in the gate = %+v, %v; want not OK, Canceled", tk, err)
	}
	if _, released := store.counts(); released != releasedBefore+1 {
		t.Errorf("released %d, want %d (the slot of the call cancelled in the gate)", released, releasedBefore+1)
	}
	clock.onSleep = nil

	// Keys with no cps are no limit; other keys are apart.
	for i := range 3 {
		if tk, err := p.Acquire(ctx, short, fmt.Sprintf("free-%d", i), nil, GateKey{Key: "peer:free"}, GateKey{Key: "customer:c", CPS: 5}); err != nil || !tk.OK {
			t.Fatalf("Acquire %d on other keys = %+v, %v; want OK", i, tk, err)
		}
	}
}
