package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/internal/panics"
	"github.com/cpsguard/cpsguard/internal/storescope"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/pacing"
)

// Policies for Options.OnError (store.on_error).
const (
	// PolicyLocal decides on the in-process stores, each limit divided by the
	// number of live nodes last seen, until Redis answers again.
	PolicyLocal = "local"
	// PolicyAdmit admits every call without admission limits (fail open).
	// Carriers are still paced, on the in-process slots (see Failover).
	PolicyAdmit = "admit"
	// PolicyReject refuses every call (fail closed): Admit and Reserve return
	// ErrStoreDown.
	PolicyReject = "reject"
)

// Modes reported by Failover.Mode.
const (
	ModeRedis    = "redis"    // the shared Redis store decides
	ModeFallback = "fallback" // Redis failed; on_error decides
	ModeLocal    = "local"    // no Redis configured: in-process store only
)

// ErrStoreDown is returned under PolicyReject while Redis is unusable.
var ErrStoreDown = errors.New("store: redis unavailable and store.on_error is reject")

// Pinger is what the probe needs of a Redis client.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Options configures a Failover.
type Options struct {
	// Redis and RedisSlots are the shared stores; nil for a single node on
	// the in-process store.
	Redis      admission.Store
	RedisSlots pacing.SlotStore
	// Local and LocalSlots are the in-process stores (required).
	Local      admission.Store
	LocalSlots pacing.SlotStore
	// Probe checks Redis while in fallback (required with Redis).
	Probe Pinger
	// Nodes counts live nodes; nil means 1.
	Nodes *Heartbeat
	// Policy is PolicyLocal (default), PolicyAdmit or PolicyReject.
	Policy string
	// ProbeInterval is the pause between probes in fallback (default 250 ms).
	ProbeInterval time.Duration
	// RecoverAfter is how many probes in a row must succeed before the node
	// goes back to Redis (default 3): a Redis that answers PING but is slow
	// or flapping must not make the node switch back and forth, since every
	// switch starts the other store without the last second's history.
	RecoverAfter int
	// Timeout is store.redis.timeout (default 50 ms): Quiet's default
	// derives from it.
	Timeout time.Duration
	// Quiet is how long Redis must have answered no call before a timeout
	// switches to the fallback (default 5 × Timeout, at least 250 ms): a
	// node that gets no CPU for a moment (a saturated scheduler, a noisy
	// neighbour) reads every reply late without Redis being slow. Refused
	// connections and other errors switch at once.
	Quiet time.Duration
	// OnMode is called once per switch with the new mode.
	OnMode func(mode string)
	// Panics logs and counts a panic of the probe (nil: logs only).
	Panics *panics.Reporter
	Logger *slog.Logger
}

// Failover is an admission.Store and a pacing.SlotStore that decides on Redis
// while Redis answers and on the in-process stores (per Policy) from the first
// Redis error until a background probe sees Redis answer again. A call that
// meets a Redis error is decided by the fallback at once, so no call is lost
// and none waits longer than the Redis timeout allows. A timeout switches
// only when Redis answered no other call within the last Quiet (see fail).
//
// Failover is safe for concurrent use.
type Failover struct {
	o    Options
	down atomic.Bool
	mu   sync.Mutex // serialises mode switches and their logs
	// lastOK is when Redis last answered a call (Unix nanoseconds).
	lastOK atomic.Int64
	// confirming is set while a confirm probe runs.
	confirming atomic.Bool
	// carefulSince is when the last careful span of admissions began,
	// gateSince the last of the send gate (those and a switch to the
	// fallback), carefulLogged when one was last logged (Unix
	// nanoseconds; 0: never): careful.go.
	carefulSince, gateSince, carefulLogged atomic.Int64
	// lostAt is when the schedule in use last lost the carriers' slots
	// (Unix nanoseconds; 0: never): careful.go, Lost. noScriptAt is when
	// a NOSCRIPT last counted as a loss.
	lostAt, noScriptAt atomic.Int64
	// lostLocal reports that the last loss was the in-process schedule's
	// alone (markLostLocal).
	lostLocal atomic.Bool
	// recounts are the decisions made on the fallback while Redis is in
	// use, to be counted in Redis (recount.go); nil without Redis.
	recounts chan recount
}

