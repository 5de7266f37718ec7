package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed admit.lua
	admitSrc string
	//go:embed counts.lua
	countsSrc string
	//go:embed pace.lua
	paceSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed queue.lua
	queueSrc string
	//go:embed pause.lua
	pauseSrc string
	//go:embed evidence.lua
	evidenceSrc string
	//go:embed refund.lua
	refundSrc string
	//go:embed rate.lua
	rateSrc string
	//go:embed respace.lua
	respaceSrc string
)

// The scripts, hashed once. Run sends EVALSHA and falls back to EVAL when the
// server does not know the script (restart, SCRIPT FLUSH, failover).
var (
	admitScript    = redis.NewScript(admitSrc)
	countsScript   = redis.NewScript(countsSrc)
	paceScript     = redis.NewScript(paceSrc)
	releaseScript  = redis.NewScript(releaseSrc)
	queueScript    = redis.NewScript(queueSrc)
	pauseScript    = redis.NewScript(pauseSrc)
	evidenceScript = redis.NewScript(evidenceSrc)
	refundScript   = redis.NewScript(refundSrc)
	rateScript     = redis.NewScript(rateSrc)
	respaceScript  = redis.NewScript(respaceSrc)
)

// Script names, as passed to observers and used in metrics labels.
const (
	ScriptAdmit    = "admit"
	ScriptCounts   = "counts"
	ScriptPace     = "pace"
	ScriptRelease  = "release"
	ScriptQueue    = "queue"
	ScriptPause    = "pause"
	ScriptEvidence = "evidence"
	ScriptRefund   = "refund"
	ScriptRate     = "rate"
	ScriptRespace  = "respace"
)

// ErrReply reports a script reply whose shape or values are not what the
// script returns; it means a wrong script or a broken server, never a limit.
var ErrReply = errors.New("lua: malformed script reply")

// ErrArgs reports arguments a script cannot be run with (no keys, a window
// or interval that is not positive).
var ErrArgs = errors.New("lua: invalid script arguments")

// Load makes sure every script is in Redis's script cache, so a script
// Redis rejects fails at start and not on the first call, and the first
// calls after a restart (an empty cache) do not each send their script's
// text. It takes one round trip (SCRIPT EXISTS for all) when the cache
// holds them, two when some must be loaded (their SCRIPT LOADs pipelined):
// the fallback's probe runs it within store.redis.timeout, and a Redis a
// few milliseconds away must pass it (one SCRIPT LOAD per script, 21 round
// trips with the PING, did not). On a ClusterClient it runs on every
// master, concurrently; not on replicas, so that a replica down does not
// fail the fallback's probe while the masters serve (a replica promoted
// later runs each script by EVAL once, then has it).
func Load(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return loadOn(ctx, m)
		})
	}
	return loadOn(ctx, c)
}

// allScripts is every script Load loads: its name, its text and the
// variable holding the script run with it (whose Hash the text, after
// SetVariant's line, must get).
var allScripts = []struct {
	name   string
	src    string
	script **redis.Script // the variable, which SetVariant replaces
}{
	{ScriptAdmit, admitSrc, &admitScript},
	{ScriptAdmitPace, admitPaceSrc, &admitPaceScript},
	{ScriptCounts, countsSrc, &countsScript},
	{ScriptPace, paceSrc, &paceScript},
	{ScriptRelease, releaseSrc, &releaseScript},
	{ScriptQueue, queueSrc, &queueScript},
	{ScriptPause, pauseSrc, &pauseScript},
	{ScriptEvidence, evidenceSrc, &evidenceScript},
	{ScriptRefund, refundSrc, &refundScript},
	{ScriptRate, rateSrc, &rateScript},
	{ScriptRespace, respaceSrc, &respaceScript},
	{ScriptHeartbeat, heartbeatSrc, &heartbeatScript},
	{ScriptCallsOccupy, callsOccupySrc, &callsOccupyScript},
	{ScriptCallsFree, callsFreeSrc, &callsFreeScript},
	{ScriptCallsRefresh, callsRefreshSrc, &callsRefreshScript},
	{ScriptCallsCount, callsCountSrc, &callsCountScript},
	{ScriptOverrides, overridesSrc, &overridesScript},
	{ScriptDialogsEnded, dialogsEndedSrc, &dialogsEndedScript},
	{ScriptLive, liveSrc, &liveScript},
	{ScriptService, serviceSrc, &serviceScript},
	{ScriptRebook, rebookSrc, &rebookScript},
}

