package config

import (
	"fmt"
	"time"
)

// MaxBurst is the largest burst of a peer or customer. A token bucket costs
// the same memory whatever its capacity; the bound keeps its level, counted
// in micro-tokens, exact in the doubles of Redis's Lua.
const MaxBurst = 1_000_000

// MaxWindowCalls is the largest calls of an extra window. A window holds one
// entry per admitted call (about 100 bytes in Redis), so the bound is also
// memory: 1,000,000 calls is about 100 MB for one bucket.
const MaxWindowCalls = 1_000_000

// Bounds of an extra window's length: shorter than the 1 s window is what
// cps is for, and a window longer than a day holds a day of calls.
const (
	MinWindowPer = time.Second
	MaxWindowPer = 24 * time.Hour
)

// limits checks the burst and extra windows of a peer or customer at path;
// the burst is measured against cps only when cpsOK (a valid cps).
func (v *validator) limits(path string, cps float64, cpsOK bool, burst int, windows []Window) {
	switch {
	case burst == 0:
	case burst < 0 || (cpsOK && float64(burst) < cps):
		v.errf(path+".burst", "must be 0 (no burst) or >= cps %g (got %d)", cps, burst)
	case burst > MaxBurst:
		v.errf(path+".burst", "must be <= %d (got %d)", MaxBurst, burst)
	}
	seen := map[time.Duration]int{}
	for i, w := range windows {
		wpath := fmt.Sprintf("%s.windows[%d]", path, i)
		switch {
		case w.Calls < 1:
			v.errf(wpath+".calls", "must be >= 1 (got %d)", w.Calls)
		case w.Calls > MaxWindowCalls:
			v.errf(wpath+".calls", "must be <= %d: a window holds one entry per call (got %d)", MaxWindowCalls, w.Calls)
		}
		switch {
		case w.Per < MinWindowPer || w.Per > MaxWindowPer:
			v.errf(wpath+".per", "must be between %s and %s (got %s)", fmtPer(MinWindowPer), fmtPer(MaxWindowPer), w.Per)
		default:
			if j, dup := seen[w.Per]; dup {
				v.errf(wpath+".per", "duplicate window of %s (also %s.windows[%d]): give one window per length", w.Per, path, j)
			}
			seen[w.Per] = i
		}
	}
}

// carrierLimits refuses burst and windows on a carrier. Pacing spaces a
// carrier's calls 1/cps apart so that it never sees more than cps calls in
// any rolling second; a burst would send more than cps within one second
// (the promise would no longer hold), and extra windows would need slots
// that look ahead by minutes. Both belong on the peer or customer.
func (v *validator) carrierLimits(path string, ca Carrier) {
	if ca.Burst != 0 {
		v.errf(path+".burst", "not supported on carriers: pacing spaces a carrier's calls 1/cps apart so it never sees more than cps in any rolling second, and a burst would break that promise; set burst on the peer or customer")
	}
	if len(ca.Windows) > 0 {
		v.errf(path+".windows", "not supported on carriers: pacing holds a carrier to cps per rolling second only; set windows on the peer or customer")
	}
}

// fmtPer writes a window length without trailing zero units (24h, not
// 24h0m0s).
func fmtPer(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
