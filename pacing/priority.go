package pacing

import (
	"context"
	"time"
)

// Priority calls (emergency numbers, Resource-Priority) go to the front of
// a carrier's queue, and what "front" means is decided here.
//
// Slots are reserved ahead of time: the calls already waiting hold slots
// spaced 1/cps apart, and moving them would mean waking every waiter. So
// a priority call is sent at once, without waiting for a slot, and takes
// the carrier's next free slot as its place (reserved like any other,
// whatever MaxWait, up to PriorityHorizon ahead): the calls already
// waiting keep their slots, and every call that reserves after it waits one
// interval more. The carrier therefore sees, in any rolling second, at most
// its cps plus the priority calls sent in that second; over any span
// longer than its queue it sees no more than its cps, since each priority
// call took a slot no other call sends in. The node's send gate records
// the send (the node's next normal sends of the carrier are held
// accordingly) but never holds a priority call.
//
// A paused carrier (its Retry-After) is skipped as for any call: a
// carrier that asked the pool to wait is not sent priority calls either;
// the call goes to the next carrier of its route.

// priorityKey marks a context as a priority call's.
type priorityKey struct{}

// WithPriority returns a context that marks the call as a priority call:
// Acquire on it sends the call at once, ahead of the calls waiting for the
// carrier's slots (see the comment above). It travels with the call's
// context so that whatever sits between the proxy and the Pacer needs no
// change to carry it.
func WithPriority(ctx context.Context) context.Context {
	return context.WithValue(ctx, priorityKey{}, true)
}

// IsPriority reports whether ctx is marked by WithPriority.
func IsPriority(ctx context.Context) bool {
	v, _ := ctx.Value(priorityKey{}).(bool)
	return v
}

// PriorityHorizon is how far ahead a priority call's place in a carrier's
// queue may be reserved: past it (a flood of priority calls) a priority
// call is sent without a place, over the carrier's cps.
const PriorityHorizon = 10 * time.Minute

// acquirePriority is Acquire for a priority call: the carrier's next slot
// reserved as the call's place within PriorityHorizon, and the call sent
// now. The trace is told of the reservation with a Wait of 0 (the call's
// own wait). A paused carrier is a Ticket with Paused; a store failure an
// error, nothing held.
func (p *Pacer) acquirePriority(ctx context.Context, c Carrier, member string, trace Tracer, gate []GateKey) (Ticket, error) {
	start := p.clock.Now()
	if v := p.views.of(c.Key).pause; v.Paused && start.Before(v.Until) {
		s := Slot{Paused: true, Wait: v.Until.Sub(start), Key: c.Key, Member: member}
		trace.TraceReserved(s, nil)
		return Ticket{Paused: true, Wait: s.Wait}, nil
	}
	try := c
	if r := p.views.of(c.Key).rate; r > 0 {
		try.CPS = min(c.CPS, r) // an adaptive carrier's rate in force
	}
	try.MaxWait = PriorityHorizon
	// Its place is a real slot at the tail, never a booking of a share's
	// turn: a priority call is nobody's share.
	try.Share = Share{}
	slot, err := p.Reserve(ctx, try, member)
	if err != nil {
		trace.TraceReserved(slot, err)
		if ctx.Err() != nil {
			return Ticket{}, ctx.Err()
		}
		return Ticket{}, err
	}
	p.learnSlot(slot, start)
	told := slot
	if !slot.Paused {
		// Past the horizon nothing is reserved, and the call goes all
		// the same.
		told.OK, told.Wait = true, 0
	}
	trace.TraceReserved(told, nil)
	if slot.Paused {
		return Ticket{Paused: true, Wait: slot.Wait}, nil
	}
	if err := ctx.Err(); err != nil {
		if slot.OK {
			p.releaseAfter(ctx, slot)
		}
		return Ticket{}, err
	}
	return Ticket{OK: true, Probe: slot.Probe, gate: p.gate, passed: p.gate.pass(gate, p.clock.Now())}, nil
}

// pass records a send now for every key, whatever room the keys have
// left: a priority call is never held, and the sends after it are.
func (g *sendGate) pass(keys []GateKey, now time.Time) gateTicket {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := gateTicket{rings: make([]*sendRing, 0, len(keys))}
	for _, k := range keys {
		if k = g.inForce(k); k.CPS <= 0 {
			continue
		}
		r := g.ring(k)
		t.rings = append(t.rings, r)
		t.idx = append(t.idx, r.record(now))
	}
	return t
}
