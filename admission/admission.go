package admission

import (
	"context"
	"math"
	"strconv"
	"time"
)

// Guard is added to every admission window. The proxy forwards an admitted
// call a little after the store admitted it, and that delay varies from call to
// call; a window slightly longer than the promised one keeps "never more than
// the limit in any rolling second" true where the carrier measures it, at a
// cost of about 1 % of the limit.
const Guard = 10 * time.Millisecond

// Bucket is one rolling window: at most Limit admitted calls in any interval
// of length Window.
type Bucket struct {
	// Key names the bucket in the store, e.g. "cpsguard:{peer:dialer-1}".
	Key string
	// Limit is the number of calls the window may hold (> 0).
	Limit int
	// Window is the length of the rolling window (> 0).
	Window time.Duration
}

// Decision is the outcome of one admission. Being over a limit is a Decision
// with Admit false, never an error.
type Decision struct {
	// Admit reports whether the call was admitted (and counted in every bucket).
	Admit bool
	// Refused is the index of the bucket that refused the call, or -1.
	Refused int
	// Counts holds, per bucket, the calls in its window after the decision
	// (including this call when admitted). A bucket that was not examined
	// (cross-slot path stopped early) reports -1.
	Counts []int
	// RetryAfter is, when refused, how long until the refusing bucket has room.
	RetryAfter time.Duration
	// At is the store's clock at the decision (Redis TIME, or the local clock).
	At time.Time
	// Duplicate reports that the member was already counted: a retransmission
	// or retry of an admitted call, admitted again without counting it twice.
	Duplicate bool
}

// Store decides admissions atomically over several buckets.
//
// Admit checks every bucket and, only when all are under their limits, adds
// member to all of them. member must be unique per call attempt (Call-ID and
// top Via branch); adding the same member again is idempotent.
// An error means the store failed and nothing is known about the decision.
type Store interface {
	Admit(ctx context.Context, member string, buckets []Bucket) (Decision, error)
	// Counts returns the calls currently in each bucket's window.
	Counts(ctx context.Context, buckets []Bucket) ([]int, error)
}

// LimitFor turns a calls-per-second figure into a bucket limit and window.
//
//   - cps >= 1: Limit = floor(cps) calls per 1 s (a fraction rounds down, so the
//     promise "never more than cps in any second" holds);
//   - 0 < cps < 1: Limit = 1 call per 1/cps seconds (0.5 CPS = 1 call per 2 s).
//
// Guard is added to the window in both cases.
func LimitFor(cps float64) (limit int, window time.Duration) {
	if cps >= 1 {
		return int(math.Floor(cps)), time.Second + Guard
	}
	if cps <= 0 || math.IsNaN(cps) {
		return 0, time.Second + Guard
	}
	return 1, time.Duration(float64(time.Second)/cps) + Guard
}

// WindowBucket returns the bucket of an extra rolling window beside the 1 s
// one of key (a lua.Key): at most calls admitted calls in any interval of
// length per. Guard is added as for the 1 s window. The key keeps key's hash
// tag, so the buckets of one scope share a Redis Cluster slot and are decided
// in one script call, and names the length: "cpsguard:{peer:dialer-1}:w60s".
// A window holds at most calls entries, whatever the traffic.
func WindowBucket(key string, calls int, per time.Duration) Bucket {
	suffix := ":w" + strconv.FormatInt(int64(per/time.Millisecond), 10) + "ms"
	if per%time.Second == 0 {
		suffix = ":w" + strconv.FormatInt(int64(per/time.Second), 10) + "s"
	}
	return Bucket{Key: key + suffix, Limit: calls, Window: per + Guard}
}
