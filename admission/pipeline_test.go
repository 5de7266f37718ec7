package admission

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// concurrently runs n Admit calls at once and returns their decisions and
// errors in call order.
func concurrently(ctx context.Context, s Store, n int, buckets ...Bucket) ([]Decision, []error) {
	ds, errs := make([]Decision, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ds[i], errs[i] = s.Admit(ctx, fmt.Sprintf("call-%d", i), buckets)
		}()
	}
	close(start)
	wg.Wait()
	return ds, errs
}

// 256 callers at once through the pipeliner into a limit-100 bucket (and a
// second bucket of the same slot): exactly 100 admitted, as one call per
// connection would.
func TestPipelinedConcurrentAdmit(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	p := lua.NewPipeliner(c, lua.PipelineOptions{})
	defer p.Close()
	var observed atomic.Int64
	s := NewRedisStore(c, RedisOptions{Timeout: 5 * time.Second, Pipeline: p, Observe: func(string, time.Duration, error) { observed.Add(1) }})
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	peer := Bucket{Key: lua.Key("test", "peer", "pp"), Limit: 100, Window: time.Minute}
	peer2 := Bucket{Key: lua.Key("test", "peer", "pp") + ":b", Limit: 150, Window: time.Minute}
	ds, errs := concurrently(ctx, s, 256, peer, peer2)
	admitted := 0
	for i, d := range ds {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if d.Admit {
			admitted++
		} else if d.Refused != 0 {
			t.Fatalf("call %d refused by bucket %d, want 0", i, d.Refused)
		}
	}
	if admitted != 100 {
		t.Fatalf("admitted %d of 256, want 100", admitted)
	}
	if n := observed.Load(); n != 256 {
		t.Fatalf("observed %d script runs, want 256", n)
	}
	counts, err := s.Counts(ctx, []Bucket{peer, peer2})
	if err != nil || counts[0] != 100 || counts[1] != 100 {
		t.Fatalf("Counts = %v, %v; want [100 100]", counts, err)
	}
}

// A hung Redis fails every pipelined caller within the store's timeout, and
// the store serves again once Redis is back.
func TestPipelinedTimeout(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	p := lua.NewPipeliner(c, lua.PipelineOptions{})
	defer p.Close()
	var failed atomic.Int64
	s := NewRedisStore(c, RedisOptions{Timeout: 100 * time.Millisecond, Pipeline: p, Observe: func(_ string, _ time.Duration, err error) {
		if err != nil {
			failed.Add(1)
		}
	}})
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	bk := Bucket{Key: lua.Key("test", "peer", "hung"), Limit: 1000, Window: time.Minute}
	srv.Pause()
	_, errs := concurrently(ctx, s, 64, bk)
	srv.Resume()
	for i, err := range errs {
		if err == nil {
			t.Fatalf("call %d on a paused Redis succeeded", i)
		}
	}
	if n := failed.Load(); n != 64 {
		t.Fatalf("observed %d failed runs, want 64", n)
	}
	// The flushers' pipelines end by their deadline; then calls succeed.
	var err error
	for range 50 {
		if _, err = s.Admit(ctx, "after", []Bucket{bk}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after resume: %v", err)
	}
	ds, errs := concurrently(ctx, s, 64, bk)
	for i := range ds {
		if errs[i] != nil || !ds[i].Admit {
			t.Fatalf("call %d after resume: %+v, %v", i, ds[i], errs[i])
		}
	}
}

// Cross-slot decisions on a cluster through the pipeliner: concurrent
// callers never push a bucket past its limit, and refused calls' rollbacks
// leave both buckets holding exactly the admitted calls.
func TestPipelinedCrossSlot(t *testing.T) {
	c := startOneNodeCluster(t)
	p := lua.NewPipeliner(c, lua.PipelineOptions{})
	defer p.Close()
	ctx := context.Background()
	s := NewRedisStore(c, RedisOptions{Timeout: 5 * time.Second, Pipeline: p})
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	peer := Bucket{Key: lua.Key("test", "peer", "p1"), Limit: 10, Window: time.Minute}
	cust := Bucket{Key: lua.Key("test", "customer", "c1"), Limit: 5, Window: time.Minute}
	ds, errs := concurrently(ctx, s, 64, peer, cust)
	admitted := 0
	for i, d := range ds {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if d.Admit {
			admitted++
		}
	}
	if admitted < 1 || admitted > 5 {
		t.Fatalf("admitted %d, want 1..5 (never past the customer's limit)", admitted)
	}
	counts, err := s.Counts(ctx, []Bucket{peer, cust})
	if err != nil || counts[0] != admitted || counts[1] != admitted {
		t.Fatalf("Counts = %v, %v; want [%d %d]", counts, err, admitted, admitted)
	}
}
