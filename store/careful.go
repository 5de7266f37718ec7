package store

import (
	"context"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/pacing"
)

// A node that starts deciding on Redis again after Redis forgot, or never
// saw, some of the pool's calls of the last window admits, for one window
// of each limit, only what Redis admits and what its own share of the
// limit (as in the fallback) still holds: "careful" windows.
//
//   - Back from the fallback (recover): the calls the nodes admitted on
//     their fallback shares in the last second are in their in-process
//     windows, not in Redis. Deciding on Redis alone, the pool admitted
//     up to its limits again on top of them (h61: 50–54 a second at a
//     peer's 30 after an outage).
//   - Redis lost its scripts (noScript: a reply NOSCRIPT to a script this
//     node had loaded): Redis restarted or a replica took over, and its
//     windows may be empty or behind (h61: 31–37 at 30 on a restart the
//     nodes did not notice as an outage). The in-process windows hold
//     this node's own calls (Admit mirrors them).
//   - The node switched to the fallback (switchDown): the calls waiting
//     for slots of Redis's schedule go at their times while the
//     fallback's slots start from now; only the send gate's share
//     (Careful) applies then, the fallback's admissions being shared
//     already.
//
// Each node then keeps to its share of the limit over windows that began
// before the careful span: after a fallback that bounds the pool by its
// limits (every node kept its share there too); after a restart it bounds
// it by the limits when the nodes' calls were spread evenly, and by at
// most 2 - 1/n times them otherwise (a node that had made few of the last
// second's calls can still make its share), against twice before.
//
// Only rolling windows of up to carefulMaxWindow are kept careful: a
// token bucket's level in the in-process store is kept at the full rate
// (the mirror), so a Redis that forgot a bucket may still let one burst
// more through, and a longer window Redis forgot may admit its limit
// once more.

// careful marks the start of a careful span (now) and logs why (at most
// every carefulLogEvery).
func (f *Failover) careful(reason string) {
	now := f.markGate()
	f.carefulSince.Store(now.UnixNano())
	last := f.carefulLogged.Load()
	if now.Sub(time.Unix(0, last)) <= carefulLogEvery || !f.carefulLogged.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	f.o.Logger.Info("redis may not count the pool's last calls: this node admits within its share as well for one window of each limit",
		"reason", reason, "live_nodes", f.nodes())
}

// markGate starts a careful span of the send gate alone (Careful) now,
// and returns now: a switch to the fallback, whose admissions are shared
// already, logs its own line.
func (f *Failover) markGate() time.Time {
	now := time.Now()
	f.gateSince.Store(now.UnixNano())
	return now
}

// markLost records that the schedule in use lost the carriers' slots
// (a switch either way, a Redis that lost its scripts): the Pacer puts
// this node's waiting slots back (Rebook).
func (f *Failover) markLost() {
	f.lostLocal.Store(false)
	f.lostAt.Store(time.Now().UnixNano())
}

// markLostLocal records that the in-process schedule gave a slot while
// Redis is in use (Reserve): Redis's schedule lost nothing, so the Pacer
// puts this node's waiting slots into the in-process one alone, without a
// round trip to a Redis that is slow right then (a Redis rebook per slow
// reply held every call behind it and sent them in bursts: h66's spike
// runs went from 30 to 34 at 30).
func (f *Failover) markLostLocal() {
	if f.lostAt.Load() != 0 && !f.lostLocal.Load() && time.Since(time.Unix(0, f.lostAt.Load())) < carefulMaxWindow {
		// A loss of Redis's schedule not long ago: its rebook covers both.
		return
	}
	f.lostLocal.Store(true)
	f.lostAt.Store(time.Now().UnixNano())
}

