package store

import (
	"context"
	"time"

	"github.com/cpsguard/cpsguard/calls"
)

// CallsFailover is the calls.Store of a node: Redis while the Failover it
// follows decides on Redis, the in-process places otherwise, per the same
// store.on_error policy (local: each max_calls divided by the live nodes;
// admit: no limit; reject: ErrStoreDown). Places taken in Redis are
// mirrored in process, so the fallback starts with this node's live calls;
// places taken in process reach Redis when it is back in use, through the
// Tracker's refresh (Store.Refresh adds missing live calls back).
//
// CallsFailover is safe for concurrent use.
type CallsFailover struct {
	f     *Failover
	redis calls.Store // nil without Redis
	local calls.Store
}

var _ calls.Store = (*CallsFailover)(nil)

// NewCallsFailover returns the calls store that follows f's mode.
func NewCallsFailover(f *Failover, redis, local calls.Store) *CallsFailover {
	return &CallsFailover{f: f, redis: redis, local: local}
}

func (c *CallsFailover) redisInUse() bool { return c.redis != nil && c.f.redisInUse() }

// Occupy implements calls.Store.
func (c *CallsFailover) Occupy(ctx context.Context, member string, ttl time.Duration, places []calls.Place) (calls.Decision, error) {
	if c.redis != nil && c.f.redisFor(ctx) {
		d, err := c.redis.Occupy(ctx, member, ttl, places)
		if err == nil {
			if d.Admit && !d.Duplicate {
				// Full limits: this node's own calls never exceed the pool's.
				_, _ = c.local.Occupy(ctx, member, ttl, places)
			}
			return d, nil
		}
		if callerGaveUp(ctx) {
			return d, err
		}
		c.f.failCall(ctx, "calls_occupy", err)
	}
	switch c.f.o.Policy {
	case PolicyAdmit:
		counts := make([]int, len(places))
		for i := range counts {
			counts[i] = -1
		}
		return calls.Decision{Admit: true, Refused: -1, Counts: counts}, nil
	case PolicyReject:
		if c.redis != nil {
			return calls.Decision{Refused: -1}, ErrStoreDown
		}
	}
	shared := places
	if n := c.f.nodes(); c.redis != nil && n > 1 {
		shared = make([]calls.Place, len(places))
		for i, p := range places {
			p.Limit /= n
			if p.Limit < 1 {
				// Less than one call per node: n nodes each taking one
				// would exceed the pool's limit, so refuse.
				counts := make([]int, len(places))
				return calls.Decision{Refused: i, Counts: counts}, nil
			}
			shared[i] = p
		}
	}
	return c.local.Occupy(ctx, member, ttl, shared)
}

// Free implements calls.Store: the places leave both stores (a call
// placed before a switch is freed where it lives). In fallback Redis is
// not asked (every call's end would wait out its timeout); a place left
// there expires with its TTL, as it does after a Redis error.
func (c *CallsFailover) Free(ctx context.Context, member string, keys []string) (int, error) {
	n, _ := c.local.Free(ctx, member, keys)
	if !c.redisInUse() {
		return n, nil
	}
	return c.redis.Free(ctx, member, keys)
}

// Refresh implements calls.Store: the mirror in process and Redis (when
// in use) are both refreshed.
func (c *CallsFailover) Refresh(ctx context.Context, key string, ttl time.Duration, members []string) (int, error) {
	n, _ := c.local.Refresh(ctx, key, ttl, members)
	if !c.redisInUse() {
		return n, nil
	}
	return c.redis.Refresh(ctx, key, ttl, members)
}

// Count implements calls.Store (for operators: errors never switch the
// mode).
func (c *CallsFailover) Count(ctx context.Context, keys []string) ([]int, error) {
	if c.redisInUse() {
		return c.redis.Count(ctx, keys)
	}
	return c.local.Count(ctx, keys)
}
