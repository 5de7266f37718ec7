package pacing

import (
	"context"
	"time"
)

// testClock is a Pacer Clock on store_test.go's fakeClock whose time moves
// only when it sleeps or is told to: a sleep of d moves it d ahead (nothing
// for d <= 0), then runs onSleep, which may move it further (a late wake)
// or end the sleep with an error.
type testClock struct {
	fakeClock
	// sleeps counts the calls to Sleep (under fakeClock's mu).
	sleeps int
	// onSleep, when set, runs at the end of every Sleep, without mu held.
	onSleep func(ctx context.Context, d time.Duration) error
}

func newTestClock() *testClock { return &testClock{fakeClock: fakeClock{now: time.Unix(1000, 0)}} }

// Set moves the clock to t.
func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Sleeps returns the number of calls to Sleep.
func (c *testClock) Sleeps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sleeps
}

func (c *testClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps++
	if err := ctx.Err(); err != nil {
		c.mu.Unlock()
		return err
	}
	if d > 0 {
		c.now = c.now.Add(d)
	}
	hook := c.onSleep
	c.mu.Unlock()
	if hook != nil {
		return hook(ctx, d)
	}
	return nil
}
