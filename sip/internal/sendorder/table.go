package sendorder

import (
	"sync"
	"time"
)

const (
	// Max bounds the keys with a send in flight a Table notes.
	Max = 4096
	// Sweep spaces a full table's sweeps (each walks it all, under the
	// lock Begin takes).
	Sweep = 100 * time.Millisecond
)

// Table is the sends in flight, by key. Set Limit before first use.
type Table[K comparable] struct {
	// Limit is how long a note holds the key's followers back.
	Limit time.Duration

	mu    sync.Mutex
	m     map[K]*flight
	swept time.Time
}

// flight is the sends of one key in flight: n of them, done closed when
// the last is over.
type flight struct {
	n    int
	at   time.Time
	done chan struct{}
}

// Begin notes a send of key's at now, on its way to another goroutine.
func (t *Table[K]) Begin(key K, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.m[key]; f != nil {
		if now.Sub(f.at) <= t.Limit {
			f.n++
			return
		}
		delete(t.m, key) // stale: holds nothing back; replaced below
		close(f.done)
	}
	if t.m == nil {
		t.m = make(map[K]*flight)
	}
	if len(t.m) >= Max {
		if now.Sub(t.swept) < Sweep {
			return
		}
		t.swept = now
		for k, f := range t.m {
			if now.Sub(f.at) > t.Limit {
				delete(t.m, k)
				close(f.done)
			}
		}
		if len(t.m) >= Max {
			return
		}
	}
	t.m[key] = &flight{n: 1, at: now, done: make(chan struct{})}
}

// End says a send of key's noted by Begin was sent or dropped.
func (t *Table[K]) End(key K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.m[key]
	if f == nil {
		return
	}
	if f.n--; f.n <= 0 {
		delete(t.m, key)
		close(f.done)
	}
}

// Wait returns once key's sends in flight are over, or Limit after the
// first of them was noted.
func (t *Table[K]) Wait(key K) {
	t.mu.Lock()
	f := t.m[key]
	t.mu.Unlock()
	if f == nil {
		return
	}
	left := t.Limit - time.Since(f.at)
	if left <= 0 {
		return
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-f.done:
	case <-timer.C:
	}
}

// Len is the number of keys with a send noted in flight.
func (t *Table[K]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
