package pacing

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// RedisOptions tunes a RedisSlots.
type RedisOptions struct {
	// Timeout bounds every store call (context.WithTimeout on the caller's
	// context); 0 = no bound beyond the caller's context. For the deadline
	// to reach the socket the client needs ContextTimeoutEnabled: true.
	Timeout time.Duration
	// Observe, when set, is called after every script run with the script
	// name (lua.ScriptPace, …), its duration and its error (nil on success).
	// It must be fast and safe for concurrent use; it feeds metrics.
	Observe func(script string, d time.Duration, err error)
	// Pipeline, when set, carries every script call (lua.Pipeliner: the
	// calls of concurrent callers share one round trip); nil = one call per
	// pooled connection. It must run on the same client. The store does not
	// own it: whoever built it closes it, after the store's last call.
	// Observe then measures a caller's wait, queue included.
	Pipeline *lua.Pipeliner
}

// RedisSlots is the SlotStore shared by every node of a pool: one sorted set
// per carrier, one pace.lua call per reservation, on Redis's clock. Every
// slot set is one key, so Redis Cluster needs nothing special. RedisSlots is
// safe for concurrent use.
type RedisSlots struct {
	c   redis.UniversalClient
	sc  redis.Scripter // opt.Pipeline, else c
	opt RedisOptions
}

var _ SlotStore = (*RedisSlots)(nil)

// NewRedisSlots returns a SlotStore on c (scripts through opt.Pipeline when
// set). Call Load once at start.
func NewRedisSlots(c redis.UniversalClient, opt RedisOptions) *RedisSlots {
	s := &RedisSlots{c: c, sc: c, opt: opt}
	if opt.Pipeline != nil {
		s.sc = opt.Pipeline
	}
	return s
}

// Load loads every script into Redis (all masters of a cluster).
func (s *RedisSlots) Load(ctx context.Context) error {
	ctx, cancel := s.context(ctx)
	defer cancel()
	if err := lua.Load(ctx, s.c); err != nil {
		return fmt.Errorf("pacing: %w", err)
	}
	return nil
}

// context bounds one call by the store's timeout (lua.WithTimeout).
func (s *RedisSlots) context(ctx context.Context) (context.Context, context.CancelFunc) {
	return lua.WithTimeout(ctx, s.opt.Timeout)
}

func (s *RedisSlots) observe(script string, start time.Time, err error) {
	if s.opt.Observe != nil {
		s.opt.Observe(script, time.Since(start), err)
	}
}

// Reserve runs pace.lua. The interval is rounded up and maxWait down to whole
// microseconds, so neither conversion lets a call out early.
func (s *RedisSlots) Reserve(ctx context.Context, key, member string, interval, maxWait time.Duration) (Slot, error) {
	if interval <= 0 {
		return Slot{}, errInterval(key, interval)
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	start := time.Now()
	r, err := lua.Pace(ctx, s.sc, key, member, lua.Micros(interval), lua.MicrosFloor(maxWait))
	s.observe(lua.ScriptPace, start, err)
	if err != nil {
		return Slot{}, fmt.Errorf("pacing: run pace.lua for %q: %w", key, err)
	}
	return Slot{
		OK:       r.OK,
		Wait:     time.Duration(r.WaitUS) * time.Microsecond,
		At:       lua.Time(r.NowUS),
		Key:      key,
		Member:   member,
		Reserved: time.Now(),
	}, nil
}

// Release runs release.lua (ZREM).
func (s *RedisSlots) Release(ctx context.Context, key, member string) error {
	ctx, cancel := s.context(ctx)
	defer cancel()
	start := time.Now()
	_, err := lua.Release(ctx, s.sc, key, member)
	s.observe(lua.ScriptRelease, start, err)
	if err != nil {
		return fmt.Errorf("pacing: run release.lua for %q: %w", key, err)
	}
	return nil
}

// Block runs block.lua: no slot of key is granted for span from now.
func (s *RedisSlots) Block(ctx context.Context, key string, span time.Duration) error {
	ctx, cancel := s.context(ctx)
	defer cancel()
	start := time.Now()
	_, err := lua.Block(ctx, s.sc, key, span)
	s.observe(lua.ScriptBlock, start, err)
	if err != nil {
		return fmt.Errorf("pacing: run block.lua for %q: %w", key, err)
	}
	return nil
}

// Adapt runs rate.lua on the carrier's rate hash (lua.RateKey(key)).
func (s *RedisSlots) Adapt(ctx context.Context, key string, a AIMD, overload bool) (Rate, error) {
	args, err := a.milli(overload)
	if err != nil {
		return Rate{}, err
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	start := time.Now()
	r, err := lua.Rate(ctx, s.sc, lua.RateKey(key), args)
	s.observe(lua.ScriptRate, start, err)
	if err != nil {
		return Rate{}, fmt.Errorf("pacing: run rate.lua for %q: %w", key, err)
	}
	return Rate{CPS: float64(r.RateM) / 1000, Cut: r.Cut}, nil
}

// Queue runs queue.lua (no writes).
func (s *RedisSlots) Queue(ctx context.Context, key string, interval time.Duration) (QueueState, error) {
	if interval <= 0 {
		return QueueState{}, errInterval(key, interval)
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	start := time.Now()
	r, err := lua.Queue(ctx, s.sc, key, lua.Micros(interval))
	s.observe(lua.ScriptQueue, start, err)
	if err != nil {
		return QueueState{}, fmt.Errorf("pacing: run queue.lua for %q: %w", key, err)
	}
	return QueueState{Queued: int(r.Queued), Sent: int(r.Sent), Wait: time.Duration(r.WaitUS) * time.Microsecond}, nil
}

func errInterval(key string, interval time.Duration) error {
	return fmt.Errorf("pacing: slot set %q: interval %v must be > 0", key, interval)
}
