package admission

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/cpsguard/cpsguard/lua"
)

// WindowGuard is added to every admission window. The proxy forwards an admitted
// call a little after the store admitted it, and that delay varies from call to
// call; a window slightly longer than the promised one keeps "never more than
// the limit in any rolling second" true where the carrier measures it, at a
// cost of about 1 % of the limit.
const WindowGuard = 10 * time.Millisecond

// Bucket is one rolling window: at most Limit admitted calls in any interval
// of length Window; or, when RateMicros > 0, one token bucket (see
// TokenBucket).
type Bucket struct {
	// Key names the bucket in the store, e.g. "cpsguard:{peer:dialer-1}".
	Key string
	// Limit is the number of calls the window may hold (> 0); for a token
	// bucket, its capacity in tokens (the burst, 1 to lua.MaxTokens).
	Limit int
	// Window is the length of the rolling window (> 0); for a token bucket,
	// how long an admitted call is remembered to recognise a duplicate.
	Window time.Duration
	// RateMicros is 0 for a rolling window. When > 0 the bucket is a token
	// bucket refilled at RateMicros micro-tokens per second (cps × 1e6, at
	// most lua.MaxRateMicros): a call takes one token (1e6 micro-tokens).
	RateMicros int64
	// Over is what the bucket does with a call over its limit: refuse it
	// (OverRefuse, the zero value), let it through uncounted (OverShadow),
	// or let it through and count it (OverCount).
	Over Over
}

// Over is what a bucket does with a call over its limit. Every bucket of
// a call is checked; the call is refused when a bucket with OverRefuse is
// over, and Decision.Over says which buckets were over either way.
type Over uint8

const (
	// OverRefuse refuses the call: it is counted in no bucket.
	OverRefuse Over = iota
	// OverShadow lets the call through without counting it in this bucket
	// (a limit in shadow mode: the would-be refusal is reported, and the
	// bucket fills as if it were enforced).
	OverShadow
	// OverCount lets the call through and counts it in this bucket anyway
	// (a call no limit may refuse): a window then holds more than its
	// limit, until its entries leave it, and the calls after it are
	// refused meanwhile; a token bucket gives it a token when one is left
	// and is never put in debt.
	OverCount
)

// TokenBucket returns the token bucket that replaces the 1 s window of key
// (a policy.Key) when a scope has a burst: capacity burst tokens, refilled at
// cps per second, full when idle. An idle scope at cps 10, burst 30 gets 30
// calls through at once, then 10 a second. The rate travels as integer
// micro-tokens per second (cps rounded to 6 decimals); the key keeps key's
// hash tag: "cpsguard:{peer:dialer-1}:tb". Admitted calls are remembered for
// 1 s + WindowGuard, like the 1 s window, to recognise a duplicate.
func TokenBucket(key string, cps float64, burst int) Bucket {
	return Bucket{Key: key + ":tb", Limit: burst, Window: time.Second + WindowGuard, RateMicros: int64(math.Round(cps * microsPerToken))}
}

// microsPerToken is one token in micro-tokens, the unit of a token bucket's
// level and rate in both stores.
const microsPerToken = 1_000_000

// tokenLevel returns a token bucket's level (µtokens) and its time (µs) at
// nowUS, from the level tokens stored at lastUS: min(capacity, tokens +
// floor((nowUS-lastUS) × rate / 1e6)), exactly as admit.lua computes it. A
// level above a lowered capacity is clamped; a clock behind lastUS adds
// nothing.
func tokenLevel(tokens, lastUS, nowUS, capacity, rate int64) (int64, int64) {
	if nowUS > lastUS {
		e := nowUS - lastUS
		es, ef := e/microsPerToken, e%microsPerToken
		if need := capacity - tokens; need <= 0 || es >= (need+rate-1)/rate {
			return capacity, nowUS
		}
		q, r := rate/microsPerToken, rate%microsPerToken
		tokens += es*rate + ef*q + ef*r/microsPerToken
		lastUS = nowUS
	}
	return min(tokens, capacity), lastUS
}

