package lua

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

func newPipeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 16})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// admitAll runs n concurrent admit.lua calls, member i into buckets[i%len],
// and returns the replies and errors in call order.
func admitAll(ctx context.Context, s redis.Scripter, n int, bucket func(i int) AdmitBucket) ([]AdmitReply, []error) {
	replies, errs := make([]AdmitReply, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i], errs[i] = Admit(ctx, s, fmt.Sprintf("m%d", i), []AdmitBucket{bucket(i)})
		}()
	}
	close(start)
	wg.Wait()
	return replies, errs
}

// 256 concurrent callers into one limit-100 bucket: exactly 100 admitted,
// as without the pipeliner.
func TestPipelinerConcurrentAdmit(t *testing.T) {
	srv := redistest.Start(t)
	c := newPipeClient(t, srv.Addr())
	for _, flushers := range []int{1, 2, 4} {
		t.Run(fmt.Sprint("flushers=", flushers), func(t *testing.T) {
			p := NewPipeliner(c, PipelineOptions{Flushers: flushers, MaxBatch: 16})
			defer p.Close()
			ctx := context.Background()
			if err := Load(ctx, c); err != nil {
				t.Fatal(err)
			}
			b := AdmitBucket{Key: Key("pipetest", "peer", t.Name()), Limit: 100, WindowUS: 60_000_000}
			replies, errs := admitAll(ctx, p, 256, func(int) AdmitBucket { return b })
			admitted := 0
			for i, r := range replies {
				if errs[i] != nil {
					t.Fatalf("call %d: %v", i, errs[i])
				}
				if r.Admitted {
					admitted++
				}
			}
			if admitted != 100 {
				t.Fatalf("admitted %d of 256, want 100", admitted)
			}
			if n := c.ZCard(ctx, b.Key).Val(); n != 100 {
				t.Fatalf("bucket holds %d, want 100", n)
			}
		})
	}
}

// After SCRIPT FLUSH every EVALSHA of a batch gets NOSCRIPT and
// redis.Script.Run falls back to EVAL through the pipeliner.
func TestPipelinerNoScript(t *testing.T) {
	srv := redistest.Start(t)
	c := newPipeClient(t, srv.Addr())
	p := NewPipeliner(c, PipelineOptions{})
	defer p.Close()
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	b := AdmitBucket{Key: Key("pipetest", "peer", "noscript"), Limit: 10, WindowUS: 60_000_000}
	replies, errs := admitAll(ctx, p, 64, func(int) AdmitBucket { return b })
	admitted := 0
	for i := range replies {
		if errs[i] != nil {
			t.Fatalf("call %d after SCRIPT FLUSH: %v", i, errs[i])
		}
		if replies[i].Admitted {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d, want 10", admitted)
	}
}

// A paused Redis fails every caller with its own context's error, and the
// flushers come back once Redis does.
func TestPipelinerPausedRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := newPipeClient(t, srv.Addr())
	p := NewPipeliner(c, PipelineOptions{Flushers: 2})
	defer p.Close()
	bg := context.Background()
	if err := Load(bg, c); err != nil {
		t.Fatal(err)
	}
	b := AdmitBucket{Key: Key("pipetest", "peer", "paused"), Limit: 1000, WindowUS: 60_000_000}
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	// Deadlines: every caller fails, none hangs.
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	_, errs := admitAll(ctx, p, 32, func(int) AdmitBucket { return b })
	cancel()
	for i, err := range errs {
		if err == nil {
			t.Fatalf("call %d on a paused Redis succeeded", i)
		}
	}
	// Cancellation: a queued caller (another call is under way, so it does
	// not go alone) whose context is cancelled returns with
	// context.Canceled, though nothing answers.
	blockCtx, blockCancel := context.WithTimeout(bg, time.Second)
	defer blockCancel()
	blocked := make(chan error, 1)
	go func() {
		_, err := Admit(blockCtx, p, "blocker", []AdmitBucket{b})
		blocked <- err
	}()
	for p.active.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cctx, ccancel := context.WithCancel(bg)
	errc := make(chan error, 1)
	go func() {
		_, err := Admit(cctx, p, "cancelled", []AdmitBucket{b})
		errc <- err
	}()
	for p.active.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	ccancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: got %v, want context.Canceled", err)
	}
	if err := <-blocked; err == nil {
		t.Fatal("blocker on a paused Redis succeeded")
	}
	srv.Resume()
	resumed = true
	// The flushers free themselves (pipeline deadline) and serve again.
	ctx, cancel = context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	replies, errs := admitAll(ctx, p, 32, func(int) AdmitBucket { return b })
	for i, err := range errs {
		if err != nil || !replies[i].Admitted {
			t.Fatalf("call %d after resume: %+v, %v", i, replies[i], err)
		}
	}
}

