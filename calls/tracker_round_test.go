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

// refreshCounter counts the members a Store's Refresh is given, per key.
type refreshCounter struct {
	Store
	mu sync.Mutex
	n  map[string]int // key+" "+member -> refreshes
}

func (s *refreshCounter) Refresh(ctx context.Context, key string, ttl time.Duration, members []string) (int, error) {
	s.mu.Lock()
	for _, m := range members {
		s.n[key+" "+m]++
	}
	s.mu.Unlock()
	return s.Store.Refresh(ctx, key, ttl, members)
}

// A round raced by churn between its chunks (calls ended, set up, ended
// and set up again many times, tracked again while live) and by a
// concurrent flusher: every call live throughout the round is listed and
// refreshed exactly once, every call past MaxDuration is ended, no call
// ended is listed after its removal, and order stays bounded.
func TestRefreshRoundUnderChurn(t *testing.T) {
	ctx := context.Background()
	oldMax := maxPending
	maxPending = 64
	t.Cleanup(func() { maxPending = oldMax })
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	reg := &opRegistry{LocalRegistry: NewLocalRegistry(clock.Now)}
	st := &refreshCounter{Store: NewLocalStore(clock.Now), n: map[string]int{}}
	tr := NewTracker(st, TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour, Registry: reg, Now: clock.Now})
	track := func(m string) {
		if d, err := tr.Occupy(ctx, m, []Place{{Key: "k", Limit: 1 << 30}}); err != nil || !d.Admit {
			t.Fatalf("occupy %s: %+v %v", m, d, err)
		}
		tr.Track(m, Live{ID: "id-" + m, CallID: "c-" + m, Node: "n1"}, nil)
	}
	n := 4*refreshChunk + 7
	for i := range n {
		track(fmt.Sprint("old", i))
	}
	clock.Advance(time.Hour) // the "old" calls are past MaxDuration
	for i := range n {
		track(fmt.Sprint("m", i))
	}
	tr.flushRegistry(ctx)
	reg.mu.Lock()
	reg.ops = nil
	reg.mu.Unlock()

	// Churn between chunks: the tail ends, new calls come, one member
	// is ended and tracked again many times, a live one tracked again.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a concurrent flusher, as runRegistry
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				tr.flushRegistry(ctx)
			}
		}
	}()
	chunk, endless := 0, false
	refreshChunkDone = func() {
		chunk++
		if chunk > 1000 {
			endless = true // let the round end: no more churn
			return
		}
		tr.End(ctx, fmt.Sprint("m", n-chunk))
		track(fmt.Sprint("new", chunk))
		for range 50 {
			tr.End(ctx, "bounce")
			track("bounce")
		}
		tr.Track("m0", Live{ID: "id-m0", CallID: "c-m0", Node: "n1"}, nil)
	}
	t.Cleanup(func() { refreshChunkDone = nil })
	tr.Refresh(ctx)
	refreshChunkDone = nil
	close(stop)
	wg.Wait()
	tr.flushRegistry(ctx)
	if endless {
		t.Fatalf("the round went on past %d chunks: it chases the calls set up during it", chunk)
	}

	tr.mu.Lock()
	orderLen, live := len(tr.order), len(tr.calls)
	tr.mu.Unlock()
	if orderLen > 2*live+refreshChunk+100*chunk {
		t.Errorf("order holds %d members for %d calls", orderLen, live)
	}
	puts := map[string]int{}
	last := map[string]string{}
	reg.mu.Lock()
	for _, op := range reg.ops {
		var kind, id string
		fmt.Sscan(op, &kind, &id)
		if kind == "put" {
			puts[id]++
		}
		last[id] = kind
	}
	reg.mu.Unlock()
	for i := range n {
		if tr.Live() > 0 && tr.EndAs(ctx, fmt.Sprint("old", i), "probe", "") {
			t.Fatalf("old%d, past MaxDuration, not ended by the round", i)
		}
	}
	for i := 1; i < n-chunk; i++ { // live throughout
		m := fmt.Sprint("m", i)
		if puts["id-"+m] != 1 {
			t.Fatalf("%s listed %d times in the round, want 1", m, puts["id-"+m])
		}
		st.mu.Lock()
		r := st.n["k "+m]
		st.mu.Unlock()
		if r != 1 {
			t.Fatalf("%s refreshed %d times in the round, want 1", m, r)
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for id, kind := range last {
		m := id[len("id-"):]
		if kind == "put" && tr.calls[m] == nil {
			t.Errorf("%s is ended but its last registry write is a listing", m)
		}
		if kind == "del" && tr.calls[m] != nil {
			t.Errorf("%s is live but its last registry write is a removal", m)
		}
	}
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

// TestListLetsGoBetweenChunks: an operator's listing of the node's own
// calls (the pool's fallback when the Registry cannot be read) copied
// every call under the lock each call's setup and end takes (~70 ms with
// 200,000 calls up). It now walks them a chunk at a time, letting go in
// between; calls set up and ended meanwhile are listed or not, but no
// call is listed twice and every call up through the listing is in it.
func TestListLetsGoBetweenChunks(t *testing.T) {
	ctx := context.Background()
	tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour})
	n := 3*refreshChunk + 17
	track := func(m string) {
		tr.Track(m, Live{ID: "id-" + m, CallID: "c-" + m, Node: "n1"}, nil)
	}
	for i := range n {
		track(fmt.Sprint("m", i))
	}
	// m1 ends and comes back: queued twice in order.
	tr.End(ctx, "m1")
	track("m1")
	chunks := 0
	listChunkDone = func() {
		chunks++
		if !tr.mu.TryLock() {
			t.Fatal("List holds the Tracker's lock between chunks")
		}
		tr.mu.Unlock()
		// Setups and ends go on during the listing.
		track(fmt.Sprint("during", chunks))
		tr.End(ctx, fmt.Sprint("m", n-chunks))
	}
	t.Cleanup(func() { listChunkDone = nil })
	got := tr.List()
	listChunkDone = nil
	if chunks < 3 {
		t.Fatalf("%d calls listed in %d chunks, want at least 3 (chunks of %d)", n, chunks, refreshChunk)
	}
	seen := map[string]int{}
	for _, l := range got {
		seen[l.ID]++
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s listed %d times", id, k)
		}
	}
	for i := range n - chunks {
		if id := fmt.Sprint("id-m", i); seen[id] != 1 {
			t.Errorf("%s, up through the listing, listed %d times", id, seen[id])
		}
	}
}
