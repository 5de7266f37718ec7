package admission

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/internal/monoclock"
)

// idleGrace is how long an idle bucket outlives its window, like the TTL
// admit.lua sets (window + 1 s).
const idleGrace = time.Second

// sweepEvery is how often, on the store's clock, idle buckets are looked for.
const sweepEvery = time.Second

// LocalStore is the in-process Store of a single node, or the fallback while
// Redis is down. It decides exactly like admit.lua, on the local monotonic
// clock; a token bucket's level is computed with the same integer
// arithmetic, on the clock read in whole microseconds.
//
// Memory is bounded: a window holds at most its limit of calls (a ring; and
// at most maxForced more counted over it with OverCount), a
// token bucket at most the calls it can admit within its window, and a bucket
// idle for longer than its window plus one second (a token bucket: until it
// is full again, plus one second, like the TTLs admit.lua sets) is evicted
// lazily, by the calls that come after (no background goroutine). LocalStore is safe
// for concurrent use; one mutex makes every multi-bucket decision atomic.
type LocalStore struct {
	mu        sync.Mutex
	clock     monoclock.Clock // read under mu
	nextSweep time.Duration
	buckets   map[string]*ring
}

var _ Store = (*LocalStore)(nil)

// NewLocalStore returns an empty LocalStore on clock (nil = time.Now). The
// clock is read under the store's lock; readings that go backwards are
// treated as the latest reading.
func NewLocalStore(clock func() time.Time) *LocalStore {
	return &LocalStore{clock: monoclock.New(clock), buckets: make(map[string]*ring)}
}

// ring holds the admitted calls of one bucket, oldest first, and a token
// bucket's level.
type ring struct {
	at      []time.Duration // admission times since epoch; len = capacity
	member  []string
	head, n int
	members map[string]struct{}
	expire  time.Duration // evicted from then on (last admission + idle time)

	// Token bucket: level in µtokens at lastUS (µs since epoch); an entry
	// without a level (hasLevel false) is a full bucket.
	tokens   int64
	lastUS   int64
	hasLevel bool
}

func (r *ring) idx(i int) int { return (r.head + i) % len(r.at) }

// trim drops the calls that left the window at now.
func (r *ring) trim(now, window time.Duration) {
	for r.n > 0 && r.at[r.head] <= now-window {
		delete(r.members, r.member[r.head])
		r.member[r.head] = ""
		r.head = (r.head + 1) % len(r.at)
		r.n--
	}
}

// grow makes room for one more call when the ring is full, doubling its
// capacity up to limit: a bucket holds at most its limit, and a bucket with
// a large limit but little traffic stays small.
func (r *ring) grow(limit int) {
	if r.n < len(r.at) || r.n >= limit {
		return
	}
	size := min(max(2*len(r.at), 8), limit)
	at := make([]time.Duration, size)
	member := make([]string, size)
	for i := 0; i < r.n; i++ {
		at[i], member[i] = r.at[r.idx(i)], r.member[r.idx(i)]
	}
	r.at, r.member, r.head = at, member, 0
}

func (r *ring) push(now time.Duration, member string) {
	if r.n == len(r.at) {
		// Full at its bound (a token bucket's ring): forget the oldest.
		delete(r.members, r.member[r.head])
		r.member[r.head] = ""
		r.head = (r.head + 1) % len(r.at)
		r.n--
	}
	j := r.idx(r.n)
	r.at[j], r.member[j] = now, member
	r.n++
	r.members[member] = struct{}{}
}

// level returns the token bucket's level (µtokens) and its time at nowUS.
func (r *ring) level(b Bucket, nowUS int64) (int64, int64) {
	capacity := int64(b.Limit) * microsPerToken
	if !r.hasLevel {
		return capacity, nowUS
	}
	return tokenLevel(r.tokens, r.lastUS, nowUS, capacity, b.RateMicros)
}

// ringBound is how many calls a bucket's ring may need: a window's limit;
// for a token bucket, the most it admits within its window (capacity plus
// the refill over the window).
func ringBound(b Bucket) int {
	if b.RateMicros <= 0 {
		return b.Limit
	}
	refill := float64(b.RateMicros) / microsPerToken * b.Window.Seconds()
	return int(min(float64(b.Limit)+math.Ceil(refill)+1, 1<<24))
}

// now reads the clock under s.mu.
func (s *LocalStore) now() time.Duration { return s.clock.Now() }

// sweep evicts idle buckets, at most once per sweepEvery.
func (s *LocalStore) sweep(now time.Duration) {
	if now < s.nextSweep {
		return
	}
	s.nextSweep = now + sweepEvery
	for k, r := range s.buckets {
		if now >= r.expire {
			delete(s.buckets, k)
		}
	}
}