// loadOn is Load on one server.
func loadOn(ctx context.Context, c redis.Cmdable) error {
	hashes := make([]string, len(allScripts))
	for i, s := range allScripts {
		hashes[i] = (*s.script).Hash()
	}
	have, err := c.ScriptExists(ctx, hashes...).Result()
	if err != nil {
		return fmt.Errorf("lua: script exists: %w", err)
	}
	if len(have) != len(hashes) {
		return fmt.Errorf("%w: SCRIPT EXISTS answered %d flags for %d scripts", ErrReply, len(have), len(hashes))
	}
	pipe := c.Pipeline()
	var cmds []*redis.StringCmd
	var missing []int
	for i, s := range allScripts {
		if !have[i] {
			// Never s.script.Load on a pipeline: it sets the script's
			// hash to the reply, empty before the pipeline runs.
			cmds = append(cmds, pipe.ScriptLoad(ctx, variant+s.src))
			missing = append(missing, i)
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	for i, cmd := range cmds {
		s := allScripts[missing[i]]
		sha, err := cmd.Result()
		if err != nil {
			return fmt.Errorf("lua: load %s.lua: %w", s.name, err)
		}
		if want := (*s.script).Hash(); sha != want {
			return fmt.Errorf("%w: SCRIPT LOAD of %s.lua answered %q, want %q", ErrReply, s.name, sha, want)
		}
	}
	return nil
}

// SHA returns the SHA1 digest of a script by name (ScriptAdmit, …), as used
// by EVALSHA; "" for an unknown name. Benchmarks and operators use it to run a
// script by hand.
func SHA(name string) string {
	for _, s := range allScripts {
		if s.name == name {
			return (*s.script).Hash()
		}
	}
	return ""
}

// Micros converts d to integer microseconds, rounding up: a window or an
// interval is never shortened by the conversion.
func Micros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us
}

// MicrosFloor converts d to integer microseconds, rounding down: a maximum
// wait is never lengthened by the conversion. Negative durations become 0.
func MicrosFloor(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(d / time.Microsecond)
}

// Time converts Redis TIME in microseconds to a time.Time.
func Time(us int64) time.Time { return time.UnixMicro(us) }

// AdmitBucket is one bucket of an admit.lua call: a rolling window, or a
// token bucket when RateMicros > 0.
type AdmitBucket struct {
	// Key is the bucket's sorted set: the calls of a rolling window, or the
	// calls a token bucket remembers for WindowUS to spot duplicates. A
	// token bucket's level lives in the hash TokenKey(Key).
	Key string
	// Limit is the number of calls the window may hold, or the token
	// bucket's capacity in tokens (its burst).
	Limit int64
	// WindowUS is the window in integer µs (> 0).
	WindowUS int64
	// RateMicros is 0 for a rolling window; for a token bucket its refill
	// in micro-tokens per second (cps × 1e6).
	RateMicros int64
	// Over is what admit.lua does with a call over the bucket's limit:
	// OverRefuse, OverShadow or OverCount (counts.lua and refund.lua
	// ignore it).
	Over int64
}

// What admit.lua does with a call over a bucket's limit (AdmitBucket.Over).
const (
	// OverRefuse refuses the call: it is counted nowhere.
	OverRefuse = 0
	// OverShadow lets it through without counting it in this bucket.
	OverShadow = 1
	// OverCount lets it through and counts it in this bucket anyway.
	OverCount = 2
)

// MaxTokens is the largest token bucket capacity a script accepts: its level
// in micro-tokens, times 1000 for the TTL in ms, stays an exact integer in
// Lua's doubles (below 2^53).
const MaxTokens = 1_000_000

// MaxRateMicros is the largest token bucket rate, in micro-tokens per
// second, a script accepts (1e6 tokens per second); every product the
// scripts form with it stays below 2^53.
const MaxRateMicros = 1_000_000 * 1_000_000

// scriptArgs builds KEYS and ARGV shared by admit.lua, counts.lua and
// refund.lua: one key per bucket, then the hash of each token bucket; three
// values per bucket (limit, window µs, rate), and a fourth (Over) when
// withOver, after member when withMember.
func scriptArgs(script, member string, withMember, withOver bool, buckets []AdmitBucket) ([]string, []any, error) {
	if len(buckets) == 0 {
		return nil, nil, fmt.Errorf("%w: %s needs at least one bucket", ErrArgs, script)
	}
	keys := make([]string, len(buckets), 2*len(buckets))
	args := make([]any, 0, 1+4*len(buckets))
	if withMember {
		args = append(args, member)
	}
	for i, b := range buckets {
		switch {
		case b.WindowUS <= 0:
			return nil, nil, fmt.Errorf("%w: bucket %q: window %dµs must be > 0", ErrArgs, b.Key, b.WindowUS)
		case b.RateMicros < 0 || b.RateMicros > MaxRateMicros:
			return nil, nil, fmt.Errorf("%w: bucket %q: rate %d µtokens/s must be 0 (rolling window) or 1 to %d", ErrArgs, b.Key, b.RateMicros, int64(MaxRateMicros))
		case b.RateMicros > 0 && (b.Limit < 1 || b.Limit > MaxTokens):
			return nil, nil, fmt.Errorf("%w: token bucket %q: capacity %d must be 1 to %d", ErrArgs, b.Key, b.Limit, MaxTokens)
		case b.Over < OverRefuse || b.Over > OverCount:
			return nil, nil, fmt.Errorf("%w: bucket %q: over %d must be %d, %d or %d", ErrArgs, b.Key, b.Over, OverRefuse, OverShadow, OverCount)
		}
		keys[i] = b.Key
		args = append(args, b.Limit, b.WindowUS, b.RateMicros)
		if withOver {
			args = append(args, b.Over)
		}
	}
	for _, b := range buckets {
		if b.RateMicros > 0 {
			keys = append(keys, TokenKey(b.Key))
		}
	}
	return keys, args, nil
}

// AdmitReply is the decoded reply of admit.lua.
type AdmitReply struct {
	// Admitted reports the call was admitted (added to every bucket, or
	// already present when Duplicate).
	Admitted bool
	// Refused is the 0-based index of the refusing bucket, -1 when admitted.
	Refused int
	// Duplicate reports the member was already in a bucket; nothing was added.
	Duplicate bool
	// NowUS is Redis TIME at the decision, in µs.
	NowUS int64
	// RetryAfterUS is, when refused, the µs until the refusing bucket has room.
	RetryAfterUS int64
	// Counts holds the calls in each bucket's window after the decision.
	Counts []int64
	// Over reports, per bucket, that it was over its limit: it refused the
	// call, or let it through (OverShadow, OverCount).
	Over []bool
}

// Admit runs admit.lua: one atomic decision over every bucket. All keys must
// hash to one Redis Cluster slot (see Slot); callers split cross-slot
// decisions themselves.
func Admit(ctx context.Context, c redis.Scripter, member string, buckets []AdmitBucket) (AdmitReply, error) {
	keys, args, err := scriptArgs(ScriptAdmit, member, true, true, buckets)
	if err != nil {
		return AdmitReply{}, err
	}
	v, err := admitScript.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return AdmitReply{}, err
	}
	return DecodeAdmit(v, len(buckets))
}

