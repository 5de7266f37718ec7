package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// RedisOptions tunes a RedisStore.
type RedisOptions struct {
	// Timeout bounds every store call (context.WithTimeout on the caller's
	// context); 0 = no bound beyond the caller's context. For the deadline
	// to reach the socket the client needs ContextTimeoutEnabled: true.
	Timeout time.Duration
	// Observe, when set, is called after every script run with the script
	// name (lua.ScriptAdmit, …), its duration and its error (nil on success).
	// It must be fast and safe for concurrent use; it feeds metrics.
	Observe func(script string, d time.Duration, err error)
	// Pipeline, when set, carries every script call (lua.Pipeliner: the
	// calls of concurrent callers share one round trip); nil = one call per
	// pooled connection. It must run on the same client. The store does not
	// own it: whoever built it closes it, after the store's last call.
	// Observe then measures a caller's wait, queue included.
	Pipeline *lua.Pipeliner
}

// RedisStore is the Store shared by every node of a pool: buckets are Redis
// sorted sets and each decision is one admit.lua call on Redis's clock.
//
// On a *redis.ClusterClient, a decision whose buckets live in different hash
// slots is taken bucket by bucket (see Admit). RedisStore is safe for
// concurrent use.
type RedisStore struct {
	c       redis.UniversalClient
	sc      redis.Scripter // opt.Pipeline, else c
	cluster bool
	opt     RedisOptions
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a Store on c (scripts through opt.Pipeline when
// set). Call Load once at start so a script Redis rejects fails there.
func NewRedisStore(c redis.UniversalClient, opt RedisOptions) *RedisStore {
	_, cluster := c.(*redis.ClusterClient)
	s := &RedisStore{c: c, sc: c, cluster: cluster, opt: opt}
	if opt.Pipeline != nil {
		s.sc = opt.Pipeline
	}
	return s
}

// Load loads every script into Redis (all masters of a cluster).
func (s *RedisStore) Load(ctx context.Context) error {
	ctx, cancel := s.context(ctx)
	defer cancel()
	if err := lua.Load(ctx, s.c); err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	return nil
}

// context bounds one call by the store's timeout (lua.WithTimeout).
func (s *RedisStore) context(ctx context.Context) (context.Context, context.CancelFunc) {
	return lua.WithTimeout(ctx, s.opt.Timeout)
}

func (s *RedisStore) observe(script string, start time.Time, err error) {
	if s.opt.Observe != nil {
		s.opt.Observe(script, time.Since(start), err)
	}
}

func luaBuckets(buckets []Bucket) ([]lua.AdmitBucket, error) {
	out := make([]lua.AdmitBucket, len(buckets))
	for i, b := range buckets {
		if b.Window <= 0 {
			return nil, errWindow(b)
		}
		out[i] = lua.AdmitBucket{Key: b.Key, Limit: int64(b.Limit), WindowUS: lua.Micros(b.Window)}
	}
	return out, nil
}

// sameSlot reports whether every bucket hashes to one Cluster slot.
func sameSlot(buckets []Bucket) bool {
	for i := 1; i < len(buckets); i++ {
		if lua.Slot(buckets[i].Key) != lua.Slot(buckets[0].Key) {
			return false
		}
	}
	return true
}

// Admit decides for every bucket in one admit.lua call.
//
// Cross-slot (Cluster, buckets in different slots): the member is admitted
// into each bucket in turn; when a later bucket refuses, the reservations
// already made are removed again (ZREM). Between the two steps the earlier
// buckets count one call too many, so concurrent calls may be refused that
// would have fit (under-admission for a round trip), but no bucket ever holds
// more than its limit. If the removal fails, the stale entries leave with the
// window; the decision (refused) stands and the error goes to Observe.
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
	ctx, cancel := s.context(ctx)
	defer cancel()
	start := time.Now()
	r, err := lua.Admit(ctx, s.sc, member, lb)
	s.observe(lua.ScriptAdmit, start, err)
	if err != nil {
		return Decision{}, fmt.Errorf("admission: run admit.lua for %q: %w", buckets[0].Key, err)
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
	return d
}

// rollbackTimeout bounds the removal of cross-slot reservations, which runs
// even when the caller's context is already done.
const rollbackTimeout = time.Second

func (s *RedisStore) admitCrossSlot(ctx context.Context, member string, buckets []Bucket, lb []lua.AdmitBucket) (Decision, error) {
	d := Decision{Admit: true, Refused: -1, Counts: make([]int, len(buckets))}
	for i := range d.Counts {
		d.Counts[i] = -1
	}
	var added []int // buckets this call added member to
	rollback := func() {
		if len(added) == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		for _, i := range added {
			start := time.Now()
			_, err := lua.Release(rctx, s.sc, buckets[i].Key, member)
			s.observe(lua.ScriptRelease, start, err)
		}
	}
	for i := range buckets {
		cctx, cancel := s.context(ctx)
		start := time.Now()
		r, err := lua.Admit(cctx, s.sc, member, lb[i:i+1])
		cancel()
		s.observe(lua.ScriptAdmit, start, err)
		if err != nil {
			rollback()
			return Decision{}, fmt.Errorf("admission: run admit.lua for %q (cross-slot, bucket %d): %w", buckets[i].Key, i, err)
		}
		d.At = lua.Time(r.NowUS)
		d.Counts[i] = int(r.Counts[0])
		switch {
		case r.Duplicate:
			// Admitted before: a retransmission. Like the one-call script,
			// nothing is added anywhere; undo this attempt's additions.
			rollback()
			for _, j := range added {
				d.Counts[j]--
			}
			d.Duplicate = true
			return d, nil
		case !r.Admitted:
			rollback()
			for _, j := range added {
				d.Counts[j]--
			}
			d.Admit = false
			d.Refused = i
			d.RetryAfter = time.Duration(r.RetryAfterUS) * time.Microsecond
			return d, nil
		}
		added = append(added, i)
	}
	return d, nil
}

// Counts returns the calls currently in each bucket's window (no writes).
// Buckets in different Cluster slots are read one by one.
func (s *RedisStore) Counts(ctx context.Context, buckets []Bucket) ([]int, error) {
	if len(buckets) == 0 {
		return []int{}, nil
	}
	keys := make([]string, len(buckets))
	windows := make([]int64, len(buckets))
	for i, b := range buckets {
		if b.Window <= 0 {
			return nil, errWindow(b)
		}
		keys[i], windows[i] = b.Key, lua.Micros(b.Window)
	}
	out := make([]int, 0, len(buckets))
	groups := [][2]int{{0, len(buckets)}}
	if s.cluster && !sameSlot(buckets) {
		groups = groups[:0]
		for i := range buckets {
			groups = append(groups, [2]int{i, i + 1})
		}
	}
	for _, g := range groups {
		cctx, cancel := s.context(ctx)
		start := time.Now()
		r, err := lua.Counts(cctx, s.sc, keys[g[0]:g[1]], windows[g[0]:g[1]])
		cancel()
		s.observe(lua.ScriptCounts, start, err)
		if err != nil {
			return nil, fmt.Errorf("admission: run counts.lua for %q: %w", keys[g[0]], err)
		}
		for _, c := range r.Counts {
			out = append(out, int(c))
		}
	}
	return out, nil
}
