package monoclock

import (
	"testing"
	"time"
)

func TestNeverBackwards(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	c := New(func() time.Time { return now })
	now = t0.Add(2 * time.Second)
	if got := c.Now(); got != 2*time.Second {
		t.Fatalf("Now = %v, want 2s", got)
	}
	now = t0.Add(time.Second) // the clock steps back
	if got := c.Now(); got != 2*time.Second {
		t.Errorf("after a step back: Now = %v, want the latest reading, 2s", got)
	}
	if got := c.Time(2 * time.Second); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("Time(2s) = %v, want %v", got, t0.Add(2*time.Second))
	}
}