var (
	_ admission.Store  = (*Failover)(nil)
	_ pacing.SlotStore = (*Failover)(nil)
	_ pacing.Careful   = (*Failover)(nil)
	_ pacing.Rebooker  = (*Failover)(nil)
)

// NewFailover returns a Failover in Redis mode (or local mode without Redis).
func NewFailover(o Options) *Failover {
	if o.Policy == "" {
		o.Policy = PolicyLocal
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 250 * time.Millisecond
	}
	if o.RecoverAfter <= 0 {
		o.RecoverAfter = 3
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.Quiet <= 0 {
		o.Quiet = BackgroundTimeout(o.Timeout)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Failover{o: o}
	if o.Redis != nil {
		f.recounts = make(chan recount, recountQueue)
	}
	return f
}

// Mode reports which store decides now: ModeRedis, ModeFallback or ModeLocal.
func (f *Failover) Mode() string {
	switch {
	case f.o.Redis == nil:
		return ModeLocal
	case f.down.Load():
		return ModeFallback
	default:
		return ModeRedis
	}
}

// Usable reports whether calls can be decided now: always, except in fallback
// under PolicyReject.
func (f *Failover) Usable() bool {
	return !(f.Mode() == ModeFallback && f.o.Policy == PolicyReject)
}

func (f *Failover) redisInUse() bool { return f.o.Redis != nil && !f.down.Load() }

// redisFor reports whether an operation on ctx goes to Redis: Redis is in
// use and has not failed ctx's call already (storescope: a call meets at
// most one Redis timeout, not one per operation of its setup).
func (f *Failover) redisFor(ctx context.Context) bool {
	return f.redisInUse() && !storescope.Failed(ctx)
}

// failCall is fail for an operation of ctx's call, whose later operations
// then go to the fallback (storescope).
func (f *Failover) failCall(ctx context.Context, op string, err error) {
	storescope.Fail(ctx)
	f.fail(op, err)
}

// ok records that Redis answered a call.
func (f *Failover) ok() { f.lastOK.Store(time.Now().UnixNano()) }

// answeredLately reports whether Redis answered a call within the last
// Quiet.
func (f *Failover) answeredLately() bool {
	return time.Since(time.Unix(0, f.lastOK.Load())) < f.o.Quiet
}

// isTimeout reports a deadline error: the reply did not come in time,
// which says as much about this node (a reply read late by a saturated
// scheduler) as about Redis.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// connLost reports an error of a connection that was closed under the
// command (EOF, a reset, a broken pipe): a pooled connection Redis, a
// proxy or a load balancer closed while it was idle, whose close had not
// reached this node when the command took it. It says nothing of Redis
// itself; a Redis that is gone refuses the new connection.
func connLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// fail switches to fallback after a Redis error (once per outage). A
// timeout while Redis answered another call within the last Quiet is not
// an outage: on a CPU-saturated node some replies are read late while
// Redis is well (issue 15); nor is a connection lost under a command
// then (connLost). That call alone is decided by the fallback (per
// Policy). Any other error (refused, a hostile reply) switches at once; a
// timeout or a lost connection after Quiet without an answer switches
// once a probe of Redis (Options.Probe, within Quiet) gets no answer
// either (confirm).
func (f *Failover) fail(op string, err error) {
	if f.o.Redis == nil || f.down.Load() {
		return
	}
	if isTimeout(err) || connLost(err) {
		if f.answeredLately() {
			return
		}
		if f.o.Probe != nil {
			// No answer within Quiet may be for want of asking: a node
			// with few calls has no recent answer, and one slow reply (a
			// spike every node saw) switched it alone while the busy
			// nodes stayed on Redis, a pool half on each (h61). Ask Redis
			// once, within Quiet, and switch only if it does not answer;
			// calls meanwhile are decided one by one, as on a busy node.
			f.confirm(op, err)
			return
		}
	}
	f.switchDown(op, err)
}

// confirm probes Redis in the background (one at a time) after a timeout
// or a lost connection of op with no answer within Quiet: an answer
// counts as one (the node stays), none switches to the fallback.
func (f *Failover) confirm(op string, err error) {
	if !f.confirming.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer f.confirming.Store(false)
		perr := f.probe(context.Background())
		if perr == nil {
			f.ok()
			return
		}
		f.switchDown(op, err, "probe_error", perr)
	}()
}

// switchDown switches to the fallback (once per outage) after op met err;
// attrs are logged with it.
func (f *Failover) switchDown(op string, err error, attrs ...any) {
	if !f.down.CompareAndSwap(false, true) {
		return
	}
	f.markGate() // the carriers' schedule (careful.go)
	f.markLost()
	f.mu.Lock()
	f.o.Logger.Warn("redis failed, switching to fallback",
		append([]any{"op", op, "policy", f.o.Policy, "live_nodes", f.nodes(), "error", err}, attrs...)...)
	if f.o.OnMode != nil {
		f.o.OnMode(ModeFallback)
	}
	f.mu.Unlock()
}

func (f *Failover) recover() {
	if !f.down.CompareAndSwap(true, false) {
		return
	}
	f.mu.Lock()
	f.o.Logger.Info("redis answers again, back on the shared store")
	// Redis has not seen the calls the fallback admitted in the last
	// window, nor the slots it gave (careful.go). Only the local policy
	// admitted calls in the fallback and counted them in-process: under
	// reject there were none, under admit they are counted nowhere, and a
	// careful span would only refuse calls on the node's Redis-era
	// history (h64).
	f.markLost()
	if f.o.Policy == PolicyLocal {
		f.careful("back_from_fallback")
	}
	if f.o.OnMode != nil {
		f.o.OnMode(ModeRedis)
	}
	f.mu.Unlock()
}

// callerGaveUp reports whether the caller cancelled ctx (CANCEL, shutdown):
// a Redis error then says nothing about Redis. A caller's deadline that ran
// out with the Redis call is not giving up: go-redis reports a socket
// timeout then, and the call still needs a decision from the fallback.
func callerGaveUp(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled)
}

