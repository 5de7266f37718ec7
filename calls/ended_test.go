package calls

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// TestRedisEndedShared: the ends one node records reach another node's
// next sync, once each as the cursors move on, and never come back to the
// node that recorded them; a node that starts reads what the pool keeps;
// ends older than the ttl are gone; pages move on.
func TestRedisEndedShared(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		if err := lua.Load(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := NewRedisEnded(client(), "t:{ended:dialogs}", RedisOptions{Timeout: time.Second})
	b := NewRedisEnded(client(), "t:{ended:dialogs}", RedisOptions{Timeout: time.Second})
	const ttl = time.Hour

	got, ca, more, err := a.Sync(ctx, 0, []string{"aa01", "aa02"}, ttl)
	if err != nil || more || len(got) != 0 {
		t.Fatalf("a's first sync = %v, %v, %v; want none (its own ends are not read back)", got, more, err)
	}
	got, cb, _, err := b.Sync(ctx, 0, nil, ttl)
	if err != nil || !slices.Equal(got, []string{"aa01", "aa02"}) {
		t.Fatalf("b's first sync = %v, %v; want a's two ends", got, err)
	}
	if _, _, _, err := b.Sync(ctx, cb, []string{"bb01"}, ttl); err != nil {
		t.Fatal(err)
	}
	got, _, _, err = a.Sync(ctx, ca, nil, ttl)
	if err != nil || !slices.Equal(got, []string{"bb01"}) {
		t.Fatalf("a's next sync = %v, %v; want b's end only (its own are not read back)", got, err)
	}

	// A short ttl: the ends recorded before are trimmed.
	time.Sleep(5 * time.Millisecond)
	got, _, _, err = a.Sync(ctx, 0, []string{"cc01"}, time.Millisecond)
	if err != nil || len(got) != 0 {
		t.Fatalf("sync with a 1 ms ttl = %v, %v; want none (older ends trimmed, its own not read back)", got, err)
	}
	got, _, _, err = b.Sync(ctx, 0, nil, time.Hour)
	if err != nil || !slices.Equal(got, []string{"cc01"}) {
		t.Fatalf("b's sync after the 1 ms ttl = %v, %v; want only cc01 (the ends before it trimmed)", got, err)
	}

	// More ends than a page: read over several syncs, each once.
	var all []string
	for i := 0; i < 3; i++ {
		batch := make([]string, lua.MaxEndsPerCall)
		for j := range batch {
			batch[j] = fmt.Sprintf("dd%02d%04d", i, j)
		}
		if _, _, _, err := a.Sync(ctx, 0, batch, ttl); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
	}
	seen := map[string]int{}
	cursor := int64(0)
	for page := 0; page < 100; page++ {
		got, next, more, err := b.Sync(ctx, cursor, nil, ttl)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range got {
			seen[k]++
		}
		cursor = next
		if !more {
			break
		}
	}
	for _, k := range all {
		if seen[k] == 0 {
			t.Fatalf("end %s never read", k)
		}
	}
	if _, _, _, err := a.Sync(ctx, 0, make([]string, lua.MaxEndsPerCall+1), ttl); err == nil {
		t.Fatal("more than lua.MaxEndsPerCall ends in one sync accepted")
	}
}

// TestRedisEndedReadsAnEarlierReleasesEnds: a node of the release before
// (which recorded up to 1,000 ends in one call, all at that call's score)
// shares a pool with this one while the pool is upgraded node by node. A
// reader moves on from a full page's last score, so a page no larger than
// such a call's ends never moved on: the same page again on every sync,
// no later end ever read.
func TestRedisEndedReadsAnEarlierReleasesEnds(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	if err := lua.Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	const key = "t:{ended:dialogs}"
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// One call of an earlier node: 1,000 ends at one score.
	score := float64(now.UnixMicro() - 1000)
	members := make([]redis.Z, 1000)
	want := map[string]bool{}
	for i := range members {
		k := fmt.Sprintf("ee%04d", i)
		members[i] = redis.Z{Score: score, Member: k}
		want[k] = true
	}
	if err := c.ZAdd(ctx, key, members...).Err(); err != nil {
		t.Fatal(err)
	}
	a := NewRedisEnded(c, key, RedisOptions{Timeout: time.Second})
	b := NewRedisEnded(c, key, RedisOptions{Timeout: time.Second})
	// A later end of this release's node.
	if _, _, _, err := a.Sync(ctx, 0, []string{"ff01"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	want["ff01"] = true
	cursor := int64(0)
	for page := 0; page < 10 && len(want) > 0; page++ {
		got, next, _, err := b.Sync(ctx, cursor, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range got {
			delete(want, k)
		}
		cursor = next
	}
	if len(want) > 0 {
		t.Fatalf("%d ends never read in 10 syncs (cursor stuck at %d)", len(want), cursor)
	}
}
