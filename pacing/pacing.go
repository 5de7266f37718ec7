package pacing

import (
	"context"
	"time"
)

// SpacingGuard is the fraction by which slots are spaced wider than 1/cps. The proxy
// sends a call a little after its slot (timer and scheduling jitter); spacing
// slots 1 % wider means a send may be up to 10 ms late before the carrier could
// see more than cps calls in one rolling second.
const SpacingGuard = 0.01

// MaxLate is how late after its slot a call may be sent: SpacingGuard of a
// second (10 ms). Slots are spaced SpacingGuard wider than 1/cps, so cps slots
// span 1 s + MaxLate and the first of them may go out that late before a
// carrier could count cps + 1 calls in one rolling second; a caller that
// wakes later must give the slot back and take the next.
const MaxLate = time.Duration(SpacingGuard * float64(time.Second))

// Interval is the spacing of send slots for a carrier allowed cps calls per
// second, including SpacingGuard.
func Interval(cps float64) time.Duration {
	if cps <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / cps * (1 + SpacingGuard))
}

// Carrier is what pacing needs to know of one carrier.
type Carrier struct {
	// Key names the carrier's slot set in the store, e.g. "cpsguard:{carrier:a}".
	Key string
	// CPS is the carrier's calls-per-second limit (> 0, may be fractional).
	CPS float64
	// MaxWait is the longest a call may wait for a slot of this carrier.
	MaxWait time.Duration
}

// Slot is the outcome of one reservation. A full queue is a Slot with OK
// false, never an error.
type Slot struct {
	// OK reports whether a slot was reserved.
	OK bool
	// Wait is how long the caller must wait before sending (the wait it would
	// have had when OK is false).
	Wait time.Duration
	// At is the store's clock when the slot was decided.
	At time.Time
	// Key and Member identify the reservation for Release.
	Key, Member string
	// Reserved is the local time the reply arrived; the send is due at
	// Reserved + Wait.
	Reserved time.Time
}

// Due is the local time at which the reserved call may be sent.
func (s Slot) Due() time.Time { return s.Reserved.Add(s.Wait) }

// SlotStore reserves and releases send slots atomically.
//
// Reserve takes slot = max(now, last + interval); when slot - now > maxWait it
// reserves nothing and reports OK false with the wait it would have been.
// An error means the store failed and nothing was reserved that the caller
// knows of.
type SlotStore interface {
	Reserve(ctx context.Context, key, member string, interval, maxWait time.Duration) (Slot, error)
	// Release removes a reservation that will not be used (call cancelled or
	// rerouted before it was sent). Releasing an unknown member is a no-op.
	Release(ctx context.Context, key, member string) error
	// Block grants no slot of key for span from now (the carrier asked the
	// pool to wait: 503 with Retry-After); every node's next Reserve sees it.
	Block(ctx context.Context, key string, span time.Duration) error
	// Adapt returns the effective rate of an adaptive carrier whose slot
	// set is key, first decreasing it when overload (AIMD, see AIMD).
	Adapt(ctx context.Context, key string, a AIMD, overload bool) (Rate, error)
	// Queue reports the state of a carrier's slots (see QueueState).
	Queue(ctx context.Context, key string, interval time.Duration) (QueueState, error)
}

// QueueState is what an operator sees of one carrier's slots.
type QueueState struct {
	// Queued is the number of reservations still in the future: calls
	// waiting for their slot.
	Queued int
	// Sent is the number of slots in the last second: the carrier's current
	// calls per second as paced by the whole pool.
	Sent int
	// Wait is the least wait of a call reserving now.
	Wait time.Duration
}