// Admit decides for every bucket atomically, like admit.lua.
func (s *LocalStore) Admit(_ context.Context, member string, buckets []Bucket) (Decision, error) {
	if len(buckets) == 0 {
		return Decision{Admit: true, Refused: -1, Counts: []int{}}, nil
	}
	for _, b := range buckets {
		if err := check(b); err != nil {
			return Decision{}, err
		}
	}
	d := Decision{Admit: true, Refused: -1, Counts: make([]int, len(buckets))}
	var one [4]*ring
	var levels, lasts [4]int64 // token buckets' levels at now, by bucket (first 4)
	rings := one[:0]
	lv, ls := levels[:], lasts[:]
	if len(buckets) > len(one) {
		rings = make([]*ring, 0, len(buckets))
		lv, ls = make([]int64, len(buckets)), make([]int64, len(buckets))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	nowUS := int64(now / time.Microsecond)
	d.At = s.clock.Time(now)
	s.sweep(now)

	for i, b := range buckets {
		r := s.buckets[b.Key]
		if r == nil {
			r = &ring{members: make(map[string]struct{})}
			s.buckets[b.Key] = r
		}
		r.trim(now, b.Window)
		rings = append(rings, r)
		d.Counts[i] = r.n
		if b.RateMicros > 0 {
			lv[i], ls[i] = r.level(b, nowUS)
			d.Counts[i] = b.Limit - int(lv[i]/microsPerToken)
		}
		if _, ok := r.members[member]; ok {
			d.Duplicate = true
		}
	}
	if d.Duplicate {
		return d, nil
	}
	var overs [4]bool
	over := overs[:0]
	if len(buckets) > len(overs) {
		over = make([]bool, 0, len(buckets))
	}
	anyOver := false
	for i, b := range buckets {
		o := rings[i].n >= b.Limit
		if b.RateMicros > 0 {
			o = lv[i] < microsPerToken
		}
		over = append(over, o)
		anyOver = anyOver || o
	}
	if anyOver {
		d.Over = slices.Clone(over)
	}
	for i, b := range buckets {
		if !over[i] || b.Over != OverRefuse {
			continue
		}
		r := rings[i]
		d.Admit, d.Refused = false, i
		if b.RateMicros > 0 {
			us := ((microsPerToken-lv[i])*microsPerToken + b.RateMicros - 1) / b.RateMicros
			d.RetryAfter = time.Duration(us) * time.Microsecond
		} else {
			d.RetryAfter = b.Window
			if b.Limit > 0 {
				d.RetryAfter = max(r.at[r.idx(r.n-b.Limit)]+b.Window-now, 0)
			}
		}
		return d, nil
	}
	for i, b := range buckets {
		if over[i] && b.Over == OverShadow {
			continue // shadowed: not counted here
		}
		r := rings[i]
		bound := ringBound(b)
		if over[i] {
			// Counted over its limit (OverCount): the ring grows past it,
			// up to maxForced entries more.
			bound += maxForced
		}
		r.grow(bound)
		r.push(now, member)
		r.expire = now + b.Window + idleGrace
		if b.RateMicros > 0 {
			tokens := lv[i]
			if tokens >= microsPerToken {
				tokens -= microsPerToken
			}
			r.tokens, r.lastUS, r.hasLevel = tokens, ls[i], true
			// Full again after fillMS, as the hash's TTL in admit.lua.
			fillMS := ((int64(b.Limit)*microsPerToken-r.tokens)*1000 + b.RateMicros - 1) / b.RateMicros
			r.expire = max(r.expire, now+time.Duration(fillMS)*time.Millisecond+idleGrace)
			d.Counts[i] = b.Limit - int(r.tokens/microsPerToken)
			continue
		}
		d.Counts[i] = r.n
	}
	return d, nil
}

// maxForced bounds the calls a window holds beyond its limit (OverCount):
// past it the oldest are forgotten, so a flood of calls no limit refuses
// costs bounded memory (the window then under-counts them).
const maxForced = 1 << 16

// Counts returns the calls currently in each bucket's window.
func (s *LocalStore) Counts(_ context.Context, buckets []Bucket) ([]int, error) {
	out := make([]int, len(buckets))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	nowUS := int64(now / time.Microsecond)
	for i, b := range buckets {
		if err := check(b); err != nil {
			return nil, err
		}
		r := s.buckets[b.Key]
		switch {
		case r == nil:
		case b.RateMicros > 0:
			level, _ := r.level(b, nowUS)
			out[i] = b.Limit - int(level/microsPerToken)
		default:
			r.trim(now, b.Window)
			out[i] = r.n
		}
	}
	return out, nil
}

// Len returns the number of buckets held, after evicting idle ones.
func (s *LocalStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.nextSweep = 0
	s.sweep(now)
	return len(s.buckets)
}
