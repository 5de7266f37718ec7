package calls

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := NewLocalStore(clock.Now)
	tr := NewTracker(store, TrackerOptions{TTL: 3 * time.Second, MaxDuration: time.Minute, Now: clock.Now})
	peer := Place{Key: "p", Limit: 2}
	car := Place{Key: "c", Limit: 1}
	count := func() string {
		n, _ := store.Count(ctx, []string{"p", "c"})
		return fmt.Sprint(n)
	}

	if d, err := tr.Occupy(ctx, "a", []Place{peer}); err != nil || !d.Admit {
		t.Fatalf("occupy a: %+v %v", d, err)
	}
	if d, err := tr.Occupy(ctx, "a", []Place{car}); err != nil || !d.Admit {
		t.Fatalf("a's carrier: %+v %v", d, err)
	}
	if d, _ := tr.Occupy(ctx, "b", []Place{peer, car}); d.Admit || d.Refused != 1 {
		t.Fatalf("b: got %+v, want refused by the carrier", d)
	}
	tr.Release(ctx, "a", []string{"c"})
	if got, want := count(), "[1 0]"; got != want {
		t.Fatalf("after release: got %s, want %s", got, want)
	}

	// A BYE of a dialog nobody set up frees nothing.
	if tr.EndDialog(ctx, "nobody", "callee", "caller") {
		t.Fatal("EndDialog of an unknown dialog reported a call")
	}
	tr.Bind("a", "dlg-a")
	tr.Answer(ctx, "a", "callee-a")
	// A BYE naming a made-up callee tag (the carrier would answer 481 and
	// the call go on) frees nothing.
	if tr.EndDialog(ctx, "dlg-a", "made-up", "caller") {
		t.Fatal("a BYE with another callee tag ended the call")
	}
	// Refreshed while it lives: still there after several TTLs.
	for i := 0; i < 4; i++ {
		clock.Advance(time.Second)
		tr.Refresh(ctx)
	}
	if got, want := count(), "[1 0]"; got != want {
		t.Fatalf("after refreshes: got %s, want %s", got, want)
	}
	if !tr.EndDialog(ctx, "dlg-a", "callee-a", "caller") {
		t.Fatal("EndDialog of a's dialog found no call")
	}
	if tr.EndDialog(ctx, "dlg-a", "callee-a", "caller") {
		t.Fatal("a second BYE ended a call again")
	}
	if got, want := count(), "[0 0]"; got != want || tr.Live() != 0 {
		t.Fatalf("after BYE: got %s and %d live, want %s and 0", got, tr.Live(), want)
	}

	// max duration: the call is ended by the refresher.
	if d, _ := tr.Occupy(ctx, "long", []Place{peer}); !d.Admit {
		t.Fatal("occupy long refused")
	}
	for i := 0; i < 61; i++ {
		clock.Advance(time.Second)
		tr.Refresh(ctx)
	}
	if got, want := count(), "[0 0]"; got != want || tr.Live() != 0 {
		t.Fatalf("after max duration: got %s and %d live, want %s and 0", got, tr.Live(), want)
	}

	// A node that stops refreshing (died): its call leaves at the TTL.
	if d, _ := tr.Occupy(ctx, "orphan", []Place{peer}); !d.Admit {
		t.Fatal("occupy orphan refused")
	}
	clock.Advance(3 * time.Second)
	if got, want := count(), "[0 0]"; got != want {
		t.Fatalf("an unrefreshed call after the TTL: got %s, want %s", got, want)
	}
}

