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
			return c.EvalSha(ctx, sha, keys, m, bk.Limit, windowUS, 0).Err()
		})
	})
	b.Run("redis/raw-evalsha-timeout", func(b *testing.B) {
		bk := benchBucket("raw-timeout")
		sha, keys, windowUS := lua.SHA(lua.ScriptAdmit), []string{bk.Key}, lua.Micros(bk.Window)
		b.SetParallelism(benchParallelism)
		runAdmit(b, func(m string) error {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return c.EvalSha(cctx, sha, keys, m, bk.Limit, windowUS, 0).Err()
		})
	})
}