// DecodeAdmit decodes an admit.lua reply for n buckets. It never panics; a
// reply of the wrong shape is an error wrapping ErrReply.
func DecodeAdmit(v any, n int) (AdmitReply, error) {
	a, err := ints(v, 5+2*n, ScriptAdmit)
	if err != nil {
		return AdmitReply{}, err
	}
	r := AdmitReply{
		Admitted:     a[0] == 1,
		Refused:      int(a[1]),
		Duplicate:    a[2] == 1,
		NowUS:        a[3],
		RetryAfterUS: a[4],
		Counts:       a[5 : 5+n],
		Over:         make([]bool, n),
	}
	for i, o := range a[5+n:] {
		if o != 0 && o != 1 {
			return AdmitReply{}, fmt.Errorf("%w: admit: over flag %d for bucket %d not 0 or 1", ErrReply, o, i)
		}
		r.Over[i] = o == 1
	}
	switch {
	case a[0] != 0 && a[0] != 1, a[2] != 0 && a[2] != 1:
		return AdmitReply{}, fmt.Errorf("%w: admit: flags %d/%d not 0 or 1", ErrReply, a[0], a[2])
	case r.Admitted && r.Refused != -1, !r.Admitted && (a[1] < 0 || a[1] >= int64(n)):
		return AdmitReply{}, fmt.Errorf("%w: admit: refused index %d with admitted=%v for %d buckets", ErrReply, a[1], r.Admitted, n)
	case r.Duplicate && !r.Admitted:
		return AdmitReply{}, fmt.Errorf("%w: admit: duplicate but not admitted", ErrReply)
	case r.RetryAfterUS < 0:
		return AdmitReply{}, fmt.Errorf("%w: admit: negative retry-after %d", ErrReply, r.RetryAfterUS)
	}
	for i, c := range r.Counts {
		if c < 0 {
			return AdmitReply{}, fmt.Errorf("%w: admit: negative count %d for bucket %d", ErrReply, c, i)
		}
	}
	return r, nil
}

