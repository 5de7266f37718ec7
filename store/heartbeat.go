package store

import (
	"context"
	"log/slog"
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
// A count that falls reaches the figure only once the larger count is older
// than HeartbeatOptions.Hold (default 10 × Interval): a node whose beats
// fail (its link to Redis, its own stall) still decides calls on its
// fallback, and a Redis restarted empty answers a node's first beat with
// that node alone; either way the others, dividing by the lower count
// when Redis then fails them too, would together admit more than the
// limit. Holding the count errs the other way: after a node leaves, the
// fallback shares the limits among one node too many for up to Hold.
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
	hold     time.Duration
	// live is the figure Live answers: count, or a larger count of the
	// last hold (peakAt, under mu).
	live   atomic.Int64
	count  atomic.Int64
	mu     sync.Mutex
	peakAt time.Time
	// older is the live nodes of a release that cannot read dialog tokens
	// in opaque text at the last beat; -1 before the first.
	older   atomic.Int64
	dup     atomic.Bool
	onError func(error)
	onBeat  func()
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
	// Hold is how long a larger count of live nodes stays the figure after
	// the count falls (default 10 × Interval).
	Hold time.Duration
	// OnError is told of a failed beat (the failover uses it to switch).
	OnError func(error)
	// OnBeat is told of a beat Redis answered (the failover counts it as
	// Redis answering).
	OnBeat func()
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
		o.Hold = 10 * o.Interval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Heartbeat{beater: b, node: o.Node, interval: o.Interval, ttl: 3 * o.Interval,
		minNodes: o.MinNodes, hold: o.Hold, onError: o.OnError, onBeat: o.OnBeat, onDup: o.OnDuplicate, log: o.Logger, panics: o.Panics}
	h.live.Store(int64(o.MinNodes))
	h.count.Store(int64(o.MinNodes))
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
// least 1): the count last seen, or a larger one seen within the last
// Hold.
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
	r, err := h.beater.Beat(bctx, h.node, h.ttl)
	if err != nil && connLost(err) && bctx.Err() == nil {
		// A pooled connection Redis (or a proxy, a load balancer) closed
		// while idle, its close still on the way: a new one answers.
		r, err = h.beater.Beat(bctx, h.node, h.ttl)
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
	now := time.Now()
	held := h.live.Load()
	if n >= held || now.Sub(h.peakAt) >= h.hold {
		h.live.Store(n)
		h.peakAt = now
	}
	share := h.live.Load()
	h.mu.Unlock()
	switch old := h.count.Swap(n); {
	case old != n && share != n:
		h.log.Info("live nodes changed; the fallback keeps dividing the limits by the larger count a while",
			"live_nodes", n, "was", old, "fallback_share_nodes", share, "hold", h.hold)
	case old != n:
		h.log.Info("live nodes changed", "live_nodes", n, "was", old)
	case share != held:
		h.log.Info("the fallback divides the limits by the live nodes again", "live_nodes", n, "was", held)
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
