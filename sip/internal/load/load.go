package load

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cpsguard/cpsguard/config"
)

// Limit is the current bound of cfg's new calls being decided
// (sip.max_inflight, or derived from GOMAXPROCS).
func Limit(cfg *config.Config) int64 {
	return int64(cfg.SIP.Inflight(runtime.GOMAXPROCS(0)))
}

// Inflight is the number of new calls being decided, with the read
// path's hook that wakes the workers holding INVITEs back while the bound
// is taken: a unit given back wakes them, and only them.
type Inflight struct {
	n    atomic.Int64
	wake atomic.Pointer[func()]
}

// Load returns the number of units taken.
func (c *Inflight) Load() int64 { return c.n.Load() }

// TryTake takes a unit when fewer than limit are taken. The count never
// goes over limit, not even for an instant: a worker holding an INVITE
// back reads it, and an overshoot given back without a wake would keep it
// holding until inflight_wait.
func (c *Inflight) TryTake(limit int64) bool {
	for {
		n := c.n.Load()
		if n >= limit {
			return false
		}
		if c.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Take takes a unit whatever the bound (a priority call: it still counts
// in flight).
func (c *Inflight) Take() { c.n.Add(1) }

// OnRelease sets the hook called whenever a unit is given back.
func (c *Inflight) OnRelease(f func()) { c.wake.Store(&f) }

// Release gives one unit back (invites.Bound).
func (c *Inflight) Release() {
	c.n.Add(-1)
	if f := c.wake.Load(); f != nil {
		(*f)()
	}
}

// Memory is how long after the node was last seen behind (Behind.Note) it
// counts as overloaded for carrier health: a call forwarded then may wait
// out its whole setup_timeout (2 s by default) with the carrier's answer
// in the node's own queue.
const Memory = 5 * time.Second

// Lag is how long a response or in-dialog request may wait in the UDP
// read path's fast lane before the node counts as behind: a quarter of a
// probe's default timeout.
const Lag = 250 * time.Millisecond

// Behind is when the node was last seen behind reading its own queues.
type Behind struct {
	at atomic.Int64 // Unix ns; 0: never
}

// Note records that the node was behind at now.
func (b *Behind) Note(now time.Time) { b.at.Store(now.UnixNano()) }

// Recent reports whether the node was behind within Memory.
func (b *Behind) Recent() bool {
	last := b.at.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < Memory
}