// CountsReply is the decoded reply of counts.lua.
type CountsReply struct {
	// NowUS is Redis TIME at the read, in µs.
	NowUS int64
	// Counts holds the calls in each bucket's window.
	Counts []int64
}

// Counts runs counts.lua: the calls in each rolling window and the tokens in
// use in each token bucket, without writing. Keys must share one Cluster
// slot.
func Counts(ctx context.Context, c redis.Scripter, buckets []AdmitBucket) (CountsReply, error) {
	keys, args, err := scriptArgs(ScriptCounts, "", false, false, buckets)
	if err != nil {
		return CountsReply{}, err
	}
	v, err := countsScript.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return CountsReply{}, err
	}
	return DecodeCounts(v, len(buckets))
}

// Refund runs refund.lua: member leaves every bucket, and each token bucket
// that had admitted it gets its token back. It undoes an Admit of the same
// buckets (the cross-slot path) and returns the number of buckets member was
// removed from. Keys must share one Cluster slot.
func Refund(ctx context.Context, c redis.Scripter, member string, buckets []AdmitBucket) (int, error) {
	keys, args, err := scriptArgs(ScriptRefund, member, true, false, buckets)
	if err != nil {
		return 0, err
	}
	v, err := refundScript.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return 0, err
	}
	return DecodeRefund(v, len(buckets))
}

// DecodeRefund decodes a refund.lua reply for n buckets: an integer from 0
// to n. It never panics.
func DecodeRefund(v any, n int) (int, error) {
	r, ok := v.(int64)
	if !ok || r < 0 || r > int64(n) {
		return 0, fmt.Errorf("%w: refund: got %T %v, want integer 0 to %d", ErrReply, v, v, n)
	}
	return int(r), nil
}

// DecodeCounts decodes a counts.lua reply for n buckets. It never panics.
func DecodeCounts(v any, n int) (CountsReply, error) {
	a, err := ints(v, 1+n, ScriptCounts)
	if err != nil {
		return CountsReply{}, err
	}
	for i, c := range a[1:] {
		if c < 0 {
			return CountsReply{}, fmt.Errorf("%w: counts: negative count %d for bucket %d", ErrReply, c, i)
		}
	}
	return CountsReply{NowUS: a[0], Counts: a[1:]}, nil
}

// PaceReply is the decoded reply of pace.lua.
type PaceReply struct {
	// OK reports a slot was reserved (or was already held by the member),
	// or a turn booked (Booked).
	OK bool
	// WaitUS is slot - now: the wait, or the wait it would have been; for
	// a paused carrier, what is left of the pause's span; for a booking,
	// until the call must ask again.
	WaitUS int64
	// NowUS is Redis TIME at the decision, in µs.
	NowUS int64
	// Paused reports a refusal because the carrier is paused (or half-open
	// with its probe taken by another call).
	Paused bool
	// Probe reports a slot granted as the half-open probe of a pause.
	Probe bool
	// Booked reports a booking of the call's share's turn: the call must
	// run Pace again (same member) WaitUS from now to take its slot.
	Booked bool
}

// PauseKey is the hash pause.lua keeps a carrier's pause in, beside its
// slot set (same hash tag, so same Cluster slot).
func PauseKey(slotKey string) string { return slotKey + ":pause" }

// FairKeys are the hash and the sorted set pace.lua keeps a carrier's
// fair shares in, beside its slot set (same hash tag): the shares
// waiting, their turns and weights, the fair calls' records; and when
// each of those expires.
func FairKeys(slotKey string) (shares, expiries string) {
	return slotKey + ":fair", slotKey + ":fairx"
}

// PaceShare is the share of a carrier's slots a pace.lua call draws on
// (see pace.lua); the zero PaceShare is none: first come, first served.
type PaceShare struct {
	// Name is the share's name ("" = none).
	Name string
	// Weight is its weight, 1 to 1000.
	Weight int64
	// LeadUS is how far from its turn a call's slot may be (> 0).
	LeadUS int64
	// KeepUS is how long past max_wait a fair call's record lives (> 0).
	KeepUS int64
	// SumCap caps the sum of the weights waiting (> 0).
	SumCap int64
}