// A carrier's BYE that overtakes the recording of its own 2xx is kept and
// carried out by the matching answer; a BYE before the answer naming
// another tag is not.
func TestEndBeforeAnswer(t *testing.T) {
	ctx := context.Background()
	tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour})
	peer := Place{Key: "p", Limit: 2}
	for _, m := range []string{"x", "y"} {
		if d, err := tr.Occupy(ctx, m, []Place{peer}); err != nil || !d.Admit {
			t.Fatalf("%s: %+v %v", m, d, err)
		}
		tr.Bind(m, "dlg-"+m)
	}
	if tr.EndDialog(ctx, "dlg-x", "callee-x", "caller") {
		t.Fatal("a BYE before the answer ended the call at once")
	}
	if !tr.Answer(ctx, "x", "callee-x") || tr.Live() != 1 {
		t.Fatalf("the answer matching the early BYE did not end the call (%d live)", tr.Live())
	}
	tr.EndDialog(ctx, "dlg-y", "bogus", "caller")
	if tr.Answer(ctx, "y", "callee-y") || tr.Live() != 1 {
		t.Fatalf("an early BYE naming another tag ended y (%d live)", tr.Live())
	}
}

// A live call whose place the store lost (taken in the fallback, or the
// store's data gone) counts again after the next refresh round, and Kick
// runs that round at once.
func TestTrackerRestoresLostPlaces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shared := NewLocalStore(nil)
	tr := NewTracker(shared, TrackerOptions{TTL: time.Hour, MaxDuration: 4 * time.Hour})
	peer := Place{Key: "p", Limit: 2}
	for _, m := range []string{"a", "b"} {
		if d, err := tr.Occupy(ctx, m, []Place{peer}); err != nil || !d.Admit {
			t.Fatalf("occupy %s: %+v %v", m, d, err)
		}
	}
	// The store forgets both calls (a Redis restart, or calls taken while
	// the node decided in process).
	if _, err := shared.Free(ctx, "a", []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.Free(ctx, "b", []string{"p"}); err != nil {
		t.Fatal(err)
	}
	go tr.Run(ctx)
	tr.Kick()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := shared.Count(ctx, []string{"p"})
		if n[0] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Kick the store counts %d live calls, want 2", n[0])
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d, _ := shared.Occupy(ctx, "c", time.Hour, []Place{peer}); d.Admit {
		t.Fatal("a third call was admitted over the restored live calls")
	}
}

// endingStore ends a call in the middle of a refresh of its place.
type endingStore struct {
	Store
	during func()
}

func (s *endingStore) Refresh(ctx context.Context, key string, ttl time.Duration, members []string) (int, error) {
	s.during()
	return s.Store.Refresh(ctx, key, ttl, members)
}

// A call that ends while a refresh round is adding its place back does
// not leave the place behind.
func TestTrackerRefreshRacingEnd(t *testing.T) {
	ctx := context.Background()
	local := NewLocalStore(nil)
	es := &endingStore{Store: local}
	tr := NewTracker(es, TrackerOptions{TTL: time.Hour, MaxDuration: 4 * time.Hour})
	if d, err := tr.Occupy(ctx, "a", []Place{{Key: "p", Limit: 1}}); err != nil || !d.Admit {
		t.Fatalf("occupy: %+v %v", d, err)
	}
	es.during = func() { tr.End(ctx, "a") } // frees p before the refresh adds it back
	tr.Refresh(ctx)
	if n, _ := local.Count(ctx, []string{"p"}); n[0] != 0 || tr.Live() != 0 {
		t.Fatalf("after a refresh racing the call's end: %d places held, %d live; want 0, 0", n[0], tr.Live())
	}
}

