package pacing

import (
	"context"
	"time"
)

// Respace tells the pacer that carrier c is paced at c.CPS from now on:
// its limit changed on this node (a reload, a live override). When lowered,
// the store removes the carrier's slots still in the future, once for the
// pool (SlotStore.Respace), and this node's calls holding a slot reserved
// before that take one again at c.CPS before they send (Acquire), so the
// carrier does not see the old rate for up to max_wait. A raised limit
// removes nothing. An error means the store failed and nothing was
// learned; the caller tries again.
func (p *Pacer) Respace(ctx context.Context, c Carrier, lowered bool) error {
	interval := Interval(c.CPS)
	if interval <= 0 {
		return errInterval(c.Key, interval)
	}
	at, err := p.store.Respace(ctx, c.Key, interval, lowered)
	if err != nil {
		return err
	}
	p.views.respace(c.Key, c.CPS, at)
	return nil
}

// respace records a limit changed on this node: cps is key's rate from
// now on, and at the store's time of its last respace (zero: none).
func (v *views) respace(key string, cps float64, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cv := v.get(key)
	if at.After(cv.cutAt) {
		cv.cutAt = at
	}
	cv.rate = cps
}
