package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// RedisOptions tunes a RedisStore: the timeout, the observer and the
// Pipeliner of its lua.Runner (the pacing store takes the same).
type RedisOptions = lua.RunnerOptions

// RedisStore is the Store shared by every node of a pool: buckets are Redis
// sorted sets and each decision is one admit.lua call on Redis's clock.
//
// On a *redis.ClusterClient, a decision whose buckets live in different hash
// slots is taken bucket by bucket (see Admit). RedisStore is safe for
// concurrent use.
type RedisStore struct {
	run     *lua.Runner
	cluster bool
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a Store on c (scripts through opt.Pipeline when
// set). Call Load once at start so a script Redis rejects fails there.
func NewRedisStore(c redis.UniversalClient, opt RedisOptions) *RedisStore {
	_, cluster := c.(*redis.ClusterClient)
	return &RedisStore{run: lua.NewRunner(c, opt), cluster: cluster}
}

// Load loads every script into Redis (all masters of a cluster).
func (s *RedisStore) Load(ctx context.Context) error {
	if err := s.run.Load(ctx); err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	return nil
}

// admit runs admit.lua for lb, bounded by the store's timeout.
func (s *RedisStore) admit(ctx context.Context, member string, lb []lua.AdmitBucket) (r lua.AdmitReply, err error) {
	err = s.run.Run(ctx, lua.ScriptAdmit, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Admit(ctx, sc, member, lb)
		return err
	})
	return r, err
}

// AdmitPace decides like Admit and, for a call it admits (not a
// duplicate), runs pc (pace.lua's reservation of the call's first carrier
// slot) in the same script: one round trip for both (lua.AdmitPace).
// paced reports that the reservation ran and r is its reply; it is false
// for a call refused or a duplicate, and when the two cannot share a
// script (on a Cluster, keys in different slots: the call is then only
// admitted, as by Admit, and the caller reserves apart).
func (s *RedisStore) AdmitPace(ctx context.Context, member string, buckets []Bucket, pc lua.PaceCall) (d Decision, r lua.PaceReply, paced bool, err error) {
	if len(buckets) == 0 || (s.cluster && !sameSlotAs(buckets, pc.Key)) {
		d, err = s.Admit(ctx, member, buckets)
		return d, lua.PaceReply{}, false, err
	}
	lb, err := luaBuckets(buckets)
	if err != nil {
		return Decision{}, lua.PaceReply{}, false, err
	}
	var a lua.AdmitReply
	err = s.run.Run(ctx, lua.ScriptAdmitPace, func(ctx context.Context, sc redis.Scripter) (err error) {
		a, r, paced, err = lua.AdmitPace(ctx, sc, member, lb, pc)
		return err
	})
	if err != nil {
		return Decision{}, lua.PaceReply{}, false, fmt.Errorf("admission: bucket %q with slot set %q: %w", buckets[0].Key, pc.Key, err)
	}
	return decision(a), r, paced, nil
}

// sameSlotAs reports whether every bucket and key hash to one Cluster slot.
func sameSlotAs(buckets []Bucket, key string) bool {
	return sameSlot(buckets) && lua.HashSlot(buckets[0].Key) == lua.HashSlot(key)
}

func luaBuckets(buckets []Bucket) ([]lua.AdmitBucket, error) {
	out := make([]lua.AdmitBucket, len(buckets))
	for i, b := range buckets {
		if err := check(b); err != nil {
			return nil, err
		}
		out[i] = lua.AdmitBucket{Key: b.Key, Limit: int64(b.Limit), WindowUS: lua.Micros(b.Window), RateMicros: b.RateMicros, Over: int64(b.Over)}
	}
	return out, nil
}

// sameSlot reports whether every bucket hashes to one Cluster slot.
func sameSlot(buckets []Bucket) bool {
	for i := 1; i < len(buckets); i++ {
		if lua.HashSlot(buckets[i].Key) != lua.HashSlot(buckets[0].Key) {
			return false
		}
	}
	return true
}

// slotGroups splits bucket indexes by Cluster slot, in order of first
// appearance: the buckets of one scope (its 1 s window or token bucket and
// its extra windows) share a hash tag, so one group per scope.
func slotGroups(buckets []Bucket) [][]int {
	var groups [][]int
	at := map[int]int{}
	for i, b := range buckets {
		slot := lua.HashSlot(b.Key)
		g, ok := at[slot]
		if !ok {
			g = len(groups)
			at[slot] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// Admit decides for every bucket in one admit.lua call.
//
// Cross-slot (Cluster, buckets in different slots): the buckets are grouped
// by slot and each group is decided in one admit.lua call, in turn (all or
// nothing within the group); when a later group refuses, the groups already
// admitted are undone (refund.lua: the member leaves their sorted sets and
// their token buckets get the token back). Between the two steps the earlier
// buckets count one call too many, so concurrent calls may be refused that
// would have fit (under-admission for a round trip), but no bucket ever
// admits more than its limit. If the undo fails, the stale window entries
// leave with the window and the token is not given back (under-admission
// again); the decision (refused) stands and the error goes to Observe.
func (s *RedisStore) Admit(ctx context.Context, member string, buckets []Bucket) (Decision, error) {
	if len(buckets) == 0 {
		return Decision{Admit: true, Refused: -1, Counts: []int{}}, nil
	}
	lb, err := luaBuckets(buckets)
	if err != nil {
		return Decision{}, err
	}
	if s.cluster && !sameSlot(buckets) {
		return s.admitCrossSlot(ctx, member, buckets, lb)
	}
	r, err := s.admit(ctx, member, lb)
	if err != nil {
		return Decision{}, fmt.Errorf("admission: bucket %q: %w", buckets[0].Key, err)
	}
	return decision(r), nil
}

func decision(r lua.AdmitReply) Decision {
	d := Decision{
		Admit:     r.Admitted,
		Refused:   r.Refused,
		Counts:    make([]int, len(r.Counts)),
		At:        lua.Time(r.NowUS),
		Duplicate: r.Duplicate,
	}
	if !r.Admitted {
		d.RetryAfter = time.Duration(r.RetryAfterUS) * time.Microsecond
	}
	for i, c := range r.Counts {
		d.Counts[i] = int(c)
	}
	d.Over = overFlags(r.Over)
	return d
}

// overFlags is a reply's over flags, nil when none is set.
func overFlags(over []bool) []bool {
	for _, o := range over {
		if o {
			return over
		}
	}
	return nil
}

// rollbackTimeout bounds the undoing of cross-slot admissions, which runs
// even when the caller's context is already done.
const rollbackTimeout = time.Second

// pick returns lb at the indexes idx.
func pick(lb []lua.AdmitBucket, idx []int) []lua.AdmitBucket {
	out := make([]lua.AdmitBucket, len(idx))
	for i, j := range idx {
		out[i] = lb[j]
	}
	return out
}

func (s *RedisStore) admitCrossSlot(ctx context.Context, member string, buckets []Bucket, lb []lua.AdmitBucket) (Decision, error) {
	d := Decision{Admit: true, Refused: -1, Counts: make([]int, len(buckets))}
	for i := range d.Counts {
		d.Counts[i] = -1
	}
	var added [][]int // groups this call admitted member into
	rollback := func() {
		if len(added) == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		for _, g := range added {
			// Bounded by rollbackTimeout, not the store's timeout.
			_ = s.run.RunWithin(rctx, lua.ScriptRefund, func(ctx context.Context, sc redis.Scripter) error {
				_, err := lua.Refund(ctx, sc, member, pick(lb, g))
				return err
			})
			for _, j := range g {
				d.Counts[j]-- // the call left the window, or its token came back
			}
		}
	}
	for _, g := range slotGroups(buckets) {
		r, err := s.admit(ctx, member, pick(lb, g))
		if err != nil {
			rollback()
			return Decision{}, fmt.Errorf("admission: bucket %q (cross-slot, bucket %d): %w", buckets[g[0]].Key, g[0], err)
		}
		d.At = lua.Time(r.NowUS)
		for k, j := range g {
			d.Counts[j] = int(r.Counts[k])
			if r.Over[k] && !r.Duplicate {
				if d.Over == nil {
					d.Over = make([]bool, len(buckets))
				}
				d.Over[j] = true
			}
		}
		switch {
		case r.Duplicate:
			// Admitted before: a retransmission. Like the one-call script,
			// nothing is added anywhere; undo this attempt's additions.
			rollback()
			d.Duplicate, d.Over = true, nil
			return d, nil
		case !r.Admitted:
			rollback()
			d.Admit = false
			d.Refused = g[r.Refused]
			d.RetryAfter = time.Duration(r.RetryAfterUS) * time.Microsecond
			return d, nil
		}
		added = append(added, g)
	}
	return d, nil
}

// Counts returns the calls currently in each bucket's window (tokens in use
// for a token bucket), without writing. Buckets in different Cluster slots
// are read group by group.
func (s *RedisStore) Counts(ctx context.Context, buckets []Bucket) ([]int, error) {
	if len(buckets) == 0 {
		return []int{}, nil
	}
	lb, err := luaBuckets(buckets)
	if err != nil {
		return nil, err
	}
	groups := [][]int{nil}
	for i := range buckets {
		groups[0] = append(groups[0], i)
	}
	if s.cluster && !sameSlot(buckets) {
		groups = slotGroups(buckets)
	}
	out := make([]int, len(buckets))
	for _, g := range groups {
		var r lua.CountsReply
		err := s.run.Run(ctx, lua.ScriptCounts, func(ctx context.Context, sc redis.Scripter) (err error) {
			r, err = lua.Counts(ctx, sc, pick(lb, g))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("admission: bucket %q: %w", buckets[g[0]].Key, err)
		}
		for k, j := range g {
			out[j] = int(r.Counts[k])
		}
	}
	return out, nil
}
