package pacing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/lua"
)

func TestInterval(t *testing.T) {
	for _, tc := range []struct {
		cps  float64
		want time.Duration
	}{
		{10, 101 * time.Millisecond},
		{1, 1010 * time.Millisecond},
		{0.5, 2020 * time.Millisecond},
		{0, 0},
	} {
		if got := Interval(tc.cps); got != tc.want {
			t.Errorf("Interval(%v) = %v, want %v", tc.cps, got, tc.want)
		}
	}
}

func TestPacer(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			p := NewPacer(b.real)
			ctx := context.Background()
			c := Carrier{Key: lua.Key("test", "carrier", t.Name()), CPS: 10, MaxWait: time.Second}

			first, err := p.Reserve(ctx, c, "call-0")
			if err != nil || !first.OK || first.Wait > 5*time.Millisecond {
				t.Fatalf("first Reserve = %+v, %v; want OK with no wait", first, err)
			}
			if err := p.Wait(ctx, first); err != nil {
				t.Fatalf("Wait on a due slot: %v", err)
			}

			// Wait sleeps until the slot is due, not before. The slot is one
			// interval after the first on the store's clock, exactly.
			second, err := p.Reserve(ctx, c, "call-1")
			if err != nil || !second.OK || second.At.Add(second.Wait).Sub(first.At) != Interval(c.CPS) {
				t.Fatalf("second Reserve = %+v, %v; want OK one interval (%v) after the first", second, err, Interval(c.CPS))
			}
			if err := p.Wait(ctx, second); err != nil || time.Now().Before(second.Due()) {
				t.Fatalf("Wait = %v at %v before due", err, time.Until(second.Due()))
			}

			// Wait returns early on cancel and releases the slot. A 1 CPS
			// carrier makes the wait long enough that no stall hides it.
			slow := Carrier{Key: lua.Key("test", "carrier", t.Name()+"/slow"), CPS: 1, MaxWait: 5 * time.Second}
			s0, err := p.Reserve(ctx, slow, "slow-0")
			if err != nil || !s0.OK {
				t.Fatalf("Reserve slow-0 = %+v, %v", s0, err)
			}
			// One interval after slow-0 on the store's clock, exactly (its
			// wait alone shrinks by the time between the two calls).
			third, err := p.Reserve(ctx, slow, "slow-1")
			if err != nil || !third.OK || third.At.Add(third.Wait).Sub(s0.At.Add(s0.Wait)) != Interval(slow.CPS) || third.Wait <= 0 {
				t.Fatalf("Reserve slow-1 = %+v, %v; want OK, one interval (%v) after slow-0", third, err, Interval(slow.CPS))
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = p.Wait(cctx, third)
			if !errors.Is(err, context.DeadlineExceeded) || !time.Now().Before(third.Due()) {
				t.Fatalf("Wait with a 5ms context = %v after %v; want DeadlineExceeded before the slot (%v)", err, time.Since(start), third.Wait)
			}
			if b.realHeld(slow.Key, "slow-1") {
				t.Fatal("slot of a cancelled wait is still held")
			}
			if !b.realHeld(slow.Key, "slow-0") {
				t.Fatal("the other slot was released too")
			}
			if !errors.Is(p.Wait(ctx, Slot{}), ErrNotReserved) {
				t.Fatal("Wait on a refused slot: want ErrNotReserved")
			}
			if err := p.Release(ctx, Slot{}); err != nil {
				t.Fatalf("Release of a refused slot: %v", err)
			}
		})
	}
}

// Never reserve a slot the caller cannot wait for: a context deadline
// shorter than MaxWait caps the wait, and the refusal reserves nothing.
func TestPacerHonoursDeadline(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			p := NewPacer(b.real)
			c := Carrier{Key: lua.Key("test", "carrier", t.Name()), CPS: 1, MaxWait: 10 * time.Second}
			for i := range 3 { // slots at +0, +1.01s, +2.02s
				if s, err := p.Reserve(context.Background(), c, fmt.Sprintf("call-%d", i)); err != nil || !s.OK {
					t.Fatalf("Reserve %d = %+v, %v", i, s, err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			s, err := p.Reserve(ctx, c, "late")
			if err != nil || s.OK || s.Wait < 500*time.Millisecond {
				t.Fatalf("Reserve with 500ms left = %+v, %v; want refused with the would-be wait", s, err)
			}
			if b.realHeld(c.Key, "late") {
				t.Fatal("a refused reservation holds a slot")
			}
			if _, err := p.Reserve(context.Background(), Carrier{Key: c.Key, CPS: 0}, "x"); err == nil {
				t.Fatal("Reserve with cps 0: got no error")
			}
		})
	}
}