func (f *Failover) nodes() int {
	if f.o.Nodes == nil {
		return 1
	}
	return f.o.Nodes.Live()
}

// Admit implements admission.Store.
func (f *Failover) Admit(ctx context.Context, member string, buckets []admission.Bucket) (admission.Decision, error) {
	if f.redisFor(ctx) {
		ld, careful := f.admitMine(ctx, member, buckets)
		if careful && (!ld.Admit || ld.Duplicate) {
			return ld, nil
		}
		d, err := f.o.Redis.Admit(ctx, member, buckets)
		if err == nil {
			f.ok()
			if ld, ok := f.counted(ctx, member, buckets, d, careful); !ok {
				return ld, nil
			}
			return d, nil
		}
		if callerGaveUp(ctx) {
			return d, err // the caller gave up (CANCEL); Redis is not to blame
		}
		f.failCall(ctx, "admit", err)
		if careful {
			return f.mineOnFailure(ctx, member, buckets, ld)
		}
	}
	return f.admitFallback(ctx, member, buckets)
}

// admitFallback is Admit's decision without Redis: by Policy.
func (f *Failover) admitFallback(ctx context.Context, member string, buckets []admission.Bucket) (admission.Decision, error) {
	switch f.o.Policy {
	case PolicyAdmit:
		counts := make([]int, len(buckets))
		for i := range counts {
			counts[i] = -1
		}
		return admission.Decision{Admit: true, Refused: -1, Counts: counts, At: time.Now(), Mode: admission.ModeOpen}, nil
	case PolicyReject:
		if f.o.Redis != nil {
			return admission.Decision{Refused: -1}, ErrStoreDown
		}
	}
	d, err := f.o.Local.Admit(ctx, member, f.share(buckets))
	if err == nil {
		f.recountAdmission(member, buckets, d)
	}
	return d, err
}

