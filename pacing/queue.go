package pacing

import "context"

// Queue reads c's slots from the store: the calls waiting for one, the
// slots of the last second and the least wait of a call reserving now at
// c.CPS (a least_wait route compares its carriers by it).
func (p *Pacer) Queue(ctx context.Context, c Carrier) (QueueState, error) {
	return p.store.Queue(ctx, c.Key, Interval(c.CPS))
}
