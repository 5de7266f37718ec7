package calls

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// fakeClock only moves when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
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

// backend is one Store under the contract suite.
type backend struct {
	name string
	// open returns a store; a second call is another node on the same
	// shared state.
	open    func() Store
	advance func(d time.Duration)
	// held reports whether the store still keeps anything for key.
	held func(key string) bool
}

// startOneNodeCluster starts a redis-server in cluster mode owning every
// slot: it refuses scripts whose keys span slots (CROSSSLOT) like a bigger
// cluster does.
func startOneNodeCluster(t *testing.T) *redistest.Server {
	t.Helper()
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx := context.Background()
	if out, err := srv.CLI(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v %s", err, out)
	}
	for i := 0; ; i++ {
		if out, _ := srv.CLI(ctx, "CLUSTER", "INFO"); strings.Contains(out, "cluster_state:ok") {
			return srv
		}
		if i > 100 {
			t.Fatal("cluster not ok after 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func backends(t *testing.T) []backend {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	local := NewLocalStore(clock.Now)
	redisBackend := func(name string, newClient func() redis.UniversalClient, pipelined bool) backend {
		admin := newClient()
		t.Cleanup(func() { _ = admin.Close() })
		if err := lua.Load(context.Background(), admin); err != nil {
			t.Fatalf("load scripts: %v", err)
		}
		return backend{
			name: name,
			open: func() Store {
				c := newClient()
				t.Cleanup(func() { _ = c.Close() })
				opt := RedisOptions{Timeout: 5 * time.Second}
				if pipelined {
					p := lua.NewPipeliner(c, lua.PipelineOptions{})
					t.Cleanup(func() { _ = p.Close() })
					opt.Pipeline = p
				}
				return NewRedisStore(c, opt)
			},
			advance: time.Sleep,
			held: func(key string) bool {
				n, err := admin.Exists(context.Background(), key).Result()
				if err != nil {
					t.Fatalf("EXISTS %s: %v", key, err)
				}
				return n == 1
			},
		}
	}
	srv := redistest.Start(t)
	cl := startOneNodeCluster(t)
	cl3 := redistest.StartCluster(t, 3, 0)
	return []backend{
		{
			name:    "local",
			open:    func() Store { return local },
			advance: clock.Advance,
			held: func(key string) bool {
				local.mu.Lock()
				defer local.mu.Unlock()
				_, ok := local.places[key]
				return ok
			},
		},
		redisBackend("redis", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 32})
		}, false),
		redisBackend("redis-pipelined", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 32})
		}, true),
		redisBackend("cluster", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Addr()}, ContextTimeoutEnabled: true})
		}, false),
		// Three masters: a call's places live on different servers.
		redisBackend("cluster-3-pipelined", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl3.Addrs(), ContextTimeoutEnabled: true})
		}, true),
	}
}

// places returns a peer, customer and carrier place with the given limits,
// keyed per test; the three keys carry different hash tags, so on a
// cluster they are in different slots (checked).
func places(t *testing.T, peer, cust, car int) []Place {
	t.Helper()
	key := func(scope string) string { return lua.Key("test", "calls:"+scope, t.Name()) }
	ps := []Place{{key("peer"), peer}, {key("customer"), cust}, {key("carrier"), car}}
	if lua.HashSlot(ps[0].Key) == lua.HashSlot(ps[1].Key) && lua.HashSlot(ps[1].Key) == lua.HashSlot(ps[2].Key) {
		t.Fatal("test keys share one slot; the cross-slot path is not exercised")
	}
	return ps
}

func keysOf(ps []Place) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Key
	}
	return out
}

func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

func counts(t *testing.T, s Store, ps []Place) []int {
	t.Helper()
	got, err := s.Count(context.Background(), keysOf(ps))
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return got
}

