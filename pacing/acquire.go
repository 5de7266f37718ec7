package pacing

import (
	"context"
	"errors"
	"time"

	"github.com/cpsguard/cpsguard/admission"
)

// maxLateWakes bounds the slots one Acquire may miss by waking too late
// before it gives up on the carrier.
const maxLateWakes = 3

// maxBookings bounds the times one Acquire follows a booking (its share's
// turn, then a neighbour's slot taken, a slip...) before it gives up on
// the carrier. A fair call needs two or three on a busy carrier.
const maxBookings = 12

// Ticket is the outcome of Acquire.
type Ticket struct {
	// OK reports that the call may be sent now. False means the carrier is
	// paused (Paused) or full for this call: no slot within its MaxWait,
	// maxLateWakes slots missed by waking late (or taken again after rate
	// decreases), or the send gate would hold the send past MaxWait. A
	// Ticket with OK false holds nothing.
	OK bool
	// Paused reports that the carrier is paused: the call was refused a
	// slot at once, or its slot was given back just before the send.
	Paused bool
	// Probe reports that the call is the half-open probe of the carrier's
	// pause: its outcome goes to ProbeDone.
	Probe bool
	// Wait is the wait of the call's last slot: granted, or refused as too
	// long; for a paused carrier, what was left of the pause's span. For a
	// call that waited for its share's turn (a booking) it counts from the
	// start of Acquire. It is 0 when no reply came from the store.
	Wait time.Duration

	gate   *sendGate
	passed gateTicket
}

// Sent stamps the send gate with at, the time the request left (after the
// write returned), so the gate's window counts from the real send. On a
// Ticket with OK false it does nothing.
func (t Ticket) Sent(at time.Time) {
	if t.gate != nil {
		t.gate.sent(t.passed, at)
	}
}

// Tracer is told what one Acquire does, so that the caller can count and
// log it (pacing keeps no metrics); see Trace's fields for when each method
// is called. Each runs on Acquire's goroutine, before Acquire goes on, and
// must return quickly. A caller that implements it on one value of its own
// spends one allocation per call where a Trace of closures spends five.
type Tracer interface {
	TraceReserved(s Slot, err error)
	TraceQueued(delta int)
	TraceLate(s Slot, late time.Duration)
	TracePaused(s Slot)
}

// Trace is a Tracer of funcs. A nil func is not called; a nil *Trace is a
// Tracer told nothing.
type Trace struct {
	// Reserved follows the reply to every reservation but those that
	// carry a booked call on (Slot.Booked: the call's share's turn, asked
	// again at it, answering with the slot or with a booking a little
	// later): err when the store failed (or ctx ended), else s, whose OK
	// is false for a full carrier (s.Wait is then the wait refused). For a
	// priority call s.Wait is 0 and s.OK true unless the carrier is
	// paused: it is sent at once.
	Reserved func(s Slot, err error)
	// Queued is called with +1 when Acquire starts waiting for a reserved
	// slot or a booked turn and with -1 when that wait ends.
	Queued func(delta int)
	// Late is called when Acquire woke late, more than MaxLate after s was
	// due, and gave s back to take the next slot.
	Late func(s Slot, late time.Duration)
	// Paused is called when Acquire gave s back, just before the send or
	// at the booked turn it waited for, because the carrier was paused
	// meanwhile.
	Paused func(s Slot)
}

var _ Tracer = (*Trace)(nil)

// TraceReserved calls t.Reserved.
func (t *Trace) TraceReserved(s Slot, err error) {
	if t != nil && t.Reserved != nil {
		t.Reserved(s, err)
	}
}

// TraceQueued calls t.Queued.
func (t *Trace) TraceQueued(delta int) {
	if t != nil && t.Queued != nil {
		t.Queued(delta)
	}
}

// TraceLate calls t.Late.
func (t *Trace) TraceLate(s Slot, late time.Duration) {
	if t != nil && t.Late != nil {
		t.Late(s, late)
	}
}

