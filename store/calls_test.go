package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/pacing"
)

// brokenCalls is a calls.Store whose Redis is down.
type brokenCalls struct{ calls.Store }

var errDown = errors.New("redis down")

func (brokenCalls) Occupy(context.Context, string, time.Duration, []calls.Place) (calls.Decision, error) {
	return calls.Decision{}, errDown
}

func TestCallsFailoverPolicies(t *testing.T) {
	ctx := context.Background()
	place := []calls.Place{{Key: "p", Limit: 10}}
	for _, tc := range []struct {
		policy  string
		admits  int // of 12 calls
		wantErr error
	}{
		{PolicyLocal, 3, nil}, // 10 over 3 live nodes
		{PolicyAdmit, 12, nil},
		{PolicyReject, 0, ErrStoreDown},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			hb := NewHeartbeat(nil, HeartbeatOptions{MinNodes: 3})
			f := NewFailover(Options{Redis: admission.NewLocalStore(nil), Local: admission.NewLocalStore(nil),
				LocalSlots: pacing.NewLocalSlots(nil), Nodes: hb, Policy: tc.policy})
			c := NewCallsFailover(f, brokenCalls{}, calls.NewLocalStore(nil))
			admitted := 0
			for i := 0; i < 12; i++ {
				d, err := c.Occupy(ctx, fmt.Sprint("c", i), time.Minute, place)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("call %d: err %v, want %v", i, err, tc.wantErr)
				}
				if d.Admit {
					admitted++
				}
			}
			if admitted != tc.admits {
				t.Fatalf("admitted %d of 12, want %d", admitted, tc.admits)
			}
			if f.Mode() != ModeFallback {
				t.Fatalf("mode %s after a Redis error, want fallback", f.Mode())
			}
		})
	}
	t.Run("share below one call refuses", func(t *testing.T) {
		hb := NewHeartbeat(nil, HeartbeatOptions{MinNodes: 3})
		f := NewFailover(Options{Redis: admission.NewLocalStore(nil), Local: admission.NewLocalStore(nil),
			LocalSlots: pacing.NewLocalSlots(nil), Nodes: hb})
		c := NewCallsFailover(f, brokenCalls{}, calls.NewLocalStore(nil))
		if d, err := c.Occupy(ctx, "c", time.Minute, []calls.Place{{Key: "p", Limit: 2}}); err != nil || d.Admit {
			t.Fatalf("max_calls 2 over 3 nodes: got %+v %v, want refused", d, err)
		}
	})
	t.Run("redis places mirrored", func(t *testing.T) {
		f := NewFailover(Options{Redis: admission.NewLocalStore(nil), Local: admission.NewLocalStore(nil),
			LocalSlots: pacing.NewLocalSlots(nil)})
		redis, local := calls.NewLocalStore(nil), calls.NewLocalStore(nil)
		c := NewCallsFailover(f, redis, local)
		if d, err := c.Occupy(ctx, "c", time.Minute, place); err != nil || !d.Admit {
			t.Fatalf("occupy: %+v %v", d, err)
		}
		if n, _ := local.Count(ctx, []string{"p"}); n[0] != 1 {
			t.Fatalf("local mirror holds %d calls, want 1", n[0])
		}
		if n, err := c.Free(ctx, "c", []string{"p"}); err != nil || n != 1 {
			t.Fatalf("free: %d %v, want 1", n, err)
		}
		if n, _ := local.Count(ctx, []string{"p"}); n[0] != 0 {
			t.Fatalf("local mirror holds %d calls after free, want 0", n[0])
		}
	})
	t.Run("fallback calls reach redis on recovery", func(t *testing.T) {
		f := NewFailover(Options{Redis: admission.NewLocalStore(nil), Local: admission.NewLocalStore(nil),
			LocalSlots: pacing.NewLocalSlots(nil)})
		shared := calls.NewLocalStore(nil) // stands in for Redis
		flaky := &flakyCalls{Store: shared, down: true}
		c := NewCallsFailover(f, flaky, calls.NewLocalStore(nil))
		tr := calls.NewTracker(c, calls.TrackerOptions{TTL: time.Minute})
		for _, m := range []string{"a", "b"} {
			if d, err := tr.Occupy(ctx, m, place); err != nil || !d.Admit {
				t.Fatalf("occupy %s in the fallback: %+v %v", m, d, err)
			}
		}
		if f.Mode() != ModeFallback {
			t.Fatalf("mode %s, want fallback", f.Mode())
		}
		flaky.down = false
		f.recover()
		tr.Refresh(ctx) // what Kick runs at once on the switch back
		if n, _ := shared.Count(ctx, []string{"p"}); n[0] != 2 {
			t.Fatalf("redis counts %d live calls after recovery, want the 2 taken in the fallback", n[0])
		}
	})
}

// flakyCalls is a calls.Store whose Occupy fails while down.
type flakyCalls struct {
	calls.Store
	down bool
}

func (s *flakyCalls) Occupy(ctx context.Context, member string, ttl time.Duration, places []calls.Place) (calls.Decision, error) {
	if s.down {
		return calls.Decision{}, errDown
	}
	return s.Store.Occupy(ctx, member, ttl, places)
}
