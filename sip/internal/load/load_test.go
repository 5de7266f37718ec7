package load

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The count of new calls being decided never goes over the bound, not even
// for an instant: a worker holding an INVITE back reads it (the sip package's holdInvite), and
// a take that failed after overshooting, then gave its unit back without a
// wake, could leave that worker holding until inflight_wait (h30).
func TestInflightTakeNeverOvershoots(t *testing.T) {
	var c Inflight
	const limit = 4
	var over atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c.Load() > limit {
				over.Add(1)
			}
		}
	}()
	// Half the time the bound is full (every take must fail), half the
	// time units come and go.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50000 {
				if c.TryTake(limit) {
					c.Release()
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			var held int
			for c.TryTake(limit) {
				held++
			}
			for range 1000 {
				runtime.Gosched()
			}
			for range held {
				c.Release()
			}
		}
	})
	wg.Wait()
	close(stop)
	<-watched
	if n := over.Load(); n > 0 {
		t.Fatalf("the count was seen over the bound of %d %d times", limit, n)
	}
	if n := c.Load(); n != 0 {
		t.Fatalf("count after every unit came back = %d, want 0", n)
	}
}

// TestInflightTakeReleaseWake: Take goes beyond the bound, TryTake does
// not; every Release calls the hook, once.
func TestInflightTakeReleaseWake(t *testing.T) {
	var c Inflight
	c.Take()
	var woken int
	c.OnRelease(func() { woken++ })
	if !c.TryTake(2) || c.TryTake(2) {
		t.Fatalf("TryTake(2) with %d taken: want one more and no second", c.Load())
	}
	c.Take()
	if n := c.Load(); n != 3 {
		t.Fatalf("count %d after Take beyond the bound, want 3", n)
	}
	for range 3 {
		c.Release()
	}
	if woken != 3 || c.Load() != 0 {
		t.Fatalf("woken %d times, count %d; want 3 and 0", woken, c.Load())
	}
}

// TestBehind: a zero Behind was never behind; a Note counts for Memory.
func TestBehind(t *testing.T) {
	var b Behind
	if b.Recent() {
		t.Fatal("a zero Behind is behind")
	}
	b.Note(time.Now())
	if !b.Recent() {
		t.Fatal("not behind right after a Note")
	}
	b.Note(time.Now().Add(-Memory - time.Second))
	if b.Recent() {
		t.Fatal("behind after Memory has passed")
	}
}