// Lost implements pacing.Rebooker: when the schedule in use last lost the
// carriers' slots (zero: never; never without Redis).
func (f *Failover) Lost() time.Time {
	ns := f.lostAt.Load()
	if ns == 0 || f.o.Redis == nil {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Rebook implements pacing.Rebooker: the slots go back into the schedule
// in use, Redis's or, in the fallback, the in-process one. A failure is
// returned, never a switch: the calls then go at their times, and the send
// gate holds this node to its share meanwhile (Careful).
//
// On Redis they go into the in-process schedule as well: a call whose
// Redis call fails while the node stays on Redis (a lost connection
// forgiven) takes its slot there (Reserve), after this node's waiting
// slots rather than at once beside them (h66: 38 a second at a carrier's
// 30 at a Redis kill).
func (f *Failover) Rebook(ctx context.Context, key string, slots []pacing.Waiting) error {
	var err error
	if f.redisInUse() && !f.lostLocal.Load() {
		if rb, ok := f.o.RedisSlots.(slotRebooker); ok {
			err = rb.Rebook(ctx, key, slots)
		}
	}
	if rb, ok := f.o.LocalSlots.(slotRebooker); ok {
		if lerr := rb.Rebook(ctx, key, slots); err == nil {
			err = lerr
		}
	}
	return err
}

// slotRebooker is a slot store that can put slots back (pacing's
// RedisSlots and LocalSlots).
type slotRebooker interface {
	Rebook(ctx context.Context, key string, slots []pacing.Waiting) error
}

// carefulMaxWindow is the longest window kept careful. A careful window
// holds the node to its share of its own calls over the whole window: for
// an extra window of minutes to a day (windows, repeat_dial) whose calls
// come to some nodes more than others (a peer sending to one node), that
// refused the peer for up to the window's length after a one-second spike
// (h64: 131 calls refused in 9 s with a 20 s window), while what Redis
// missed is at most the outage's calls. Longer windows, like token
// buckets, are Redis's alone.
const carefulMaxWindow = 10 * time.Second

// carefulLogEvery spaces careful's log lines: a restarted Redis answers
// NOSCRIPT once for every script the node runs, one after another.
const carefulLogEvery = 10 * time.Second

// noScript is told that Redis answered NOSCRIPT to a script this node had
// loaded (lua.PipelineOptions.OnNoScript).
//
// One NOSCRIPT counts as a loss at most every carefulMaxWindow: a Redis
// that keeps evicting scripts (Redis 7.4 and later evict those EVAL
// loaded, past 500) would otherwise keep the node careful and make every
// call put its node's waiting slots back (h65). The scripts still missing
// are loaded again in the background (the probe's lua.Load), so the
// scripts this node has not run since do not each meet NOSCRIPT later.
func (f *Failover) noScript() {
	if f.o.Redis == nil {
		return
	}
	now := time.Now()
	last := f.noScriptAt.Load()
	if now.Sub(time.Unix(0, last)) < carefulMaxWindow || !f.noScriptAt.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	f.markLost()
	f.careful("scripts_lost")
	if f.o.Probe != nil {
		go func() { _ = f.probe(context.Background()) }()
	}
}

// carefulBuckets returns, when some of buckets are careful at now, the
// buckets of the call's in-process check: each careful one as its share
// on this node (shareOf), the others as they are (the mirror). ok is
// false when none is careful.
func (f *Failover) carefulBuckets(buckets []admission.Bucket, now time.Time) (out []admission.Bucket, ok bool) {
	since := f.carefulSince.Load()
	if since == 0 {
		return nil, false
	}
	age := now.Sub(time.Unix(0, since))
	n := f.nodes()
	for i, b := range buckets {
		if b.RateMicros > 0 || age >= b.Window || b.Window > carefulMaxWindow {
			continue
		}
		if out == nil {
			out = make([]admission.Bucket, len(buckets))
			copy(out, buckets)
		}
		out[i] = shareOf(b, n)
	}
	return out, out != nil
}

// Careful implements pacing.Careful: when the last careful span began
// (zero when none did) and among how many live nodes. The Pacer's send
// gate holds this node's sends to its share for the carrier's max_wait
// and one window after it. A switch to the fallback starts one too: the
// calls waiting for slots of Redis's schedule go at their times while
// the fallback's slots start from now.
func (f *Failover) Careful() (since time.Time, nodes int) {
	ns := f.gateSince.Load()
	if ns == 0 || f.o.Redis == nil {
		return time.Time{}, 1
	}
	return time.Unix(0, ns), f.nodes()
}

// admitMine is a careful call's decision on this node's share, made before
// Redis is asked (Admit, AdmitReserve): careful is false, and d empty,
// when no bucket of the call is careful now. A refusal or a duplicate (the
// call is counted in this node's windows: it was admitted here) is the
// call's decision; Redis is asked only about a call it admits. A call it
// admits is counted in the in-process windows (the mirror Redis's
// admission then skips), and stays counted there if Redis refuses it, on
// the safe side. A local store error (a bucket it refuses to read) leaves
// the decision to Redis.
func (f *Failover) admitMine(ctx context.Context, member string, buckets []admission.Bucket) (d admission.Decision, careful bool) {
	mine, careful := f.carefulBuckets(buckets, time.Now())
	if !careful {
		return admission.Decision{}, false
	}
	d, err := f.o.Local.Admit(ctx, member, mine)
	if err != nil {
		return admission.Decision{Admit: true}, true
	}
	return d, true
}

// counted records in this node's windows a call Redis decided (d), after
// admitMine (careful: the share was checked before Redis was asked). A
// call Redis admitted is mirrored at the full limits (this node's own
// calls never exceed the pool's), so a switch to the fallback starts with
// this node's last window instead of empty windows; but a call that made
// the node careful while Redis decided it (its NOSCRIPT: Redis restarted)
// is checked against the share instead, like the calls after it, and ok
// false returns the share's refusal (Redis keeps counting the call, on the
// safe side).
func (f *Failover) counted(ctx context.Context, member string, buckets []admission.Bucket, d admission.Decision, careful bool) (refused admission.Decision, ok bool) {
	if !d.Admit || d.Duplicate || careful {
		return admission.Decision{}, true
	}
	if ld, late := f.admitMine(ctx, member, buckets); late {
		return ld, ld.Admit
	}
	_, _ = f.o.Local.Admit(ctx, member, buckets)
	return admission.Decision{}, true
}

// mineOnFailure is the fallback's decision for a careful call Redis failed
// after admitMine decided it (mine) on this node's windows: under
// PolicyLocal that decision is the fallback's (the call's careful buckets
// were checked at the share, and it is counted there already: deciding
// again would find it a duplicate, which the proxy takes for a
// retransmission and never forwards); under the other policies theirs.
func (f *Failover) mineOnFailure(ctx context.Context, member string, buckets []admission.Bucket, mine admission.Decision) (admission.Decision, error) {
	if f.o.Policy != PolicyLocal {
		return f.admitFallback(ctx, member, buckets)
	}
	f.recountAdmission(member, buckets, mine)
	return mine, nil
}
