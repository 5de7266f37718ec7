package pacing

import (
	"context"
	"errors"
	"time"
)

// maxLateWakes bounds the slots one Acquire may miss by waking too late
// before it gives up on the carrier.
const maxLateWakes = 3

// Ticket is the outcome of Acquire.
type Ticket struct {
	// OK reports that the call may be sent now. False means the carrier is
	// full for this call: no slot within its MaxWait, maxLateWakes slots
	// missed by waking late, or the send gate would hold the send past
	// MaxWait. A Ticket with OK false holds nothing.
	OK bool
	// Wait is the wait of the call's last slot: granted, or refused as too
	// long. It is 0 when no reply came from the store.
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

// Trace is told what one Acquire does, so that the caller can count and log
// it (pacing keeps no metrics). A nil func is not called. Each runs on
// Acquire's goroutine, before Acquire goes on, and must return quickly.
type Trace struct {
	// Reserved follows the reply to every reservation: err when the store
	// failed (or ctx ended), else s, whose OK is false for a full carrier
	// (s.Wait is then the wait refused).
	Reserved func(s Slot, err error)
	// Queued is called with +1 when Acquire starts waiting for a reserved
	// slot and with -1 when that wait ends.
	Queued func(delta int)
	// Late is called when Acquire woke late, more than MaxLate after s was
	// due, and gave s back to take the next slot.
	Late func(s Slot, late time.Duration)
}

// Acquire waits until a call (member, unique per call attempt) may be sent
// to carrier c, like x/time/rate's WaitN: it reserves the carrier's next
// slot within c.MaxWait, waits for it, then passes the send gate for gate
// (the carrier's own limit and the call's admission limits, see GateKey),
// the whole wait within c.MaxWait. A slot it woke too late for (more than
// MaxLate after it was due) is given back and the next one taken, in what
// is left of MaxWait, a few times at most.
//
// A full carrier is a Ticket with OK false and a nil error. When ctx ends
// first Acquire returns ctx.Err(); any other error means the store failed.
// In every case but an OK Ticket, a slot Acquire reserved is given back
// (on a fresh context bounded by releaseTimeout; a failed release only
// delays later calls until the slot has passed). trace, when not nil, is
// told of each step.
func (p *Pacer) Acquire(ctx context.Context, c Carrier, member string, trace *Trace, gate ...GateKey) (Ticket, error) {
	if trace == nil {
		trace = &Trace{}
	}
	start := p.clock.Now()
	var slot Slot
	for late := 0; ; late++ {
		// No deadline here: Reserve shortens MaxWait to a context's
		// deadline, and the store bounds its own round trip. A slot taken
		// again after a late wake must still fit in what is left of
		// MaxWait.
		try := c
		try.MaxWait = max(c.MaxWait-p.clock.Now().Sub(start), 0)
		var err error
		slot, err = p.Reserve(ctx, try, member)
		if trace.Reserved != nil {
			trace.Reserved(slot, err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return Ticket{}, ctx.Err()
			}
			return Ticket{}, err
		}
		if !slot.OK {
			return Ticket{Wait: slot.Wait}, nil
		}

		if trace.Queued != nil {
			trace.Queued(+1)
		}
		err = p.Wait(ctx, slot)
		if trace.Queued != nil {
			trace.Queued(-1)
		}
		if err == nil && ctx.Err() != nil {
			// Cancelled as the slot came due: give the slot back, do not send.
			err = ctx.Err()
			p.releaseAfter(ctx, slot)
		}
		if err != nil {
			return Ticket{Wait: slot.Wait}, err
		}
		// Slots are spaced so that a send up to MaxLate after its slot
		// keeps the carrier within its cps in every rolling second; a node
		// that woke later (a starved scheduler) would break that promise
		// for the whole pool. The slot is missed: give it back and take the
		// next, a few times at most, then the carrier counts as full for
		// this call.
		lateBy := p.clock.Now().Sub(slot.Due())
		if lateBy <= MaxLate {
			break
		}
		p.releaseAfter(ctx, slot)
		if trace.Late != nil {
			trace.Late(slot, lateBy)
		}
		if late == maxLateWakes-1 {
			return Ticket{Wait: slot.Wait}, nil
		}
	}
	// The whole wait (slots, then gate) stays within MaxWait.
	passed, err := p.gate.wait(ctx, p.clock, gate, start.Add(c.MaxWait))
	switch {
	case errors.Is(err, errGateFull):
		// This node already sent a limit's worth within its window: the
		// carrier is full for this call; give the slot back.
		p.releaseAfter(ctx, slot)
		return Ticket{Wait: slot.Wait}, nil
	case err != nil:
		// ctx ended in the gate: the slot goes unused, like one whose
		// wait was cancelled.
		p.releaseAfter(ctx, slot)
		return Ticket{Wait: slot.Wait}, err
	}
	return Ticket{OK: true, Wait: slot.Wait, gate: p.gate, passed: passed}, nil
}
