package calls

import (
	"context"
	"errors"
	"time"
)

// Place is one concurrent-call limit: at most Limit live calls in the set
// at Key.
type Place struct {
	// Key names the place in the store (policy.CallsKey), e.g.
	// "cpsguard:{calls:peer:dialer-1}".
	Key string
	// Limit is the number of calls the place may hold at once (> 0).
	Limit int
}

// Decision is the outcome of Occupy. A full place is a Decision with Admit
// false, never an error.
type Decision struct {
	// Admit reports the call holds a place in every Place.
	Admit bool
	// Refused is the index of the place that was full, or -1.
	Refused int
	// Counts holds, per place, the live calls after the decision (this one
	// included when admitted); -1 for a place not examined (cross-slot path
	// stopped early).
	Counts []int
	// Duplicate reports the call was already live (a retransmission):
	// admitted again without counting it twice.
	Duplicate bool
}

// Store keeps the places of live calls.
//
// Occupy checks every place and, only when none is full, adds member to all
// of them, each expiring ttl after the store's now unless refreshed; an
// already live member is admitted again and not counted twice. Free removes
// member from the given places (nothing for a member that holds none).
// Refresh sets the places of members in one key to expire ttl from now and
// reports how many of them were missing and were added back: the caller
// names only calls it holds live (a Tracker's), so a place lost while the
// store was out of use, or with the store's data, counts again and the
// limit sees every call that exists. Adding back admits no new call.
// Count returns the live calls of each key.
type Store interface {
	Occupy(ctx context.Context, member string, ttl time.Duration, places []Place) (Decision, error)
	Free(ctx context.Context, member string, keys []string) (int, error)
	Refresh(ctx context.Context, key string, ttl time.Duration, members []string) (int, error)
	Count(ctx context.Context, keys []string) ([]int, error)
}

// ErrArgs reports arguments no store can decide on (no ttl, a limit < 1).
var ErrArgs = errors.New("calls: invalid arguments")

func checkArgs(ttl time.Duration, places []Place) error {
	if ttl <= 0 {
		return ErrArgs
	}
	for _, p := range places {
		if p.Limit < 1 || p.Key == "" {
			return ErrArgs
		}
	}
	return nil
}
