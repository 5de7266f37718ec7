package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
)

// gatedCounts is a Counter whose reads wait for release, counting how
// many run at once.
type gatedCounts struct {
	release chan struct{}
	mu      sync.Mutex
	now     int
	most    int
	calls   int
}

func (g *gatedCounts) Counts(_ context.Context, buckets []admission.Bucket) ([]int, error) {
	g.mu.Lock()
	g.now++
	g.calls++
	g.most = max(g.most, g.now)
	g.mu.Unlock()
	<-g.release
	g.mu.Lock()
	g.now--
	g.mu.Unlock()
	return make([]int, len(buckets)), nil
}

func (g *gatedCounts) state() (now, most, calls int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now, g.most, g.calls
}

// TestStatusReadsTheStoreOnceAtATime: GET /api/v1/status needs no token
// and reads every window and queue from the store. Concurrent requests
// each ran their own reads, so anyone who reaches http.listen could put
// any number of status reads on the admission store at once (a round
// trip, or a script over every key, per kind and carrier), slowing the
// calls' own store calls past their budget. Requests that arrive while a
// status is being built now share it: one build at a time, each request
// answered.
func TestStatusReadsTheStoreOnceAtATime(t *testing.T) {
	g := &gatedCounts{release: make(chan struct{})}
	cfg := testConfig()
	srv := httptest.NewServer(New(Options{Config: func() *config.Config { return cfg }, Counts: g}))
	defer srv.Close()
	const n = 8
	codes := make(chan int, n)
	for range n {
		go func() {
			res, err := http.Get(srv.URL + PathStatus)
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	// Give the requests up to 3 s to reach the store; more than one read
	// at once fails at once.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if _, most, _ := g.state(); most > 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(g.release)
	for range n {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("a status request: %d, want 200", code)
		}
	}
	if _, most, calls := g.state(); most > 1 {
		t.Errorf("%d status reads of the store at once (%d in all) for %d concurrent requests, want 1 at a time", most, calls, n)
	}
}
