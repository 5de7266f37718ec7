package calls

import (
	"context"
	"fmt"
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
	if tr.EndDialog(ctx, "nobody", "callee") {
		t.Fatal("EndDialog of an unknown dialog reported a call")
	}
	tr.Bind("a", "dlg-a")
	tr.Answer(ctx, "a", "callee-a")
	// A BYE naming a made-up callee tag (the carrier would answer 481 and
	// the call go on) frees nothing.
	if tr.EndDialog(ctx, "dlg-a", "made-up") {
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
	if !tr.EndDialog(ctx, "dlg-a", "callee-a") {
		t.Fatal("EndDialog of a's dialog found no call")
	}
	if tr.EndDialog(ctx, "dlg-a", "callee-a") {
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
	if tr.EndDialog(ctx, "dlg-x", "callee-x") {
		t.Fatal("a BYE before the answer ended the call at once")
	}
	if !tr.Answer(ctx, "x", "callee-x") || tr.Live() != 1 {
		t.Fatalf("the answer matching the early BYE did not end the call (%d live)", tr.Live())
	}
	tr.EndDialog(ctx, "dlg-y", "bogus")
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
