package admission

import (
	"math"
	"testing"
	"time"
)

// TestLimitForLiterals pins LimitFor to literal values: a fractional cps
// above 1 rounds down (2.5 CPS admits 2 a second, never 3), one below 1
// becomes one call per 1/cps seconds. Every other test that builds a
// window from a cps computes its expectation with LimitFor itself, so
// this is the one that sees a change of rounding.
func TestLimitForLiterals(t *testing.T) {
	const guard = 10 * time.Millisecond // WindowGuard, spelled out
	if WindowGuard != guard {
		t.Fatalf("WindowGuard = %v; this table assumes %v", WindowGuard, guard)
	}
	for _, tc := range []struct {
		cps        float64
		wantLimit  int
		wantWindow time.Duration
	}{
		{1, 1, 1010 * time.Millisecond},
		{1.0001, 1, 1010 * time.Millisecond},
		{1.5, 1, 1010 * time.Millisecond},
		{2, 2, 1010 * time.Millisecond},
		{2.5, 2, 1010 * time.Millisecond},
		{2.999, 2, 1010 * time.Millisecond},
		{10.9, 10, 1010 * time.Millisecond},
		{100, 100, 1010 * time.Millisecond},
		{0.5, 1, 2010 * time.Millisecond},
		{0.25, 1, 4010 * time.Millisecond},
		{0.999, 1, 1001001001 + guard},
		{0, 0, 1010 * time.Millisecond},
		{-3, 0, 1010 * time.Millisecond},
		{math.NaN(), 0, 1010 * time.Millisecond},
	} {
		limit, window := LimitFor(tc.cps)
		if limit != tc.wantLimit || window != tc.wantWindow {
			t.Errorf("LimitFor(%v) = %d per %v, want %d per %v", tc.cps, limit, window, tc.wantLimit, tc.wantWindow)
		}
	}
}

// TestFractionalCPSAdmitsTheFloor: a 2.5 CPS bucket, as LimitFor builds
// it, admits exactly 2 calls in a second on both stores (the third in the
// same window is refused), whatever LimitFor says.
func TestFractionalCPSAdmitsTheFloor(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key func(string, string) string) {
		s := b.open()
		limit, window := LimitFor(2.5)
		bk := Bucket{Key: key("peer", "p"), Limit: limit, Window: window}
		for i, want := range []bool{true, true, false} {
			if d := admit(t, s, "call-"+string(rune('a'+i)), bk); d.Admit != want {
				t.Fatalf("call %d of one second at 2.5 CPS: admit %v, want %v (%+v)", i+1, d.Admit, want, d)
			}
		}
	})
}
