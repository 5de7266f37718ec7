package admission

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// benchParallelism × GOMAXPROCS goroutines issue calls: Redis round trips
// are latency bound, so the Redis benchmarks need more callers than cores.
const benchParallelism = 8

var benchSeq atomic.Int64

// member returns a unique member per call: real calls carry their own ids.
func member(buf []byte, g int64, i int) ([]byte, string) {
	buf = strconv.AppendInt(buf[:0], g, 10)
	buf = append(buf, '-')
	buf = strconv.AppendInt(buf, int64(i), 10)
	return buf, string(buf)
}

// benchBucket is the admission of a 100 CPS peer (LimitFor(100)).
func benchBucket(name string) Bucket {
	limit, window := LimitFor(100)
	return Bucket{Key: lua.Key("bench", "peer", name), Limit: limit, Window: window}
}

func runAdmit(b *testing.B, admit func(member string) error) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := benchSeq.Add(1)
		var buf []byte
		var m string
		for i := 0; pb.Next(); i++ {
			buf, m = member(buf, g, i)
			if err := admit(m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkAdmit measures decisions per second on one bucket.
//
//	local/limit100:   LocalStore, a 100 CPS bucket (nearly every call refused).
//	local/admitall:   LocalStore, a bucket large enough to admit every call
//	                  (ring insert + trim + member set on every call).
//	redis/store:      RedisStore.Admit, one bucket, one admit.lua per call.
//	redis/store-timeout-observe: the same with a per-call timeout and an
//	                  observer, as cmd/cpsguard runs it.
//	redis/raw-evalsha: the same script and arguments through go-redis EvalSha,
//	                  no wrapper: the ceiling for redis/store.
//	redis/raw-evalsha-timeout: the same with a per-call context timeout: the
//	                  ceiling for redis/store-timeout-observe.
func BenchmarkAdmit(b *testing.B) {
	ctx := context.Background()
	b.Run("local/limit100", func(b *testing.B) {
		s := NewLocalStore(nil)
		bk := []Bucket{benchBucket("local")}
		runAdmit(b, func(m string) error { _, err := s.Admit(ctx, m, bk); return err })
	})
	b.Run("local/admitall", func(b *testing.B) {
		s := NewLocalStore(nil)
		bk := []Bucket{{Key: "admitall", Limit: 1 << 22, Window: benchBucket("").Window}}
		runAdmit(b, func(m string) error { _, err := s.Admit(ctx, m, bk); return err })
	})

	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64, ContextTimeoutEnabled: true})
	defer c.Close()
	if err := lua.Load(ctx, c); err != nil {
		b.Fatal(err)
	}
	b.Run("redis/store", func(b *testing.B) {
		s := NewRedisStore(c, RedisOptions{Timeout: 0})
		bk := []Bucket{benchBucket("redis")}
		b.SetParallelism(benchParallelism)
		runAdmit(b, func(m string) error { _, err := s.Admit(ctx, m, bk); return err })
	})
	b.Run("redis/store-timeout-observe", func(b *testing.B) {
		var observed atomic.Int64
		s := NewRedisStore(c, RedisOptions{Timeout: time.Second, Observe: func(string, time.Duration, error) { observed.Add(1) }})
		bk := []Bucket{benchBucket("redis-opts")}
		b.SetParallelism(benchParallelism)
		runAdmit(b, func(m string) error { _, err := s.Admit(ctx, m, bk); return err })
	})
	b.Run("redis/raw-evalsha", func(b *testing.B) {
		bk := benchBucket("raw")
		sha, keys, windowUS := lua.SHA(lua.ScriptAdmit), []string{bk.Key}, lua.Micros(bk.Window)
		b.SetParallelism(benchParallelism)
		runAdmit(b, func(m string) error {
			return c.EvalSha(ctx, sha, keys, m, bk.Limit, windowUS, 0, lua.OverRefuse).Err()
		})
	})
	b.Run("redis/raw-evalsha-timeout", func(b *testing.B) {
		bk := benchBucket("raw-timeout")
		sha, keys, windowUS := lua.SHA(lua.ScriptAdmit), []string{bk.Key}, lua.Micros(bk.Window)
		b.SetParallelism(benchParallelism)
		runAdmit(b, func(m string) error {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return c.EvalSha(cctx, sha, keys, m, bk.Limit, windowUS, 0, lua.OverRefuse).Err()
		})
	})
}