// AdmitReserve decides like Admit and, while the shared Redis store is in
// use, makes the call's first slot reservation ask (what
// pacing.Pacer.FirstAsk returns) in the same round trip when the call is
// admitted (lua.AdmitPace; BENCHMARKS.md, F6). reserved reports that
// first holds that reservation, as Reserve would have returned it, for
// Acquire to take (pacing.Carrier.First). It is false for a call refused
// or a duplicate, in the fallback, and where admission and the slot
// cannot share a script (a Cluster with their keys in different slots):
// the caller then reserves through the Pacer as before. The decision is
// Admit's in every case: the same store, the same mirror into the
// in-process windows, the same switch to the fallback when Redis fails.
func (f *Failover) AdmitReserve(ctx context.Context, member string, buckets []admission.Bucket, ask pacing.Ask) (d admission.Decision, first pacing.First, reserved bool, err error) {
	ap, ok := f.o.Redis.(admitPacer)
	if !f.redisFor(ctx) || !ok || len(buckets) == 0 {
		d, err = f.Admit(ctx, member, buckets)
		return d, pacing.First{}, false, err
	}
	pc, err := pacing.PaceCall(ask.Key, ask.Member, ask.Share, ask.Interval, ask.MaxWait)
	if err != nil {
		d, err = f.Admit(ctx, member, buckets)
		return d, pacing.First{}, false, err
	}
	ld, careful := f.admitMine(ctx, member, buckets) // as Admit does
	if careful && (!ld.Admit || ld.Duplicate) {
		return ld, pacing.First{}, false, nil
	}
	asked := time.Now()
	d, r, paced, err := ap.AdmitPace(ctx, member, buckets, pc)
	if err != nil {
		if callerGaveUp(ctx) {
			return d, pacing.First{}, false, err
		}
		f.failCall(ctx, "admit", err)
		if careful { // as Admit does
			d, err = f.mineOnFailure(ctx, member, buckets, ld)
		} else {
			d, err = f.admitFallback(ctx, member, buckets)
		}
		return d, pacing.First{}, false, err
	}
	f.ok()
	if ld, ok := f.counted(ctx, member, buckets, d, careful); !ok {
		if paced {
			// The slot no call will take: given back at once, as the
			// caller gives back one no attempt takes.
			_ = f.Release(ctx, ask.Key, ask.Member)
		}
		return ld, pacing.First{}, false, nil
	}
	if !paced {
		return d, pacing.First{}, false, nil
	}
	return d, pacing.First{Slot: pacing.SlotOf(r, ask.Key, ask.Member), Asked: asked}, true, nil
}

// Reserves reports whether AdmitReserve can make a reservation now: the
// shared store is one that can (admission.RedisStore) and in use. A node
// in process or in its fallback asks for none (sip's firstAsk).
func (f *Failover) Reserves() bool {
	_, ok := f.o.Redis.(admitPacer)
	return ok && f.redisInUse()
}

// admitPacer is the shared admission store's one-round-trip admission
// and first reservation (admission.RedisStore).
type admitPacer interface {
	AdmitPace(ctx context.Context, member string, buckets []admission.Bucket, pc lua.PaceCall) (admission.Decision, lua.PaceReply, bool, error)
}

// Counts implements admission.Store; in fallback it reports this node's
// in-process windows. It is a read for operators (status API): its errors are
// returned, never taken as a reason to switch, so a status client that gives
// up or a slow status read cannot move the node off Redis.
func (f *Failover) Counts(ctx context.Context, buckets []admission.Bucket) ([]int, error) {
	if f.redisInUse() {
		return f.o.Redis.Counts(ctx, buckets)
	}
	return f.o.Local.Counts(ctx, f.share(buckets))
}

// share divides every limit by the live nodes: n nodes each admitting
// floor(limit/n) never admit more than limit together. A share below one call
// becomes one call per n/limit windows. A token bucket's rate and capacity
// are divided alike (a capacity share below one token becomes one token, so
// a pool of more nodes than the burst may burst up to one call per node).
func (f *Failover) share(buckets []admission.Bucket) []admission.Bucket {
	n := f.nodes()
	if n <= 1 || f.o.Redis == nil {
		return buckets
	}
	out := make([]admission.Bucket, len(buckets))
	for i, b := range buckets {
		out[i] = shareOf(b, n)
	}
	return out
}

// shareOf is b's share on one of n nodes (share).
func shareOf(b admission.Bucket, n int) admission.Bucket {
	if b.RateMicros > 0 {
		// A token bucket: each node refills at rate/n with capacity
		// burst/n (at least one token, so a node is never shut).
		b.RateMicros = max(b.RateMicros/int64(n), 1)
		b.Limit = max(b.Limit/n, 1)
		return b
	}
	if q := b.Limit / n; q >= 1 {
		b.Limit = q
	} else {
		b.Window = time.Duration(int64(b.Window) * int64(n) / int64(max(b.Limit, 1)))
		b.Limit = 1
	}
	return b
}

