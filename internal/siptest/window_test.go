package siptest

import (
	"testing"
	"time"
)

func TestMaxInWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms ...int) []time.Time {
		out := make([]time.Time, len(ms))
		for i, m := range ms {
			out[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return out
	}
	tests := []struct {
		name   string
		ms     []int
		want   int
		wantAt int // ms after t0 of the first fullest window; -1 = zero time
	}{
		{"empty", nil, 0, -1},
		{"one", []int{5}, 1, 5},
		{"window is half-open", []int{0, 1000}, 1, 0},
		{"just inside", []int{0, 999}, 2, 0},
		{"boundary burst", []int{900, 950, 999, 1000, 1001, 1950}, 5, 900},
		{"equal stamps", []int{10, 10, 10, 2000}, 3, 10},
		{"later window fuller", []int{0, 1500, 1600, 1700}, 3, 1500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := at(tc.ms...)
			if got := MaxInWindow(ts, time.Second); got != tc.want {
				t.Errorf("MaxInWindow(%v) = %d, want %d", tc.ms, got, tc.want)
			}
			got, gotAt := MaxInWindowAt(ts, time.Second)
			wantAt := time.Time{}
			if tc.wantAt >= 0 {
				wantAt = t0.Add(time.Duration(tc.wantAt) * time.Millisecond)
			}
			if got != tc.want || !gotAt.Equal(wantAt) {
				t.Errorf("MaxInWindowAt(%v) = %d, %v; want %d, %v", tc.ms, got, gotAt, tc.want, wantAt)
			}
		})
	}
}
