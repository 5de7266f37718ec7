package siptest

import "time"

// MaxInWindow returns the most of ts (sorted) in any half-open window
// [t, t+w) that starts at one of them: the most calls seen in one rolling
// window, e.g. "at most N in any rolling second" at a carrier.
func MaxInWindow(ts []time.Time, w time.Duration) int {
	n, _ := MaxInWindowAt(ts, w)
	return n
}

// MaxInWindowAt is MaxInWindow and the start of the first window that holds
// that many (the zero time when ts is empty).
func MaxInWindowAt(ts []time.Time, w time.Duration) (int, time.Time) {
	best, at := 0, time.Time{}
	j := 0
	for i := range ts {
		if j < i {
			j = i
		}
		for j < len(ts) && ts[j].Sub(ts[i]) < w {
			j++
		}
		if n := j - i; n > best {
			best, at = n, ts[i]
		}
	}
	return best, at
}