// check reports a bucket no store can decide on.
func check(b Bucket) error {
	switch {
	case b.Window <= 0:
		return errWindow(b)
	case b.RateMicros < 0 || b.RateMicros > lua.MaxRateMicros:
		return fmt.Errorf("admission: bucket %q: rate %d µtokens/s must be 0 (rolling window) or 1 to %d", b.Key, b.RateMicros, int64(lua.MaxRateMicros))
	case b.RateMicros > 0 && (b.Limit < 1 || b.Limit > lua.MaxTokens):
		return fmt.Errorf("admission: token bucket %q: capacity %d must be 1 to %d", b.Key, b.Limit, lua.MaxTokens)
	case b.Over > OverCount:
		return fmt.Errorf("admission: bucket %q: unknown over mode %d", b.Key, b.Over)
	}
	return nil
}

// Decision is the outcome of one admission. Being over a limit is a Decision
// with Admit false, never an error.
type Decision struct {
	// Admit reports whether the call was admitted (and counted in every bucket).
	Admit bool
	// Refused is the index of the bucket that refused the call, or -1.
	Refused int
	// Counts holds, per bucket, the calls in its window after the decision
	// (including this call when admitted); for a token bucket, the tokens in
	// use (capacity - whole tokens left). A bucket that was not examined
	// (cross-slot path stopped early) reports -1.
	Counts []int
	// Over reports, per bucket, that it was over its limit when the call
	// came: the bucket that refused it, or one that let it through
	// (OverShadow, OverCount). Nil when no bucket was examined over (and
	// for a duplicate).
	Over []bool
	// RetryAfter is, when refused, how long until the refusing bucket has room.
	RetryAfter time.Duration
	// At is the store's clock at the decision (Redis TIME, or the local clock).
	At time.Time
	// Duplicate reports that the member was already counted: a retransmission
	// or retry of an admitted call, admitted again without counting it twice.
	Duplicate bool
	// Mode says how the decision was made: ModeCounted (by the store's
	// windows, shared or in-process) or ModeOpen (the store failed and
	// store.on_error: admit let the call through uncounted).
	Mode Mode
}

// Mode is how an admission was decided.
type Mode uint8

const (
	// ModeCounted: the buckets decided (Redis, or an in-process store).
	ModeCounted Mode = iota
	// ModeOpen: admitted without counting (the store's fail-open policy);
	// Counts are then -1 and no limit held the call.
	ModeOpen
)

// Store decides admissions atomically over several buckets.
//
// Admit checks every bucket and, only when no bucket refuses (none with
// OverRefuse is over its limit), adds member to all of them, but a bucket
// with OverShadow that is over its limit. member must be unique per call attempt (Call-ID and
// top Via branch); adding the same member again is idempotent.
// An error means the store failed and nothing is known about the decision.
type Store interface {
	Admit(ctx context.Context, member string, buckets []Bucket) (Decision, error)
	// Counts returns the calls currently in each bucket's window (tokens
	// in use for a token bucket).
	Counts(ctx context.Context, buckets []Bucket) ([]int, error)
}

// LimitFor turns a calls-per-second figure into a bucket limit and window.
//
//   - cps >= 1: Limit = floor(cps) calls per 1 s (a fraction rounds down, so the
//     promise "never more than cps in any second" holds);
//   - 0 < cps < 1: Limit = 1 call per 1/cps seconds (0.5 CPS = 1 call per 2 s).
//
// WindowGuard is added to the window in both cases.
func LimitFor(cps float64) (limit int, window time.Duration) {
	if cps >= 1 {
		return int(math.Floor(cps)), time.Second + WindowGuard
	}
	if cps <= 0 || math.IsNaN(cps) {
		return 0, time.Second + WindowGuard
	}
	return 1, time.Duration(float64(time.Second)/cps) + WindowGuard
}

// WindowBucket returns the bucket of an extra rolling window beside the 1 s
// one of key (a policy.Key): at most calls admitted calls in any interval of
// length per. WindowGuard is added as for the 1 s window. The key keeps key's hash
// tag, so the buckets of one scope share a Redis Cluster slot and are decided
// in one script call, and names the length: "cpsguard:{peer:dialer-1}:w60s".
// A window holds at most calls entries, whatever the traffic.
func WindowBucket(key string, calls int, per time.Duration) Bucket {
	suffix := ":w" + strconv.FormatInt(int64(per/time.Millisecond), 10) + "ms"
	if per%time.Second == 0 {
		suffix = ":w" + strconv.FormatInt(int64(per/time.Second), 10) + "s"
	}
	return Bucket{Key: key + suffix, Limit: calls, Window: per + WindowGuard}
}
