package pacing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// backend is one SlotStore under the contract suite.
type backend struct {
	name    string
	exact   bool // fake clock: waits are checked exactly
	store   SlotStore
	real    SlotStore // the same kind of store on the real clock (for Pacer tests)
	advance func(time.Duration)
	// held reports whether member holds a slot of key.
	held func(key, member string) bool
	// realHeld is held for the store on the real clock.
	realHeld func(key, member string) bool
	// exists reports whether the store holds anything for key.
	exists func(key string) bool
	ttl    func(key string) time.Duration
	// slotAt returns the time of member's slot of key as the store keeps
	// it (its own clock), false when none.
	slotAt func(key, member string) (time.Time, bool)
	// fairTTL (Redis) is the TTL of a key of the fair state; fairLen
	// (in-process) counts the entries of key's fair state after a sweep.
	fairTTL func(key string) time.Duration
	fairLen func(key string) int
}

func backends(t *testing.T) []backend {
	t.Helper()
	clock := newFakeClock()
	local := NewLocalSlots(clock.Now)
	realLocal := NewLocalSlots(nil)
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	rs := NewRedisSlots(c, RedisOptions{Timeout: 5 * time.Second})
	if err := rs.Load(context.Background()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	pipe := lua.NewPipeliner(c, lua.PipelineOptions{})
	t.Cleanup(func() { _ = pipe.Close() })
	ps := NewRedisSlots(c, RedisOptions{Timeout: 5 * time.Second, Pipeline: pipe})
	ctx := context.Background()
	redisSlotAt := func(key, member string) (time.Time, bool) {
		score, err := c.ZScore(ctx, key, member).Result()
		if errors.Is(err, redis.Nil) {
			return time.Time{}, false
		}
		if err != nil {
			t.Fatalf("ZSCORE: %v", err)
		}
		return lua.Time(int64(score)), true
	}
	return []backend{
		{
			name: "local", exact: true, store: local, real: realLocal, advance: clock.Advance,
			held:     func(key, member string) bool { return heldIn(local, key, member) },
			realHeld: func(key, member string) bool { return heldIn(realLocal, key, member) },
			exists: func(key string) bool {
				local.Len() // evicts
				local.mu.Lock()
				defer local.mu.Unlock()
				_, ok := local.sets[key]
				return ok
			},
			fairLen: func(key string) int { return local.fairEntries(key) },
			slotAt: func(key, member string) (time.Time, bool) {
				local.mu.Lock()
				defer local.mu.Unlock()
				if s := local.sets[key]; s != nil {
					if at, ok := s.members[member]; ok {
						return local.clock.Time(at), true
					}
				}
				return time.Time{}, false
			},
		},
		{
			name: "redis", store: rs, real: rs, advance: time.Sleep,
			held: func(key, member string) bool {
				err := c.ZScore(ctx, key, member).Err()
				if err != nil && !errors.Is(err, redis.Nil) {
					t.Fatalf("ZSCORE: %v", err)
				}
				return err == nil
			},
			realHeld: func(key, member string) bool {
				return c.ZScore(ctx, key, member).Err() == nil
			},
			exists:  func(key string) bool { return c.Exists(ctx, key).Val() == 1 },
			ttl:     func(key string) time.Duration { return c.PTTL(ctx, key).Val() },
			fairTTL: func(key string) time.Duration { return c.PTTL(ctx, key).Val() },
			slotAt:  redisSlotAt,
		},
		{
			name: "redis-pipelined", store: ps, real: ps, advance: time.Sleep,
			held: func(key, member string) bool {
				err := c.ZScore(ctx, key, member).Err()
				if err != nil && !errors.Is(err, redis.Nil) {
					t.Fatalf("ZSCORE: %v", err)
				}
				return err == nil
			},
			realHeld: func(key, member string) bool {
				return c.ZScore(ctx, key, member).Err() == nil
			},
			exists:  func(key string) bool { return c.Exists(ctx, key).Val() == 1 },
			ttl:     func(key string) time.Duration { return c.PTTL(ctx, key).Val() },
			fairTTL: func(key string) time.Duration { return c.PTTL(ctx, key).Val() },
			slotAt:  redisSlotAt,
		},
	}
}

func heldIn(l *LocalSlots, key, member string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sets[key]
	if s == nil {
		return false
	}
	_, ok := s.members[member]
	return ok
}

func eachBackend(t *testing.T, f func(t *testing.T, b backend, key string)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			f(t, b, lua.Key("test", "carrier", t.Name()))
		})
	}
}

