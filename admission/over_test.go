package admission

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/lua"
)

// A bucket with OverCount counts a call over its limit and lets it
// through (a priority call): the window then holds more than its limit,
// reports it over, and refuses the normal calls after it until its
// entries leave. The buckets beside it count the call too.
func TestOverCountCountsPastTheLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		peer := Bucket{Key: key("peer", "p"), Limit: 3, Window: time.Minute}
		dest := Bucket{Key: key("destination", "911"), Limit: 100, Window: time.Minute}
		for i := range 3 {
			if d := admit(t, s, fmt.Sprintf("normal-%d", i), peer, dest); !d.Admit || d.Over != nil {
				t.Fatalf("normal call %d: got %+v, want admitted, no bucket over", i, d)
			}
		}
		forced := func(bk Bucket) Bucket { bk.Over = OverCount; return bk }
		for i := range 5 {
			d := admit(t, s, fmt.Sprintf("prio-%d", i), forced(peer), forced(dest))
			if !d.Admit || d.Refused != -1 {
				t.Fatalf("priority call %d: got %+v, want admitted", i, d)
			}
			if want := []int{4 + i, 4 + i}; !slices.Equal(d.Counts, want) {
				t.Fatalf("priority call %d: counts %v, want %v (counted past the limit)", i, d.Counts, want)
			}
			if want := []bool{true, false}; !slices.Equal(d.Over, want) {
				t.Fatalf("priority call %d: over %v, want %v", i, d.Over, want)
			}
		}
		// A retransmission of a priority call is a duplicate: not counted twice.
		if d := admit(t, s, "prio-0", forced(peer), forced(dest)); !d.Admit || !d.Duplicate || d.Counts[0] != 8 {
			t.Fatalf("retransmission of a priority call: got %+v, want a duplicate with count 8", d)
		}
		// The normal call after them is refused, by the window they fill.
		d := admit(t, s, "normal-3", peer, dest)
		if d.Admit || d.Refused != 0 || d.Counts[0] != 8 || !slices.Equal(d.Over, []bool{true, false}) {
			t.Fatalf("normal call after the priority calls: got %+v, want refused by bucket 0 with count 8", d)
		}
		if d.RetryAfter <= 0 {
			t.Fatalf("RetryAfter %v, want > 0", d.RetryAfter)
		}
		counts, err := s.Counts(context.Background(), []Bucket{peer, dest})
		if err != nil || !slices.Equal(counts, []int{8, 8}) {
			t.Fatalf("Counts: got %v, %v; want [8 8]", counts, err)
		}
	})
}

// A token bucket with OverCount lets a call through when it is empty, and
// is not put in debt: the next normal call waits only for the refill.
func TestOverCountTokenBucketNoDebt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		tb := TokenBucket(key("peer", "p"), 1, 2) // 1 token a second, burst 2
		for i := range 2 {
			if d := admit(t, s, fmt.Sprintf("normal-%d", i), tb); !d.Admit {
				t.Fatalf("normal call %d: got %+v, want admitted", i, d)
			}
		}
		forced := tb
		forced.Over = OverCount
		for i := range 10 {
			d := admit(t, s, fmt.Sprintf("prio-%d", i), forced)
			if !d.Admit || !slices.Equal(d.Over, []bool{true}) {
				t.Fatalf("priority call %d on an empty bucket: got %+v, want admitted, over", i, d)
			}
			if d.Counts[0] != 2 {
				t.Fatalf("priority call %d: tokens in use %d, want 2 (empty, not in debt)", i, d.Counts[0])
			}
		}
		d := admit(t, s, "normal-2", tb)
		if d.Admit || d.RetryAfter > time.Second {
			t.Fatalf("normal call after them: got %+v, want refused, with a retry within the refill of one token (1 s)", d)
		}
	})
}

// A bucket with OverShadow lets a call over its limit through without
// counting it there (its would-be refusal is reported in Over), while an
// enforced bucket beside it still refuses; a shadowed bucket fills as if
// it were enforced.
func TestOverShadow(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		shadowed := Bucket{Key: key("peer", "p"), Limit: 2, Window: time.Minute, Over: OverShadow}
		enforced := Bucket{Key: key("customer", "c"), Limit: 4, Window: time.Minute}
		var overs, admitted int
		for i := range 6 {
			d := admit(t, s, fmt.Sprintf("call-%d", i), shadowed, enforced)
			switch {
			case i < 2:
				if !d.Admit || d.Over != nil || !slices.Equal(d.Counts, []int{i + 1, i + 1}) {
					t.Fatalf("call %d: got %+v, want admitted under both limits", i, d)
				}
			case i < 4:
				// Over the shadowed limit: through, counted by the customer only.
				if !d.Admit || !slices.Equal(d.Over, []bool{true, false}) || !slices.Equal(d.Counts, []int{2, i + 1}) {
					t.Fatalf("call %d: got %+v, want admitted, over the shadowed bucket, counts [2 %d]", i, d, i+1)
				}
			default:
				// The enforced customer is full: refused, and the shadowed
				// peer is reported over as well.
				if d.Admit || d.Refused != 1 || !slices.Equal(d.Over, []bool{true, true}) {
					t.Fatalf("call %d: got %+v, want refused by the enforced bucket", i, d)
				}
			}
			if d.Admit {
				admitted++
			}
			if d.Over != nil && d.Over[0] {
				overs++
			}
		}
		if admitted != 4 || overs != 4 {
			t.Fatalf("admitted %d, over the shadowed limit %d; want 4 and 4", admitted, overs)
		}
		counts, err := s.Counts(context.Background(), []Bucket{shadowed, enforced})
		if err != nil || !slices.Equal(counts, []int{2, 4}) {
			t.Fatalf("Counts: got %v, %v; want [2 4]", counts, err)
		}
	})
}

// Over modes on a Cluster, buckets in different slots: decided slot by
// slot, the flags of every slot reported.
func TestCrossSlotOver(t *testing.T) {
	c := startOneNodeCluster(t)
	ctx := context.Background()
	s := NewRedisStore(c, RedisOptions{Timeout: 5 * time.Second})
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	peer := Bucket{Key: lua.Key("test", "peer", "p1"), Limit: 1, Window: time.Minute, Over: OverShadow}
	cust := Bucket{Key: lua.Key("test", "customer", "c1"), Limit: 1, Window: time.Minute, Over: OverCount}
	if lua.HashSlot(peer.Key) == lua.HashSlot(cust.Key) {
		t.Fatal("test keys share a slot; pick other names")
	}
	admit(t, s, "first", peer, cust)
	d := admit(t, s, "second", peer, cust)
	if !d.Admit || !slices.Equal(d.Over, []bool{true, true}) || !slices.Equal(d.Counts, []int{1, 2}) {
		t.Fatalf("second call: got %+v, want admitted, both over, counts [1 2]", d)
	}
}

// An unknown over mode is refused before the store is asked.
func TestOverModeChecked(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		bad := Bucket{Key: key("peer", "p"), Limit: 1, Window: time.Second, Over: OverCount + 1}
		if _, err := b.open().Admit(context.Background(), "m", []Bucket{bad}); err == nil {
			t.Fatal("Admit with an unknown over mode: got nil error")
		}
	})
}