// Close fails later calls with ErrClosed, is idempotent, and leaves no
// goroutine behind.
func TestPipelinerClose(t *testing.T) {
	srv := redistest.Start(t)
	c := newPipeClient(t, srv.Addr())
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	p := NewPipeliner(c, PipelineOptions{Flushers: 4})
	b := AdmitBucket{Key: Key("pipetest", "peer", "close"), Limit: 10, WindowUS: 60_000_000}
	if _, err := Admit(ctx, p, "a", []AdmitBucket{b}); err != nil {
		t.Fatal(err)
	}
	// Close while calls are in flight: each gets a reply or ErrClosed.
	var wg sync.WaitGroup
	var ok, closed atomic.Int64
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := Admit(ctx, p, fmt.Sprint("c", i), []AdmitBucket{b})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrClosed):
				closed.Add(1)
			default:
				t.Errorf("call %d during Close: %v", i, err)
			}
		}()
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, err := Admit(ctx, p, "late", []AdmitBucket{b}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: got %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	t.Logf("during Close: %d served, %d ErrClosed", ok.Load(), closed.Load())
	// The flushers are gone (Close waited for them); give the runtime a
	// moment to retire the test's own goroutines.
	for i := 0; ; i++ {
		n := runtime.NumGoroutine()
		if n <= before {
			break
		}
		if i > 200 {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// On a 3-master cluster one batch spans slots and nodes: go-redis splits the
// pipeline by node, and every bucket admits exactly its limit.
func TestPipelinerCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	p := NewPipeliner(c, PipelineOptions{Flushers: 1})
	defer p.Close()
	ctx := context.Background()
	if err := Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	const keys, limit, per = 24, 3, 10
	buckets := make([]AdmitBucket, keys)
	slots := map[int]bool{}
	for k := range buckets {
		buckets[k] = AdmitBucket{Key: Key("pipetest", "peer", fmt.Sprint("k", k)), Limit: limit, WindowUS: 60_000_000}
		slots[HashSlot(buckets[k].Key)] = true
	}
	if len(slots) < 2 {
		t.Fatal("test keys share one slot")
	}
	replies, errs := admitAll(ctx, p, keys*per, func(i int) AdmitBucket { return buckets[i%keys] })
	admitted := make([]int, keys)
	for i, r := range replies {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if r.Admitted {
			admitted[i%keys]++
		}
	}
	for k, n := range admitted {
		if n != limit {
			t.Fatalf("bucket %d admitted %d, want %d", k, n, limit)
		}
	}
	// Pace through the pipeliner on the cluster too.
	if r, err := Pace(ctx, p, Key("pipetest", "carrier", "x"), "m", 1000, 1_000_000, 1_000_000, PaceShare{}); err != nil || !r.OK {
		t.Fatalf("Pace: %+v, %v", r, err)
	}
	// A fair share's keys (FairKeys) share the slot set's hash slot.
	fair := PaceShare{Name: "customer:a", Weight: 1, LeadUS: 2000, KeepUS: 10_000_000, SumCap: 1_000_000}
	if r, err := Pace(ctx, p, Key("pipetest", "carrier", "x"), "f", 1000, 1_000_000, 1_000_000, fair); err != nil || !r.OK {
		t.Fatalf("Pace with a share: %+v, %v", r, err)
	}
	if _, err := Release(ctx, p, Key("pipetest", "carrier", "x"), "f"); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// busySrc keeps Redis busy for ARGV[1] µs (a script blocks the server).
const busySrc = `local t = redis.call('TIME')
repeat local n = redis.call('TIME') until (n[1]-t[1])*1000000 + (n[2]-t[2]) >= tonumber(ARGV[1])
return 1`

// TestPipelinerImpatientCallerFailsOnlyItself: in one batch behind a slow
// script, a caller with a short deadline fails by it, and the others, whose
// deadlines are far, still get their replies (the batch is bounded by the
// latest deadline, not the earliest).
func TestPipelinerImpatientCallerFailsOnlyItself(t *testing.T) {
	srv := redistest.Start(t)
	c := newPipeClient(t, srv.Addr())
	p := NewPipeliner(c, PipelineOptions{Flushers: 1})
	t.Cleanup(func() { _ = p.Close() })
	busy := func(us int, d time.Duration) chan error {
		ch := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			ch <- p.Eval(ctx, busySrc, nil, us).Err()
		}()
		return ch
	}
	// A runs on its own (lone caller); B occupies the one flusher behind
	// it; S, E and L then queue and leave together as one batch: S keeps
	// Redis busy past E's deadline, long before L's.
	a := busy(200000, 5*time.Second)
	time.Sleep(50 * time.Millisecond)
	b := busy(200000, 5*time.Second)
	time.Sleep(50 * time.Millisecond)
	s := busy(400000, 5*time.Second)
	time.Sleep(40 * time.Millisecond)
	e := busy(1, 480*time.Millisecond)
	l := busy(1, 5*time.Second)
	for name, ch := range map[string]chan error{"A": a, "B": b, "S": s, "L": l} {
		if err := <-ch; err != nil {
			t.Errorf("%s (5 s deadline): %v", name, err)
		}
	}
	// E queued behind S, whose script alone runs 400 ms once sent (after
	// B, which holds the one flusher until at least 200 ms after A): E's
	// 480 ms cannot cover that on any machine, fast or slow, so it must
	// fail — alone, with its own deadline, while L beside it in the batch
	// succeeded above.
	if err := <-e; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("E (480 ms deadline, queued behind a 400 ms script): got %v, want its own context.DeadlineExceeded", err)
	}
}

// TestWithTimeoutBoundsRoundTripAndWholeCall: WithTimeout hands the round
// trip bound to the sender and bounds the whole call by twice it; a
// caller's sooner deadline is kept.
func TestWithTimeoutBoundsRoundTripAndWholeCall(t *testing.T) {
	ctx, cancel := WithTimeout(context.Background(), time.Second)
	defer cancel()
	if d, ok := roundTrip(ctx); !ok || d != time.Second {
		t.Errorf("round trip bound: got %v %v, want 1s", d, ok)
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) <= time.Second || time.Until(dl) > 2*time.Second {
		t.Errorf("whole call deadline in %v, want within (1s, 2s]", time.Until(dl))
	}
	soon, cancelSoon := context.WithTimeout(context.Background(), time.Millisecond*500)
	defer cancelSoon()
	ctx2, cancel2 := WithTimeout(soon, time.Second)
	defer cancel2()
	if a, _ := ctx2.Deadline(); func() bool { b, _ := soon.Deadline(); return !a.Equal(b) }() {
		t.Errorf("a caller's sooner deadline was not kept")
	}
	if _, ok := roundTrip(context.Background()); ok {
		t.Errorf("round trip bound without WithTimeout")
	}
}

// The round trip bound is the socket's: a lone caller on a paused Redis
// fails when its round trip bound from the send has passed, with the
// socket's timeout, not at the whole call's bound (twice it) with its
// context's error.
func TestRoundTripBoundIsTheSockets(t *testing.T) {
	srv := redistest.Start(t)
	c := newPipeClient(t, srv.Addr())
	p := NewPipeliner(c, PipelineOptions{})
	defer p.Close()
	bg := context.Background()
	if err := Load(bg, c); err != nil {
		t.Fatal(err)
	}
	// A second of round trip, two of whole call: the check after the
	// failure has a second to spare.
	ctx, cancel := WithTimeout(bg, time.Second)
	defer cancel()
	sctx, scancel := sendCtx(ctx)
	defer scancel()
	dl, ok := sctx.Deadline()
	whole, _ := ctx.Deadline()
	if !ok || !dl.Before(whole) {
		t.Fatalf("send deadline %v (%v), want one before the whole call's %v", dl, ok, whole)
	}

	b := AdmitBucket{Key: Key("pipetest", "peer", "rt"), Limit: 1000, WindowUS: 60_000_000}
	srv.Pause()
	defer srv.Resume()
	_, err := Admit(ctx, p, "lone", []AdmitBucket{b})
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("lone call on a paused Redis: %v, want the socket's timeout", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the whole call's bound had passed when the call failed (%v): the round trip was not bounded", ctx.Err())
	}
}