func reserve(t *testing.T, s SlotStore, key, member string, interval, maxWait time.Duration) Slot {
	t.Helper()
	sl, err := s.Reserve(context.Background(), key, member, Share{}, interval, maxWait)
	if err != nil {
		t.Fatalf("Reserve(%q): %v", member, err)
	}
	if sl.Key != key || sl.Member != member {
		t.Fatalf("Reserve(%q): slot names %q/%q", member, sl.Key, sl.Member)
	}
	return sl
}

// Test 6: at 1 CPS, 15 reservations at once get waits 0, 1 s, 2 s, …;
// with max_wait 10 s the ones beyond are refused and reserve nothing.
//
// On Redis's clock the waits shrink by the time the calls take, and the
// twelfth call is refused only while that is under one interval: at
// 10 CPS (100 ms) a stall of the test or of Redis among the 15 round
// trips let it in. At 1 CPS it would take a stall of a second.
func TestReserveSpacing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		const interval, maxWait = time.Second, 10 * time.Second
		before := time.Now()
		var first Slot
		for i := range 15 {
			sl := reserve(t, b.store, key, fmt.Sprintf("call-%d", i), interval, maxWait)
			if i == 0 {
				first = sl
			}
			want := time.Duration(min(i, 11)) * interval // refused ones report the wait of slot 11
			wantOK := i <= 10                            // wait 10 s == max_wait still fits
			// The slot's time on the store's clock is exact on both stores;
			// the wait itself is exact only on the frozen clock.
			if got := sl.At.Add(sl.Wait).Sub(first.At); got != want || sl.OK != wantOK {
				t.Errorf("call %d: got ok %v slot +%v, want ok %v slot +%v", i, sl.OK, got, wantOK, want)
			}
			if b.exact && sl.Wait != want {
				t.Errorf("call %d: got wait %v, want %v", i, sl.Wait, want)
			}
			if held := b.held(key, sl.Member); held != wantOK {
				t.Errorf("call %d: slot held %v, want %v", i, held, wantOK)
			}
		}
		q, err := b.store.Queue(context.Background(), key, interval)
		if err != nil {
			t.Fatal(err)
		}
		// The next free slot is one interval after the last (+10 s): its
		// wait, on Redis's clock, is less by at most the time since before
		// (whole ms: 1 ms more), and slots that time passed are no longer
		// queued; no stall can fail these bounds.
		since := time.Since(before)
		queued, wait := q.Queued, q.Wait
		hi := 11 * interval
		lo, fewest := hi-since-time.Millisecond, 10-int(since/interval)
		if b.exact {
			lo, fewest = hi, 10
		}
		if queued > 10 && !(queued == 11 && !b.exact) || queued < fewest || wait < lo || wait > hi {
			t.Fatalf("Queue = %+v; want %d to 10 future slots and a wait in [%v, %v]", q, fewest, lo, hi)
		}
		if q.Sent+q.Queued != 11 {
			t.Fatalf("Queue = %+v; want sent + queued = the 11 reserved slots", q)
		}
	})
}

func TestRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		const interval, maxWait = 100 * time.Millisecond, time.Second
		var slots []Slot
		for i := range 4 {
			slots = append(slots, reserve(t, b.store, key, fmt.Sprintf("call-%d", i), interval, maxWait))
		}
		if err := b.store.Release(context.Background(), key, "call-1"); err != nil {
			t.Fatal(err)
		}
		if b.held(key, "call-1") {
			t.Fatal("released slot still held")
		}
		for _, m := range []string{"call-1", "unknown"} { // releasing again or an unknown member: no-op
			if err := b.store.Release(context.Background(), key, m); err != nil {
				t.Fatalf("Release(%q): %v", m, err)
			}
		}
		if err := b.store.Release(context.Background(), lua.Key("test", "carrier", "none"), "x"); err != nil {
			t.Fatalf("Release on an unknown carrier: %v", err)
		}
		// Releasing the last slot gives its time to the next reservation.
		if err := b.store.Release(context.Background(), key, "call-3"); err != nil {
			t.Fatal(err)
		}
		sl := reserve(t, b.store, key, "call-4", interval, maxWait)
		if got, want := sl.At.Add(sl.Wait), slots[3].At.Add(slots[3].Wait); !sl.OK || !got.Equal(want) {
			t.Fatalf("after releasing the last slot: got ok %v slot %v, want the released slot %v", sl.OK, got, want)
		}
	})
}

// TestReserveAfterIdle: time passes between reservations. The next slot
// is max(now, last + interval): once the last slot is more than an
// interval old (but still kept: younger than 1 s), the next call goes at
// once, and the one after it an interval later; a slot is never in the
// past. Every slot is checked exactly against the store's own clock (the
// reply's now and the kept slot's time), so the real clock of Redis needs
// no threshold: the idle gap only has to land between the interval and
// the 1 s trim horizon, which a 200 ms sleep does unless the machine
// stalls for most of a second (then the round is played again).
func TestReserveAfterIdle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		const interval, idle, maxWait = 50 * time.Millisecond, 200 * time.Millisecond, time.Second
		// check reserves member and returns its slot, which must be
		// max(now, prev + interval) (prev zero: now), kept as returned.
		check := func(key, member string, prev time.Time) (Slot, time.Time) {
			t.Helper()
			sl := reserve(t, b.store, key, member, interval, maxWait)
			at := sl.At.Add(sl.Wait)
			want := sl.At
			if !prev.IsZero() && prev.Add(interval).After(want) {
				want = prev.Add(interval)
			}
			if !sl.OK || sl.Wait < 0 || !at.Equal(want) {
				t.Fatalf("%s: got ok %v wait %v (slot %v after the previous one), want ok, slot max(now, previous + %v) = now + %v",
					member, sl.OK, sl.Wait, at.Sub(prev), interval, want.Sub(sl.At))
			}
			if kept, ok := b.slotAt(key, member); !ok || !kept.Equal(at) {
				t.Fatalf("%s: slot kept %v off the returned one (held %v), want the returned slot", member, kept.Sub(at), ok)
			}
			return sl, at
		}
		for round := 0; round < 3; round++ {
			k := fmt.Sprintf("%s:%d", key, round)
			first, at1 := check(k, "call-1", time.Time{})
			b.advance(idle)
			second, at2 := check(k, "call-2", at1)
			_, at3 := check(k, "call-3", at2)
			if b.exact && (second.Wait != 0 || at3.Sub(at2) != interval) {
				t.Fatalf("exact clock: second wait %v, third %v after it; want 0 and %v", second.Wait, at3.Sub(at2), interval)
			}
			if gap := second.At.Sub(first.At); gap > interval && gap < time.Second {
				// The second call found the last slot in the past but kept:
				// the case under test (exactly a free slot at once).
				if second.Wait != 0 {
					t.Fatalf("after %v idle: second wait %v, want 0", gap, second.Wait)
				}
				return
			}
			t.Logf("round %d: the idle gap was %v, outside (%v, 1s): again", round, second.At.Sub(first.At), interval)
		}
		t.Fatal("three rounds without an idle gap between the interval and 1 s")
	})
}

