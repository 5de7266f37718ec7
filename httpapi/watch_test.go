package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/testlog"
)

// syncBuffer is a buffer safe for a writer and a reader goroutine.
type syncBuffer = testlog.Buffer

func TestWatchRefreshesAndSurvivesErrors(t *testing.T) {
	api := New(Options{Config: testConfig, Counts: newFake(), Queue: newFake()})
	var n atomic.Int32
	// The second fetch fails; the watch shows the error and goes on.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 {
			http.Error(w, "boom", http.StatusBadGateway)
			return
		}
		api.ServeHTTP(w, r)
	}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, out, srv.URL, 10*time.Millisecond) }()
	deadline := time.Now().Add(5 * time.Second)
	// Wait for three frames written, not three requests received: a frame
	// whose fetch is cut by the cancel is (rightly) never written.
	for strings.Count(out.String(), ClearScreen) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch: got %v, want nil after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after cancel")
	}
	got := out.String()
	frames := strings.Split(got, ClearScreen)[1:]
	if len(frames) < 3 {
		t.Fatalf("frames: got %d, want >= 3:\n%q", len(frames), got)
	}
	if !strings.Contains(frames[0], "carrier-a") {
		t.Errorf("frame 1: no table:\n%s", frames[0])
	}
	if !strings.Contains(frames[1], "http 502: boom") || !strings.Contains(frames[1], "retrying") {
		t.Errorf("frame 2: want the error and a retry note, got:\n%s", frames[1])
	}
	if !strings.Contains(frames[2], "carrier-a") {
		t.Errorf("frame 3: no table after the error:\n%s", frames[2])
	}
}

func TestPrintStatus(t *testing.T) {
	srv := httptest.NewServer(New(Options{Config: testConfig}))
	defer srv.Close()
	var buf bytes.Buffer
	if err := PrintStatus(context.Background(), &buf, srv.URL); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "node node-1") {
		t.Errorf("PrintStatus: got %q", buf.String())
	}
}
