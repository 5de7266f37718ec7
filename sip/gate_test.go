package sip

import (
	"context"
	"errors"
	"testing"
	"time"
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
		{"limit reached in the window", 3, []int{0, 10, 20}, 30, 980 * time.Millisecond},
		{"oldest is a window old", 3, []int{0, 10, 20}, 1010, 0},
		{"late send counts from when it left", 2, []int{0, 300}, 900, 110 * time.Millisecond},
		{"fractional cps: one per 1/cps", 0.5, []int{0}, 1000, 1010 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newSendGate()
			keys := []gateKey{{"carrier:a", tc.cps}}
			for _, s := range tc.sends {
				d, tk := g.reserve(keys, ms(s))
				if d != 0 {
					t.Fatalf("send at %d ms: wait %v, want 0", s, d)
				}
				g.sent(tk, ms(s))
			}
			if d, _ := g.reserve(keys, ms(tc.at)); d != tc.wantWait {
				t.Errorf("send at %d ms: wait = %v, want %v", tc.at, d, tc.wantWait)
			}
		})
	}
}

func TestSendGateStampsRealSendTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := newSendGate()
	keys := []gateKey{{"peer:p", 1}, {"carrier:a", 100}}
	_, tk := g.reserve(keys, t0)
	g.sent(tk, t0.Add(40*time.Millisecond)) // the write left 40 ms after the check
	if d, _ := g.reserve(keys, t0.Add(time.Second)); d != 50*time.Millisecond {
		t.Errorf("wait = %v, want 50ms (1.01 s after the real send)", d)
	}
}

func TestSendGateWaitGivesUpOverLimit(t *testing.T) {
	g := newSendGate()
	keys := []gateKey{{"carrier:a", 1}}
	if _, err := g.wait(context.Background(), keys, time.Second); err != nil {
		t.Fatalf("first send: %v", err)
	}
	if _, err := g.wait(context.Background(), keys, 100*time.Millisecond); !errors.Is(err, errGateFull) {
		t.Fatalf("second send within the window, limit 100ms: err = %v, want errGateFull", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.wait(ctx, keys, 2*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait cut by its context: err = %v, want DeadlineExceeded", err)
	}
}
