package pacing

import (
	"cmp"
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// fairOp is one operation of a replayed run: a reservation (and its
// reply) or a release.
type fairOp struct {
	release bool
	member  string
	share   Share
	maxWait time.Duration
	got     Slot
}

// TestFairLocalDecidesLikeRedis: a random run of fair reservations and
// releases against Redis (new calls of three shares, bookings coming back
// at their turns, some given back) is played again on LocalSlots with its
// clock set to the Redis TIME of each reply: every decision must be the
// same, to the microsecond. Redis's clock cannot be stopped, so this is how
// the two stores are held to one arithmetic.
func TestFairLocalDecidesLikeRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("real time")
	}
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	rs := NewRedisSlots(c, RedisOptions{Timeout: 5 * time.Second})
	ctx := context.Background()
	if err := rs.Load(ctx); err != nil {
		t.Fatal(err)
	}
	const interval = 5 * time.Millisecond
	key := lua.Key("test", "carrier", t.Name())
	shares := []Share{{Name: "customer:a", Weight: 1}, {Name: "customer:b", Weight: 3}, {Name: "peer:c", Weight: 2}}
	rng := rand.New(rand.NewSource(7))

	type pending struct {
		due     time.Time
		member  string
		share   Share
		arrived time.Time
	}
	var ops []fairOp
	var queue []pending
	var held []string
	n := 0
	start := time.Now()
	for step := 0; step < 5000 && (time.Since(start) < 1500*time.Millisecond || len(queue) > 0); step++ {
		if time.Since(start) > 5*time.Second {
			t.Fatal("run did not settle in 5 s")
		}
		slices.SortFunc(queue, func(a, b pending) int { return a.due.Compare(b.due) })
		var p pending
		switch {
		case len(queue) > 0 && !queue[0].due.After(time.Now()):
			p, queue = queue[0], queue[1:]
		case time.Since(start) < 1500*time.Millisecond && rng.Intn(8) == 0 && len(held) > 0:
			i := rng.Intn(len(held))
			m := held[i]
			held = slices.Delete(held, i, i+1)
			if err := rs.Release(ctx, key, m); err != nil {
				t.Fatal(err)
			}
			ops = append(ops, fairOp{release: true, member: m})
			continue
		case time.Since(start) < 1500*time.Millisecond:
			n++
			sh := shares[rng.Intn(len(shares))]
			p = pending{member: fmt.Sprintf("%s-%d", sh.Name, n), share: sh, arrived: time.Now()}
			time.Sleep(time.Duration(rng.Intn(3000)) * time.Microsecond)
		default:
			time.Sleep(time.Until(queue[0].due))
			continue
		}
		mw := max(300*time.Millisecond-time.Since(p.arrived), 0)
		s, err := rs.Reserve(ctx, key, p.member, p.share, interval, mw)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, fairOp{member: p.member, share: p.share, maxWait: mw, got: s})
		switch {
		case s.Booked:
			p.due = time.Now().Add(s.Wait)
			queue = append(queue, p)
			held = append(held, p.member)
		case s.OK:
			held = append(held, p.member)
		}
	}
	booked := 0
	for _, o := range ops {
		if o.got.Booked {
			booked++
		}
	}
	if booked < 20 {
		t.Fatalf("only %d bookings in %d operations: the run did not load the carrier", booked, len(ops))
	}

	// Replay on the in-process store.
	var clock fakeClock
	first := slices.IndexFunc(ops, func(o fairOp) bool { return !o.release })
	clock.now = ops[first].got.At
	local := NewLocalSlots(clock.Now)
	for i, o := range ops {
		if o.release {
			if err := local.Release(ctx, key, o.member); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if o.got.At.Before(clock.Now()) {
			t.Fatalf("op %d: Redis TIME went back", i)
		}
		clock.now = o.got.At
		s, err := local.Reserve(ctx, key, o.member, o.share, interval, o.maxWait)
		if err != nil {
			t.Fatal(err)
		}
		want, got := o.got, s
		if got.OK != want.OK || got.Booked != want.Booked || got.Wait != want.Wait || got.Paused != want.Paused || !got.At.Equal(want.At) {
			t.Fatalf("op %d (%s of %s, max_wait %v): local %s, Redis %s", i, o.member, o.share.Name, o.maxWait, describe(got), describe(want))
		}
	}
	// Both hold the same slots.
	zs, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	local.mu.Lock()
	defer local.mu.Unlock()
	set := local.sets[key]
	var ls []string
	for _, e := range set.slots {
		ls = append(ls, fmt.Sprintf("%s@%d", e.member, local.clock.Time(e.at).UnixMicro()))
	}
	var rl []string
	for _, z := range zs {
		rl = append(rl, fmt.Sprintf("%s@%d", z.Member, int64(z.Score)))
	}
	slices.SortFunc(ls, cmp.Compare[string])
	slices.SortFunc(rl, cmp.Compare[string])
	if !slices.Equal(ls, rl) {
		t.Fatalf("slot sets differ:\nlocal %v\nredis %v", ls, rl)
	}
	t.Logf("%d operations (%d bookings) decided alike", len(ops), booked)
}

func describe(s Slot) string {
	return fmt.Sprintf("{ok %v booked %v wait %v at %d}", s.OK, s.Booked, s.Wait, s.At.UnixMicro())
}
