package refusals

import (
	"testing"
	"time"
)

// The table: an attempt is found with all its fields, not with another
// attempt of the same transaction key, nor once its time is over; it
// never holds more than its bound, oldest out first, and an idle table
// gives its memory back at the sweep.
func TestRefusedTable(t *testing.T) {
	now := time.Now()
	tab := New(64, TTL)
	tab.Remember(1, Refusal{Attempt: 10, Code: 503, Reason: "CPS Limit Exceeded", Tag: "t1", RetryAfter: 2}, now)
	if r, ok := tab.Lookup(1, 10, now); !ok || r.Code != 503 || r.Reason != "CPS Limit Exceeded" || r.Tag != "t1" || r.RetryAfter != 2 {
		t.Fatalf("lookup = %+v, %v; want the refusal", r, ok)
	}
	if _, ok := tab.Lookup(1, 11, now); ok {
		t.Error("another attempt of the same transaction key found")
	}
	if _, ok := tab.Lookup(2, 10, now); ok {
		t.Error("another transaction found")
	}
	if _, ok := tab.Lookup(1, 10, now.Add(TTL+time.Millisecond)); ok {
		t.Error("found after its time")
	}
	if !tab.HasTx(1, now) || tab.HasTx(1, now.Add(TTL+time.Millisecond)) {
		t.Error("HasTx wrong")
	}
	// A later refusal of the same transaction replaces it, and the older
	// one's eviction leaves it.
	tab.Remember(1, Refusal{Attempt: 12, Code: 486}, now.Add(time.Millisecond))
	if r, ok := tab.Lookup(1, 12, now.Add(time.Millisecond)); !ok || r.Code != 486 {
		t.Fatalf("replaced refusal: %+v, %v", r, ok)
	}

	// Far more refusals than the bound: never more than it, the newest
	// kept, the oldest gone.
	const n = 100 * 64
	for i := uint64(0); i < n; i++ {
		tab.Remember(1000+i, Refusal{Attempt: i}, now.Add(2*time.Millisecond))
		if got := tab.len(); got > 64 {
			t.Fatalf("after %d refusals the table holds %d, over its bound 64", i+1, got)
		}
	}
	if got := tab.len(); got != 64 {
		t.Errorf("table holds %d, want its bound 64", got)
	}
	last := now.Add(2 * time.Millisecond)
	if _, ok := tab.Lookup(1000+n-1, n-1, last); !ok {
		t.Error("the newest refusal was dropped")
	}
	if _, ok := tab.Lookup(1000, 0, last); ok {
		t.Error("the oldest refusal was kept past the bound")
	}
	for i := range tab.stripes {
		if s := &tab.stripes[i]; len(s.q) > tab.max || s.n > tab.max {
			t.Errorf("stripe %d queue holds %d (%d live), over %d", i, len(s.q), s.n, tab.max)
		}
	}
	tab.Sweep(last.Add(TTL + time.Second))
	if got := tab.len(); got != 0 {
		t.Errorf("after the sweep the table holds %d, want 0", got)
	}
	for i := range tab.stripes {
		if s := &tab.stripes[i]; len(s.q) != 0 {
			t.Errorf("stripe %d keeps a queue of %d after the sweep", i, len(s.q))
		}
	}
}