// Pace runs pace.lua: reserve the next slot of key for member, unless the
// wait would exceed maxWaitUS or the carrier is paused (its pause hash is
// PauseKey(key)); a half-open probe claim lasts claimUS. With a share
// (sh.Name set) the carrier's slots are shared fairly (its state in
// FairKeys(key)) and the reply may be a booking.
func Pace(ctx context.Context, c redis.Scripter, key, member string, intervalUS, maxWaitUS, claimUS int64, sh PaceShare) (PaceReply, error) {
	pc := PaceCall{Key: key, Member: member, IntervalUS: intervalUS, MaxWaitUS: maxWaitUS, ClaimUS: claimUS, Share: sh}
	if err := pc.check(); err != nil {
		return PaceReply{}, err
	}
	keys, args := pc.args()
	v, err := paceScript.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return PaceReply{}, err
	}
	return DecodePace(v)
}

// PaceCall is the arguments of one pace.lua call (see Pace): reserve the
// next slot of Key for Member within MaxWaitUS.
type PaceCall struct {
	Key, Member string
	// IntervalUS is the carrier's slot interval (> 0); MaxWaitUS the
	// longest acceptable wait (a negative one is 0); ClaimUS how long a
	// half-open probe claim lasts (> 0).
	IntervalUS, MaxWaitUS, ClaimUS int64
	// Share is the share of the carrier's slots the call draws on.
	Share PaceShare
}

// check reports arguments pace.lua cannot run with.
func (pc PaceCall) check() error {
	sh := pc.Share
	if pc.IntervalUS <= 0 || pc.ClaimUS <= 0 {
		return fmt.Errorf("%w: slot set %q: interval %dµs and claim %dµs must be > 0", ErrArgs, pc.Key, pc.IntervalUS, pc.ClaimUS)
	}
	if sh.Name != "" && (sh.Weight < 1 || sh.Weight > 1000 || sh.LeadUS <= 0 || sh.KeepUS <= 0 || sh.SumCap <= 0) {
		return fmt.Errorf("%w: slot set %q: share %q: weight %d must be 1-1000, lead %dµs, keep %dµs and cap %d > 0",
			ErrArgs, pc.Key, sh.Name, sh.Weight, sh.LeadUS, sh.KeepUS, sh.SumCap)
	}
	return nil
}

// args builds pace.lua's KEYS and ARGV. Without a share the share's
// five arguments are left off (pace.lua reads an absent ARGV[5] as none):
// every argument costs the script a string to intern.
func (pc PaceCall) args() ([]string, []any) {
	fair, exp := FairKeys(pc.Key)
	keys := []string{pc.Key, PauseKey(pc.Key), fair, exp}
	sh := pc.Share
	if sh.Name == "" {
		return keys, []any{pc.Member, pc.IntervalUS, max(pc.MaxWaitUS, 0), pc.ClaimUS}
	}
	return keys, []any{pc.Member, pc.IntervalUS, max(pc.MaxWaitUS, 0), pc.ClaimUS, sh.Name, sh.Weight, sh.LeadUS, sh.KeepUS, sh.SumCap}
}

// DecodePace decodes a pace.lua reply. It never panics.
func DecodePace(v any) (PaceReply, error) {
	a, err := ints(v, 4, ScriptPace)
	if err != nil {
		return PaceReply{}, err
	}
	if a[0] != 0 && a[0] != 1 {
		return PaceReply{}, fmt.Errorf("%w: pace: flag %d not 0 or 1", ErrReply, a[0])
	}
	if a[1] < 0 {
		return PaceReply{}, fmt.Errorf("%w: pace: negative wait %d", ErrReply, a[1])
	}
	if a[3] < 0 || a[3] > 3 || (a[3] == 1 && a[0] == 1) || ((a[3] == 2 || a[3] == 3) && a[0] == 0) {
		return PaceReply{}, fmt.Errorf("%w: pace: state %d with flag %d", ErrReply, a[3], a[0])
	}
	return PaceReply{OK: a[0] == 1, WaitUS: a[1], NowUS: a[2], Paused: a[3] == 1, Probe: a[3] == 2, Booked: a[3] == 3}, nil
}

// Release runs release.lua: remove member's slot from key, or its booking
// (giving its share the turn back). It reports whether either was removed.
func Release(ctx context.Context, c redis.Scripter, key, member string) (bool, error) {
	fair, exp := FairKeys(key)
	v, err := releaseScript.Run(ctx, c, []string{key, fair, exp}, member).Result()
	if err != nil {
		return false, err
	}
	return DecodeRelease(v)
}

