package limits

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/policy"
)

// RedisStore keeps the pool's overrides in Redis (overrides.lua): every
// node reads the same ones. Expiry is Redis's clock: a reply carries the
// time each override has left, which becomes a local Until.
type RedisStore struct {
	client  redis.Scripter
	key     string
	timeout time.Duration
	clock   func() time.Time
	observe func(script string, d time.Duration, err error)
}

var _ Store = (*RedisStore)(nil)

// RedisOptions configure a RedisStore.
type RedisOptions struct {
	// Timeout bounds one script run (serve gives it
	// store.BackgroundTimeout: no SIP call waits for it); 0: the caller's
	// context only.
	Timeout time.Duration
	// Observe is told of every script run (metrics); nil: nobody.
	Observe func(script string, d time.Duration, err error)
	// Clock turns the time left into Until; nil: time.Now.
	Clock func() time.Time
}

// NewRedisStore keeps the overrides under key prefix (store.key_prefix)
// through client.
func NewRedisStore(client redis.Scripter, prefix string, o RedisOptions) *RedisStore {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &RedisStore{client: client, key: policy.OverridesKey(prefix), timeout: o.Timeout, clock: o.Clock, observe: o.Observe}
}

func (s *RedisStore) run(ctx context.Context, fn func(ctx context.Context) ([]lua.OverrideEntry, error)) ([]Override, error) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	start := s.clock()
	es, err := fn(ctx)
	if s.observe != nil {
		s.observe(lua.ScriptOverrides, time.Since(start), err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	now := s.clock()
	out := make([]Override, 0, len(es))
	for _, e := range es {
		o, err := decode(e.Field, e.Value, now.Add(e.Left))
		if err != nil {
			continue // not one of ours (or a newer encoding): skip it
		}
		out = append(out, o)
	}
	return out, nil
}

func one(os []Override, err error) (*Override, error) {
	if err != nil || len(os) == 0 {
		return nil, err
	}
	return &os[0], nil
}

// Set implements Store.
func (s *RedisStore) Set(ctx context.Context, o Override, ttl time.Duration) (*Override, error) {
	v, err := encode(o)
	if err != nil {
		return nil, err
	}
	return one(s.run(ctx, func(ctx context.Context) ([]lua.OverrideEntry, error) {
		e, err := lua.SetOverride(ctx, s.client, s.key, o.Field(), v, ttl)
		if e == nil {
			return nil, err
		}
		return []lua.OverrideEntry{*e}, err
	}))
}

// Delete implements Store.
func (s *RedisStore) Delete(ctx context.Context, scope, name string) (*Override, error) {
	return one(s.run(ctx, func(ctx context.Context) ([]lua.OverrideEntry, error) {
		e, err := lua.DeleteOverride(ctx, s.client, s.key, Field(scope, name))
		if e == nil {
			return nil, err
		}
		return []lua.OverrideEntry{*e}, err
	}))
}

// List implements Store.
func (s *RedisStore) List(ctx context.Context) ([]Override, error) {
	return s.run(ctx, func(ctx context.Context) ([]lua.OverrideEntry, error) {
		return lua.ListOverrides(ctx, s.client, s.key)
	})
}
