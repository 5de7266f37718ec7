package limits_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/policy"
)

// backend is one Store under test, with a way to let time pass.
type backend struct {
	store limits.Store
	// pass lets d go by for the store's expiry.
	pass func(d time.Duration)
}

func localBackend(t *testing.T) backend {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	return backend{
		store: limits.NewLocalStore(clock),
		pass:  func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() },
	}
}

func redisBackend(t *testing.T) (backend, *redis.Client) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	return backend{
		store: limits.NewRedisStore(c, "test", limits.RedisOptions{Timeout: time.Second}),
		pass:  time.Sleep, // Redis's own clock
	}, c
}

func intp(n int) *int { return &n }

// TestStoreContract runs one suite against both stores: they must agree.
func TestStoreContract(t *testing.T) {
	rb, _ := redisBackend(t)
	for name, b := range map[string]backend{"local": localBackend(t), "redis": rb} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := b.store
			// The peer's override must outlive the next three round trips
			// on Redis's clock (a 300 ms ttl was all the room a stall of
			// the test or of Redis had), and be gone once passed.
			const peerTTL = time.Second
			prev, err := s.Set(ctx, limits.Override{Scope: "peer", Name: "dialer-1", CPS: 20, SetBy: "127.0.0.1:1"}, peerTTL)
			if err != nil || prev != nil {
				t.Fatalf("first Set = %v, %v; want nil, nil", prev, err)
			}
			prev, err = s.Set(ctx, limits.Override{Scope: "peer", Name: "dialer-1", CPS: 15, Burst: intp(30)}, peerTTL)
			if err != nil || prev == nil || prev.CPS != 20 || prev.SetBy != "127.0.0.1:1" {
				t.Fatalf("second Set returned previous %+v, %v; want the cps 20 one", prev, err)
			}
			if _, err := s.Set(ctx, limits.Override{Scope: "carrier", Name: "c1", CPS: 0.5}, time.Hour); err != nil {
				t.Fatal(err)
			}
			list, err := s.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 2 || list[0].Field() != "peer/dialer-1" || list[0].CPS != 15 || list[0].Burst == nil || *list[0].Burst != 30 ||
				list[1].Field() != "carrier/c1" || list[1].CPS != 0.5 {
				t.Fatalf("List = %+v; want peer/dialer-1 cps 15 burst 30, then carrier/c1 cps 0.5 (by expiry)", list)
			}
			if left := time.Until(list[1].Until); name == "redis" && (left < 59*time.Minute || left > time.Hour) {
				t.Errorf("carrier/c1 has %v left, want about 1h", left)
			}

			b.pass(peerTTL + 100*time.Millisecond)
			list, err = s.List(ctx)
			if err != nil || len(list) != 1 || list[0].Field() != "carrier/c1" {
				t.Fatalf("List after the peer's ttl = %+v, %v; want only carrier/c1", list, err)
			}
			prev, err = s.Delete(ctx, "peer", "dialer-1")
			if err != nil || prev != nil {
				t.Errorf("Delete of an expired override = %+v, %v; want nil, nil", prev, err)
			}
			prev, err = s.Delete(ctx, "carrier", "c1")
			if err != nil || prev == nil || prev.CPS != 0.5 {
				t.Errorf("Delete = %+v, %v; want the cps 0.5 override", prev, err)
			}
			if list, _ := s.List(ctx); len(list) != 0 {
				t.Errorf("List after Delete = %+v, want none", list)
			}
		})
	}
}

