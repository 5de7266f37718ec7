package admission

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// fakeClock is an injected clock that only moves when told to.
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

// backend is one Store under the contract suite.
type backend struct {
	name string
	// exact: the store runs on a fake clock; advance moves it and decisions
	// at window edges are checked to the nanosecond. Otherwise advance sleeps
	// and edges are checked against the store's own reported times.
	exact bool
	// open returns a fresh store; a second call returns another "node" on
	// the same shared state.
	open    func() Store
	advance func(d time.Duration)
	// held reports whether the store still holds anything for key.
	held func(key string) bool
	// ttl returns the remaining time to live of key (Redis only).
	ttl func(key string) time.Duration
}

func backends(t *testing.T) []backend {
	t.Helper()
	clock := newFakeClock()
	local := NewLocalStore(clock.Now)
	srv := redistest.Start(t)
	var clients []*redis.Client
	t.Cleanup(func() {
		for _, c := range clients {
			_ = c.Close()
		}
	})
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 32})
		clients = append(clients, c)
		return c
	}
	admin := newClient()
	redisBackend := func(name string, pipelined bool) backend {
		return backend{
			name: name,
			open: func() Store {
				c := newClient()
				opt := RedisOptions{Timeout: 5 * time.Second}
				if pipelined {
					p := lua.NewPipeliner(c, lua.PipelineOptions{})
					t.Cleanup(func() { _ = p.Close() })
					opt.Pipeline = p
				}
				s := NewRedisStore(c, opt)
				if err := s.Load(context.Background()); err != nil {
					t.Fatalf("Load: %v", err)
				}
				return s
			},
			advance: time.Sleep,
			held: func(key string) bool {
				n, err := admin.Exists(context.Background(), key).Result()
				if err != nil {
					t.Fatalf("EXISTS %s: %v", key, err)
				}
				return n == 1
			},
			ttl: func(key string) time.Duration {
				d, err := admin.PTTL(context.Background(), key).Result()
				if err != nil {
					t.Fatalf("PTTL %s: %v", key, err)
				}
				return d
			},
		}
	}
	return []backend{
		{
			name:    "local",
			exact:   true,
			open:    func() Store { return local },
			advance: clock.Advance,
			held: func(key string) bool {
				local.mu.Lock()
				defer local.mu.Unlock()
				_, ok := local.buckets[key]
				return ok
			},
		},
		redisBackend("redis", false),
		redisBackend("redis-pipelined", true),
	}
}

// eachBackend runs f once per store, each on fresh keys.
func eachBackend(t *testing.T, f func(t *testing.T, b backend, key func(scope, name string) string)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			key := func(scope, name string) string { return lua.Key("test", scope, t.Name()+"/"+name) }
			f(t, b, key)
		})
	}
}

func admit(t *testing.T, s Store, member string, buckets ...Bucket) Decision {
	t.Helper()
	d, err := s.Admit(context.Background(), member, buckets)
	if err != nil {
		t.Fatalf("Admit(%q): %v", member, err)
	}
	return d
}

