package calls

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkRefreshRound prices one refresh round of a node with 200,000
// calls up (1,200 CPS of 3-minute calls), listed in an in-process
// Registry: the round's time, and the longest any other goroutine (a
// call's setup or end, which take the Tracker's lock) waited for the lock
// meanwhile, sampled every 100 µs:
//
//	go test ./calls/ -run '^$' -bench RefreshRound -benchtime 3x
func BenchmarkRefreshRound(b *testing.B) {
	ctx := context.Background()
	tr := NewTracker(NewLocalStore(nil), TrackerOptions{TTL: time.Minute, MaxDuration: time.Hour, Registry: NewLocalRegistry(nil)})
	const n = 200000
	for i := range n {
		m := fmt.Sprintf("call-%d@192.0.2.1/z9hG4bK-%d/192.0.2.1:5060/UDP", i, i)
		tr.Track(m, Live{ID: fmt.Sprintf("%016x", i), CallID: fmt.Sprintf("call-%d", i), Carrier: "c", Node: "n1", StartedAt: time.Now()}, nil)
		tr.Bind(m, fmt.Sprintf("dlg-%d", i))
	}
	tr.flushRegistry(ctx)
	var worst time.Duration
	b.ResetTimer()
	for b.Loop() {
		stop, res := make(chan struct{}), make(chan time.Duration)
		go func() {
			var w time.Duration
			for {
				select {
				case <-stop:
					res <- w
					return
				default:
				}
				t0 := time.Now()
				tr.mu.Lock()
				tr.mu.Unlock()
				w = max(w, time.Since(t0))
				time.Sleep(100 * time.Microsecond)
			}
		}()
		tr.Refresh(ctx)
		tr.flushRegistry(ctx)
		close(stop)
		worst = max(worst, <-res)
	}
	b.ReportMetric(float64(worst)/float64(time.Millisecond), "worst-lock-wait-ms")
}
