package calls

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// RedisOptions tunes a RedisStore: the timeout, the observer and the
// Pipeliner of its lua.Runner, as for the admission and pacing stores.
type RedisOptions = lua.RunnerOptions

// RedisStore is the Store shared by a pool: each place is a Redis sorted set
// of live calls scored by their expiry (Redis TIME µs).
//
// On a *redis.ClusterClient, places in different hash slots are taken one
// by one (see Occupy). RedisStore is safe for concurrent use.
type RedisStore struct {
	run     *lua.Runner
	cluster bool
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a Store on c. The scripts are loaded by lua.Load.
func NewRedisStore(c redis.UniversalClient, opt RedisOptions) *RedisStore {
	_, cluster := c.(*redis.ClusterClient)
	return &RedisStore{run: lua.NewRunner(c, opt), cluster: cluster}
}

func (s *RedisStore) sameSlot(keys []string) bool {
	if !s.cluster {
		return true
	}
	for _, k := range keys[1:] {
		if lua.HashSlot(k) != lua.HashSlot(keys[0]) {
			return false
		}
	}
	return true
}

// Occupy takes a place in every Place in one calls_occupy.lua call.
//
// Cross-slot (Cluster, places in different slots): the member takes each
// place in turn; when a later place is full, the places already taken are
// freed again. Between the two steps the earlier places count one call too
// many, so a concurrent call may be refused that would have fit, but no
// place ever holds more than its limit. If the freeing fails, the stale
// places expire with the TTL.
func (s *RedisStore) Occupy(ctx context.Context, member string, ttl time.Duration, places []Place) (Decision, error) {
	if len(places) == 0 {
		return Decision{Admit: true, Refused: -1, Counts: []int{}}, nil
	}
	if err := checkArgs(ttl, places); err != nil {
		return Decision{}, err
	}
	lp := make([]lua.CallPlace, len(places))
	keys := make([]string, len(places))
	for i, p := range places {
		lp[i] = lua.CallPlace{Key: p.Key, Limit: int64(p.Limit)}
		keys[i] = p.Key
	}
	if !s.sameSlot(keys) {
		return s.occupyCrossSlot(ctx, member, ttl, lp)
	}
	var r lua.OccupyReply
	err := s.run.Run(ctx, lua.ScriptCallsOccupy, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Occupy(ctx, sc, member, lua.Micros(ttl), lp)
		return err
	})
	if err != nil {
		return Decision{}, fmt.Errorf("calls: %q: %w", keys[0], err)
	}
	d := Decision{Admit: r.Admitted, Refused: r.Refused, Duplicate: r.Duplicate, Counts: make([]int, len(r.Counts))}
	for i, c := range r.Counts {
		d.Counts[i] = int(c)
	}
	return d, nil
}

// rollbackTimeout bounds the freeing of cross-slot places, which runs even
// when the caller's context is done.
const rollbackTimeout = time.Second

func (s *RedisStore) occupyCrossSlot(ctx context.Context, member string, ttl time.Duration, lp []lua.CallPlace) (Decision, error) {
	d := Decision{Admit: true, Refused: -1, Counts: make([]int, len(lp))}
	for i := range d.Counts {
		d.Counts[i] = -1
	}
	var added []int
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		for _, i := range added {
			_ = s.run.RunWithin(rctx, lua.ScriptCallsFree, func(ctx context.Context, sc redis.Scripter) error {
				_, err := lua.FreeCall(ctx, sc, member, []string{lp[i].Key})
				return err
			})
			d.Counts[i]--
		}
	}
	for i := range lp {
		var r lua.OccupyReply
		err := s.run.Run(ctx, lua.ScriptCallsOccupy, func(ctx context.Context, sc redis.Scripter) (err error) {
			r, err = lua.Occupy(ctx, sc, member, lua.Micros(ttl), lp[i:i+1])
			return err
		})
		if err != nil {
			rollback()
			return Decision{}, fmt.Errorf("calls: %q (cross-slot, place %d): %w", lp[i].Key, i, err)
		}
		d.Counts[i] = int(r.Counts[0])
		switch {
		case r.Duplicate:
			// Live already: a retransmission. Like the one-call script,
			// nothing new is counted; undo this attempt's additions.
			rollback()
			d.Duplicate = true
			return d, nil
		case !r.Admitted:
			rollback()
			d.Admit, d.Refused = false, i
			return d, nil
		}
		added = append(added, i)
	}
	return d, nil
}

// Free removes member from every key (one script call per Cluster slot).
func (s *RedisStore) Free(ctx context.Context, member string, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	freed := 0
	for _, g := range s.groups(keys) {
		var n int64
		err := s.run.Run(ctx, lua.ScriptCallsFree, func(ctx context.Context, sc redis.Scripter) (err error) {
			n, err = lua.FreeCall(ctx, sc, member, g)
			return err
		})
		if err != nil {
			return freed, fmt.Errorf("calls: %q: %w", g[0], err)
		}
		freed += int(n)
	}
	return freed, nil
}

// Refresh extends the places of members in key, adding back the missing
// ones, and reports how many were added back (one script call).
func (s *RedisStore) Refresh(ctx context.Context, key string, ttl time.Duration, members []string) (int, error) {
	if ttl <= 0 {
		return 0, ErrArgs
	}
	if len(members) == 0 {
		return 0, nil
	}
	var r lua.RefreshReply
	err := s.run.Run(ctx, lua.ScriptCallsRefresh, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.RefreshCalls(ctx, sc, key, lua.Micros(ttl), members)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("calls: %q: %w", key, err)
	}
	return int(r.Restored), nil
}

// Count returns the live calls of each key (read-only).
func (s *RedisStore) Count(ctx context.Context, keys []string) ([]int, error) {
	out := make([]int, 0, len(keys))
	for _, g := range s.groups(keys) {
		var r lua.CountsReply
		err := s.run.Run(ctx, lua.ScriptCallsCount, func(ctx context.Context, sc redis.Scripter) (err error) {
			r, err = lua.CountCalls(ctx, sc, g)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("calls: %q: %w", g[0], err)
		}
		for _, c := range r.Counts {
			out = append(out, int(c))
		}
	}
	return out, nil
}

// groups splits keys into runs a single script call may name: all of them
// outside a cluster, one by one when they span slots.
func (s *RedisStore) groups(keys []string) [][]string {
	if len(keys) == 0 {
		return nil
	}
	if s.sameSlot(keys) {
		return [][]string{keys}
	}
	out := make([][]string, len(keys))
	for i, k := range keys {
		out[i] = []string{k}
	}
	return out
}
