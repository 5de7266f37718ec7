package calls

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// benchParallelism × GOMAXPROCS goroutines issue calls: Redis round trips
// are latency bound.
const benchParallelism = 8

var benchSeq atomic.Int64

// runDecisions runs decide in parallel with a unique member per call and
// reports decisions per second.
func runDecisions(b *testing.B, decide func(member string) error) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := strconv.FormatInt(benchSeq.Add(1), 10)
		for i := 0; pb.Next(); i++ {
			if err := decide(g + "-" + strconv.Itoa(i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkOccupy measures max_calls decisions per second on one place of
// 100 calls, full (every call refused after the first 100: the path an
// overloaded peer takes), and a call that takes a place and frees it.
//
//	local/full:          LocalStore.Occupy on a full place.
//	redis/full:          RedisStore.Occupy, one calls_occupy.lua per call.
//	redis/raw-evalsha:   the same script and arguments through go-redis
//	                     EvalSha, no wrapper: the ceiling for redis/full.
//	redis/occupy+free:   Occupy then Free of the same call (two scripts).
func BenchmarkOccupy(b *testing.B) {
	ctx := context.Background()
	full := func(b *testing.B, s Store, key string) []Place {
		ps := []Place{{Key: key, Limit: 100}}
		for i := 0; i < 100; i++ {
			if _, err := s.Occupy(ctx, fmt.Sprint("fill-", i), time.Hour, ps); err != nil {
				b.Fatal(err)
			}
		}
		return ps
	}
	b.Run("local/full", func(b *testing.B) {
		s := NewLocalStore(nil)
		ps := full(b, s, "local")
		runDecisions(b, func(m string) error { _, err := s.Occupy(ctx, m, time.Hour, ps); return err })
	})

	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	if err := lua.Load(ctx, c); err != nil {
		b.Fatal(err)
	}
	s := NewRedisStore(c, RedisOptions{})
	b.Run("redis/full", func(b *testing.B) {
		ps := full(b, s, lua.Key("bench", "calls:peer", "full"))
		b.SetParallelism(benchParallelism)
		runDecisions(b, func(m string) error { _, err := s.Occupy(ctx, m, time.Hour, ps); return err })
	})
	b.Run("redis/raw-evalsha", func(b *testing.B) {
		ps := full(b, s, lua.Key("bench", "calls:peer", "raw"))
		sha := lua.SHA(lua.ScriptCallsOccupy)
		keys := []string{ps[0].Key}
		ttl := lua.Micros(time.Hour)
		b.SetParallelism(benchParallelism)
		runDecisions(b, func(m string) error { return c.EvalSha(ctx, sha, keys, m, ttl, 100).Err() })
	})
	b.Run("redis/occupy+free", func(b *testing.B) {
		ps := []Place{{Key: lua.Key("bench", "calls:peer", "cycle"), Limit: 1 << 30}}
		keys := []string{ps[0].Key}
		b.SetParallelism(benchParallelism)
		runDecisions(b, func(m string) error {
			if _, err := s.Occupy(ctx, m, time.Hour, ps); err != nil {
				return err
			}
			_, err := s.Free(ctx, m, keys)
			return err
		})
	})
}

// BenchmarkCallBytes reports the Redis memory of one live call in a place:
// MEMORY USAGE of a place holding 1,000 calls with ids of ~75 bytes (a
// Call-ID, a Via branch, a source and a transport, like the proxy's).
func BenchmarkCallBytes(b *testing.B) {
	ctx := context.Background()
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	s := NewRedisStore(c, RedisOptions{})
	for _, n := range []int{100, 1000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			key := lua.Key("bench", "calls:peer", "bytes"+strconv.Itoa(n))
			ps := []Place{{Key: key, Limit: n}}
			for i := 0; i < n; i++ {
				m := fmt.Sprintf("%s@192.0.2.10/z9hG4bK-%016d/192.0.2.10:5060/UDP", strings.Repeat("a", 24), i)
				if d, err := s.Occupy(ctx, m, time.Hour, ps); err != nil || !d.Admit {
					b.Fatalf("occupy %d: %+v %v", i, d, err)
				}
			}
			bytes, err := c.MemoryUsage(ctx, key, 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(bytes), "bytes")
			b.ReportMetric(float64(bytes)/float64(n), "bytes/call")
		})
	}
}
