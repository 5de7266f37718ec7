package store

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpsguard/cpsguard/internal/panics"
	"github.com/cpsguard/cpsguard/lua"
)

// Beater records one process's heartbeat under its node id in the shared
// store and returns how many nodes beat within ttl, how many of them are of
// a release that cannot read dialog tokens in opaque text, and the instance
// ids of the other processes beating under the same node id
// (lua.Heartbeater on Redis).
type Beater interface {
	Beat(ctx context.Context, node string, ttl time.Duration) (lua.BeatReply, error)
}

// Leaver is a Beater that can take its process out of the shared store as
// it stops (lua.Heartbeater), so that a process restarted under the same
// node id is not counted beside it until its last beat ages out.
type Leaver interface {
	Leave(ctx context.Context, node string, ttl time.Duration) error
}

// Heartbeat announces this node in Redis every Interval and remembers how
// many nodes were alive at the last successful beat. The fallback divides
// every limit by that figure: n nodes that each allow limit/n stay within the
// limit together, which is the point of "one limit for the pool".
//
// The rule: a node is live when its last beat is younger than TTL (3 ×
// Interval). The figure is the one last seen while Redis answered; a node that
// starts while Redis is down assumes HeartbeatOptions.MinNodes (default 1).
// The figure is the largest count of the last HeartbeatOptions.Hold
// answered beats (default 10), MinNodes counting as one of them until that
// many were answered: a count that falls reaches it only 10 answered beats
// later. A node whose beats fail (its link to Redis, its own stall) still
// decides calls on its fallback, and a Redis restarted empty (after an
// outage of any length: failed beats do not age the window) answers a
// node's first beat with that node alone; either way the others, dividing
// by the lower count, would together admit more than the limit. Holding
// the count errs the other way: after a node leaves, the fallback shares
// the limits among one node too many for 10 beats.
//
// Two processes beating under one node_id (a copied configuration, a node
// started twice) are a mistake the share cannot see by node id alone: the
// beater counts them as two and reports the other; Heartbeat logs it at
// Error, tells HeartbeatOptions.OnDuplicate and answers Duplicate until the
// other stops beating.
//
// Heartbeat is safe for concurrent use.
type Heartbeat struct {
	beater   Beater
	node     string
	interval time.Duration
	ttl      time.Duration
	minNodes int
	// live is the figure Live answers: the largest of counts.
	live  atomic.Int64
	count atomic.Int64
	mu    sync.Mutex
	// counts are the counts of the last answered beats (a ring at next),
	// seeded with MinNodes.
	counts []int64
	next   int
	// older is the live nodes of a release that cannot read dialog tokens
	// in opaque text at the last beat; -1 before the first.
	older   atomic.Int64
	dup     atomic.Bool
	onError func(error)
	onBeat  func()
	observe func(script string, d time.Duration, err error)
	onDup   func(bool)
	log     *slog.Logger
	panics  *panics.Reporter
}

// HeartbeatOptions configures NewHeartbeat.
type HeartbeatOptions struct {
	Node     string
	Interval time.Duration // default 1 s
	// MinNodes is the figure assumed before the first successful beat
	// (default 1).
	MinNodes int
	// Hold is how many answered beats a larger count of live nodes stays
	// the figure after the count falls (default 10).
	Hold int
	// OnError is told of a failed beat (the failover uses it to switch).
	OnError func(error)
	// OnBeat is told of a beat Redis answered (the failover counts it as
	// Redis answering).
	OnBeat func()
	// Observe, when set, is told of every beat (its time and error, a
	// retry on a new connection included: one beat, one observation), as
	// the stores tell of their scripts (lua.ScriptHeartbeat).
	Observe func(script string, d time.Duration, err error)
	// OnDuplicate is told when another process starts (true) or stops
	// (false) beating under Node.
	OnDuplicate func(duplicate bool)
	Logger      *slog.Logger
	// Panics logs and counts a panic of a beat (nil: logs only).
	Panics *panics.Reporter
}