// kindBuckets are the bucket kinds of issue 13, each for a 100 CPS scope:
//
//	window-1s:    LimitFor(100), the rolling 1 s window (the reference);
//	token-bucket: TokenBucket(100 cps, burst 100), replacing the 1 s window;
//	window-1m:    WindowBucket(6000 per minute) alone;
//	1s+1m:        the 1 s window and a 6000-per-minute window in one call,
//	              as a scope with `windows: [{calls: 6000, per: 1m}]` runs.
//
// As in BenchmarkAdmit, after the first calls of each period nearly every
// call is refused, so these measure the refusal path of each kind.
func kindBuckets(name string) map[string][]Bucket {
	k := lua.Key("bench", "peer", name)
	oneSec := benchBucket(name)
	return map[string][]Bucket{
		"window-1s":    {oneSec},
		"token-bucket": {TokenBucket(k, 100, 100)},
		"window-1m":    {WindowBucket(k, 6000, time.Minute)},
		"1s+1m":        {oneSec, WindowBucket(k, 6000, time.Minute)},
	}
}

var kinds = []string{"window-1s", "token-bucket", "window-1m", "1s+1m"}

// BenchmarkAdmitKinds measures decisions per second of each bucket kind
// (kindBuckets) on the LocalStore and on RedisStore (one admit.lua call per
// decision), and raw go-redis EVALSHA of the token bucket for the wrapper's
// cost.
func BenchmarkAdmitKinds(b *testing.B) {
	ctx := context.Background()
	for _, kind := range kinds {
		b.Run("local/"+kind, func(b *testing.B) {
			s := NewLocalStore(nil)
			bk := kindBuckets("local-" + kind)[kind]
			runAdmit(b, func(m string) error { _, err := s.Admit(ctx, m, bk); return err })
		})
	}
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64, ContextTimeoutEnabled: true})
	defer c.Close()
	if err := lua.Load(ctx, c); err != nil {
		b.Fatal(err)
	}
	for _, kind := range kinds {
		b.Run("redis/"+kind, func(b *testing.B) {
			s := NewRedisStore(c, RedisOptions{})
			bk := kindBuckets("redis-" + kind)[kind]
			b.SetParallelism(benchParallelism)
			runAdmit(b, func(m string) error { _, err := s.Admit(ctx, m, bk); return err })
		})
	}
	b.Run("redis/raw-evalsha-token-bucket", func(b *testing.B) {
		tb := kindBuckets("raw")["token-bucket"][0]
		sha, keys := lua.SHA(lua.ScriptAdmit), []string{tb.Key, lua.TokenKey(tb.Key)}
		b.SetParallelism(benchParallelism)
		runAdmit(b, func(m string) error {
			return c.EvalSha(ctx, sha, keys, m, tb.Limit, lua.Micros(tb.Window), tb.RateMicros, lua.OverRefuse).Err()
		})
	})
}

// BenchmarkBucketBytes reports the Redis memory of one bucket of each kind
// at its fullest for a 100 CPS scope (MEMORY USAGE of its keys, SAMPLES 0):
// a 1 s window holding 100 calls, a 1 min window holding 6,000, a day window
// holding 10,000, and a token bucket (burst 100) just after its burst (its
// hash, and the 100 calls it remembers for 1.01 s). The loop itself only
// re-reads the figure; the metric is what matters.
func BenchmarkBucketBytes(b *testing.B) {
	ctx := context.Background()
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	s := NewRedisStore(c, RedisOptions{})
	if err := s.Load(ctx); err != nil {
		b.Fatal(err)
	}
	k := func(name string) string { return lua.Key("cpsguard", "peer", name) }
	for _, tc := range []struct {
		name  string
		b     Bucket
		calls int
	}{
		{"window-1s-100", benchBucket("dialer-1s"), 100},
		{"window-1m-6000", WindowBucket(k("dialer-1m"), 6000, time.Minute), 6000},
		{"window-24h-10000", WindowBucket(k("dialer-24h"), 10000, 24*time.Hour), 10000},
		{"token-bucket-100", TokenBucket(k("dialer-tb"), 100, 100), 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var buf []byte
			var m string
			for i := range tc.calls {
				// Members shaped like real ones: Call-ID/branch, ~60 bytes.
				buf, m = member(buf[:0], 1_000_000_000_000, i)
				m = "a84b4c76e66710@pc33.atlanta.example.com/z9hG4bK776asdhds" + m
				if _, err := s.Admit(ctx, m, []Bucket{tc.b}); err != nil {
					b.Fatal(err)
				}
			}
			keys := []string{tc.b.Key}
			if tc.b.RateMicros > 0 {
				keys = append(keys, lua.TokenKey(tc.b.Key))
			}
			var bytes, last int64
			b.ResetTimer()
			for range b.N {
				bytes = 0
				for _, key := range keys {
					n, err := c.MemoryUsage(ctx, key, 0).Result()
					if err != nil {
						b.Fatal(err)
					}
					bytes, last = bytes+n, n
				}
			}
			b.ReportMetric(float64(bytes), "bytes/bucket")
			b.ReportMetric(float64(bytes)/float64(tc.calls), "bytes/call")
			if tc.b.RateMicros > 0 {
				b.ReportMetric(float64(last), "hash-bytes")
			}
		})
	}
}
