package pacing

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/admission"
)

// sendGate is the last line of the node's own promise: no `limit`
// consecutive sends of one key (a carrier, a peer, a customer) leave this
// node within one window.
//
// The shared store decides when a call may go (admission time, pacing slot),
// but the send happens later, after a timer wake-up and some scheduling; on
// a busy machine that lateness varies by tens of milliseconds, more than
// the stores' 1 % guards. A call woken late followed by one woken on time
// would put limit+1 calls into one second at the carrier. The gate records
// when this node actually sent, and holds a send until the send `limit`
// places back is a window old (the stores' window less gateSlack). It only
// ever delays, by about the
// jitter it absorbs; it never rejects. Across a pool the stores' guards
// carry the promise; the gate removes this node's own jitter from it.
//
// Each Pacer has one gate (the gate is this node's, not the pool's), which
// Acquire passes after the slot. A sendGate is safe for concurrent use.
type sendGate struct {
	mu    sync.Mutex
	rings map[string]*sendRing
	// limits are the keys' limits in force (setLimit), which a call's own
	// GateKey, taken when it started, may predate.
	limits map[string]float64
}

// sendRing holds the last limit send times of one key. It grows with the
// sends it records (a 100,000 CPS key that carries 10 calls holds 10
// entries, not 100,000) and, once it holds limit entries, is a ring whose
// oldest entry is at next.
type sendRing struct {
	limit  int
	window time.Duration
	at     []time.Time
	next   int
}

// back returns the send k places back (1: the last; limit: the oldest
// kept, with 1 <= k <= limit), or the zero time when fewer than k sends
// were recorded.
func (r *sendRing) back(k int) time.Time {
	if len(r.at) < r.limit {
		if len(r.at) < k {
			return time.Time{}
		}
		return r.at[len(r.at)-k]
	}
	return r.at[(r.next-k+r.limit)%r.limit]
}

// record stores a send time and returns its index.
func (r *sendRing) record(at time.Time) int {
	if len(r.at) < r.limit {
		r.at = append(r.at, at)
		return len(r.at) - 1
	}
	i := r.next
	r.at[i] = at
	r.next = (r.next + 1) % r.limit
	return i
}

// GateKey is one limit the send gate holds a send to: at most
// admission.LimitFor(CPS) sends of Key leave this node within that limit's
// window (less gateSlack). A CPS of 0 or less is no limit.
type GateKey struct {
	// Key names the limit on this node, e.g. "carrier:a" or "peer:dialer-1".
	Key string
	// CPS is the limit's calls per second (may be fractional).
	CPS float64
}

// gateTicket identifies the ring entries of one send, to stamp the time
// the message actually left.
type gateTicket struct {
	rings []*sendRing
	idx   []int
}

func newSendGate() *sendGate {
	return &sendGate{rings: map[string]*sendRing{}, limits: map[string]float64{}}
}

// setLimit makes k.CPS the limit of k.Key for every send from now on,
// whatever limit the calls that pass carry (a reload or an override
// changed it after they started). A changed limit starts a fresh
// history: the carrier is held to the new one from the change on.
func (g *sendGate) setLimit(k GateKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.limits[k.Key]; ok && old == k.CPS {
		return
	}
	g.limits[k.Key] = k.CPS
	delete(g.rings, k.Key)
}

// inForce returns k with the limit in force for its key.
func (g *sendGate) inForce(k GateKey) GateKey {
	if cps, ok := g.limits[k.Key]; ok {
		k.CPS = cps
	}
	return k
}

// gateSlack is how much shorter the gate's window is than the stores'.
//
// The gate measures real sends, so it needs no guard against its own
// lateness; with the stores' full window (1 s + admission.WindowGuard, exactly the span of
// limit pacing slots) every send would inherit the lateness of the send
// limit places back plus its own, a ratchet that grew lateness by ~0.6 ms
// per second of backlog (BENCHMARKS.md, finding F1). Half the guard is kept
// for the network between this node and the carrier: the gate then never
// holds a send that is on its slot, yet a burst of late sends still leaves
// at most limit in any 1 s + admission.WindowGuard/2 at this node.
const gateSlack = admission.WindowGuard / 2

func (g *sendGate) ring(k GateKey) *sendRing {
	limit, window := admission.LimitFor(k.CPS)
	window -= gateSlack
	r := g.rings[k.Key]
	if r == nil || r.limit != limit || r.window != window {
		// New key, or its limit changed: start a fresh history.
		r = &sendRing{limit: limit, window: window}
		g.rings[k.Key] = r
	}
	return r
}

// reserve returns 0 and a ticket when a send now respects every key (and
// records it), or how long to wait before asking again. With share above
// 1, a key's limit on this node is its share of the pool's (limit/share,
// at least 1): the store may have lost the pool's schedule (Careful).
func (g *sendGate) reserve(keys []GateKey, now time.Time, share int) (time.Duration, gateTicket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var wait time.Duration
	rings := make([]*sendRing, 0, len(keys))
	for _, k := range keys {
		if k = g.inForce(k); k.CPS <= 0 {
			continue
		}
		r := g.ring(k)
		rings = append(rings, r)
		if oldest := r.back(max(r.limit/max(share, 1), 1)); !oldest.IsZero() {
			if d := oldest.Add(r.window).Sub(now); d > wait {
				wait = d
			}
		}
	}
	if wait > 0 {
		return wait, gateTicket{}
	}
	t := gateTicket{rings: rings, idx: make([]int, len(rings))}
	for i, r := range rings {
		t.idx[i] = r.record(now)
	}
	return 0, t
}

// sent stamps the ticket's entries with the time the message left (after
// the write returned), so the window counts from the real send.
func (g *sendGate) sent(t gateTicket, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, r := range t.rings {
		if at.After(r.at[t.idx[i]]) {
			r.at[t.idx[i]] = at
		}
	}
}

// errGateFull reports that the gate would hold a send past its deadline.
var errGateFull = errors.New("pacing: send gate wait over max_wait")

// wait blocks on clock until a send respects every key and returns its
// ticket, or ctx.Err() when ctx ends first. Waiting costs a timer. Whenever the next
// wait would end after deadline (on the first check and on every later one,
// since other sends may take the room a waiter was waiting for) it returns
// errGateFull at once, so a call is never held past its carrier's max_wait
// and a carrier whose slots come faster than the gate lets them out
// (fractional CPS above 1) cannot build an ever-growing queue. reserve's
// share is shareAt(cs, span) at each check.
func (g *sendGate) wait(ctx context.Context, clock Clock, keys []GateKey, deadline time.Time, cs Careful, span time.Duration) (gateTicket, error) {
	for {
		now := clock.Now()
		d, t := g.reserve(keys, now, shareAt(cs, span, now))
		if d <= 0 {
			return t, nil
		}
		if now.Add(d).After(deadline) {
			return gateTicket{}, errGateFull
		}
		if err := clock.Sleep(ctx, d); err != nil {
			return gateTicket{}, err
		}
	}
}
