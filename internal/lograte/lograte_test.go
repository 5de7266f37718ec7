package lograte

import (
	"testing"
	"time"
)

// A burst of one second's worth passes, the rest is counted and handed
// to the next allowed line, or to Take.
func TestBucket(t *testing.T) {
	var b Bucket
	now := time.Unix(1000, 0)
	for i := range 5 {
		ok, _ := b.Allow(now, 3)
		if want := i < 3; ok != want {
			t.Fatalf("line %d at once: allowed %v, want %v", i, ok, want)
		}
	}
	ok, n := b.Allow(now.Add(400*time.Millisecond), 3)
	if !ok || n != 2 {
		t.Fatalf("after 400 ms: allowed %v with %d suppressed, want true and 2", ok, n)
	}
	b.Allow(now.Add(400*time.Millisecond), 3)
	if got := b.Take(); got != 1 {
		t.Errorf("Take = %d, want 1", got)
	}
	if got := b.Take(); got != 0 {
		t.Errorf("second Take = %d, want 0", got)
	}
}
