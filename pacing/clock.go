package pacing

import (
	"context"
	"time"
)

// Clock is the time a Pacer reads and waits on. Tests give NewPacerClock a
// fake one to drive time without sleeping.
type Clock interface {
	// Now returns the current local time.
	Now() time.Time
	// Sleep waits d, or until ctx ends, and then returns ctx.Err(). With
	// d <= 0 it returns nil at once.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the machine's clock: time.Now and a timer.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
