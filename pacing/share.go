package pacing

import "time"

// Share is the part of a carrier's slots a call draws on when the carrier
// is shared fairly among its callers (a customer or a peer): while the
// carrier is the bottleneck, each share waiting for it gets at least
// Weight / (the sum of the weights waiting) of its slots, and any part
// one leaves idle is used by the others. The zero Share is none: the call
// takes the carrier's next free slot, first come, first served.
type Share struct {
	// Name identifies the share among the carrier's callers, e.g.
	// "customer:acme"; "" is no share.
	Name string
	// Weight is the share's weight, 1 to MaxWeight (0 counts as 1).
	Weight int
}

// MaxWeight is the largest weight of a Share.
const MaxWeight = 1000

// maxWeightSum caps the sum of the weights waiting for one carrier as the
// stores count it, so that interval × sum stays an exact integer in Lua's
// doubles (interval at most 1.01e9 µs, one call in 1000 s): a million is
// a thousand shares of the largest weight at once.
const maxWeightSum = 1_000_000

// recordKeep is how long past its max_wait a fair reservation's record
// (its share and charge, for a release to refund) is kept: a release
// comes within max_wait and a release timeout (1 s) of the reservation,
// and a booked call asks again within its max_wait. A carrier holds about
// cps × (max_wait + recordKeep) records.
const recordKeep = 2 * time.Second

// weight returns s's weight in [1, MaxWeight].
func (s Share) weight() int64 {
	return int64(min(max(s.Weight, 1), MaxWeight))
}

// shareLead is how far from its share's turn a fair call's slot may be
// and still be taken: a booked call comes back this long before its turn
// (so that a wake a little late still finds it), and takes the first free
// slot from its turn if it is no later than this after it; a later one is
// left for the calls arriving meanwhile, and the call comes back for it.
// An eighth of the interval, at least 2 ms (a timer's lateness on a busy
// host), never more than the interval.
func shareLead(interval time.Duration) time.Duration {
	return min(max(interval/8, 2*time.Millisecond), interval)
}
