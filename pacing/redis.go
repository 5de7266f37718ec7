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
// per carrier (and, for a carrier shared fairly, a hash and a sorted set of
// its shares' state beside it, lua.FairKeys), one pace.lua call per
// reservation, on Redis's clock. A carrier's keys share one hash tag, so
// Redis Cluster needs nothing special. RedisSlots is
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
func (s *RedisSlots) Reserve(ctx context.Context, key, member string, share Share, interval, maxWait time.Duration) (Slot, error) {
	pc, err := PaceCall(key, member, share, interval, maxWait)
	if err != nil {
		return Slot{}, err
	}
	var r lua.PaceReply
	err = s.run.Run(ctx, lua.ScriptPace, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Pace(ctx, sc, pc.Key, pc.Member, pc.IntervalUS, pc.MaxWaitUS, pc.ClaimUS, pc.Share)
		return err
	})
	if err != nil {
		return Slot{}, fmt.Errorf("pacing: slot set %q: %w", key, err)
	}
	return SlotOf(r, key, member), nil
}

// PaceCall is the pace.lua call RedisSlots.Reserve makes for these
// arguments; the admission store runs it in the same script as a call's
// admission (lua.AdmitPace) to save a round trip.
func PaceCall(key, member string, share Share, interval, maxWait time.Duration) (lua.PaceCall, error) {
	if interval <= 0 {
		return lua.PaceCall{}, errInterval(key, interval)
	}
	var sh lua.PaceShare
	if share.Name != "" {
		sh = lua.PaceShare{Name: share.Name, Weight: share.weight(), LeadUS: lua.Micros(shareLead(interval)),
			KeepUS: lua.Micros(recordKeep), SumCap: maxWeightSum}
	}
	return lua.PaceCall{Key: key, Member: member, IntervalUS: lua.Micros(interval), MaxWaitUS: lua.MicrosFloor(maxWait),
		ClaimUS: lua.Micros(max(maxWait, 0) + ProbeClaim), Share: sh}, nil
}

// SlotOf is the Slot a pace.lua reply r grants member of key, reserved now.
func SlotOf(r lua.PaceReply, key, member string) Slot {
	return Slot{
		OK:       r.OK,
		Wait:     time.Duration(r.WaitUS) * time.Microsecond,
		At:       lua.Time(r.NowUS),
		Key:      key,
		Member:   member,
		Reserved: time.Now(),
		Paused:   r.Paused,
		Probe:    r.Probe,
		Booked:   r.Booked,
	}
}

// Release runs release.lua (the slot, or the booking and its share's turn).
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

// pause runs one pause.lua op on key's carrier.
func (s *RedisSlots) pause(ctx context.Context, key string, op lua.PauseOp) (Pause, error) {
	var r lua.PauseReply
	err := s.run.Run(ctx, lua.ScriptPause, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Pause(ctx, sc, key, op)
		return err
	})
	if err != nil {
		return Pause{}, fmt.Errorf("pacing: pause of %q: %w", key, err)
	}
	if r.UntilUS == 0 && r.SinceUS == 0 {
		return Pause{Paused: r.Paused, Changed: r.Changed}, nil
	}
	us := func(v int64) time.Duration { return time.Duration(max(v, 0)) * time.Microsecond }
	return Pause{
		Paused: r.Paused, Left: us(r.UntilUS - r.NowUS), Age: us(r.NowUS - r.SinceUS),
		Reason: r.Reason, Probing: r.Probing, Changed: r.Changed,
	}, nil
}

// Pause runs pause.lua's set (the span rounded up to whole microseconds).
func (s *RedisSlots) Pause(ctx context.Context, key string, span time.Duration, reason string) (Pause, error) {
	if span <= 0 {
		return Pause{}, fmt.Errorf("pacing: pause span %v must be > 0", span)
	}
	return s.pause(ctx, key, lua.PauseOp{Op: "set", SpanUS: lua.Micros(span), KeepUS: lua.Micros(pauseKeep), Reason: reason})
}

// Paused runs pause.lua's get.
func (s *RedisSlots) Paused(ctx context.Context, key string) (Pause, error) {
	return s.pause(ctx, key, lua.PauseOp{Op: "get"})
}

// ProbeDone runs pause.lua's done.
func (s *RedisSlots) ProbeDone(ctx context.Context, key, member string, ok bool) (Pause, error) {
	if member == "" {
		return Pause{}, fmt.Errorf("pacing: pause %q: probe done without a member", key)
	}
	return s.pause(ctx, key, lua.PauseOp{Op: "done", Member: member, OK: ok})
}

// OpenPause runs pause.lua's open.
func (s *RedisSlots) OpenPause(ctx context.Context, key string, minAge time.Duration) (Pause, error) {
	if minAge < 0 {
		return Pause{}, fmt.Errorf("pacing: pause %q: min age %v must be >= 0", key, minAge)
	}
	return s.pause(ctx, key, lua.PauseOp{Op: "open", MinAgeUS: lua.Micros(minAge)})
}

// Unpause runs pause.lua's lift.
func (s *RedisSlots) Unpause(ctx context.Context, key string) (Pause, error) {
	return s.pause(ctx, key, lua.PauseOp{Op: "lift"})
}

// Evidence runs evidence.lua on key's carrier (windows rounded up to whole
// microseconds).
func (s *RedisSlots) Evidence(ctx context.Context, key, peer string, overload bool, w EvidenceWindows) (Evidence, error) {
	if peer == "" || w.Callers <= 0 || w.Overload <= 0 {
		return Evidence{}, fmt.Errorf("pacing: evidence %q: need a peer (got %q) and windows > 0 (got %+v)", key, peer, w)
	}
	var r lua.EvidenceReply
	err := s.run.Run(ctx, lua.ScriptEvidence, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Evidence(ctx, sc, key, peer, overload, lua.Micros(w.Callers), lua.Micros(w.Overload))
		return err
	})
	if err != nil {
		return Evidence{}, fmt.Errorf("pacing: evidence of %q: %w", key, err)
	}
	return Evidence{Callers: int(r.Callers), Overloaded: int(r.Overloaded)}, nil
}

// Adapt runs rate.lua on the carrier's rate hash (lua.RateKey(key)); a
// decrease removes the future slots of key.
func (s *RedisSlots) Adapt(ctx context.Context, key string, a AIMD, overload bool) (Rate, error) {
	args, err := a.milli(overload)
	if err != nil {
		return Rate{}, err
	}
	var r lua.RateReply
	err = s.run.Run(ctx, lua.ScriptRate, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Rate(ctx, sc, key, args)
		return err
	})
	if err != nil {
		return Rate{}, fmt.Errorf("pacing: slot set %q: %w", key, err)
	}
	rate := Rate{CPS: float64(r.RateM) / 1000, Cut: r.Cut}
	if r.CutUS > 0 {
		rate.CutAt = lua.Time(r.CutUS)
	}
	return rate, nil
}

// Respace runs respace.lua on the carrier's slot set.
func (s *RedisSlots) Respace(ctx context.Context, key, prefix string) (time.Time, error) {
	var r lua.RespaceReply
	err := s.run.Run(ctx, lua.ScriptRespace, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.Respace(ctx, sc, key, prefix)
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("pacing: slot set %q: %w", key, err)
	}
	return lua.Time(r.NowUS), nil
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
