package lograte

import (
	"sync"
	"time"
)

// Bucket allows up to a rate of lines a second, with a burst of one
// second's worth, and counts the lines it refuses. The zero Bucket is
// full. It is safe for concurrent use.
type Bucket struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int64
}

// Allow takes a token at rate per second at now. ok false means the line
// is suppressed (and counted); when ok, suppressed is the count of the
// lines suppressed since the last allowed one (the caller logs it), and
// the count starts again.
func (b *Bucket) Allow(now time.Time, rate int) (ok bool, suppressed int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := float64(rate)
	if b.last.IsZero() {
		b.tokens = r
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(r, b.tokens+d.Seconds()*r)
	}
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}

// Take returns the count of the lines suppressed since the last allowed
// one or the last Take, and starts it again.
func (b *Bucket) Take() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.suppressed
	b.suppressed = 0
	return n
}