// TestRedisKeysExpire: the keys carry a TTL no longer than the latest
// override's, so an override never outlives its TTL with no node up.
func TestRedisKeysExpire(t *testing.T) {
	b, c := redisBackend(t)
	ctx := context.Background()
	if _, err := b.store.Set(ctx, limits.Override{Scope: "customer", Name: "acme", CPS: 5}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Set(ctx, limits.Override{Scope: "peer", Name: "p", CPS: 5}, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	key := policy.OverridesKey("test")
	if !strings.Contains(key, "{overrides:all}") {
		t.Errorf("key %q has no hash tag", key)
	}
	for _, k := range []string{key, lua.OverridesExpiryKey(key)} {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl <= time.Second || ttl > 2*time.Second {
			t.Errorf("PTTL %s = %v, %v; want in (1s, 2s]: the latest override's", k, ttl, err)
		}
	}
	if _, err := b.store.Delete(ctx, "customer", "acme"); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := c.PTTL(ctx, key).Result(); ttl > 500*time.Millisecond {
		t.Errorf("PTTL after deleting the longest = %v, want <= 500ms", ttl)
	}
	time.Sleep(600 * time.Millisecond)
	if n, _ := c.Exists(ctx, key, lua.OverridesExpiryKey(key)).Result(); n != 0 {
		t.Errorf("%d override keys left after every TTL, want 0", n)
	}
}

// TestOverridesKeepLastOnStoreFailure: with Redis gone, the view keeps the
// overrides it read, and each still ends at its expiry.
func TestOverridesKeepLastOnStoreFailure(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	store := limits.NewRedisStore(c, "test", limits.RedisOptions{Timeout: 200 * time.Millisecond})
	var mu sync.Mutex
	var told [][]limits.Override
	x := limits.New(store, limits.Options{OnChange: func(os []limits.Override) { mu.Lock(); told = append(told, os); mu.Unlock() }})
	ctx := context.Background()
	// The override must outlive two refreshes, killing Redis and a failed
	// Set (a 700 ms ttl was all the room for a loaded machine), and the
	// test then waits until just past it.
	const ttl = 2 * time.Second
	// Set on "another node": this view sees it on refresh.
	if _, err := store.Set(ctx, limits.Override{Scope: "peer", Name: "d", CPS: 3}, ttl); err != nil {
		t.Fatal(err)
	}
	set := time.Now() // after the Set: its expiry is before set + ttl
	if _, ok := x.Lookup("peer", "d"); ok {
		t.Fatal("Lookup before any refresh found the override")
	}
	if err := x.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if o, ok := x.Lookup("peer", "d"); !ok || o.CPS != 3 {
		t.Fatalf("Lookup after refresh = %+v, %v; want cps 3", o, ok)
	}
	srv.Kill()
	if err := x.Refresh(ctx); err == nil {
		t.Fatal("Refresh with Redis down succeeded")
	}
	if o, ok := x.Lookup("peer", "d"); !ok || o.CPS != 3 {
		t.Errorf("Lookup with Redis down = %+v, %v; want the last one read", o, ok)
	}
	if _, err := x.Set(ctx, limits.Override{Scope: "peer", Name: "d", CPS: 1}, time.Hour); err == nil {
		t.Error("Set with Redis down succeeded")
	}
	time.Sleep(time.Until(set.Add(ttl + 100*time.Millisecond)))
	if _, ok := x.Lookup("peer", "d"); ok {
		t.Error("Lookup after the TTL still finds the override (Redis down)")
	}
	_ = x.Refresh(ctx)
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 || len(told[0]) != 1 || len(told[1]) != 0 {
		t.Errorf("OnChange got %v, want [one override] then [] (its expiry)", told)
	}
}

// TestOverridesApplyLocallyAtOnce: a Set through the view applies before
// any refresh; a Delete ends it at once.
func TestOverridesApplyLocallyAtOnce(t *testing.T) {
	x := limits.New(limits.NewLocalStore(nil), limits.Options{})
	ctx := context.Background()
	if _, err := x.Set(ctx, limits.Override{Scope: "carrier", Name: "c", CPS: 7}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if o, ok := x.Lookup("carrier", "c"); !ok || o.CPS != 7 {
		t.Fatalf("Lookup = %+v, %v; want cps 7", o, ok)
	}
	if got := x.List(); len(got) != 1 {
		t.Errorf("List = %v, want one", got)
	}
	prev, err := x.Delete(ctx, "carrier", "c")
	if err != nil || prev == nil || prev.CPS != 7 {
		t.Fatalf("Delete = %+v, %v", prev, err)
	}
	if _, ok := x.Lookup("carrier", "c"); ok {
		t.Error("Lookup after Delete found the override")
	}
}

// TestRedisCluster: both keys share a hash slot, so the script runs on a
// Redis Cluster as on one server.
func TestRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t, 3, 0)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := lua.Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	s := limits.NewRedisStore(c, "xs", limits.RedisOptions{Timeout: time.Second})
	for _, n := range []string{"a", "b", "c"} {
		if _, err := s.Set(ctx, limits.Override{Scope: "peer", Name: n, CPS: 2}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("List on a cluster = %v, %v; want 3", list, err)
	}
	if prev, err := s.Delete(ctx, "peer", "b"); err != nil || prev == nil {
		t.Fatalf("Delete on a cluster = %v, %v", prev, err)
	}
}