// PauseOp is one operation of pause.lua.
type PauseOp struct {
	// Op is "set", "get", "done", "open" or "lift".
	Op string
	// SpanUS (set) is the pause's span from now, > 0; KeepUS how long
	// the record outlives it, >= 0; Reason says why.
	SpanUS, KeepUS int64
	Reason         string
	// Member and OK (done): the half-open probe call of Member ended,
	// answered (OK) or not.
	Member string
	OK     bool
	// MinAgeUS (open): the least age of a pause a good OPTIONS probe ends.
	MinAgeUS int64
}

// PauseReply is the decoded reply of pause.lua.
type PauseReply struct {
	// Paused reports a pause in force after the op (span running or
	// half-open).
	Paused bool
	// UntilUS and SinceUS are the end of its span and its start (Redis
	// TIME µs); for an op that ended the pause, those of the ended one.
	UntilUS, SinceUS int64
	// NowUS is Redis TIME at the op.
	NowUS int64
	// Reason says why the carrier was paused.
	Reason string
	// Probing reports a live half-open probe claim.
	Probing bool
	// Changed reports that the op changed the pause.
	Changed bool
}

// Pause runs pause.lua on the pause of the carrier whose slot set is key.
func Pause(ctx context.Context, c redis.Scripter, key string, op PauseOp) (PauseReply, error) {
	keys := []string{key, PauseKey(key)}
	var args []any
	switch op.Op {
	case "set":
		if op.SpanUS <= 0 || op.KeepUS < 0 {
			return PauseReply{}, fmt.Errorf("%w: pause %q: span %dµs must be > 0 and keep %dµs >= 0", ErrArgs, key, op.SpanUS, op.KeepUS)
		}
		args = []any{op.Op, op.SpanUS, op.Reason, op.KeepUS}
	case "get", "lift":
		args = []any{op.Op}
	case "done":
		if op.Member == "" {
			return PauseReply{}, fmt.Errorf("%w: pause %q: done needs a member", ErrArgs, key)
		}
		ok := 0
		if op.OK {
			ok = 1
		}
		args = []any{op.Op, op.Member, ok}
	case "open":
		if op.MinAgeUS < 0 {
			return PauseReply{}, fmt.Errorf("%w: pause %q: min age %dµs must be >= 0", ErrArgs, key, op.MinAgeUS)
		}
		args = []any{op.Op, op.MinAgeUS}
	default:
		return PauseReply{}, fmt.Errorf("%w: pause %q: unknown op %q", ErrArgs, key, op.Op)
	}
	v, err := pauseScript.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return PauseReply{}, err
	}
	return DecodePause(v)
}

// DecodePause decodes a pause.lua reply. It never panics.
func DecodePause(v any) (PauseReply, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 7 {
		return PauseReply{}, fmt.Errorf("%w: pause: got %T %v, want 7 elements", ErrReply, v, v)
	}
	var n [7]int64
	for _, i := range []int{0, 1, 2, 3, 5, 6} {
		x, ok := a[i].(int64)
		if !ok || x < 0 {
			return PauseReply{}, fmt.Errorf("%w: pause: element %d is %T %v, want an integer >= 0", ErrReply, i, a[i], a[i])
		}
		n[i] = x
	}
	reason, ok := a[4].(string)
	if !ok || n[0] > 1 || n[5] > 1 || n[6] > 1 || (n[0] == 1 && n[2] > n[1]) {
		return PauseReply{}, fmt.Errorf("%w: pause: got %v", ErrReply, a)
	}
	return PauseReply{Paused: n[0] == 1, UntilUS: n[1], SinceUS: n[2], NowUS: n[3], Reason: reason, Probing: n[5] == 1, Changed: n[6] == 1}, nil
}

// EvidenceKeys are the sorted sets evidence.lua keeps beside a carrier's
// slot set (same hash tag): its callers and the peers it gave overload
// answers.
func EvidenceKeys(slotKey string) (callers, overloaded string) {
	return slotKey + ":callers", slotKey + ":overloaded"
}

// EvidenceReply is the decoded reply of evidence.lua.
type EvidenceReply struct {
	// Callers and Overloaded count peers within their windows.
	Callers, Overloaded int64
	// NowUS is Redis TIME at the call.
	NowUS int64
}