// The Tracker lists the calls it tracks in the Registry (batched), marks
// them answered, tells OnEnd of the calls it ends, and lists a call no
// more once it ended; a refresh lists again what the Registry lost.
func TestTrackerListsAndEndsCalls(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	reg := NewLocalRegistry(clock.Now)
	tr := NewTracker(NewLocalStore(clock.Now), TrackerOptions{TTL: 3 * time.Second, MaxDuration: time.Minute, Now: clock.Now, Registry: reg})
	var ends []Ended
	tr.SetOnEnd(func(e Ended) { ends = append(ends, e) })
	list := func() []string {
		tr.flushRegistry(ctx)
		ls, _ := reg.List(ctx)
		var out []string
		for _, l := range ls {
			s := l.ID + "@" + l.Carrier
			if l.AnsweredAt != nil {
				s += "+answered"
			}
			out = append(out, s)
		}
		return out
	}
	info := func(id, carrier string) Live {
		return Live{ID: id, CallID: "cid-" + id, Carrier: carrier, Node: "n1", StartedAt: clock.Now()}
	}

	tr.Track("m1", info("1", "a"), "data-1")
	tr.Track("m1", info("1", "b"), "data-1") // rerouted
	tr.Bind("m1", "dlg-1")
	tr.Track("m2", info("2", "a"), "data-2")
	tr.Bind("m2", "dlg-2")
	if got := fmt.Sprint(list()); got != "[1@b 2@a]" {
		t.Fatalf("listed: got %s, want [1@b 2@a]", got)
	}
	if f := tr.Find("cid-1"); len(f) != 1 || f[0].Member != "m1" || f[0].Data != "data-1" {
		t.Fatalf("Find: got %+v", f)
	}
	tr.Answer(ctx, "m1", "callee-1")
	if got := fmt.Sprint(list()); got != "[1@b+answered 2@a]" {
		t.Fatalf("after the answer: got %s", got)
	}
	// The callee's BYE ends m1: OnEnd is told who, and m1 is no longer listed.
	if !tr.EndDialog(ctx, "dlg-1", "callee-1", "callee") {
		t.Fatal("EndDialog: no call")
	}
	if len(ends) != 1 || ends[0].Member != "m1" || ends[0].Data != "data-1" || ends[0].Reason != ReasonBye || ends[0].By != "callee" {
		t.Fatalf("OnEnd after the BYE: %+v", ends)
	}
	if got := fmt.Sprint(list()); got != "[2@a]" {
		t.Fatalf("after the BYE: got %s", got)
	}
	// The owner's End tells nobody.
	tr.End(ctx, "m2")
	if len(ends) != 1 {
		t.Fatalf("End told OnEnd: %+v", ends)
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("after End: %v", got)
	}

	// A call put and ended within one round costs the registry nothing,
	// and the registry losing an entry is repaired at the refresh.
	tr.Track("m3", info("3", "a"), nil)
	tr.Track("m4", info("4", "a"), nil)
	tr.End(ctx, "m4")
	if got := fmt.Sprint(list()); got != "[3@a]" {
		t.Fatalf("m3 listed, m4 never: got %s", got)
	}
	_ = reg.Remove(ctx, []string{"3"})
	tr.Refresh(ctx)
	if got := fmt.Sprint(list()); got != "[3@a]" {
		t.Fatalf("after a refresh: got %s, want m3 listed again", got)
	}

	// max_call_duration, then shutdown.
	clock.Advance(time.Minute)
	tr.Track("m5", info("5", "a"), "data-5")
	tr.Refresh(ctx)
	if len(ends) != 2 || ends[1].Member != "m3" || ends[1].Reason != ReasonMaxDuration {
		t.Fatalf("OnEnd at max duration: %+v", ends)
	}
	tr.Shutdown(ctx)
	if len(ends) != 3 || ends[2].Member != "m5" || ends[2].Reason != ReasonShutdown {
		t.Fatalf("OnEnd at shutdown: %+v", ends)
	}
	if ls, _ := reg.List(ctx); len(ls) != 0 || tr.Live() != 0 {
		t.Fatalf("after shutdown: listed %v, tracked %d", ls, tr.Live())
	}
	// A BYE that came before the answer: the answer ends the call.
	tr.Track("m6", info("6", "a"), "data-6")
	tr.Bind("m6", "dlg-6")
	tr.EndDialog(ctx, "dlg-6", "callee-6", "caller")
	if !tr.Answer(ctx, "m6", "callee-6") || len(ends) != 4 || ends[3].By != "caller" {
		t.Fatalf("pending BYE: ends %+v", ends)
	}
	if tr.EndAs(ctx, "m7", "operator", "node") {
		t.Fatal("EndAs of an unknown call reported true")
	}
}

// countingRegistry is a LocalRegistry that counts the listings put.
type countingRegistry struct {
	*LocalRegistry
	mu   sync.Mutex
	puts map[string]int
}

