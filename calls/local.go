package calls

import (
	"context"
	"sync"
	"time"
)

// LocalStore is the in-process Store: one node, or the fallback while Redis
// is down. Its clock is injected (time.Now by default), so expiry edges are
// tested exactly. A place holds at most its limit of members and an empty
// place is forgotten, so memory is bounded by the limits of live calls.
//
// LocalStore is safe for concurrent use.
type LocalStore struct {
	now func() time.Time

	mu     sync.Mutex
	places map[string]map[string]time.Time // key -> member -> expiry
}

var _ Store = (*LocalStore)(nil)

// NewLocalStore returns an empty LocalStore on clock now (nil: time.Now).
func NewLocalStore(now func() time.Time) *LocalStore {
	if now == nil {
		now = time.Now
	}
	return &LocalStore{now: now, places: make(map[string]map[string]time.Time)}
}

// trim drops the expired members of key (expiry <= now) and returns the
// live ones (nil when none).
func (s *LocalStore) trim(key string, now time.Time) map[string]time.Time {
	m := s.places[key]
	for member, exp := range m {
		if !exp.After(now) {
			delete(m, member)
		}
	}
	if len(m) == 0 {
		delete(s.places, key)
		return nil
	}
	return m
}

// Occupy decides like calls_occupy.lua: all places or none.
func (s *LocalStore) Occupy(_ context.Context, member string, ttl time.Duration, places []Place) (Decision, error) {
	if err := checkArgs(ttl, places); err != nil {
		return Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	d := Decision{Admit: true, Refused: -1, Counts: make([]int, len(places))}
	for i, p := range places {
		m := s.trim(p.Key, now)
		d.Counts[i] = len(m)
		if _, ok := m[member]; ok {
			d.Duplicate = true
		}
	}
	if d.Duplicate {
		for _, p := range places {
			if m := s.places[p.Key]; m != nil {
				if _, ok := m[member]; ok {
					m[member] = now.Add(ttl)
				}
			}
		}
		return d, nil
	}
	for i, p := range places {
		if d.Counts[i] >= p.Limit {
			d.Admit, d.Refused = false, i
			return d, nil
		}
	}
	for i, p := range places {
		m := s.places[p.Key]
		if m == nil {
			m = make(map[string]time.Time)
			s.places[p.Key] = m
		}
		m[member] = now.Add(ttl)
		d.Counts[i]++
	}
	return d, nil
}

// Free removes member from every key.
func (s *LocalStore) Free(_ context.Context, member string, keys []string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	freed := 0
	for _, k := range keys {
		m := s.trim(k, now)
		if _, ok := m[member]; ok {
			delete(m, member)
			freed++
			if len(m) == 0 {
				delete(s.places, k)
			}
		}
	}
	return freed, nil
}

// Refresh extends the live members of key to ttl from now.
func (s *LocalStore) Refresh(_ context.Context, key string, ttl time.Duration, members []string) (int, error) {
	if ttl <= 0 {
		return 0, ErrArgs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	m := s.trim(key, now)
	n := 0
	for _, member := range members {
		if _, ok := m[member]; ok {
			m[member] = now.Add(ttl)
			n++
		}
	}
	return n, nil
}

// Count returns the live calls of each key.
func (s *LocalStore) Count(_ context.Context, keys []string) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]int, len(keys))
	for i, k := range keys {
		out[i] = len(s.trim(k, now))
	}
	return out, nil
}
