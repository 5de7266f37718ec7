package calls

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// failingRegistry fails every call.
type failingRegistry struct{ Registry }

var errDown = errors.New("registry down")

func (failingRegistry) List(context.Context) ([]Live, error) { return nil, errDown }

// poolNode is one node of a test pool: its Pool and the calls it holds,
// ended (and removed from the registry) by End.
type poolNode struct {
	pool  *Pool
	mu    sync.Mutex
	calls map[string]Live // id -> call
	ended []string
}

func newPoolNode(reg Registry, name string) *poolNode {
	n := &poolNode{calls: map[string]Live{}}
	n.pool = &Pool{Registry: reg, Node: name,
		Local: func() []Live {
			n.mu.Lock()
			defer n.mu.Unlock()
			var out []Live
			for _, l := range n.calls {
				out = append(out, l)
			}
			return out
		},
		End: func(ctx context.Context, callID string) int {
			n.mu.Lock()
			defer n.mu.Unlock()
			c := 0
			for id, l := range n.calls {
				if l.CallID == callID {
					delete(n.calls, id)
					_ = reg.Remove(ctx, []string{id})
					n.ended = append(n.ended, id)
					c++
				}
			}
			return c
		}}
	return n
}

func (n *poolNode) add(t *testing.T, l Live) {
	t.Helper()
	n.mu.Lock()
	n.calls[l.ID] = l
	n.mu.Unlock()
	if err := n.pool.Registry.Put(context.Background(), time.Minute, []Live{l}); err != nil {
		t.Fatal(err)
	}
}

// endCallWhileRunning ends callID from a while b polls its end queue
// (b's Run), and stops b's Run once EndCall returned.
func endCallWhileRunning(ctx context.Context, a, b *poolNode, callID string) (EndResult, error) {
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.pool.Run(runCtx) }()
	res, err := a.pool.EndCall(ctx, callID)
	stop()
	<-done
	return res, err
}

func TestPoolListsAndEndsAcrossNodes(t *testing.T) {
	defer func(d time.Duration) { endQueuePoll = d }(endQueuePoll)
	endQueuePoll = 10 * time.Millisecond
	ctx := context.Background()
	reg := NewLocalRegistry(nil)
	a, b := newPoolNode(reg, "a"), newPoolNode(reg, "b")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	call := func(id, node, peer, carrier string, at int) Live {
		return Live{ID: id, CallID: "cid-" + id, Peer: peer, Carrier: carrier, Node: node, StartedAt: t0.Add(time.Duration(at) * time.Second)}
	}
	a.add(t, call("1", "a", "p1", "c1", 3))
	b.add(t, call("2", "b", "p2", "c1", 1))
	b.add(t, call("3", "b", "p1", "c2", 2))
	ids := func(ls Listing) string {
		var out []string
		for _, l := range ls.Calls {
			out = append(out, l.ID)
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{}, "[2 3 1]"},
		{Filter{Peer: "p1"}, "[3 1]"},
		{Filter{Carrier: "c1"}, "[2 1]"},
		{Filter{Peer: "p1", Carrier: "c2"}, "[3]"},
		{Filter{Peer: "nobody"}, "[]"},
	} {
		if got := a.pool.List(ctx, tc.f); ids(got) != tc.want || got.Partial {
			t.Errorf("List(%+v): got %s (partial %v), want %s", tc.f, ids(got), got.Partial, tc.want)
		}
	}

	// This node's call: ended at once.
	res, err := a.pool.EndCall(ctx, "cid-1")
	if err != nil || res.Ended != 1 || len(res.Requested) != 0 {
		t.Fatalf("EndCall of a's call on a: %+v, %v", res, err)
	}
	// Another node's call: asked through its queue, ended by its Run.
	res, err = endCallWhileRunning(ctx, a, b, "cid-3")
	if err != nil || res.Ended != 0 || !slices.Equal(res.Requested, []string{"b"}) || len(res.Pending) != 0 {
		t.Fatalf("EndCall of b's call on a: %+v, %v", res, err)
	}
	if !slices.Equal(b.ended, []string{"3"}) {
		t.Fatalf("b ended %v, want [3]", b.ended)
	}
	// Asked of a node that does not answer: pending.
	defer func(d time.Duration) { endWait = d }(endWait)
	endWait = 50 * time.Millisecond
	res, err = a.pool.EndCall(ctx, "cid-2")
	if err != nil || !slices.Equal(res.Pending, []string{"b"}) {
		t.Fatalf("EndCall with b not polling: %+v, %v", res, err)
	}
	if _, err := a.pool.EndCall(ctx, "cid-nothing"); !errors.Is(err, ErrNoCall) {
		t.Fatalf("EndCall of an unknown Call-ID: %v, want ErrNoCall", err)
	}
}

// The registry down: the list is this node's own, marked partial; this
// node's calls can still be ended, a call it does not hold cannot.
func TestPoolRegistryDown(t *testing.T) {
	ctx := context.Background()
	n := newPoolNode(NewLocalRegistry(nil), "a")
	n.add(t, Live{ID: "1", CallID: "cid-1", Node: "a"})
	n.pool.Registry = failingRegistry{n.pool.Registry}
	ls := n.pool.List(ctx, Filter{})
	if !ls.Partial || ls.Error == "" || len(ls.Calls) != 1 {
		t.Fatalf("list with the registry down: %+v", ls)
	}
	res, err := n.pool.EndCall(ctx, "cid-1")
	if err != nil || res.Ended != 1 || res.Error == "" {
		t.Fatalf("end of a local call with the registry down: %+v, %v", res, err)
	}
	if _, err := n.pool.EndCall(ctx, "cid-2"); !errors.Is(err, errDown) {
		t.Fatalf("end of an unknown call with the registry down: %v, want the registry's error", err)
	}
}

// TestPoolEndsLongCallID: a Call-ID longer than the list keeps (MaxCallID
// bytes) is listed clipped; ending it by its full text, or by the clipped
// text the list shows, reaches the node that holds it (the list compared
// the full text with the clipped one and found no call).
func TestPoolEndsLongCallID(t *testing.T) {
	defer func(d time.Duration) { endQueuePoll = d }(endQueuePoll)
	endQueuePoll = 10 * time.Millisecond
	ctx := context.Background()
	reg := NewLocalRegistry(nil)
	a, b := newPoolNode(reg, "a"), newPoolNode(reg, "b")
	full := strings.Repeat("é", MaxCallID) // 2 bytes each: clipped inside a rune
	clipped := ClipCallID(full)
	if len(clipped) > MaxCallID+len("…") || !strings.HasSuffix(clipped, "…") || !utf8.ValidString(clipped) {
		t.Fatalf("ClipCallID = %q (%d bytes)", clipped, len(clipped))
	}
	if ClipCallID(clipped) != clipped {
		t.Fatalf("ClipCallID of the clipped form changed it: %q", ClipCallID(clipped))
	}
	for i, asked := range []string{full, clipped} {
		id := fmt.Sprint("long-", i)
		b.add(t, Live{ID: id, CallID: clipped, Node: "b"})
		res, err := endCallWhileRunning(ctx, a, b, asked)
		if err != nil || !slices.Equal(res.Requested, []string{"b"}) || len(res.Pending) != 0 {
			t.Fatalf("EndCall by the %s Call-ID: %+v, %v", []string{"full", "clipped"}[i], res, err)
		}
		if !slices.Contains(b.ended, id) {
			t.Fatalf("b ended %v, want %s", b.ended, id)
		}
	}
}
