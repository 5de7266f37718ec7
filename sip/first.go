package sip

import (
	"context"
	"strconv"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
)

// One store round trip per call (BENCHMARKS.md, F6; issue 23).
//
// A call's admission and its first carrier slot are two scripts on the
// shared store. Where both can be decided in one, they are: before the
// admission the call works out the reservation its first carrier's
// Acquire would make (the route's first carrier, when the route's order
// needs no store call and that carrier is usable now: firstAsk), and the
// admission store makes it in the same script when it admits the call
// (store.Failover.AdmitReserve: lua's admit_pace). Acquire then takes
// that reply as its first reservation's (pacing.Carrier.First): the same
// slot, the same waits, late wakes, bookings and pauses as before.
//
// Nothing else changes. The reservation is made only for a call the
// store admits, on Redis (not in the fallback, nor in process: there the
// call asks for none, Reserves), for a call that is not a priority call, and on a Cluster only when the keys
// share a slot. The first carrier's pacing firstAsk works out is the
// one its first attempt waits on (pacingFor), not worked out again. A reservation the call does not use (max_calls full, the
// carrier became unusable, the caller cancelled before the route) is
// given back when the call's handler ends (dropFirst): a slot it held
// only ever delays other calls, never lets one out early.

// admitReserver is an admission store that can reserve a call's first
// slot with its admission (store.Failover), when Reserves says it can now
// (on Redis, not in process nor in the fallback).
type admitReserver interface {
	AdmitReserve(ctx context.Context, member string, buckets []admission.Bucket, ask pacing.Ask) (admission.Decision, pacing.First, bool, error)
	Reserves() bool
}

// firstPacer is a Pacer that says what its first reservation for a call
// would be, and gives back one made ahead (*pacing.Pacer).
type firstPacer interface {
	FirstAsk(ctx context.Context, c pacing.Carrier, member string) (pacing.Ask, bool)
	Release(ctx context.Context, s pacing.Slot) error
}

// firstAsk prepares the reservation of the call's first carrier slot to
// make with its admission, and the route's order (route reuses it), when
// the stores can make it in one round trip and the order needs no store
// call (not least_wait). It sets c.ask; nothing is reserved yet.
func (c *call) firstAsk(route string) {
	p, cfg := c.p, c.cfg
	fp, ok := p.pacer.(firstPacer)
	if !ok || c.priority != "" {
		return
	}
	if ar, ok := p.adm.(admitReserver); !ok || !ar.Reserves() {
		return
	}
	if r, ok := cfg.Routes[route]; !ok || r.PolicyName() == config.RouteLeastWait {
		return
	}
	c.order, c.ordered = p.carriers.Order(c.ctx, cfg, route), true
	if len(c.order) == 0 {
		return
	}
	car := cfg.Carrier(c.order[0])
	if car == nil || p.carriers.Usable(cfg, car) != "" {
		return
	}
	pc, gate := p.pacingOf(cfg, car, c.peer, c.customer)
	ask, ok := fp.FirstAsk(c.ctx, pc, p.memberOf(c.member, 0))
	if !ok {
		return
	}
	c.ask, c.askCarrier, c.askPacing, c.askGate = &ask, car.Name, pc, gate
}

// pacingFor is car's pacing for the call's i-th attempt: the one firstAsk
// worked out for the first (the same call configuration gives the same
// answer), else pacingOf's.
func (c *call) pacingFor(i int, car *config.Carrier) (pacing.Carrier, pacing.GateKey) {
	if i == 0 && c.ask != nil && car.Name == c.askCarrier {
		return c.askPacing, c.askGate
	}
	return c.p.pacingOf(c.cfg, car, c.peer, c.customer)
}

// admitStore runs the call's admission, with its first reservation when
// firstAsk prepared one (c.first holds it when made).
func (c *call) admitStore(ctx context.Context, buckets []admission.Bucket) (admission.Decision, error) {
	ar, ok := c.p.adm.(admitReserver)
	if !ok || c.ask == nil {
		return c.p.adm.Admit(ctx, c.member, buckets)
	}
	d, first, reserved, err := ar.AdmitReserve(ctx, c.member, buckets, *c.ask)
	if reserved {
		c.first = &first
	}
	return d, err
}

// takeFirst hands the reservation made with the admission to the i-th
// attempt, on carrier name, when it is that attempt's; the Pacer owns it
// from then on.
func (c *call) takeFirst(i int, name string) *pacing.First {
	if c.first == nil || i != 0 || name != c.askCarrier {
		return nil
	}
	f := c.first
	c.first = nil
	return f
}

// dropFirst gives back a reservation made with the admission that no
// attempt took (on a context of its own: the call's may have ended).
func (c *call) dropFirst() {
	f := c.first
	if f == nil || !f.Slot.OK {
		return
	}
	c.first = nil
	fp, ok := c.p.pacer.(firstPacer)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), firstReleaseTimeout)
	defer cancel()
	if err := fp.Release(ctx, f.Slot); err != nil {
		c.log.Debug("unused first slot not given back", "carrier", c.askCarrier, "error", err)
	}
}

// firstReleaseTimeout bounds giving back an unused first slot; a slot not
// given back only delays the carrier's next calls until it passes.
const firstReleaseTimeout = time.Second

// memberOf is the pacing store member of a call's i-th carrier attempt:
// the pacer's (pacing.Pacer.MemberOf: behind its process's prefix, which a
// respace of a lowered carrier limit removes this node's slots by), else
// member#i.
func (p *Proxy) memberOf(member string, i int) string {
	if m, ok := p.pacer.(interface{ MemberOf(string, int) string }); ok {
		return m.MemberOf(member, i)
	}
	return member + "#" + strconv.Itoa(i)
}