func TestContract(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	eachBackend(t, func(t *testing.T, b backend) {
		t.Run("limit and all-or-none", func(t *testing.T) {
			s := b.open()
			ps := places(t, 3, 5, 2)
			for i, tc := range []struct {
				member  string
				admit   bool
				refused int
			}{
				{"a", true, -1},
				{"b", true, -1},
				{"c", false, 2}, // the carrier is full
			} {
				d, err := s.Occupy(ctx, tc.member, ttl, ps)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if d.Admit != tc.admit || d.Refused != tc.refused {
					t.Fatalf("call %s: got admit %v refused %d, want %v %d", tc.member, d.Admit, d.Refused, tc.admit, tc.refused)
				}
			}
			if got, want := fmt.Sprint(counts(t, s, ps)), "[2 2 2]"; got != want {
				t.Fatalf("counts after a refusal: got %s, want %s (nothing taken by the refused call)", got, want)
			}
		})
		t.Run("duplicate counted once", func(t *testing.T) {
			s := b.open()
			ps := places(t, 2, 2, 2)
			for i := 0; i < 3; i++ {
				d, err := s.Occupy(ctx, "same", ttl, ps)
				if err != nil || !d.Admit || d.Duplicate != (i > 0) {
					t.Fatalf("attempt %d: got %+v, %v; want admitted, duplicate %v", i, d, err, i > 0)
				}
			}
			if got, want := fmt.Sprint(counts(t, s, ps)), "[1 1 1]"; got != want {
				t.Fatalf("counts: got %s, want %s", got, want)
			}
		})
		t.Run("free", func(t *testing.T) {
			s := b.open()
			ps := places(t, 1, 1, 1)
			if d, err := s.Occupy(ctx, "a", ttl, ps); err != nil || !d.Admit {
				t.Fatalf("occupy a: %+v %v", d, err)
			}
			if d, err := s.Occupy(ctx, "b", ttl, ps); err != nil || d.Admit || d.Refused != 0 {
				t.Fatalf("occupy b while a lives: got %+v %v, want refused at 0", d, err)
			}
			if n, err := s.Free(ctx, "nobody", keysOf(ps)); err != nil || n != 0 {
				t.Fatalf("free of an unknown call: got %d %v, want 0", n, err)
			}
			if n, err := s.Free(ctx, "a", keysOf(ps)); err != nil || n != 3 {
				t.Fatalf("free a: got %d %v, want 3", n, err)
			}
			if n, err := s.Free(ctx, "a", keysOf(ps)); err != nil || n != 0 {
				t.Fatalf("second free of a: got %d %v, want 0", n, err)
			}
			if d, err := s.Occupy(ctx, "b", ttl, ps); err != nil || !d.Admit {
				t.Fatalf("occupy b after a ended: got %+v %v", d, err)
			}
		})
		t.Run("expiry and refresh", func(t *testing.T) {
			s := b.open()
			ps := places(t, 2, 2, 2)
			// kept must be refreshed before its ttl ends, and live on
			// through the checks after lost's expiry: on Redis's clock
			// each is a step of a few round trips (more on a 3-master
			// cluster) plus one sleep. With a 400 ms ttl and 250 ms sleeps
			// a stall of 150 ms expired it; now 400 ms, and the two sleeps
			// still outlast the ttl.
			const short, step = time.Second, 600 * time.Millisecond
			for _, m := range []string{"kept", "lost"} {
				if d, err := s.Occupy(ctx, m, short, ps); err != nil || !d.Admit {
					t.Fatalf("occupy %s: %+v %v", m, d, err)
				}
			}
			b.advance(step)
			for _, k := range keysOf(ps) {
				if n, err := s.Refresh(ctx, k, short, []string{"kept"}); err != nil || n != 0 {
					t.Fatalf("refresh %s: got %d added back, %v; want 0 (kept is there)", k, n, err)
				}
			}
			b.advance(step) // lost expired, kept lives
			if got, want := fmt.Sprint(counts(t, s, ps)), "[1 1 1]"; got != want {
				t.Fatalf("counts after lost's expiry: got %s, want %s", got, want)
			}
			// The caller names a live call the set lost (taken in a
			// fallback, or the store's data lost): it counts again, even
			// over the limit, which admits nothing new.
			if n, err := s.Refresh(ctx, ps[0].Key, short, []string{"lost", "kept"}); err != nil || n != 1 {
				t.Fatalf("refresh naming a lost call: got %d added back, %v; want 1", n, err)
			}
			if got, want := fmt.Sprint(counts(t, s, ps)), "[2 1 1]"; got != want {
				t.Fatalf("counts after lost came back: got %s, want %s", got, want)
			}
			if d, err := s.Occupy(ctx, "new", short, ps); err != nil || d.Admit {
				t.Fatalf("a new call with the live calls counted: got %+v %v, want refused", d, err)
			}
			b.advance(short)
			if got, want := fmt.Sprint(counts(t, s, ps)), "[0 0 0]"; got != want {
				t.Fatalf("counts after every ttl: got %s, want %s", got, want)
			}
			if b.name == "local" {
				for _, k := range keysOf(ps) {
					if b.held(k) {
						t.Fatalf("%s still held with no live call", k)
					}
				}
			}
		})
		t.Run("pool never over the limit", func(t *testing.T) {
			nodes := []Store{b.open(), b.open()}
			ps := places(t, 1000, 1000, 5)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < 40; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := nodes[i%2].Occupy(ctx, fmt.Sprint("call-", i), ttl, ps)
					if err != nil {
						t.Errorf("occupy %d: %v", i, err)
						return
					}
					if d.Admit {
						admitted.Add(1)
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 5 {
				t.Fatalf("admitted %d calls, want exactly 5", got)
			}
			if got, want := fmt.Sprint(counts(t, nodes[0], ps)), "[5 5 5]"; got != want {
				t.Fatalf("counts: got %s, want %s (refused calls left nothing behind)", got, want)
			}
		})
	})
}

func TestRedisKeyVanishes(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	s := NewRedisStore(c, RedisOptions{})
	ps := []Place{{Key: lua.Key("test", "calls:peer", "ttl"), Limit: 1}}
	if _, err := s.Occupy(ctx, "a", 2*time.Second, ps); err != nil {
		t.Fatal(err)
	}
	d, err := c.PTTL(ctx, ps[0].Key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d < 2*time.Second || d > 3*time.Second+100*time.Millisecond {
		t.Fatalf("PTTL: got %v, want between the call's ttl and ttl + 1 s", d)
	}
}

// TestRedisKeyOutlivesItsCalls: a place's key expires exactly 1 s after
// its latest member does, whether the member was placed (calls_occupy),
// placed again (a duplicate refreshes it) or refreshed (calls_refresh): a
// key that expired earlier would forget live calls and let the pool take
// more than its limit. The key's expiry and the members' scores are read
// in one MULTI with Redis's TIME, so the check is exact to the
// millisecond the scripts round to, whatever the machine's speed.
func TestRedisKeyOutlivesItsCalls(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	s := NewRedisStore(c, RedisOptions{})
	key := lua.Key("test", "calls:peer", "outlives")
	ps := []Place{{Key: key, Limit: 3}}
	check := func(step string) {
		t.Helper()
		var now *redis.TimeCmd
		var last *redis.ZSliceCmd
		var pttl *redis.DurationCmd
		if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			now = p.Time(ctx)
			last = p.ZRangeWithScores(ctx, key, -1, -1)
			pttl = p.PTTL(ctx, key)
			return nil
		}); err != nil {
			t.Fatalf("%s: MULTI: %v", step, err)
		}
		if len(last.Val()) != 1 || pttl.Val() <= 0 {
			t.Fatalf("%s: latest member %v, PTTL %v; want one member and a key that expires", step, last.Val(), pttl.Val())
		}
		memberExp := int64(last.Val()[0].Score) / 1000              // ms
		keyExp := now.Val().UnixMilli() + pttl.Val().Milliseconds() // ms
		if d := keyExp - memberExp; d < 998 || d > 1001 {
			t.Fatalf("%s: key expires %d ms after its latest member, want 1000 (rounded to the ms)", step, d)
		}
	}
	if _, err := s.Occupy(ctx, "a", 10*time.Second, ps); err != nil {
		t.Fatal(err)
	}
	check("placed with ttl 10s")
	if _, err := s.Occupy(ctx, "b", 3*time.Second, ps); err != nil {
		t.Fatal(err)
	}
	check("a shorter call placed after it")
	if _, err := s.Occupy(ctx, "a", 30*time.Second, ps); err != nil {
		t.Fatal(err)
	}
	check("placed again (duplicate) with ttl 30s")
	if _, err := s.Refresh(ctx, key, time.Minute, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	check("refreshed with ttl 1m")
}