// Reserve implements pacing.SlotStore. In fallback the slot interval is
// multiplied by the live nodes, so the pool together stays within the
// carrier's cps. Under PolicyAdmit carriers are still paced this way: failing
// open on admission must not make a carrier see more than its cps. A
// share's booking made on one store and asked again on the other (a switch
// meanwhile) is a new call there: it shares that store's slots.
func (f *Failover) Reserve(ctx context.Context, key, member string, share pacing.Share, interval, maxWait time.Duration) (pacing.Slot, error) {
	if f.redisFor(ctx) {
		s, err := f.o.RedisSlots.Reserve(ctx, key, member, share, interval, maxWait)
		if err == nil {
			f.ok()
			return s, nil
		}
		if callerGaveUp(ctx) {
			return s, err
		}
		f.failCall(ctx, "reserve", err)
	}
	if f.o.Policy == PolicyReject && f.o.Redis != nil {
		return pacing.Slot{Key: key, Member: member}, ErrStoreDown
	}
	s, err := f.o.LocalSlots.Reserve(ctx, key, member, share, f.shareInterval(interval), maxWait)
	if err == nil && s.OK && f.redisInUse() {
		// A slot Redis's schedule does not hold (recount.go), from an
		// in-process schedule that may not hold this node's waiting
		// slots: a loss, so the Pacer puts them there and this call
		// takes its slot again after them (Rebook).
		f.recountSlot(key, s, interval)
		f.markLostLocal()
	}
	return s, err
}

func (f *Failover) shareInterval(interval time.Duration) time.Duration {
	if f.o.Redis == nil {
		return interval
	}
	return interval * time.Duration(f.nodes())
}

// Release implements pacing.SlotStore. A slot is released from both stores:
// it may have been reserved before a switch.
func (f *Failover) Release(ctx context.Context, key, member string) error {
	lerr := f.o.LocalSlots.Release(ctx, key, member)
	if f.redisInUse() {
		if err := f.o.RedisSlots.Release(ctx, key, member); err != nil {
			f.fail("release", err)
			return fmt.Errorf("store: release %q: %w", key, err)
		}
	}
	return lerr
}

// Pause implements pacing.SlotStore: the pause goes to Redis (the pool)
// and to the local slots (this node, and the fallback if Redis goes away).
func (f *Failover) Pause(ctx context.Context, key string, span time.Duration, reason string) (pacing.Pause, error) {
	return f.both(ctx, "pause", key, func(s pacing.SlotStore) (pacing.Pause, error) { return s.Pause(ctx, key, span, reason) })
}

// ProbeDone implements pacing.SlotStore, on both stores like Pause.
func (f *Failover) ProbeDone(ctx context.Context, key, member string, ok bool) (pacing.Pause, error) {
	return f.both(ctx, "probe_done", key, func(s pacing.SlotStore) (pacing.Pause, error) { return s.ProbeDone(ctx, key, member, ok) })
}

// OpenPause implements pacing.SlotStore, on both stores like Pause.
func (f *Failover) OpenPause(ctx context.Context, key string, minAge time.Duration) (pacing.Pause, error) {
	return f.both(ctx, "open_pause", key, func(s pacing.SlotStore) (pacing.Pause, error) { return s.OpenPause(ctx, key, minAge) })
}

// Unpause implements pacing.SlotStore, on both stores like Pause.
func (f *Failover) Unpause(ctx context.Context, key string) (pacing.Pause, error) {
	return f.both(ctx, "unpause", key, func(s pacing.SlotStore) (pacing.Pause, error) { return s.Unpause(ctx, key) })
}

// both runs a pause operation on the local slots and, while it is in use,
// on Redis, whose answer (the pool's) it returns.
func (f *Failover) both(ctx context.Context, op, key string, run func(pacing.SlotStore) (pacing.Pause, error)) (pacing.Pause, error) {
	local, lerr := run(f.o.LocalSlots)
	if f.redisInUse() {
		st, err := run(f.o.RedisSlots)
		if err != nil {
			f.fail(op, err)
			return pacing.Pause{}, fmt.Errorf("store: %s %q: %w", op, key, err)
		}
		f.ok()
		return st, lerr
	}
	return local, lerr
}

// Paused implements pacing.SlotStore. Like Queue it is a read and never
// switches the mode.
func (f *Failover) Paused(ctx context.Context, key string) (pacing.Pause, error) {
	if f.redisFor(ctx) {
		return f.o.RedisSlots.Paused(ctx, key)
	}
	return f.o.LocalSlots.Paused(ctx, key)
}

