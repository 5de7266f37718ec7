package gctune

import (
	"math"
	"runtime/debug"
	"testing"
)

// restore puts the process's GC settings back after a test changes them.
func restore(t *testing.T) {
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	})
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestApplyDefaults(t *testing.T) {
	restore(t)
	debug.SetMemoryLimit(math.MaxInt64)
	s := apply(env(nil), func() (int64, bool) { return 1 << 30, true })
	if s.GCPercent != DefaultGCPercent || s.GCSource != "default" {
		t.Errorf("gc = %d from %s, want %d from default", s.GCPercent, s.GCSource, DefaultGCPercent)
	}
	if got := debug.SetGCPercent(DefaultGCPercent); got != DefaultGCPercent {
		t.Errorf("runtime GC percent = %d, want %d", got, DefaultGCPercent)
	}
	giB := int64(1 << 30)
	want := int64(float64(giB) * limitShare)
	if s.MemoryLimit != want || s.LimitSource != "cgroup" || debug.SetMemoryLimit(-1) != want {
		t.Errorf("limit = %d from %s (runtime %d), want %d from cgroup", s.MemoryLimit, s.LimitSource, debug.SetMemoryLimit(-1), want)
	}
}

func TestApplyKeepsOperatorSettings(t *testing.T) {
	restore(t)
	debug.SetGCPercent(150) // as the runtime does for GOGC=150
	debug.SetMemoryLimit(512 << 20)
	s := apply(env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "512MiB"}), func() (int64, bool) { return 1 << 30, true })
	if s.GCPercent != 150 || s.GCSource != "GOGC" || debug.SetGCPercent(150) != 150 {
		t.Errorf("gc = %d from %s, want the operator's 150", s.GCPercent, s.GCSource)
	}
	if s.MemoryLimit != 512<<20 || s.LimitSource != "GOMEMLIMIT" || debug.SetMemoryLimit(-1) != 512<<20 {
		t.Errorf("limit = %d from %s, want the operator's 512 MiB", s.MemoryLimit, s.LimitSource)
	}
}

func TestApplyWithoutCgroupLimit(t *testing.T) {
	restore(t)
	debug.SetMemoryLimit(math.MaxInt64)
	s := apply(env(nil), func() (int64, bool) { return 0, false })
	if s.LimitSource != "none" || s.MemoryLimit != math.MaxInt64 {
		t.Errorf("limit = %d from %s, want none", s.MemoryLimit, s.LimitSource)
	}
}

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"max\n", 0, false},
		{"1073741824\n", 1 << 30, true},
		{"9223372036854771712\n", 0, false}, // cgroup v1 "unlimited"
		{"", 0, false},
		{"garbage", 0, false},
		{"-1", 0, false},
	} {
		if got, ok := parseLimit(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("parseLimit(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
