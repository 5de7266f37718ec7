package stats

import (
	"testing"
	"time"
)

func at(ms ...int) []time.Time {
	t0 := time.Unix(1_700_000_000, 0)
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = t0.Add(time.Duration(m) * time.Millisecond)
	}
	return out
}

func TestSliding(t *testing.T) {
	got := Sliding(at(0, 500, 999, 1000, 1000, 2500), time.Second)
	want := []int{1, 2, 3, 4, 4, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Sliding = %v, want %v", got, want)
		}
	}
}

func TestSlidingGrid(t *testing.T) {
	ts := at(0, 100, 1100)
	from := ts[0]
	_, n := SlidingGrid(ts, time.Second, from, from.Add(1200*time.Millisecond), 400*time.Millisecond)
	want := []int{1, 2, 2, 1} // t = 0, 400, 800, 1200 ms: (t-1s, t]; at 1200 only 1100
	if len(n) != len(want) {
		t.Fatalf("SlidingGrid = %v, want %v", n, want)
	}
	for i := range want {
		if n[i] != want[i] {
			t.Fatalf("SlidingGrid = %v, want %v", n, want)
		}
	}
}

func TestPctAndPerSecond(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if got := Pct(ds, 50); got != 3 {
		t.Errorf("Pct 50 = %d, want 3", got)
	}
	if got := Pct(ds, 100); got != 5 {
		t.Errorf("Pct 100 = %d, want 5", got)
	}
	ts := at(0, 10, 999, 1000, 2999)
	got := PerSecond(ts, ts[0])
	want := []int{3, 1, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("PerSecond = %v, want %v", got, want)
		}
	}
}
