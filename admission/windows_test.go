package admission

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/lua"
)

// A short and a long window on one scope, decided together: each trims by
// its own length, the long one refuses while the short one has room, and it
// admits again exactly when its oldest call is one long window old.
func TestSustainedWindow(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		const short, long = 100 * time.Millisecond, 1500 * time.Millisecond
		var (
			perSec, sustained Bucket
			buckets           []Bucket
			first, d          Decision
		)
		// On Redis's clock calls 0-3, and calls 4-6, must each fall within
		// one short window (100 ms, a few round trips): a stall of the test
		// or of Redis can take longer, and then the counts are of another
		// scenario. Such a round (the store's own times show it) is played
		// again on a fresh key; one without must pass every check.
		for round := 0; ; round++ {
			if round == 3 {
				t.Fatal("three rounds in which calls meant to share a short window did not, on Redis's clock")
			}
			k := key("peer", fmt.Sprintf("p%d", round))
			perSec = Bucket{Key: k, Limit: 3, Window: short}
			sustained = WindowBucket(k, 5, long-WindowGuard)
			if sustained.Window != long || sustained.Limit != 5 {
				t.Fatalf("WindowBucket: got %+v, want limit 5 window %v", sustained, long)
			}
			buckets = []Bucket{perSec, sustained}
			stalled := func(from, to Decision) bool {
				if b.exact || to.At.Sub(from.At) < short {
					return false
				}
				t.Logf("round %d: %v between calls meant to share a %v window on Redis's clock: again", round, to.At.Sub(from.At), short)
				return true
			}

			first = admit(t, s, "call-0", buckets...)
			admit(t, s, "call-1", buckets...)
			admit(t, s, "call-2", buckets...)
			d3 := admit(t, s, "call-3", buckets...)
			if stalled(first, d3) {
				continue
			}
			if d3.Admit || d3.Refused != 0 || !slices.Equal(d3.Counts, []int{3, 3}) {
				t.Fatalf("4th call in the short window: got %+v, want refused by bucket 0 with counts [3 3]", d3)
			}
			b.advance(short + time.Millisecond)
			d4 := admit(t, s, "call-4", buckets...)
			if !d4.Admit || !slices.Equal(d4.Counts, []int{1, 4}) {
				t.Fatalf("after the short window: got %+v, want admitted with counts [1 4] (each window trims by its own length)", d4)
			}
			admit(t, s, "call-5", buckets...)
			d = admit(t, s, "call-6", buckets...)
			if !stalled(d4, d) {
				break
			}
		}
		if d.Admit || d.Refused != 1 || !slices.Equal(d.Counts, []int{2, 5}) {
			t.Fatalf("6th call: got %+v, want refused by the long window with counts [2 5]", d)
		}
		if want := first.At.Add(long).Sub(d.At); d.RetryAfter != want {
			t.Fatalf("RetryAfter = %v, want oldest + long window - now = %v", d.RetryAfter, want)
		}
		if b.ttl != nil {
			if ttl := b.ttl(sustained.Key); ttl <= long-short || ttl > long+time.Second {
				t.Fatalf("TTL of the long window = %v, want in (%v, %v]", ttl, long-short, long+time.Second)
			}
			if ttl := b.ttl(perSec.Key); ttl > short+time.Second {
				t.Fatalf("TTL of the short window = %v, want <= %v", ttl, short+time.Second)
			}
		}

		edge := first.At.Add(long)
		if b.exact {
			b.advance(d.RetryAfter - time.Nanosecond)
			if d := admit(t, s, "call-7", buckets...); d.Admit || d.Refused != 1 || d.RetryAfter != time.Nanosecond {
				t.Fatalf("1ns before the long edge: got %+v, want refused by bucket 1 with RetryAfter 1ns", d)
			}
			b.advance(time.Nanosecond)
			// Calls 0-2 were admitted at one instant and leave together.
			if d := admit(t, s, "call-8", buckets...); !d.Admit || !slices.Equal(d.Counts, []int{1, 3}) {
				t.Fatalf("at the long edge: got %+v, want admitted with counts [1 3]", d)
			}
			return
		}
		b.advance(d.RetryAfter - 20*time.Millisecond)
		for i := 0; ; i++ {
			if i > 200 {
				t.Fatal("never admitted again after the long edge")
			}
			d := admit(t, s, fmt.Sprintf("retry-%d", i), buckets...)
			if d.Admit != !d.At.Before(edge) {
				t.Fatalf("at edge%+v: admit %v (%+v), want %v", d.At.Sub(edge), d.Admit, d, !d.At.Before(edge))
			}
			if d.Admit {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
}

// A long window holds at most its limit of entries however many calls it
// refuses: a 10,000-per-minute window costs its members, no more.
func TestSustainedWindowMemory(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		w := WindowBucket(key("customer", "c"), 2000, time.Minute)
		for i := range 3000 {
			d := admit(t, s, fmt.Sprintf("call-%d", i), w)
			if d.Admit != (i < 2000) {
				t.Fatalf("call %d: admit %v, want %v", i, d.Admit, i < 2000)
			}
		}
		counts, err := s.Counts(context.Background(), []Bucket{w})
		if err != nil || counts[0] != 2000 {
			t.Fatalf("Counts = %v, %v; want [2000]", counts, err)
		}
		switch st := s.(type) {
		case *LocalStore:
			st.mu.Lock()
			r := st.buckets[w.Key]
			n, size := len(r.members), len(r.at)
			st.mu.Unlock()
			if n != 2000 || size > 2000 {
				t.Fatalf("local bucket: %d members in a ring of %d, want 2000 in at most 2000", n, size)
			}
		case *RedisStore:
			n, err := st.run.Client().ZCard(context.Background(), w.Key).Result()
			if err != nil || n != 2000 {
				t.Fatalf("ZCARD = %d, %v; want 2000", n, err)
			}
		}
	})
}

func TestWindowBucketKey(t *testing.T) {
	k := lua.Key("cpsguard", "peer", "dialer-1")
	for _, tc := range []struct {
		per  time.Duration
		want string
	}{
		{time.Minute, "cpsguard:{peer:dialer-1}:w60s"},
		{24 * time.Hour, "cpsguard:{peer:dialer-1}:w86400s"},
		{1500 * time.Millisecond, "cpsguard:{peer:dialer-1}:w1500ms"},
	} {
		b := WindowBucket(k, 10, tc.per)
		if b.Key != tc.want || lua.HashSlot(b.Key) != lua.HashSlot(k) {
			t.Errorf("WindowBucket(%v): got key %q slot %d, want %q slot %d", tc.per, b.Key, lua.HashSlot(b.Key), tc.want, lua.HashSlot(k))
		}
	}
}
