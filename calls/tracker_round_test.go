package calls

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// opRegistry is a LocalRegistry that logs every write, in order.
type opRegistry struct {
	*LocalRegistry
	mu  sync.Mutex
	ops []string // "put id" / "del id"
}

func (r *opRegistry) Put(ctx context.Context, ttl time.Duration, calls []Live) error {
	r.mu.Lock()
	for _, l := range calls {
		r.ops = append(r.ops, "put "+l.ID)
	}
	r.mu.Unlock()
	return r.LocalRegistry.Put(ctx, ttl, calls)
}

func (r *opRegistry) Remove(ctx context.Context, ids []string) error {
	r.mu.Lock()
	for _, id := range ids {
		r.ops = append(r.ops, "del "+id)
	}
	r.mu.Unlock()
	return r.LocalRegistry.Remove(ctx, ids)
}

// A call past MaxDuration is ended by the round and not listed again by
// it first: its removal may find the queue full and be dropped (the
// entry then expires within the TTL of its last listing), and a listing
// put just before would keep the ended call listed a whole TTL more.
func TestRefreshDoesNotListExpiredCalls(t *testing.T) {
	ctx := context.Background()
	oldMax := maxPending
	maxPending = 16
	t.Cleanup(func() { maxPending = oldMax })
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	reg := &opRegistry{LocalRegistry: NewLocalRegistry(clock.Now)}
	tr := NewTracker(NewLocalStore(clock.Now), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour, Registry: reg, Now: clock.Now})
	n := 200
	for i := range n {
		tr.Track(fmt.Sprint("m", i), Live{ID: fmt.Sprint("id", i), CallID: fmt.Sprint("c", i), Node: "n1"}, nil)
		if i%8 == 0 {
			tr.flushRegistry(ctx)
		}
	}
	tr.flushRegistry(ctx)
	reg.mu.Lock()
	reg.ops = nil
	reg.mu.Unlock()
	clock.Advance(time.Hour)
	tr.Refresh(ctx)
	tr.flushRegistry(ctx)
	if l := tr.Live(); l != 0 {
		t.Fatalf("%d calls past MaxDuration still live after the round", l)
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for _, op := range reg.ops {
		if op[:3] == "put" {
			t.Fatalf("a call past MaxDuration listed again by the round that ended it (%s; %d writes)", op, len(reg.ops))
		}
	}
}
