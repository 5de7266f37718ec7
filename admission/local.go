package admission

import (
	"context"
	"sync"
	"time"
)

// idleGrace is how long an idle bucket outlives its window, like the TTL
// admit.lua sets (window + 1 s).
const idleGrace = time.Second

// sweepEvery is how often, on the store's clock, idle buckets are looked for.
const sweepEvery = time.Second

// LocalStore is the in-process Store of a single node, or the fallback while
// Redis is down. It decides exactly like admit.lua, on the local monotonic
// clock.
//
// Memory is bounded: a bucket holds at most its limit of calls (a ring), and
// a bucket idle for longer than its window plus one second is evicted lazily,
// by the calls that come after (no background goroutine). LocalStore is safe
// for concurrent use; one mutex makes every multi-bucket decision atomic.
type LocalStore struct {
	clock func() time.Time

	mu        sync.Mutex
	epoch     time.Time
	last      time.Duration // latest clock reading, since epoch (monotonic)
	nextSweep time.Duration
	buckets   map[string]*ring
}

var _ Store = (*LocalStore)(nil)

// NewLocalStore returns an empty LocalStore on clock (nil = time.Now). The
// clock is read under the store's lock; readings that go backwards are
// treated as the latest reading.
func NewLocalStore(clock func() time.Time) *LocalStore {
	if clock == nil {
		clock = time.Now
	}
	return &LocalStore{clock: clock, epoch: clock(), buckets: make(map[string]*ring)}
}

// ring holds the admitted calls of one bucket, oldest first.
type ring struct {
	at      []time.Duration // admission times since epoch; len = capacity
	member  []string
	head, n int
	members map[string]struct{}
	touched time.Duration // last admission
	window  time.Duration // window of the last admission
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
	j := r.idx(r.n)
	r.at[j], r.member[j] = now, member
	r.n++
	r.members[member] = struct{}{}
	r.touched = now
}

// now reads the clock under s.mu.
func (s *LocalStore) now() time.Duration {
	d := s.clock().Sub(s.epoch)
	if d < s.last {
		d = s.last
	}
	s.last = d
	return d
}

// sweep evicts idle buckets, at most once per sweepEvery.
func (s *LocalStore) sweep(now time.Duration) {
	if now < s.nextSweep {
		return
	}
	s.nextSweep = now + sweepEvery
	for k, r := range s.buckets {
		if now-r.touched >= r.window+idleGrace {
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
		if b.Window <= 0 {
			return Decision{}, errWindow(b)
		}
	}
	d := Decision{Admit: true, Refused: -1, Counts: make([]int, len(buckets))}
	var one [4]*ring
	rings := one[:0]
	if len(buckets) > len(one) {
		rings = make([]*ring, 0, len(buckets))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	d.At = s.epoch.Add(now)
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
		if _, ok := r.members[member]; ok {
			d.Duplicate = true
		}
	}
	if d.Duplicate {
		return d, nil
	}
	for i, b := range buckets {
		r := rings[i]
		if r.n >= b.Limit {
			d.Admit, d.Refused = false, i
			d.RetryAfter = b.Window
			if b.Limit > 0 {
				d.RetryAfter = max(r.at[r.idx(r.n-b.Limit)]+b.Window-now, 0)
			}
			return d, nil
		}
	}
	for i, b := range buckets {
		rings[i].grow(b.Limit)
		rings[i].window = b.Window
		rings[i].push(now, member)
		d.Counts[i]++
	}
	return d, nil
}

// Counts returns the calls currently in each bucket's window.
func (s *LocalStore) Counts(_ context.Context, buckets []Bucket) ([]int, error) {
	out := make([]int, len(buckets))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	for i, b := range buckets {
		if b.Window <= 0 {
			return nil, errWindow(b)
		}
		if r := s.buckets[b.Key]; r != nil {
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
