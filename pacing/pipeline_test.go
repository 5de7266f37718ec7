package pacing

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

// 64 reservations at once through the pipeliner get 64 distinct slots,
// one interval apart, as one call per connection would.
func TestPipelinedConcurrentReserve(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	p := lua.NewPipeliner(c, lua.PipelineOptions{})
	defer p.Close()
	s := NewRedisSlots(c, RedisOptions{Timeout: 5 * time.Second, Pipeline: p})
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// Slots a second apart: however slow the machine, none comes due before
	// Queue looks (with 10 ms some did on a loaded box).
	const n, interval = 64, time.Second
	key := lua.Key("test", "carrier", "piped")
	slots, errs := make([]Slot, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots[i], errs[i] = s.Reserve(ctx, key, fmt.Sprint("call-", i), Share{}, interval, 2*time.Minute)
		}()
	}
	wg.Wait()
	var at []int64
	for i, sl := range slots {
		if errs[i] != nil || !sl.OK {
			t.Fatalf("call %d: %+v, %v", i, sl, errs[i])
		}
		at = append(at, sl.At.Add(sl.Wait).UnixMicro())
	}
	slices.Sort(at)
	for i := 1; i < n; i++ {
		if d := at[i] - at[i-1]; d < interval.Microseconds() {
			t.Fatalf("slots %d and %d are %dµs apart, want >= %v", i-1, i, d, interval)
		}
	}
	if q, err := s.Queue(ctx, key, interval); err != nil || q.Queued < n-1 {
		t.Fatalf("Queue = %+v, %v; want >= %d queued", q, err, n-1)
	}
}
