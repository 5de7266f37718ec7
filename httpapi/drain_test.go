package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
)

// POST /api/v1/drain needs the token, starts the drain, and answers
// "draining" while it lasts beyond one answer's wait; the client asks again
// until "drained".
func TestDrain(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.Token = "tok-0123456789"
	var calls atomic.Int32
	finished := make(chan struct{})
	api := New(Options{Config: func() *config.Config { return cfg }, Drain: func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			<-ctx.Done() // the first answer's wait runs out
			return ctx.Err()
		}
		close(finished)
		return nil
	}})
	old := drainWait
	drainWait = 50 * time.Millisecond
	defer func() { drainWait = old }()
	srv := httptest.NewServer(api)
	defer srv.Close()

	var e *Error
	if err := Drain(context.Background(), srv.URL, ""); !errors.As(err, &e) || e.Code != http.StatusUnauthorized {
		t.Fatalf("drain without the token: %v, want 401", err)
	}
	if calls.Load() != 0 {
		t.Fatal("drain ran without the token")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Drain(ctx, srv.URL, cfg.HTTP.Token); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	select {
	case <-finished:
	default:
		t.Fatal("Drain returned before the node said drained")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("drain asked %d times, want 2 (draining, then drained)", n)
	}
	// GET is not a drain.
	resp, err := http.Get(srv.URL + PathDrain)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d, want 405", PathDrain, resp.StatusCode)
	}
}

// A node without a drain answers 501; with no token the API is
// read-only, and a drain is a write: 403.
func TestDrainUnavailable(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.Token = "tok-0123456789"
	srv := httptest.NewServer(New(Options{Config: func() *config.Config { return cfg }}))
	defer srv.Close()
	var e *Error
	if err := Drain(context.Background(), srv.URL, cfg.HTTP.Token); !errors.As(err, &e) || e.Code != http.StatusNotImplemented {
		t.Errorf("Drain: %v, want 501", err)
	}
	open := httptest.NewServer(New(Options{Config: testConfig, Drain: func(context.Context) error { return nil }}))
	defer open.Close()
	if err := Drain(context.Background(), open.URL, ""); !errors.As(err, &e) || e.Code != http.StatusForbidden {
		t.Errorf("Drain without a configured token: %v, want 403", err)
	}
}
