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
// next sync (and its own), once each as the cursors move on; a node that
// starts reads what the pool keeps; ends older than the ttl are gone;
// pages move on.
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
	if err != nil || more || !slices.Equal(got, []string{"aa01", "aa02"}) {
		t.Fatalf("a's first sync = %v, %v, %v; want its own two ends", got, more, err)
	}
	got, cb, _, err := b.Sync(ctx, 0, nil, ttl)
	if err != nil || !slices.Equal(got, []string{"aa01", "aa02"}) {
		t.Fatalf("b's first sync = %v, %v; want a's two ends", got, err)
	}
	if _, _, _, err := b.Sync(ctx, cb, []string{"bb01"}, ttl); err != nil {
		t.Fatal(err)
	}
	got, _, _, err = a.Sync(ctx, ca, nil, ttl)
	if err != nil || !slices.Contains(got, "bb01") || slices.Contains(got, "aa01") {
		t.Fatalf("a's next sync = %v, %v; want b's end and none read before", got, err)
	}

	// A short ttl: the ends recorded before are trimmed.
	time.Sleep(5 * time.Millisecond)
	got, _, _, err = a.Sync(ctx, 0, []string{"cc01"}, time.Millisecond)
	if err != nil || !slices.Equal(got, []string{"cc01"}) {
		t.Fatalf("sync with a 1 ms ttl = %v, %v; want only the end recorded now", got, err)
	}

	// More ends than a page: read over several syncs, each once.
	var all []string
	for i := 0; i < 3; i++ {
		batch := make([]string, 1000)
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
	for page := 0; page < 10; page++ {
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
	if _, _, _, err := a.Sync(ctx, 0, make([]string, 1001), ttl); err == nil {
		t.Fatal("1001 ends in one sync accepted")
	}
}