// NewHeartbeat returns a Heartbeat that beats through b.
func NewHeartbeat(b Beater, o HeartbeatOptions) *Heartbeat {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.MinNodes < 1 {
		o.MinNodes = 1
	}
	if o.Hold <= 0 {
		o.Hold = 10
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Heartbeat{beater: b, node: o.Node, interval: o.Interval, ttl: 3 * o.Interval,
		minNodes: o.MinNodes, counts: make([]int64, o.Hold), onError: o.OnError, onBeat: o.OnBeat, observe: o.Observe, onDup: o.OnDuplicate, log: o.Logger, panics: o.Panics}
	h.live.Store(int64(o.MinNodes))
	h.count.Store(int64(o.MinNodes))
	for i := range h.counts {
		h.counts[i] = int64(o.MinNodes)
	}
	h.older.Store(-1)
	return h
}

// OpaqueTokens reports whether every live node read dialog tokens in
// opaque text at the last successful beat (true without a shared store;
// false before the first beat, and from then on the last figure seen while
// Redis answered): until then the sip package mints the tokens older
// releases read.
func (h *Heartbeat) OpaqueTokens() bool {
	return h == nil || h.older.Load() == 0
}

// Live is the number of live nodes the fallback divides the limits by (at
// least 1): the largest count of the last Hold answered beats (MinNodes
// among them until Hold beats were answered).
func (h *Heartbeat) Live() int {
	if h == nil {
		return 1
	}
	return int(max(h.live.Load(), 1))
}

// Beat beats once now.
func (h *Heartbeat) Beat(ctx context.Context, timeout time.Duration) error {
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	r, err := h.beater.Beat(bctx, h.node, h.ttl)
	if err != nil && connLost(err) && bctx.Err() == nil {
		// A pooled connection Redis (or a proxy, a load balancer) closed
		// while idle, its close still on the way: a new one answers.
		r, err = h.beater.Beat(bctx, h.node, h.ttl)
	}
	if h.observe != nil {
		h.observe(lua.ScriptHeartbeat, time.Since(start), err)
	}
	if err != nil {
		if h.onError != nil && ctx.Err() == nil {
			h.onError(err)
		}
		return err
	}
	if h.onBeat != nil {
		h.onBeat()
	}
	n := int64(max(r.Live, 1))
	h.mu.Lock()
	held := h.live.Load()
	h.counts[h.next] = n
	h.next = (h.next + 1) % len(h.counts)
	share := slices.Max(h.counts)
	h.live.Store(share)
	h.mu.Unlock()
	switch old := h.count.Swap(n); {
	case old != n && share != n:
		h.log.Info("live nodes changed; the fallback keeps dividing the limits by the larger count a while",
			"live_nodes", n, "was", old, "fallback_share_nodes", share, "beats", len(h.counts))
	case old != n:
		h.log.Info("live nodes changed", "live_nodes", n, "was", old)
	case share != held:
		h.log.Info("the fallback divides the limits by the live nodes again", "live_nodes", n, "fallback_share_nodes", share, "was", held)
	}
	// Logged when the text changes, not at every change of the count.
	if old := h.older.Swap(int64(r.Older)); (old > 0) != (r.Older > 0) {
		if r.Older > 0 {
			h.log.Warn("nodes of an older release are live: dialog tokens are minted in base64url, which they read, until they leave",
				"older_nodes", r.Older, "live_nodes", n)
		} else if old > 0 {
			h.log.Info("every live node reads dialog tokens in opaque text: minting them so", "live_nodes", n)
		}
	}
	h.setDuplicate(r.Others)
	return nil
}

// setDuplicate records whether other processes beat under this node id,
// logging and reporting each change.
func (h *Heartbeat) setDuplicate(others []string) {
	dup := len(others) > 0
	if h.dup.Swap(dup) == dup {
		return
	}
	if dup {
		h.log.Error("another process is running with this node_id in the same Redis: give every node its own node_id",
			"node_id", h.node, "other_instances", others, "live_nodes", h.Live())
	} else {
		h.log.Info("no other process beats with this node_id any more", "node_id", h.node)
	}
	if h.onDup != nil {
		h.onDup(dup)
	}
}

// Duplicate reports whether another process beat under this node's node_id
// at the last successful beat.
func (h *Heartbeat) Duplicate() bool {
	return h != nil && h.dup.Load()
}

// Run beats every interval until ctx is done, then leaves (Leaver, within
// timeout) when its Beater can.
func (h *Heartbeat) Run(ctx context.Context, timeout time.Duration) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	h.beatSafe(ctx, timeout)
	for {
		select {
		case <-ctx.Done():
			h.leave(ctx, timeout)
			return
		case <-t.C:
			h.beatSafe(ctx, timeout)
		}
	}
}

// leave takes the process out of the shared store as it stops (a Leaver's
// Leave, within timeout, past ctx's end). A failure only means the others
// count it until its last beat ages out: logged at Debug.
func (h *Heartbeat) leave(ctx context.Context, timeout time.Duration) {
	l, ok := h.beater.(Leaver)
	if !ok {
		return
	}
	defer h.panics.Recover("store.heartbeat", nil)
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(timeout, 100*time.Millisecond))
	defer cancel()
	if err := l.Leave(lctx, h.node, h.ttl); err != nil {
		h.log.Debug("heartbeat: leaving the node set failed; the others count this process until its last beat ages out", "error", err)
	}
}

// beatSafe is Beat with a panic turned into a logged, counted failure: the
// heartbeat goes on at the next tick.
func (h *Heartbeat) beatSafe(ctx context.Context, timeout time.Duration) {
	defer h.panics.Recover("store.heartbeat", func(err error) {
		if h.onError != nil {
			h.onError(err)
		}
	})
	_ = h.Beat(ctx, timeout)
}
