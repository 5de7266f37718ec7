package testlog

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestBufferConcurrent: lines written from several goroutines while the
// test reads are all there, none torn (run with -race).
func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				fmt.Fprintf(&b, "g%d line %d\n", g, i)
			}
		}()
	}
	for range 10 {
		_ = b.String()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "g") || !strings.Contains(l, " line ") {
			t.Fatalf("torn line %q", l)
		}
	}
	b.Reset()
	if s := b.String(); s != "" {
		t.Errorf("after Reset: %q", s)
	}
}
