package monoclock

import "time"

// Clock turns a wall-clock source into durations since an epoch that never
// go backwards: a reading earlier than the latest one (a clock stepped
// back, or an injected test clock) is taken as the latest one. A Clock is
// not safe for concurrent use; its owner reads it under its own lock.
type Clock struct {
	now   func() time.Time
	epoch time.Time
	last  time.Duration
}

// New returns a Clock on now (nil = time.Now), with its epoch at now().
func New(now func() time.Time) Clock {
	if now == nil {
		now = time.Now
	}
	return Clock{now: now, epoch: now()}
}

// Now returns the time since the epoch: the latest reading, never less.
func (c *Clock) Now() time.Duration {
	d := c.now().Sub(c.epoch)
	if d < c.last {
		d = c.last
	}
	c.last = d
	return d
}

// Time returns the wall time of d, a reading of Now.
func (c *Clock) Time(d time.Duration) time.Time { return c.epoch.Add(d) }