// Test 1: limit 10 — 10 admitted, the 11th refused; admitted again once the
// oldest has left the window.
func TestWindowEdge(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		const window = 300 * time.Millisecond
		// On Redis's clock the eleven calls must all fall within the
		// window of the first: a stall of the test or of Redis over their
		// 20 round trips could take 300 ms, and then call-0 had left the
		// window and the 11th was admitted. Such a round (the store's own
		// times show it) is played again on a fresh key; one within the
		// window must pass every check.
		var (
			bk       Bucket
			first, d Decision
		)
		for round := 0; ; round++ {
			if round == 3 {
				t.Fatal("three rounds in which the eleven calls took longer than the window on Redis's clock")
			}
			bk = Bucket{Key: key("peer", fmt.Sprintf("p%d", round)), Limit: 10, Window: window}
			first = admit(t, s, "call-0", bk)
			stalled := func(d Decision) bool { return !b.exact && d.At.Sub(first.At) >= window }
			again := false
			for i := 1; i < 10 && !again; i++ {
				b.advance(time.Millisecond)
				d = admit(t, s, fmt.Sprintf("call-%d", i), bk)
				if again = stalled(d); !again && (!d.Admit || d.Counts[0] != i+1) {
					t.Fatalf("call %d: got admit %v count %v, want admitted with count %d", i, d.Admit, d.Counts, i+1)
				}
			}
			if !again {
				d = admit(t, s, "call-10", bk)
				again = stalled(d)
			}
			if !again {
				break
			}
			t.Logf("round %d: the calls took %v of Redis's clock, beyond the %v window: again", round, d.At.Sub(first.At), window)
		}
		if d.Admit || d.Refused != 0 || d.Counts[0] != 10 {
			t.Fatalf("11th call: got %+v, want refused by bucket 0 with count 10", d)
		}
		wantRetry := first.At.Add(window).Sub(d.At)
		if d.RetryAfter != wantRetry {
			t.Fatalf("RetryAfter = %v, want oldest + window - now = %v", d.RetryAfter, wantRetry)
		}

		if b.exact {
			b.advance(d.RetryAfter - time.Nanosecond)
			if d := admit(t, s, "call-11", bk); d.Admit || d.RetryAfter != time.Nanosecond {
				t.Fatalf("1ns before the edge: got %+v, want refused with RetryAfter 1ns", d)
			}
			b.advance(time.Nanosecond)
			if d := admit(t, s, "call-12", bk); !d.Admit || d.Counts[0] != 10 {
				t.Fatalf("at the edge: got %+v, want admitted with count 10", d)
			}
			return
		}
		// Real clock: every decision must agree with Redis's own times.
		b.advance(d.RetryAfter - 20*time.Millisecond)
		edge := first.At.Add(window)
		for i := 0; ; i++ {
			if i > 200 {
				t.Fatal("never admitted again after the edge")
			}
			d := admit(t, s, fmt.Sprintf("retry-%d", i), bk)
			if d.Admit != !d.At.Before(edge) {
				t.Fatalf("at edge%+v: admit %v, want %v", d.At.Sub(edge), d.Admit, !d.At.Before(edge))
			}
			if d.Admit {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
}

// Test 3: peer limit 10, customer limit 5, 10 calls → exactly 5 admitted,
// and refused calls are counted nowhere.
func TestMultiBucketAtomic(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		peer := Bucket{Key: key("peer", "p"), Limit: 10, Window: time.Second}
		cust := Bucket{Key: key("customer", "c"), Limit: 5, Window: time.Second}
		admitted := 0
		for i := range 10 {
			d := admit(t, s, fmt.Sprintf("call-%d", i), peer, cust)
			if d.Admit {
				admitted++
			} else if d.Refused != 1 || d.RetryAfter <= 0 {
				t.Fatalf("call %d: got refused by %d retry %v, want bucket 1 with retry > 0", i, d.Refused, d.RetryAfter)
			}
		}
		if admitted != 5 {
			t.Fatalf("got %d admitted, want 5", admitted)
		}
		counts, err := s.Counts(context.Background(), []Bucket{peer, cust})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(counts, []int{5, 5}) {
			t.Fatalf("Counts = %v, want [5 5]", counts)
		}
	})
}

// Test 4a: the same member twice is counted once and reported admitted.
func TestDuplicateMember(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		peer := Bucket{Key: key("peer", "p"), Limit: 2, Window: time.Second}
		cust := Bucket{Key: key("customer", "c"), Limit: 2, Window: time.Second}
		if d := admit(t, s, "call-a", peer, cust); !d.Admit || d.Duplicate {
			t.Fatalf("first: got %+v, want admitted, not duplicate", d)
		}
		d := admit(t, s, "call-a", peer, cust)
		if !d.Admit || !d.Duplicate || !slices.Equal(d.Counts, []int{1, 1}) {
			t.Fatalf("retransmission: got %+v, want admitted duplicate with counts [1 1]", d)
		}
		if d := admit(t, s, "call-b", peer, cust); !d.Admit || !slices.Equal(d.Counts, []int{2, 2}) {
			t.Fatalf("second call: got %+v, want admitted with counts [2 2]", d)
		}
		// A retransmission of an admitted call is still admitted when full.
		if d := admit(t, s, "call-a", peer, cust); !d.Admit || !d.Duplicate {
			t.Fatalf("retransmission when full: got %+v, want admitted duplicate", d)
		}
		if d := admit(t, s, "call-c", peer, cust); d.Admit {
			t.Fatalf("third call: got %+v, want refused", d)
		}
	})
}

