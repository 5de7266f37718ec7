package sip

import (
	"sync"
	"time"
)

// Windows of the overload evidence (overloadEvidence).
const (
	// evidenceCallers is how far back a peer counts as a caller of a
	// carrier: the peers the pool must protect from one another.
	evidenceCallers = time.Minute
	// evidenceOverload is how recent two peers' overload answers must be
	// to be one episode of the carrier's overload.
	evidenceOverload = 2 * time.Second
)

// overloadEvidence decides whether a carrier's overload answers (an
// adaptive carrier's overload codes or reasons, or a 503/500 with
// Retry-After) are the carrier's — it is over its limit for everyone — or
// one peer's calls: a carrier answers 503 at once to numbers it cannot
// route (RFC 3398), so a peer dialling such numbers would otherwise cut an
// adaptive carrier to its floor, or pause a carrier for an hour, for every
// other peer of the pool. The pool acts on an overload answer only when
// the carrier gave one to at least two peers within evidenceOverload, or
// when one peer alone has called the carrier in the last evidenceCallers
// (it can only slow itself down).
//
// The evidence is this node's own; the store still applies a cut or a
// pause to the whole pool. Memory is bounded by configured carriers ×
// peers. Safe for concurrent use.
type overloadEvidence struct {
	mu sync.Mutex
	m  map[string]map[string]*peerSeen // carrier → peer
}

type peerSeen struct{ call, overload time.Time }

// answered records a carrier's decisive answer to a peer's call (ringing,
// or a final answer) at now, and for an overload answer reports whether
// the pool should act on it.
func (e *overloadEvidence) answered(carrier, peer string, overload bool, now time.Time) (poolWide bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]map[string]*peerSeen{}
	}
	peers := e.m[carrier]
	if peers == nil {
		peers = map[string]*peerSeen{}
		e.m[carrier] = peers
	}
	s := peers[peer]
	if s == nil {
		s = &peerSeen{}
		peers[peer] = s
	}
	s.call = now
	if overload {
		s.overload = now
	}
	callers, overloaded := 0, 0
	for name, ps := range peers {
		if now.Sub(ps.call) > evidenceCallers {
			delete(peers, name) // forget peers that stopped calling
			continue
		}
		callers++
		if !ps.overload.IsZero() && now.Sub(ps.overload) <= evidenceOverload {
			overloaded++
		}
	}
	return overload && (overloaded >= 2 || callers == 1)
}