// Evidence runs evidence.lua: peer called the carrier whose slot set is
// key (overload: and got an overload answer); it returns the peers that
// called within callersUS and those overloaded within overloadUS.
func Evidence(ctx context.Context, c redis.Scripter, key, peer string, overload bool, callersUS, overloadUS int64) (EvidenceReply, error) {
	if peer == "" || callersUS <= 0 || overloadUS <= 0 {
		return EvidenceReply{}, fmt.Errorf("%w: evidence %q: need a peer (got %q) and windows > 0 (got %d, %d µs)", ErrArgs, key, peer, callersUS, overloadUS)
	}
	over := 0
	if overload {
		over = 1
	}
	callers, overloaded := EvidenceKeys(key)
	v, err := evidenceScript.Run(ctx, c, []string{callers, overloaded}, peer, over, callersUS, overloadUS).Result()
	if err != nil {
		return EvidenceReply{}, err
	}
	return DecodeEvidence(v)
}

// DecodeEvidence decodes an evidence.lua reply. It never panics.
func DecodeEvidence(v any) (EvidenceReply, error) {
	a, err := ints(v, 3, ScriptEvidence)
	if err != nil {
		return EvidenceReply{}, err
	}
	if a[0] < 1 || a[1] < 0 || a[2] < 0 {
		return EvidenceReply{}, fmt.Errorf("%w: evidence: got %v, want at least one caller", ErrReply, a)
	}
	return EvidenceReply{Callers: a[0], Overloaded: a[1], NowUS: a[2]}, nil
}

// RateKey is the hash rate.lua keeps an adaptive carrier's effective rate
// in, beside the carrier's slot set (same hash tag, so same Cluster slot).
func RateKey(slotKey string) string { return slotKey + ":rate" }

// RateArgs are the AIMD settings of one rate.lua call; rates are integer
// milli-cps (fractions never travel as Lua floats).
type RateArgs struct {
	// MaxM is the configured cps in milli-cps (> 0).
	MaxM int64
	// MinM is the floor in milli-cps (1..MaxM).
	MinM int64
	// DecreasePermille is the factor of a decrease (1-999).
	DecreasePermille int64
	// IncreaseM is the milli-cps added per second (> 0).
	IncreaseM int64
	// HoldUS is the least time between two decreases, in µs (>= 0).
	HoldUS int64
	// Overload asks for a decrease (the carrier pushed back); false reads.
	Overload bool
}

// RateReply is the decoded reply of rate.lua.
type RateReply struct {
	// RateM is the effective rate now, in milli-cps.
	RateM int64
	// NowUS is Redis TIME at the decision, in µs.
	NowUS int64
	// Cut reports that this call decreased the rate.
	Cut bool
	// CutUS is Redis TIME of the last decrease, in µs (0: none
	// remembered).
	CutUS int64
}

// Rate runs rate.lua on the rate hash of the carrier whose slot set is
// slotKey (RateKey): the carrier's effective rate now, decreased first
// when a.Overload (which also removes the slots still in the future).
func Rate(ctx context.Context, c redis.Scripter, slotKey string, a RateArgs) (RateReply, error) {
	key := RateKey(slotKey)
	switch {
	case a.MaxM <= 0, a.MinM < 1, a.MinM > a.MaxM:
		return RateReply{}, fmt.Errorf("%w: rate %q: need 1 <= min %d <= max %d milli-cps", ErrArgs, key, a.MinM, a.MaxM)
	case a.DecreasePermille < 1 || a.DecreasePermille > 999:
		return RateReply{}, fmt.Errorf("%w: rate %q: decrease %d permille not in 1-999", ErrArgs, key, a.DecreasePermille)
	case a.IncreaseM <= 0 || a.HoldUS < 0:
		return RateReply{}, fmt.Errorf("%w: rate %q: increase %d must be > 0 and hold %d >= 0", ErrArgs, key, a.IncreaseM, a.HoldUS)
	}
	overload := 0
	if a.Overload {
		overload = 1
	}
	v, err := rateScript.Run(ctx, c, []string{key, slotKey}, a.MaxM, a.MinM, a.DecreasePermille, a.IncreaseM, a.HoldUS, overload).Result()
	if err != nil {
		return RateReply{}, err
	}
	return DecodeRate(v, a.MinM, a.MaxM)
}