func (r *countingRegistry) Put(ctx context.Context, ttl time.Duration, calls []Live) error {
	r.mu.Lock()
	for _, l := range calls {
		r.puts[l.ID]++
	}
	r.mu.Unlock()
	return r.LocalRegistry.Put(ctx, ttl, calls)
}

// A refresh round walks the calls a chunk at a time, letting go of the
// Tracker's lock between chunks (every call's setup and end takes it),
// and lists every call again however many there are: the queue of
// registry writes is flushed as it fills, where a round used to queue
// what fit (maxPending) and leave the rest unlisted until a later round.
func TestRefreshInChunksListsEveryCall(t *testing.T) {
	ctx := context.Background()
	oldMax := maxPending
	maxPending = 100
	t.Cleanup(func() { maxPending = oldMax })
	reg := &countingRegistry{LocalRegistry: NewLocalRegistry(nil), puts: map[string]int{}}
	tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour, Registry: reg})
	n := 3*refreshChunk + 5
	for i := range n {
		tr.Track(fmt.Sprint("m", i), Live{ID: fmt.Sprint("id", i), CallID: fmt.Sprint("c", i), Node: "n1"}, nil)
	}
	tr.flushRegistry(ctx)
	// Some calls end and one is tracked again: neither is listed twice in
	// a round, and the ended ones not at all.
	for i := range 10 {
		tr.End(ctx, fmt.Sprint("m", i))
	}
	tr.Track("m0", Live{ID: "id0", CallID: "c0", Node: "n1"}, nil)
	tr.flushRegistry(ctx)
	clear(reg.puts)

	chunks := 0
	refreshChunkDone = func() {
		chunks++
		if !tr.mu.TryLock() {
			t.Error("the Tracker's lock is held between chunks")
			return
		}
		tr.mu.Unlock()
	}
	t.Cleanup(func() { refreshChunkDone = nil })
	tr.Refresh(ctx)
	tr.flushRegistry(ctx)
	if chunks < 3 {
		t.Errorf("a round of %d calls in %d chunks, want at least 3 (chunks of %d)", n, chunks, refreshChunk)
	}
	for i := range n {
		id, want := fmt.Sprint("id", i), 1
		if i >= 1 && i < 10 {
			want = 0 // ended
		}
		if got := reg.puts[id]; got != want {
			t.Fatalf("%s listed %d times in a round, want %d (%d listings in all)", id, got, want, len(reg.puts))
		}
	}
}

// BenchmarkFind: an operator's end of a call (EndCalls) finds it by its
// Call-ID among the calls a node holds, under the lock every call's setup
// and end takes.
func BenchmarkFind(b *testing.B) {
	for _, n := range []int{1000, 200000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour})
			for i := range n {
				m := "m" + strconv.Itoa(i)
				tr.Track(m, Live{ID: "id" + strconv.Itoa(i), CallID: "call-" + strconv.Itoa(i)}, nil)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if len(tr.Find("call-"+strconv.Itoa(i%n))) != 1 {
					b.Fatal("not found")
				}
			}
		})
	}
}

// BenchmarkList: a node's own listing of its calls (the pool's list when
// the Registry cannot be read) with 200,000 calls up. It holds the
// Tracker's lock, which every call's setup and end takes, for one chunk
// of refreshChunk calls at a time (TestListLetsGoBetweenChunks).
func BenchmarkList(b *testing.B) {
	const n = 200000
	tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour})
	for i := range n {
		m := "m" + strconv.Itoa(i)
		tr.Track(m, Live{ID: "id" + strconv.Itoa(i), CallID: "call-" + strconv.Itoa(i), Peer: "peer", Customer: "cust", Carrier: "car", Node: "n1"}, nil)
	}
	b.ResetTimer()
	for b.Loop() {
		if len(tr.List()) != n {
			b.Fatal("calls missing from the listing")
		}
	}
}

