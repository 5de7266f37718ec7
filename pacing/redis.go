package pacing

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// RedisOptions tunes a RedisSlots: the timeout, the observer and the
// Pipeliner of its lua.Runner (the admission store takes the same).
type RedisOptions = lua.RunnerOptions

// RedisSlots is the SlotStore shared by every node of a pool: one sorted set
// per carrier, one pace.lua call per reservation, on Redis's clock. Every
// slot set is one key, so Redis Cluster needs nothing special. RedisSlots is
// safe for concurrent use.
type RedisSlots struct {
	run *lua.Runner
}

var _ SlotStore = (*RedisSlots)(nil)

// NewRedisSlots returns a SlotStore on c (scripts through opt.Pipeline when
// set). Call Load once at start.
func NewRedisSlots(c redis.UniversalClient, opt RedisOptions) *RedisSlots {
	return &RedisSlots{run: lua.NewRunner(c, opt)}
}

// Load loads every script into Redis (all masters of a cluster).
func (s *RedisSlots) Load(ctx context.Context) error {
	if err := s.run.Load(ctx); err != nil {
		return fmt.Errorf("pacing: %w", err)
	}
	return nil
}

// Reserve runs pace.lua. The interval is rounded up and maxWait down to whole
// microseconds, so neither conversion lets a call out early.
func (s *RedisSlots) Reserve(ctx context.Context, key, member string, interval, maxWait time.Duration) (Slot, error) {
	if interval <= 0 {
		return Slot{}, errInterval(key, interval)
	}
	var r lua.PaceReply
	err := s.run.Run(ctx, lua.ScriptPace, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Pace(ctx, sc, key, member, lua.Micros(interval), lua.MicrosFloor(maxWait))
		return err
	})
	if err != nil {
		return Slot{}, fmt.Errorf("pacing: slot set %q: %w", key, err)
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
	err := s.run.Run(ctx, lua.ScriptRelease, func(ctx context.Context, sc redis.Scripter) error {
		_, err := lua.Release(ctx, sc, key, member)
		return err
	})
	if err != nil {
		return fmt.Errorf("pacing: slot set %q: %w", key, err)
	}
	return nil
}

// Block runs block.lua: no slot of key is granted for span from now.
func (s *RedisSlots) Block(ctx context.Context, key string, span time.Duration) error {
	err := s.run.Run(ctx, lua.ScriptBlock, func(ctx context.Context, sc redis.Scripter) error {
		_, err := lua.Block(ctx, sc, key, span)
		return err
	})
	if err != nil {
		return fmt.Errorf("pacing: slot set %q: %w", key, err)
	}
	return nil
}

// Adapt runs rate.lua on the carrier's rate hash (lua.RateKey(key)).
func (s *RedisSlots) Adapt(ctx context.Context, key string, a AIMD, overload bool) (Rate, error) {
	args, err := a.milli(overload)
	if err != nil {
		return Rate{}, err
	}
	var r lua.RateReply
	err = s.run.Run(ctx, lua.ScriptRate, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Rate(ctx, sc, lua.RateKey(key), args)
		return err
	})
	if err != nil {
		return Rate{}, fmt.Errorf("pacing: slot set %q: %w", key, err)
	}
	return Rate{CPS: float64(r.RateM) / 1000, Cut: r.Cut}, nil
}

// Queue runs queue.lua (no writes).
func (s *RedisSlots) Queue(ctx context.Context, key string, interval time.Duration) (QueueState, error) {
	if interval <= 0 {
		return QueueState{}, errInterval(key, interval)
	}
	var r lua.QueueReply
	err := s.run.Run(ctx, lua.ScriptQueue, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Queue(ctx, sc, key, lua.Micros(interval))
		return err
	})
	if err != nil {
		return QueueState{}, fmt.Errorf("pacing: slot set %q: %w", key, err)
	}
	return QueueState{Queued: int(r.Queued), Sent: int(r.Sent), Wait: time.Duration(r.WaitUS) * time.Microsecond}, nil
}

func errInterval(key string, interval time.Duration) error {
	return fmt.Errorf("pacing: slot set %q: interval %v must be > 0", key, interval)
}