// TracePaused calls t.Paused.
func (t *Trace) TracePaused(s Slot) {
	if t != nil && t.Paused != nil {
		t.Paused(s)
	}
}

// Acquire waits until a call (member, unique per call attempt) may be sent
// to carrier c, like x/time/rate's WaitN: it reserves the carrier's next
// slot within c.MaxWait, waits for it, then passes the send gate for gate
// (the carrier's own limit and the call's admission limits, see GateKey),
// the whole wait within c.MaxWait. A slot it woke too late for (more than
// MaxLate after it was due) is given back and the next one taken, in what
// is left of MaxWait, a few times at most. With c.Share, a call beyond its
// share gets a booking of its share's turn first: Acquire waits for it and
// reserves again then for the slot itself (maxBookings times at most).
//
// A paused carrier is skipped, never waited for: while this node knows its
// pause's span runs, at once and without a store call; else the store
// refuses the slot. Just before the send the slot is checked again against
// what this node has learned meanwhile (its own pauses and decreases at
// once, the pool's through Paused and Adapt): a pause since the slot was
// reserved gives it back (unless it is the half-open probe and the span is
// still over), and a decrease of an adaptive carrier's rate since then
// makes the call take a slot again at the new rate (the store removed the
// slots spaced for the old one). Either way the calls that waited for a
// slot do not all go at once when they wake.
//
// A full or paused carrier is a Ticket with OK false and a nil error. When
// ctx ends first Acquire returns ctx.Err(); any other error means the store
// failed. In every case but an OK Ticket, a slot Acquire reserved is given
// back (on a fresh context bounded by releaseTimeout; a failed release only
// delays later calls until the slot has passed), with its probe claim.
// trace, when not nil, is told of each step.
//
// A priority call (ctx marked by WithPriority) is sent at once: its slot
// is only its place in the queue (see acquirePriority).
func (p *Pacer) Acquire(ctx context.Context, c Carrier, member string, trace Tracer, gate ...GateKey) (Ticket, error) {
	if trace == nil {
		trace = (*Trace)(nil)
	}
	first := p.takeFirst(ctx, c, member)
	c.First = nil
	if IsPriority(ctx) {
		p.dropFirst(ctx, first) // FirstAsk makes none for a priority call
		return p.acquirePriority(ctx, c, member, trace, gate)
	}
	start := p.clock.Now()
	// The store lost a schedule (a Redis restarted empty, a switch): this
	// node's waiting slots go back first, so this call's comes after them
	// (within this call's max_wait: start is taken before). A loss after
	// asked (this call's first reservation, made ahead or here) may have
	// given it a slot before they were back, or a slot of the schedule
	// lost: it takes one again once they are (below).
	asked0 := time.Now()
	if first != nil && first.Asked.Before(asked0) {
		asked0 = first.Asked
	}
	p.rebook(ctx)
	if first != nil && first.Asked.Before(start) {
		start = first.Asked // MaxWait counts from the reservation
	}
	if v := p.views.of(c.Key).pause; v.Paused && p.clock.Now().Before(v.Until) {
		// Known paused: no store call, no slot (one made ahead is given back).
		p.dropFirst(ctx, first)
		start = p.clock.Now()
		s := Slot{Paused: true, Wait: v.Until.Sub(start), Key: c.Key, Member: member}
		trace.TraceReserved(s, nil)
		return Ticket{Paused: true, Wait: s.Wait}, nil
	}
	var slot Slot
	var retaken time.Time // the decrease a slot was last taken again for
	rebooked := false     // a slot taken again behind the slots put back
	bookings := 0         // bookings followed
	following := false    // this reservation asks again at a booked turn
	// waited is the wait of s for the Ticket: from the start once the
	// call has followed a booking.
	waited := func(s Slot) time.Duration {
		if bookings == 0 {
			return s.Wait
		}
		return max(s.Due().Sub(start), 0)
	}
	for tries := 0; ; tries++ {
		// No deadline here: Reserve shortens MaxWait to a context's
		// deadline, and the store bounds its own round trip. A slot taken
		// again after a late wake must still fit in what is left of
		// MaxWait.
		try := c
		if r := p.views.of(c.Key).rate; r > 0 {
			// At the rate in force now: an adaptive carrier's, or a
			// limit lowered since the call started (Respace).
			try.CPS = min(c.CPS, r)
		}
		try.MaxWait = max(c.MaxWait-p.clock.Now().Sub(start), 0)
		asked := p.clock.Now()
		var err error
		if first != nil {
			// The reservation made ahead is this first one's reply.
			slot, asked, first = first.Slot, first.Asked, nil
		} else {
			slot, err = p.Reserve(ctx, try, member)
		}
		if !following || err != nil || !slot.OK {
			trace.TraceReserved(slot, err)
		}
		following = false
		if err != nil {
			if bookings > 0 {
				// The store may still hold the booking.
				p.releaseAfter(ctx, Slot{OK: true, Key: c.Key, Member: member})
			}
			if ctx.Err() != nil {
				return Ticket{}, ctx.Err()
			}
			return Ticket{}, err
		}
		p.learnSlot(slot, asked)
		if slot.OK && !slot.Probe && !rebooked && p.rebook(ctx).After(asked0) {
			// The store lost its schedule while this call reserved (its
			// NOSCRIPT, a switch by this or another call): its slot came
			// from the schedule lost, or from the new one before this
			// node's waiting slots were back in it. Taken again, once,
			// behind them.
			rebooked = true
			p.releaseAfter(ctx, slot)
			tries-- // not a late wake
			continue
		}
		if slot.Paused {
			if bookings > 0 {
				// Paused while the call waited for its turn: the
				// booking is given back.
				p.releaseAfter(ctx, Slot{OK: true, Key: c.Key, Member: member})
			}
			return Ticket{Paused: true, Wait: slot.Wait}, nil
		}
		if !slot.OK {
			return Ticket{Wait: waited(slot)}, nil
		}
		if slot.Booked {
			if bookings++; bookings > maxBookings {
				p.releaseAfter(ctx, slot)
				return Ticket{Wait: waited(slot)}, nil
			}
			// A booking is given back when ctx ends (Wait).
			if paused, err := p.awaitSlot(ctx, slot, try, trace); err != nil || paused {
				return Ticket{Paused: paused, Wait: waited(slot)}, err
			}
			tries-- // the turn has come: not a late wake
			following = true
			continue
		}

		if paused, err := p.awaitSlot(ctx, slot, try, trace); err != nil || paused {
			return Ticket{Paused: paused, Wait: waited(slot)}, err
		}
		// Slots are spaced so that a send up to MaxLate after its slot
		// keeps the carrier within its cps in every rolling second; a node
		// that woke later (a starved scheduler) would break that promise
		// for the whole pool. The slot is missed: give it back and take the
		// next, a few times at most, then the carrier counts as full for
		// this call.
		lateBy := p.clock.Now().Sub(slot.Due())
		// Spaced for a rate decreased since (or at the same instant: the
		// store's clock cannot tell which came first): the store removed
		// the slot unless it was due already, and then it comes back as
		// it is. Taken again once per decrease.
		cutAt := p.views.of(c.Key).cutAt
		stale := !cutAt.IsZero() && !slot.At.After(cutAt) && !cutAt.Equal(retaken)
		switch {
		case lateBy > MaxLate:
			p.releaseAfter(ctx, slot)
			trace.TraceLate(slot, lateBy)
		case stale:
			retaken = cutAt
			if tries == maxLateWakes-1 {
				p.releaseAfter(ctx, slot)
			}
		default:
		}
		if lateBy <= MaxLate && !stale {
			break
		}
		if tries == maxLateWakes-1 {
			return Ticket{Wait: waited(slot)}, nil
		}
	}
	// The whole wait (slots, then gate) stays within MaxWait.
	cs, span := p.careful(c)
	passed, err := p.gate.wait(ctx, p.clock, gate, start.Add(c.MaxWait), cs, span)
	switch {
	case errors.Is(err, errGateFull):
		// This node already sent a limit's worth within its window: the
		// carrier is full for this call; give the slot back.
		p.releaseAfter(ctx, slot)
		return Ticket{Wait: waited(slot)}, nil
	case err != nil:
		// ctx ended in the gate: the slot goes unused, like one whose
		// wait was cancelled.
		p.releaseAfter(ctx, slot)
		return Ticket{Wait: waited(slot)}, err
	}
	if p.pausedSince(slot) {
		// Paused while the gate held the send.
		p.releaseAfter(ctx, slot)
		trace.TracePaused(slot)
		return Ticket{Paused: true, Wait: waited(slot)}, nil
	}
	return Ticket{OK: true, Probe: slot.Probe, Wait: waited(slot), gate: p.gate, passed: passed}, nil
}