// TestFindByCallID: Find returns exactly the listed calls of a Call-ID,
// through a call tracked again with another Call-ID, calls sharing one,
// calls tracked without a listing, and every way a call ends (End, EndAs,
// a BYE before and after the answer, MaxDuration in a refresh round,
// Shutdown); checked against a walk of every call after each step of a
// seeded random run. The index itself must hold each listed call once,
// under its Call-ID, and nothing else: Find skips a stale member, so a
// leak (a Call-ID's entry left behind, a member listed twice) shows only
// there.
func TestFindByCallID(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const maxDur = 200 * time.Second
	tr := NewTracker(NewLocalStore(clock.Now), TrackerOptions{TTL: time.Hour, MaxDuration: maxDur, Now: clock.Now})
	type want struct {
		listed bool
		callID string
		start  time.Time
	}
	model := map[string]want{}
	checkIndex := func(step int) {
		t.Helper()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		exp := map[string][]string{}
		for m, c := range tr.calls {
			if c.info.ID != "" {
				exp[c.info.CallID] = append(exp[c.info.CallID], m)
			}
		}
		if len(tr.byCallID) != len(exp) {
			t.Fatalf("step %d: index has %d Call-IDs, want %d (%v)", step, len(tr.byCallID), len(exp), tr.byCallID)
		}
		for id, ms := range exp {
			got := slices.Clone(tr.byCallID[id])
			slices.Sort(got)
			slices.Sort(ms)
			if !slices.Equal(got, ms) {
				t.Fatalf("step %d: index of %s = %v, want %v", step, id, got, ms)
			}
		}
		for m, c := range tr.calls {
			if ms := tr.byCallID[c.info.CallID]; c.info.ID != "" && (c.at >= len(ms) || ms[c.at] != m) {
				t.Fatalf("step %d: %s is at %d of %s's index %v", step, m, c.at, c.info.CallID, ms)
			}
		}
	}
	check := func(step int) {
		t.Helper()
		for _, id := range []string{"c0", "c1", "c2", "c3", "c4"} {
			var exp []string
			for m, w := range model {
				if w.listed && w.callID == id {
					exp = append(exp, m)
				}
			}
			var got []string
			for _, f := range tr.Find(id) {
				got = append(got, f.Member)
				if f.Info.CallID != id {
					t.Fatalf("step %d: Find(%s) returned %s with Call-ID %s", step, id, f.Member, f.Info.CallID)
				}
			}
			slices.Sort(exp)
			slices.Sort(got)
			if !slices.Equal(exp, got) {
				t.Fatalf("step %d: Find(%s) = %v, want %v", step, id, got, exp)
			}
		}
		checkIndex(step)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for step := range 4000 {
		clock.Advance(time.Second)
		m := "m" + strconv.Itoa(rnd.IntN(40))
		w, held := model[m]
		if !held {
			w.start = clock.Now()
		}
		switch op := rnd.IntN(14); {
		case op < 6:
			callID := "c" + strconv.Itoa(rnd.IntN(5))
			if rnd.IntN(4) == 0 {
				// Tracked without a listing: the old one, if any, stays.
				tr.Track(m, Live{}, nil)
			} else {
				tr.Track(m, Live{ID: "id-" + m, CallID: callID}, nil)
				w.listed, w.callID = true, callID
			}
			model[m] = w
		case op < 8:
			tr.End(ctx, m)
			delete(model, m)
		case op < 9:
			tr.EndAs(ctx, m, "operator", "node")
			delete(model, m)
		case op < 11:
			// A BYE after the answer, or one before it that the answer
			// carries out.
			if !held {
				continue
			}
			tr.Bind(m, "d-"+m)
			if rnd.IntN(2) == 0 {
				tr.Answer(ctx, m, "tag")
				tr.EndDialog(ctx, "d-"+m, "tag", "peer")
			} else {
				tr.EndDialog(ctx, "d-"+m, "tag", "peer")
				tr.Answer(ctx, m, "tag")
			}
			delete(model, m)
		default:
			// A refresh round ends the calls past MaxDuration (and
			// compacts order as calls come and go).
			tr.Refresh(ctx)
			for m, w := range model {
				if clock.Now().Sub(w.start) >= maxDur {
					delete(model, m)
				}
			}
		}
		check(step)
	}
	tr.Shutdown(ctx)
	clear(model)
	check(-1)
}

// BenchmarkEndSharedCallID: the end of one of n live calls that share a
// listed Call-ID (a peer may send any number of calls with one Call-ID,
// or with Call-IDs longer than the 256 bytes the listing keeps that share
// those) must not cost the n others under the Tracker's lock.
func BenchmarkEndSharedCallID(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour})
			prefix := strings.Repeat("x", 256)
			for i := range n {
				m := prefix + "-" + strconv.Itoa(i)
				tr.Track(m, Live{ID: "id" + strconv.Itoa(i), CallID: prefix}, nil)
			}
			for i := 0; b.Loop(); i++ {
				// End one (a member from the middle of the index) and
				// set up another, so n stay live.
				m := prefix + "-" + strconv.Itoa(i%n)
				tr.End(ctx, m)
				tr.Track(m, Live{ID: "id" + strconv.Itoa(i%n), CallID: prefix}, nil)
			}
		})
	}
}

