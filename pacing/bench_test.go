package pacing

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

func runReserve(b *testing.B, reserve func(member string) error) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := benchSeq.Add(1)
		var buf []byte
		for i := 0; pb.Next(); i++ {
			buf = strconv.AppendInt(buf[:0], g, 10)
			buf = append(buf, '-')
			buf = strconv.AppendInt(buf, int64(i), 10)
			if err := reserve(string(buf)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reservations/s")
}

// BenchmarkReserve measures reservations per second on one carrier.
//
//	local/cps100:     LocalSlots, a 100 CPS carrier with max_wait 2 s (the
//	                  queue fills at once; nearly every call is refused).
//	local/fast:       LocalSlots, 1 µs interval and 1 s max_wait: most calls
//	                  take a slot (the set holds up to 2 s of slots).
//	local/fair:       local/fast with the calls spread over 8 shares of
//	                  one weight (pace.lua's fair path, in process).
//	redis/store:      RedisSlots.Reserve, 1 µs interval, 1 s max_wait.
//	redis/fair:       redis/store with the calls spread over 8 shares.
//	redis/raw-evalsha: the same script and arguments as redis/store
//	                  through go-redis EvalSha: the ceiling for redis/store.
func BenchmarkReserve(b *testing.B) {
	ctx := context.Background()
	b.Run("local/cps100", func(b *testing.B) {
		s := NewLocalSlots(nil)
		interval := Interval(100)
		runReserve(b, func(m string) error { _, err := s.Reserve(ctx, "c", m, Share{}, interval, 2*time.Second); return err })
	})
	b.Run("local/fast", func(b *testing.B) {
		s := NewLocalSlots(nil)
		runReserve(b, func(m string) error {
			_, err := s.Reserve(ctx, "c", m, Share{}, time.Microsecond, time.Second)
			return err
		})
	})
	b.Run("local/fair", func(b *testing.B) {
		s := NewLocalSlots(nil)
		runReserve(b, func(m string) error {
			_, err := s.Reserve(ctx, "c", m, benchShare(m), time.Microsecond, time.Second)
			return err
		})
	})

	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64, ContextTimeoutEnabled: true})
	defer c.Close()
	if err := lua.Load(ctx, c); err != nil {
		b.Fatal(err)
	}
	b.Run("redis/store", func(b *testing.B) {
		s := NewRedisSlots(c, RedisOptions{})
		key := lua.Key("bench", "carrier", "store")
		b.SetParallelism(benchParallelism)
		runReserve(b, func(m string) error {
			_, err := s.Reserve(ctx, key, m, Share{}, time.Microsecond, time.Second)
			return err
		})
	})
	b.Run("redis/fair", func(b *testing.B) {
		s := NewRedisSlots(c, RedisOptions{})
		key := lua.Key("bench", "carrier", "fair")
		b.SetParallelism(benchParallelism)
		runReserve(b, func(m string) error {
			_, err := s.Reserve(ctx, key, m, benchShare(m), time.Microsecond, time.Second)
			return err
		})
	})
	b.Run("redis/raw-evalsha", func(b *testing.B) {
		key := lua.Key("bench", "carrier", "raw")
		fair, exp := lua.FairKeys(key)
		sha, keys := lua.SHA(lua.ScriptPace), []string{key, lua.PauseKey(key), fair, exp}
		claim := lua.Micros(time.Second + ProbeClaim)
		b.SetParallelism(benchParallelism)
		runReserve(b, func(m string) error {
			return c.EvalSha(ctx, sha, keys, m, 1, 1_000_000, claim, "", 0, 0, 0, 0).Err()
		})
	})
}

// benchShare spreads benchmark calls over 8 shares by their member's last
// byte.
func benchShare(m string) Share {
	return Share{Name: "customer:" + string('a'+m[len(m)-1]%8), Weight: 1}
}