// A retransmitted call keeps its slot instead of taking a second one.
func TestReserveIdempotent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		const interval = 100 * time.Millisecond
		reserve(t, b.store, key, "call-a", interval, time.Second)
		s1 := reserve(t, b.store, key, "call-b", interval, time.Second)
		s2 := reserve(t, b.store, key, "call-b", interval, time.Second)
		if !s2.OK || !s2.At.Add(s2.Wait).Equal(s1.At.Add(s1.Wait)) {
			t.Fatalf("second reservation of call-b: got %+v, want the same slot as %+v", s2, s1)
		}
		s3 := reserve(t, b.store, key, "call-c", interval, time.Second)
		if got := s3.At.Add(s3.Wait).Sub(s1.At.Add(s1.Wait)); got != interval {
			t.Fatalf("call-c is %v after call-b, want %v", got, interval)
		}
	})
}

// Many reservations at the same instant all count, each one interval apart.
// The interval is long enough that no round trip, however slow the machine,
// reaches the next slot (a 1 ms interval failed on a loaded box: the
// store's clock had moved past the queue's end).
func TestReserveSameInstant(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		const n, interval = 50, time.Second
		var first Slot
		for i := range n {
			sl := reserve(t, b.store, key, fmt.Sprintf("call-%d", i), interval, 2*time.Minute)
			if i == 0 {
				first = sl
			}
			if got := sl.At.Add(sl.Wait).Sub(first.At); !sl.OK || got != time.Duration(i)*interval {
				t.Fatalf("call %d: slot +%v, want +%v", i, got, time.Duration(i)*interval)
			}
		}
	})
}

func TestSlotSetExpires(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		const interval = 100 * time.Millisecond
		before := time.Now()
		for i := range 3 {
			reserve(t, b.store, key, fmt.Sprintf("call-%d", i), interval, time.Second)
		}
		if b.ttl != nil {
			// Last slot at +200 ms from the first reservation, kept 1 s
			// after it, plus 1 s: 2.2 s from the first, run down since by
			// at most the time since before (PTTL counts whole ms), so a
			// stalled machine widens the range and cannot fail it.
			const want = 2200 * time.Millisecond
			if ttl, lo := b.ttl(key), want-time.Since(before)-time.Millisecond; ttl < lo || ttl > want {
				t.Fatalf("TTL = %v, want in [%v, %v]", ttl, lo, want)
			}
			return // waiting 2 s more for the TTL is covered by admission's test
		}
		b.advance(200*time.Millisecond + time.Second - time.Nanosecond)
		if !b.exists(key) {
			t.Fatal("slot set gone while its last slot is still within 1 s")
		}
		b.advance(time.Nanosecond)
		if b.exists(key) {
			t.Fatal("idle slot set not evicted")
		}
	})
}

func TestInvalidInterval(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		if _, err := b.store.Reserve(context.Background(), key, "m", Share{}, 0, time.Second); err == nil {
			t.Fatal("Reserve with interval 0: got no error")
		}
		if _, err := b.store.Queue(context.Background(), key, 0); err == nil {
			t.Fatal("Queue with interval 0: got no error")
		}
	})
}