// TestIndexesShrink: a burst of calls sharing one Call-ID, or bound to
// one dialog id (a peer may send any number), leaves no index of that
// size behind once most of them end.
func TestIndexesShrink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		track func(tr *Tracker, m string, i int)
		find  func(tr *Tracker) []Found
		room  func(tr *Tracker) int
	}{
		{"Call-ID",
			func(tr *Tracker, m string, i int) {
				tr.Track(m, Live{ID: "id" + strconv.Itoa(i), CallID: "shared"}, nil)
			},
			func(tr *Tracker) []Found { return tr.Find("shared") },
			func(tr *Tracker) int { return cap(tr.byCallID["shared"]) }},
		{"dialog",
			func(tr *Tracker, m string, _ int) { tr.Track(m, Live{}, nil); tr.Bind(m, "dlg") },
			func(tr *Tracker) []Found { return tr.FindDialog("dlg") },
			func(tr *Tracker) int { return cap(tr.dialogs["dlg"]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour})
			const n = 4096
			for i := range n {
				tc.track(tr, "m"+strconv.Itoa(i), i)
			}
			for i := range n - 1 {
				tr.End(ctx, "m"+strconv.Itoa(i))
			}
			if f := tc.find(tr); len(f) != 1 || f[0].Member != "m"+strconv.Itoa(n-1) {
				t.Fatalf("found %v, want the one call left", f)
			}
			tr.mu.Lock()
			c := tc.room(tr)
			tr.mu.Unlock()
			if c > 64 {
				t.Errorf("the index with 1 call left holds room for %d", c)
			}
		})
	}
}

// BenchmarkEndSharedDialog: the end of one of n live calls bound to one
// dialog id (a peer may set up any number: the same Call-ID, From tag and
// leg, another Via branch each) must not cost the n others under the
// Tracker's lock.
func BenchmarkEndSharedDialog(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour})
			for i := range n {
				m := "shared/branch-" + strconv.Itoa(i)
				tr.Track(m, Live{}, nil)
				tr.Bind(m, "dlg")
			}
			for i := 0; b.Loop(); i++ {
				// End one (from the middle of the dialog's members) and
				// set up another, so n stay live.
				m := "shared/branch-" + strconv.Itoa(i%n)
				tr.End(ctx, m)
				tr.Track(m, Live{}, nil)
				tr.Bind(m, "dlg")
			}
		})
	}
}

