package limits

import (
	"context"
	"sort"
	"sync"
	"time"
)

// LocalStore is the in-process Store of a single node. An override is
// dropped at its expiry, by the next call that looks.
type LocalStore struct {
	clock func() time.Time
	mu    sync.Mutex
	m     map[string]Override
}

var _ Store = (*LocalStore)(nil)

// NewLocalStore returns an empty LocalStore on clock (nil = time.Now).
func NewLocalStore(clock func() time.Time) *LocalStore {
	if clock == nil {
		clock = time.Now
	}
	return &LocalStore{clock: clock, m: map[string]Override{}}
}

// prune drops the expired overrides; s.mu is held.
func (s *LocalStore) prune(now time.Time) {
	for f, o := range s.m {
		if !now.Before(o.Until) {
			delete(s.m, f)
		}
	}
}

// Set implements Store.
func (s *LocalStore) Set(_ context.Context, o Override, ttl time.Duration) (*Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	s.prune(now)
	var prev *Override
	if p, ok := s.m[o.Field()]; ok {
		prev = &p
	}
	o.Until = now.Add(ttl)
	s.m[o.Field()] = o
	return prev, nil
}

// Delete implements Store.
func (s *LocalStore) Delete(_ context.Context, scope, name string) (*Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(s.clock())
	f := Field(scope, name)
	p, ok := s.m[f]
	if !ok {
		return nil, nil
	}
	delete(s.m, f)
	return &p, nil
}

// List implements Store; the overrides come by expiry, then field.
func (s *LocalStore) List(context.Context) ([]Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(s.clock())
	out := make([]Override, 0, len(s.m))
	for _, o := range s.m {
		out = append(out, o)
	}
	sortOverrides(out)
	return out, nil
}

func sortOverrides(os []Override) {
	sort.Slice(os, func(i, j int) bool {
		if !os[i].Until.Equal(os[j].Until) {
			return os[i].Until.Before(os[j].Until)
		}
		return os[i].Field() < os[j].Field()
	})
}