// Test 4b: many calls at the same instant are all counted (members are
// unique, equal scores never collapse). Exact on the frozen local clock; on
// Redis a pipeline makes many calls share a microsecond.
func TestSameInstant(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		bk := Bucket{Key: key("peer", "p"), Limit: 300, Window: time.Second}
		const n = 300
		if rs, ok := s.(*RedisStore); ok {
			// Redis TIME cannot be frozen: seed half the calls with one
			// identical score (a call of this very microsecond), then admit
			// the rest through a pipeline, where neighbours may share a
			// microsecond too.
			ctx := context.Background()
			tm, err := rs.run.Client().Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			seed := make([]redis.Z, n/2)
			for i := range seed {
				seed[i] = redis.Z{Score: float64(tm.UnixMicro()), Member: fmt.Sprintf("seed%d", i)}
			}
			if err := rs.run.Client().ZAdd(ctx, bk.Key, seed...).Err(); err != nil {
				t.Fatal(err)
			}
			pipe := rs.run.Client().Pipeline()
			cmds := make([]*redis.Cmd, n-n/2)
			for i := range cmds {
				cmds[i] = pipe.EvalSha(ctx, lua.SHA(lua.ScriptAdmit), []string{bk.Key}, fmt.Sprintf("m%d", i), bk.Limit, lua.Micros(bk.Window), 0, lua.OverRefuse)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			seen := map[int64]int{}
			for i, c := range cmds {
				r, err := lua.DecodeAdmit(c.Val(), 1)
				if err != nil || !r.Admitted || r.Counts[0] != int64(n/2+i+1) {
					t.Fatalf("call %d: got %+v %v, want admitted with count %d", i, r, err, n/2+i+1)
				}
				seen[r.NowUS]++
			}
			t.Logf("%d seeded at one microsecond; %d pipelined calls in %d distinct microseconds", n/2, len(cmds), len(seen))
		} else {
			for i := range n {
				if d := admit(t, s, fmt.Sprintf("m%d", i), bk); !d.Admit || d.Counts[0] != i+1 {
					t.Fatalf("call %d: got %+v, want admitted with count %d", i, d, i+1)
				}
			}
		}
		counts, err := s.Counts(context.Background(), []Bucket{bk})
		if err != nil {
			t.Fatal(err)
		}
		if counts[0] != n {
			t.Fatalf("Counts = %d, want %d", counts[0], n)
		}
		// Full now: the next call is refused, all equal-time entries counted.
		if d := admit(t, s, "one-more", bk); d.Admit || d.Counts[0] != n {
			t.Fatalf("call %d: got %+v, want refused with count %d", n+1, d, n)
		}
	})
}

// Test 5: every key has a TTL and an idle bucket disappears.
func TestIdleBucketDisappears(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		const window = 100 * time.Millisecond
		peer := Bucket{Key: key("peer", "p"), Limit: 5, Window: window}
		cust := Bucket{Key: key("customer", "c"), Limit: 5, Window: window}
		admit(t, s, "call-a", peer, cust)
		for _, k := range []string{peer.Key, cust.Key} {
			if !b.held(k) {
				t.Fatalf("%s not held after admission", k)
			}
			if b.ttl != nil {
				if ttl := b.ttl(k); ttl <= window || ttl > window+time.Second {
					t.Fatalf("TTL of %s = %v, want in (%v, %v]", k, ttl, window, window+time.Second)
				}
			}
		}
		if b.exact {
			b.advance(window + time.Second - time.Nanosecond)
			if l := s.(*LocalStore); l.Len() != 2 {
				t.Fatalf("Len before idle time = %d, want 2", l.Len())
			}
			b.advance(time.Nanosecond)
			if l := s.(*LocalStore); l.Len() != 0 {
				t.Fatalf("Len after idle time = %d, want 0", l.Len())
			}
		} else {
			b.advance(window + time.Second + 150*time.Millisecond)
		}
		for _, k := range []string{peer.Key, cust.Key} {
			if b.held(k) {
				t.Fatalf("%s still held after window + 1 s idle", k)
			}
		}
	})
}