// learnSlot teaches the view what a reservation asked at asked said of
// the carrier's pause: paused (and for how long), or none (unless it was
// the half-open probe).
func (p *Pacer) learnSlot(s Slot, asked time.Time) {
	switch {
	case s.Paused:
		p.views.learn(s.Key, p.onClock(Pause{Paused: true, Left: s.Wait}), asked)
	case s.Probe:
		p.views.learn(s.Key, p.onClock(Pause{Paused: true}), asked)
	default:
		p.views.learn(s.Key, Pause{}, asked)
	}
}

// pausedSince reports whether s, a reserved slot, must not be used: this
// node knows its carrier paused, and s is not the half-open probe of a
// pause whose span is over.
func (p *Pacer) pausedSince(s Slot) bool {
	v := p.views.of(s.Key).pause
	if !v.Paused {
		return false
	}
	return !s.Probe || p.clock.Now().Before(v.Until)
}

// awaitSlot waits for slot to come due, counted in trace's queue. A slot
// whose ctx ended as it came due is given back, and so is one whose
// carrier was paused meanwhile (paused): the call is then not sent.
func (p *Pacer) awaitSlot(ctx context.Context, slot Slot, c Carrier, trace Tracer) (paused bool, err error) {
	trace.TraceQueued(+1)
	// A booking's Due is when to ask again, not a slot: put back as one,
	// it would be a slot off the carrier's spacing (h65).
	if !slot.Booked {
		p.waiting.add(slot.Key, Waiting{Member: slot.Member, Due: slot.Due(), Keep: keepFor(Interval(c.CPS))})
	}
	err = p.Wait(ctx, slot)
	if !slot.Booked {
		p.waiting.remove(slot.Key, slot.Member)
	}
	trace.TraceQueued(-1)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
		p.releaseAfter(ctx, slot)
	}
	if err != nil {
		return false, err
	}
	if p.pausedSince(slot) {
		p.releaseAfter(ctx, slot)
		trace.TracePaused(slot)
		return true, nil
	}
	return false, nil
}

// Careful is what a SlotStore that may have lost the pool's schedule
// tells the Pacer (store.Failover): since when, and among how many
// nodes. Calls waiting for slots of the lost schedule still go at their
// times while new calls take slots from now; so for the carrier's
// max_wait and one window after since, this node's send gate holds each
// of its limits to its share of the pool's (limit / nodes): the pool
// stays within the limits when its calls are spread evenly. A zero since
// is nothing lost.
type Careful interface {
	Careful() (since time.Time, nodes int)
}

// careful returns what the send gate asks at each check for a call to c
// (shareAt): the store when it can be Careful, and for how long after its
// since (c's max_wait and one window).
func (p *Pacer) careful(c Carrier) (Careful, time.Duration) {
	cs, _ := p.store.(Careful)
	return cs, c.MaxWait + time.Second + admission.WindowGuard
}

// shareAt is the send gate's share at now: the live nodes while cs is
// Careful since less than span, else 1.
func shareAt(cs Careful, span time.Duration, now time.Time) int {
	if cs == nil {
		return 1
	}
	since, n := cs.Careful()
	if n <= 1 || since.IsZero() || !now.Before(since.Add(span)) {
		return 1
	}
	return n
}