// Evidence implements pacing.SlotStore: the pool's on Redis; in fallback,
// this node's own.
func (f *Failover) Evidence(ctx context.Context, key, peer string, overload bool, w pacing.EvidenceWindows) (pacing.Evidence, error) {
	if f.redisFor(ctx) {
		e, err := f.o.RedisSlots.Evidence(ctx, key, peer, overload, w)
		if err == nil {
			f.ok()
			return e, nil
		}
		if callerGaveUp(ctx) {
			return e, err
		}
		f.failCall(ctx, "evidence", err)
	}
	if f.o.Policy == PolicyReject && f.o.Redis != nil {
		return pacing.Evidence{}, ErrStoreDown
	}
	return f.o.LocalSlots.Evidence(ctx, key, peer, overload, w)
}

// Adapt implements pacing.SlotStore: the pool's rate on Redis; in
// fallback, this node's own (Reserve then shares the resulting interval
// among the live nodes, as it does every carrier's).
func (f *Failover) Adapt(ctx context.Context, key string, a pacing.AIMD, overload bool) (pacing.Rate, error) {
	if f.redisFor(ctx) {
		r, err := f.o.RedisSlots.Adapt(ctx, key, a, overload)
		if err == nil {
			f.ok()
			return r, nil
		}
		if callerGaveUp(ctx) {
			return r, err
		}
		f.failCall(ctx, "adapt", err)
	}
	if f.o.Policy == PolicyReject && f.o.Redis != nil {
		return pacing.Rate{}, ErrStoreDown
	}
	return f.o.LocalSlots.Adapt(ctx, key, a, overload)
}

// Respace implements pacing.SlotStore where the node's slots are: in
// Redis while the node uses it, else (in fallback) in its own store. A
// Redis call that fails is an error, never the fallback's answer: the
// slots to remove are in Redis, and the fallback's empty store would
// report them removed (h58); the caller owes the removal and tries again.
func (f *Failover) Respace(ctx context.Context, key, prefix string) (time.Time, error) {
	if f.redisFor(ctx) {
		t, err := f.o.RedisSlots.Respace(ctx, key, prefix)
		if err == nil {
			f.ok()
			return t, nil
		}
		if !callerGaveUp(ctx) {
			f.failCall(ctx, "respace", err)
		}
		return t, err
	}
	if f.o.Policy == PolicyReject && f.o.Redis != nil {
		return time.Time{}, ErrStoreDown
	}
	return f.o.LocalSlots.Respace(ctx, key, prefix)
}

// Queue implements pacing.SlotStore. Like Counts it is a read for
// operators and never switches the mode.
func (f *Failover) Queue(ctx context.Context, key string, interval time.Duration) (pacing.QueueState, error) {
	if f.redisFor(ctx) {
		return f.o.RedisSlots.Queue(ctx, key, interval)
	}
	return f.o.LocalSlots.Queue(ctx, key, f.shareInterval(interval))
}

// Run probes Redis while in fallback and switches back when it answers,
// and counts in Redis the decisions made without it while it was in use
// (recount.go). It returns when ctx is done. Without Redis it just waits
// for ctx.
func (f *Failover) Run(ctx context.Context) {
	if f.o.Redis != nil {
		go f.runRecounts(ctx)
	}
	if f.o.Redis == nil || f.o.Probe == nil {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(f.o.ProbeInterval)
	defer t.Stop()
	good, failed := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f.down.Load() {
			good, failed = 0, 0
			continue
		}
		err := f.probe(ctx)
		if err != nil {
			// Why the node stays on its fallback: the first failure of an
			// outage at Info, the others at Debug (one every interval).
			level := slog.LevelDebug
			if failed == 0 {
				level = slog.LevelInfo
			}
			failed++
			f.o.Logger.Log(ctx, level, "redis probe failed: staying on the fallback", "error", err, "failed_probes", failed)
			good = 0
			continue
		}
		if good++; good >= f.o.RecoverAfter {
			good, failed = 0, 0
			f.recover()
		}
	}
}

// probe pings Redis once; a panic is a failed probe (logged once, counted).
func (f *Failover) probe(ctx context.Context) (err error) {
	defer f.o.Panics.Recover("store.probe", func(e error) { err = e })
	// Within Quiet, the span without an answer that is an outage: a probe
	// takes a few round trips (store/open.go's pinger), each still bounded
	// by the client's read timeout.
	pctx, cancel := context.WithTimeout(ctx, f.o.Quiet)
	defer cancel()
	return f.o.Probe.Ping(pctx)
}