// Test 2: two nodes × 16 goroutines on one bucket of limit 100 for 3 s: no
// rolling second holds more than 100 admissions (checked on the store's own
// times) and at least 97 % of 100 × elapsed is admitted.
func TestConcurrentNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s load test")
	}
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			if b.exact {
				// The rolling window is checked on real time: run the local
				// store on the real clock (one node; both "nodes" share it).
				local := NewLocalStore(nil)
				b.open = func() Store { return local }
			}
			const limit, goroutines, run = 100, 16, 3 * time.Second
			bk := Bucket{Key: lua.Key("test", "peer", t.Name()), Limit: limit, Window: time.Second}
			type result struct {
				admitted []time.Time
				min, max time.Time
				err      error
			}
			results := make(chan result, 2*goroutines)
			stop := time.Now().Add(run)
			var wg sync.WaitGroup
			for node := range 2 {
				s := b.open()
				for g := range goroutines {
					wg.Go(func() {
						var r result
						for i := 0; time.Now().Before(stop) && i < 50_000_000; i++ {
							d, err := s.Admit(context.Background(), fmt.Sprintf("n%d-g%d-%d", node, g, i), []Bucket{bk})
							if err != nil {
								r.err = err
								break
							}
							if r.min.IsZero() || d.At.Before(r.min) {
								r.min = d.At
							}
							if d.At.After(r.max) {
								r.max = d.At
							}
							if d.Admit {
								r.admitted = append(r.admitted, d.At)
							}
						}
						results <- r
					})
				}
			}
			wg.Wait()
			close(results)
			var all []time.Time
			var first, last time.Time
			for r := range results {
				if r.err != nil {
					t.Fatalf("Admit: %v", r.err)
				}
				all = append(all, r.admitted...)
				if first.IsZero() || r.min.Before(first) {
					first = r.min
				}
				if r.max.After(last) {
					last = r.max
				}
			}
			slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
			for i := limit; i < len(all); i++ {
				if gap := all[i].Sub(all[i-limit]); gap < time.Second {
					t.Fatalf("admissions %d and %d are %v apart: %d calls within one rolling second, limit %d",
						i-limit, i, gap, limit+1, limit)
				}
			}
			elapsed := last.Sub(first)
			want := 0.97 * limit * elapsed.Seconds()
			t.Logf("%d admitted in %v (store time), want >= %.0f", len(all), elapsed, want)
			if float64(len(all)) < want {
				t.Fatalf("got %d admitted in %v, want >= %.0f (97 %% of the limit)", len(all), elapsed, want)
			}
		})
	}
}

func TestEmptyAndInvalid(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		if d, err := s.Admit(context.Background(), "m", nil); err != nil || !d.Admit || d.Refused != -1 {
			t.Fatalf("no buckets: got %+v, %v; want admitted", d, err)
		}
		if _, err := s.Admit(context.Background(), "m", []Bucket{{Key: key("peer", "p"), Limit: 1}}); err == nil {
			t.Fatal("zero window: got no error")
		}
		// Limit 0 refuses everything, with the window as retry-after.
		bk := Bucket{Key: key("peer", "zero"), Limit: 0, Window: time.Second}
		if d := admit(t, s, "m", bk); d.Admit || d.Refused != 0 || d.RetryAfter != time.Second {
			t.Fatalf("limit 0: got %+v, want refused with RetryAfter 1s", d)
		}
	})
}
