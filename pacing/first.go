package pacing

import (
	"context"
	"time"
)

// Ask is the first reservation Acquire makes for a call: the arguments of
// SlotStore.Reserve.
type Ask struct {
	Key, Member string
	Share       Share
	// Interval is Interval(CPS); MaxWait the longest accepted wait, cut
	// to what is left of the context's deadline.
	Interval, MaxWait time.Duration
}

// First is a call's first reservation, made ahead of Acquire by the
// caller (with the call's admission, in one store round trip: see
// store.Failover.AdmitReserve) and handed to Acquire in Carrier.First.
// Acquire takes it as the reply to its own first reservation: it waits
// for it, gives it back or follows its booking exactly as it would have.
type First struct {
	// Slot is the store's reply, with Key and Member those of the Ask and
	// Reserved the local time of the reply.
	Slot Slot
	// Asked is when it was asked: the start of the call's MaxWait.
	Asked time.Time
}

// FirstAsk returns the reservation Acquire(ctx, c, member, …) would make
// first, for a caller that makes it ahead of Acquire (see First). ok is
// false when Acquire would make none: a priority call, a carrier this
// node knows is paused, a CPS that is not positive, or ctx ended.
func (p *Pacer) FirstAsk(ctx context.Context, c Carrier, member string) (a Ask, ok bool) {
	if IsPriority(ctx) || ctx.Err() != nil {
		return Ask{}, false
	}
	v := p.views.of(c.Key)
	if v.rate > 0 {
		c.CPS = min(c.CPS, v.rate) // the rate in force now, as Acquire reserves
	}
	interval := Interval(c.CPS)
	if interval <= 0 {
		return Ask{}, false
	}
	now := p.clock.Now()
	if v.pause.Paused && now.Before(v.pause.Until) {
		return Ask{}, false
	}
	maxWait := c.MaxWait
	if dl, ok := ctx.Deadline(); ok {
		maxWait = min(maxWait, time.Until(dl))
	}
	return Ask{Key: c.Key, Member: member, Share: c.Share, Interval: interval, MaxWait: max(maxWait, 0)}, true
}

// takeFirst returns c's First when it is the reservation of member on
// c's carrier, else gives it back (a caller's mistake must not hold a
// slot) and returns nil.
func (p *Pacer) takeFirst(ctx context.Context, c Carrier, member string) *First {
	f := c.First
	if f == nil {
		return nil
	}
	if f.Slot.Key != c.Key || f.Slot.Member != member {
		p.dropFirst(ctx, f)
		return nil
	}
	return f
}

// dropFirst gives back the slot or booking f holds.
func (p *Pacer) dropFirst(ctx context.Context, f *First) {
	if f != nil && f.Slot.OK {
		p.releaseAfter(ctx, f.Slot)
	}
}