// DecodeRate decodes a rate.lua reply whose rate must lie in [minM, maxM].
// It never panics.
func DecodeRate(v any, minM, maxM int64) (RateReply, error) {
	a, err := ints(v, 4, ScriptRate)
	if err != nil {
		return RateReply{}, err
	}
	if a[0] < minM || a[0] > maxM || a[1] < 0 || (a[2] != 0 && a[2] != 1) || a[3] < 0 || a[3] > a[1] {
		return RateReply{}, fmt.Errorf("%w: rate: got %v, want a rate in [%d, %d], a time, a 0/1 flag and a time of cut", ErrReply, a, minM, maxM)
	}
	return RateReply{RateM: a[0], NowUS: a[1], Cut: a[2] == 1, CutUS: a[3]}, nil
}

// RespaceReply is the decoded reply of respace.lua.
type RespaceReply struct {
	// NowUS is Redis TIME at the call, in µs: a slot decided before it was
	// spaced for the old limit.
	NowUS int64
	// Removed is the number of slots removed.
	Removed int64
}

// Respace runs respace.lua on the carrier whose slot set is slotKey: the
// slots still in the future whose members start with prefix (one
// process's, never empty) are removed, its limit lowered.
func Respace(ctx context.Context, c redis.Scripter, slotKey, prefix string) (RespaceReply, error) {
	if prefix == "" {
		return RespaceReply{}, fmt.Errorf("%w: respace %q: an empty member prefix would remove every node's slots", ErrArgs, slotKey)
	}
	v, err := respaceScript.Run(ctx, c, []string{slotKey}, prefix).Result()
	if err != nil {
		return RespaceReply{}, err
	}
	return DecodeRespace(v)
}

// DecodeRespace decodes a respace.lua reply. It never panics.
func DecodeRespace(v any) (RespaceReply, error) {
	a, err := ints(v, 2, ScriptRespace)
	if err != nil {
		return RespaceReply{}, err
	}
	if a[0] < 0 || a[1] < 0 {
		return RespaceReply{}, fmt.Errorf("%w: respace: got %v, want a time and a count", ErrReply, a)
	}
	return RespaceReply{NowUS: a[0], Removed: a[1]}, nil
}

// DecodeRelease decodes a release.lua reply. It never panics.
func DecodeRelease(v any) (bool, error) {
	n, ok := v.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, fmt.Errorf("%w: release: got %T %v, want integer 0 or 1", ErrReply, v, v)
	}
	return n == 1, nil
}

// QueueReply is the decoded reply of queue.lua.
type QueueReply struct {
	// NowUS is Redis TIME at the read, in µs.
	NowUS int64
	// Queued is the number of slots still in the future and of turns
	// booked.
	Queued int64
	// WaitUS is the least wait of a call reserving now.
	WaitUS int64
	// Sent is the number of slots in the last second (now - 1 s, now].
	Sent int64
}

// Queue runs queue.lua: the calls waiting for a slot of key and the wait a
// new reservation would at least have. It writes nothing.
func Queue(ctx context.Context, c redis.Scripter, key string, intervalUS int64) (QueueReply, error) {
	if intervalUS <= 0 {
		return QueueReply{}, fmt.Errorf("%w: slot set %q: interval %dµs must be > 0", ErrArgs, key, intervalUS)
	}
	fair, _ := FairKeys(key)
	v, err := queueScript.Run(ctx, c, []string{key, fair}, intervalUS).Result()
	if err != nil {
		return QueueReply{}, err
	}
	return DecodeQueue(v)
}

// DecodeQueue decodes a queue.lua reply. It never panics.
func DecodeQueue(v any) (QueueReply, error) {
	a, err := ints(v, 4, ScriptQueue)
	if err != nil {
		return QueueReply{}, err
	}
	if a[1] < 0 || a[2] < 0 || a[3] < 0 {
		return QueueReply{}, fmt.Errorf("%w: queue: negative queued %d, wait %d or sent %d", ErrReply, a[1], a[2], a[3])
	}
	return QueueReply{NowUS: a[0], Queued: a[1], WaitUS: a[2], Sent: a[3]}, nil
}

// ints checks that v is an array of exactly n integers.
func ints(v any, n int, script string) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s: got %T, want array", ErrReply, script, v)
	}
	if len(arr) != n {
		return nil, fmt.Errorf("%w: %s: got %d elements, want %d", ErrReply, script, len(arr), n)
	}
	out := make([]int64, n)
	for i, e := range arr {
		x, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: %s: element %d is %T, want integer", ErrReply, script, i, e)
		}
		out[i] = x
	}
	return out, nil
}
