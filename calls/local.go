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
	places map[string]*localPlace
}

// localPlace is one place's live calls and a lower bound of their earliest
// expiry: trimming scans the members only once that bound has passed, so a
// decision costs O(1) between expiries instead of O(live calls).
type localPlace struct {
	members map[string]time.Time // member -> expiry
	next    time.Time            // no member expires before next
}

var _ Store = (*LocalStore)(nil)

// NewLocalStore returns an empty LocalStore on clock now (nil: time.Now).
func NewLocalStore(now func() time.Time) *LocalStore {
	if now == nil {
		now = time.Now
	}
	return &LocalStore{now: now, places: make(map[string]*localPlace)}
}

// trim drops the expired members of key (expiry <= now) and returns the
// live ones (nil when none).
func (s *LocalStore) trim(key string, now time.Time) map[string]time.Time {
	p := s.places[key]
	if p == nil {
		return nil
	}
	if !p.next.After(now) {
		var next time.Time
		for member, exp := range p.members {
			switch {
			case !exp.After(now):
				delete(p.members, member)
			case next.IsZero() || exp.Before(next):
				next = exp
			}
		}
		p.next = next
	}
	if len(p.members) == 0 {
		delete(s.places, key)
		return nil
	}
	return p.members
}

// set gives member the expiry exp in key, creating the place if needed.
func (s *LocalStore) set(key, member string, exp time.Time) {
	p := s.places[key]
	if p == nil {
		p = &localPlace{members: make(map[string]time.Time), next: exp}
		s.places[key] = p
	}
	p.members[member] = exp
	if exp.Before(p.next) {
		p.next = exp
	}
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
			if pl := s.places[p.Key]; pl != nil {
				if _, ok := pl.members[member]; ok {
					s.set(p.Key, member, now.Add(ttl))
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
		s.set(p.Key, member, now.Add(ttl))
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

// Refresh sets members of key to expire ttl from now, adding back the
// missing ones, and reports how many were added back.
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
		if _, ok := m[member]; !ok {
			n++
		}
		s.set(key, member, now.Add(ttl))
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
