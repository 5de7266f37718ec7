package pacing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotReserved is returned by Wait for a Slot whose OK is false: there is
// nothing to wait for, the call must go to another carrier or be rejected.
var ErrNotReserved = errors.New("pacing: slot not reserved")

// releaseTimeout bounds the release of a slot after the caller's context is
// done (the release runs on a fresh context).
const releaseTimeout = time.Second

// Pacer turns carriers into reservations and waits them out, like
// x/time/rate's WaitN: it never reserves a slot the caller cannot wait for,
// the wait is cancellable, and a cancelled wait gives its slot back.
// Acquire does all of it for a call, and passes the node's send gate too.
// Pacer is safe for concurrent use.
type Pacer struct {
	store SlotStore
	clock Clock
	// gate is this node's send gate (Acquire).
	gate *sendGate
	// views is what this node knows of each carrier's pause and rate cuts.
	views views
	// tag starts every member MemberOf makes (respace.go).
	tag string
	// waiting is the slots this node's calls wait for, put back into a
	// schedule the store lost (rebook.go).
	waiting waitingSet
}

// NewPacer returns a Pacer on store that reads and waits on SystemClock.
func NewPacer(store SlotStore) *Pacer { return NewPacerClock(store, SystemClock) }

// NewPacerClock returns a Pacer on store that reads and waits on clock.
func NewPacerClock(store SlotStore, clock Clock) *Pacer {
	return &Pacer{store: store, clock: clock, gate: newSendGate(), tag: newTag()}
}

// Reserve reserves the next slot of carrier c for member (unique per call
// attempt), spacing slots by Interval(c.CPS). The longest accepted wait is
// c.MaxWait, shortened to the time left before ctx's deadline when ctx has
// one: a slot the caller cannot wait for is never reserved. A full queue is a
// Slot with OK false and the wait it would have had; an error means the store
// failed (or c.CPS is not positive) and nothing was reserved that is known
// of. Slot.Reserved is set to the local time of the reply, so Slot.Due is
// right on this node whatever the store's clock.
func (p *Pacer) Reserve(ctx context.Context, c Carrier, member string) (Slot, error) {
	interval := Interval(c.CPS)
	if interval <= 0 {
		return Slot{}, fmt.Errorf("pacing: carrier %q: cps %v must be > 0", c.Key, c.CPS)
	}
	maxWait := c.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		maxWait = min(maxWait, time.Until(dl))
	}
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	s, err := p.store.Reserve(ctx, c.Key, member, c.Share, interval, max(maxWait, 0))
	if err != nil {
		return Slot{}, err
	}
	s.Reserved = p.clock.Now()
	return s, nil
}

// Wait blocks until s is due (s.Due()) on the Pacer's clock. When ctx is done first it releases
// the slot on a fresh short context and returns ctx.Err(); a failed release
// is not reported (the slot then only delays later calls until it passes).
// Waiting on a Slot with OK false returns ErrNotReserved at once.
func (p *Pacer) Wait(ctx context.Context, s Slot) error {
	if !s.OK {
		return ErrNotReserved
	}
	if err := ctx.Err(); err != nil {
		p.releaseAfter(ctx, s)
		return err
	}
	if err := p.clock.Sleep(ctx, s.Due().Sub(p.clock.Now())); err != nil {
		p.releaseAfter(ctx, s)
		return err
	}
	return nil
}

func (p *Pacer) releaseAfter(ctx context.Context, s Slot) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_ = p.release(rctx, s)
}

// release gives s back, and its probe claim when it is a pause's
// half-open probe.
func (p *Pacer) release(ctx context.Context, s Slot) error {
	err := p.store.Release(ctx, s.Key, s.Member)
	if s.Probe {
		start := p.clock.Now()
		if st, perr := p.store.ProbeDone(ctx, s.Key, s.Member, false); perr == nil {
			p.views.learn(s.Key, p.onClock(st), start)
		} else if err == nil {
			err = perr
		}
	}
	return err
}

// Release gives s back (call cancelled or rerouted before it was sent),
// with its probe claim. A Slot with OK false holds nothing; releasing it
// is a no-op.
func (p *Pacer) Release(ctx context.Context, s Slot) error {
	if !s.OK {
		return nil
	}
	return p.release(ctx, s)
}
