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
	if tr.EndDialog(ctx, "nobody") {
		t.Fatal("EndDialog of an unknown dialog reported a call")
	}
	tr.Bind("a", "dlg-a")
	// Refreshed while it lives: still there after several TTLs.
	for i := 0; i < 4; i++ {
		clock.Advance(time.Second)
		tr.Refresh(ctx)
	}
	if got, want := count(), "[1 0]"; got != want {
		t.Fatalf("after refreshes: got %s, want %s", got, want)
	}
	if !tr.EndDialog(ctx, "dlg-a") {
		t.Fatal("EndDialog of a's dialog found no call")
	}
	if tr.EndDialog(ctx, "dlg-a") {
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