// TestExactEdges: the boundaries the scripts draw, on the in-process
// store's fake clock (Redis's clock cannot be stopped; its scripts draw
// the same lines: rate.lua's now - last_cut >= hold, queue.lua's sent
// slots in (now - 1 s, now]). A second overload answer exactly one hold
// after a cut cuts again, one microsecond earlier it does not; a slot
// sent exactly 1 s ago is no longer in the last second.
func TestExactEdges(t *testing.T) {
	clock := newFakeClock()
	b := backend{store: NewLocalSlots(clock.Now), advance: clock.Advance}
	key := lua.Key("test", "carrier", t.Name())
	ctx := context.Background()
	a := AIMD{Max: 100, Min: 1, Decrease: 0.5, Increase: 0.001, Hold: 300 * time.Millisecond}
	cut := func() bool {
		t.Helper()
		r, err := b.store.Adapt(ctx, key, a, true)
		if err != nil {
			t.Fatal(err)
		}
		return r.Cut
	}
	if !cut() {
		t.Fatal("first overload: no cut")
	}
	b.advance(a.Hold - time.Microsecond)
	if cut() {
		t.Fatal("overload 1µs before the hold ends: cut, want none")
	}
	b.advance(time.Microsecond)
	if !cut() {
		t.Fatal("overload exactly one hold after the cut: no cut, want one")
	}

	slots := key + ":queue"
	reserve(t, b.store, slots, "call-a", 100*time.Millisecond, 0)
	sent := func() int {
		t.Helper()
		q, err := b.store.Queue(ctx, slots, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		return q.Sent
	}
	b.advance(time.Second - time.Nanosecond)
	if n := sent(); n != 1 {
		t.Fatalf("1ns before the slot is 1 s old: sent %d, want 1", n)
	}
	b.advance(time.Nanosecond)
	if n := sent(); n != 0 {
		t.Fatalf("slot exactly 1 s old: sent %d, want 0", n)
	}
}

// AIMD (an adaptive carrier's effective rate): an overload answer halves
// it, at most once per hold; it climbs back by Increase per second, never
// above Max nor below Min; back at Max it leaves nothing in the store.
func TestAdaptAIMD(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		a := AIMD{Max: 100, Min: 10, Decrease: 0.5, Increase: 10, Hold: 300 * time.Millisecond}
		adapt := func(a AIMD, overload bool) Rate {
			t.Helper()
			r, err := b.store.Adapt(ctx, key, a, overload)
			if err != nil {
				t.Fatalf("Adapt: %v", err)
			}
			return r
		}
		if r := adapt(a, false); r.CPS != 100 || r.Cut {
			t.Fatalf("untouched carrier: %+v, want 100 cps, no cut", r)
		}
		if r := adapt(a, true); r.CPS != 50 || !r.Cut {
			t.Fatalf("first overload: %+v, want 50 cps, cut", r)
		}
		if r := adapt(a, true); r.Cut || r.CPS < 50 || r.CPS >= 55 {
			t.Fatalf("overload within the hold: %+v, want no second cut (about 50 cps)", r)
		}
		if b.ttl != nil {
			if ttl := b.ttl(lua.RateKey(key)); ttl <= 0 {
				t.Errorf("rate key TTL %v, want one (an idle carrier's rate must vanish)", ttl)
			}
		}
		b.advance(400 * time.Millisecond)
		r := adapt(a, true)
		if !r.Cut || r.CPS >= 50 || r.CPS < 26 {
			t.Fatalf("overload after the hold: %+v, want a cut from about 54 to about 27", r)
		}
		if b.exact && r.CPS != 27 {
			t.Errorf("exact store: %v cps, want 27 ((50 + 4) / 2)", r.CPS)
		}
		for range 5 {
			b.advance(350 * time.Millisecond)
			r = adapt(a, true)
		}
		if r.CPS != 10 {
			t.Fatalf("after many overloads: %v cps, want the floor, 10", r.CPS)
		}
		b.advance(500 * time.Millisecond)
		if r = adapt(a, false); r.CPS <= 10 || r.Cut {
			t.Fatalf("500 ms later: %+v, want more than 10 cps (climbing 10 per second)", r)
		}
		if b.exact && r.CPS != 15 {
			t.Errorf("exact store: %v cps, want 15", r.CPS)
		}
		// A reload that lowers cps below the effective rate clamps it.
		if r = adapt(AIMD{Max: 12, Min: 1, Decrease: 0.5, Increase: 10, Hold: a.Hold}, false); r.CPS > 12 {
			t.Fatalf("max lowered to 12: %v cps", r.CPS)
		}
		// Back at Max after the hold: nothing left in the store.
		fast := AIMD{Max: 100, Min: 10, Decrease: 0.5, Increase: 100000, Hold: a.Hold}
		b.advance(400 * time.Millisecond)
		if r = adapt(fast, false); r.CPS != 100 {
			t.Fatalf("recovered: %v cps, want 100", r.CPS)
		}
		if b.ttl != nil {
			if n := b.ttl(lua.RateKey(key)); n > 0 {
				t.Errorf("rate key still there (TTL %v) once back at max", n)
			}
		}
		if _, err := b.store.Adapt(ctx, key, AIMD{Max: 10, Min: 20, Decrease: 0.5, Increase: 1}, false); err == nil {
			t.Error("min above max accepted")
		}
	})
}