// TestEndDialogOldest: of the calls of one dialog answered with the same
// callee tag, a BYE ends the oldest, however the ends of others moved
// them in the dialog's index; a call of the dialog not answered yet and
// older than it keeps the BYE as its pending end, a younger one does not.
func TestEndDialogOldest(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	tr := NewTracker(NewLocalStore(clock.Now), TrackerOptions{TTL: time.Hour, MaxDuration: time.Hour, Now: clock.Now})
	for _, m := range []string{"gone", "pending", "old", "young", "late"} {
		clock.Advance(time.Second)
		tr.Track(m, Live{}, nil)
		tr.Bind(m, "dlg")
	}
	tr.End(ctx, "gone") // the last ("late") takes its place
	tr.Answer(ctx, "old", "t")
	tr.Answer(ctx, "young", "t")
	if !tr.EndDialog(ctx, "dlg", "t", "peer") {
		t.Fatal("EndDialog found no call")
	}
	var left []string
	for _, f := range tr.FindDialog("dlg") {
		left = append(left, f.Member)
	}
	slices.Sort(left)
	if want := []string{"late", "pending", "young"}; !slices.Equal(left, want) {
		t.Fatalf("calls left in the dialog = %v, want %v (the oldest answered ended)", left, want)
	}
	if tr.Answer(ctx, "late", "t") {
		t.Error("a call younger than the one the BYE ended took it as its pending end")
	}
	if !tr.Answer(ctx, "pending", "t") {
		t.Error("an older call not answered yet did not keep the BYE as its pending end")
	}
}

// TestFindDialogIndex: with calls of several dialog ids coming and
// going, FindDialog returns the calls bound to each, and every bound
// call's place in its dialog's index is right.
func TestFindDialogIndex(t *testing.T) {
	ctx := context.Background()
	tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Hour, MaxDuration: time.Hour})
	model := map[string]string{} // bound member -> dialog
	rnd := rand.New(rand.NewPCG(3, 4))
	for step := range 4000 {
		m := "m" + strconv.Itoa(rnd.IntN(60))
		d := "d" + strconv.Itoa(rnd.IntN(4))
		switch op := rnd.IntN(10); {
		case op < 5:
			tr.Track(m, Live{}, nil)
			tr.Bind(m, d)
			if _, ok := model[m]; !ok {
				model[m] = d // binding twice keeps the first
			}
		case op < 8:
			tr.End(ctx, m)
			delete(model, m)
		default:
			if md, ok := model[m]; ok {
				tr.Answer(ctx, m, "tag-"+m)
				if !tr.EndDialog(ctx, md, "tag-"+m, "peer") {
					t.Fatalf("step %d: EndDialog of %s found nothing", step, m)
				}
				delete(model, m)
			}
		}
		for i := range 4 {
			d := "d" + strconv.Itoa(i)
			var exp, got []string
			for m, md := range model {
				if md == d {
					exp = append(exp, m)
				}
			}
			for _, f := range tr.FindDialog(d) {
				got = append(got, f.Member)
			}
			slices.Sort(exp)
			slices.Sort(got)
			if !slices.Equal(exp, got) {
				t.Fatalf("step %d: FindDialog(%s) = %v, want %v", step, d, got, exp)
			}
		}
		tr.mu.Lock()
		for m, c := range tr.calls {
			if ms := tr.dialogs[c.dialog]; c.dialog != "" && (c.dat >= len(ms) || ms[c.dat] != m) {
				tr.mu.Unlock()
				t.Fatalf("step %d: %s is at %d of %s's index %v", step, m, c.dat, c.dialog, ms)
			}
		}
		if len(tr.dialogs) > 4 {
			t.Errorf("step %d: %d dialogs indexed", step, len(tr.dialogs))
		}
		tr.mu.Unlock()
	}
}

// BenchmarkFindDialog: what each in-dialog request costs the Tracker's
// lock (sip's ownTokenGone asks before the per-dialog rate) when n calls
// share its dialog id.
func BenchmarkFindDialog(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour})
			for i := range n {
				m := "shared/branch-" + strconv.Itoa(i)
				tr.Track(m, Live{ID: "id" + strconv.Itoa(i), CallID: "shared"}, nil)
				tr.Bind(m, "dlg")
			}
			for b.Loop() {
				if len(tr.FindDialog("dlg")) != n {
					b.Fatal("calls missing")
				}
			}
		})
	}
}
