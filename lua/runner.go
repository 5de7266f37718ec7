package lua

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RunnerOptions tunes a Runner (and so the Redis stores of admission and
// pacing, whose RedisOptions it is).
type RunnerOptions struct {
	// Timeout bounds every store call (WithTimeout: the Redis round trip,
	// and twice that for the whole call); 0 = no bound beyond the caller's
	// context. For the deadline to reach the socket the client needs
	// ContextTimeoutEnabled: true.
	Timeout time.Duration
	// Observe, when set, is called after every script run with the script
	// name (ScriptAdmit, …), its duration and its error (nil on success).
	// It must be fast and safe for concurrent use; it feeds metrics.
	Observe func(script string, d time.Duration, err error)
	// Pipeline, when set, carries every script call (the calls of
	// concurrent callers share one round trip); nil = one call per pooled
	// connection. It must run on the same client. The store does not own
	// it: whoever built it closes it, after the store's last call. Observe
	// then measures a caller's wait, queue included.
	Pipeline *Pipeliner
}

// Runner carries one store's script calls: through the Pipeliner when
// there is one, each bounded by the timeout and reported to the observer.
// The admission and pacing Redis stores both run their scripts through
// one, so they bound, observe and load alike. A Runner is safe for
// concurrent use.
type Runner struct {
	c   redis.UniversalClient
	sc  redis.Scripter // opt.Pipeline, else c
	opt RunnerOptions
}

// NewRunner returns a Runner on c.
func NewRunner(c redis.UniversalClient, opt RunnerOptions) *Runner {
	r := &Runner{c: c, sc: c, opt: opt}
	if opt.Pipeline != nil {
		r.sc = opt.Pipeline
	}
	return r
}

// Client is the Runner's client (a *redis.ClusterClient on a cluster).
func (r *Runner) Client() redis.UniversalClient { return r.c }

// Load loads every script into Redis (all masters of a cluster), within
// the timeout.
func (r *Runner) Load(ctx context.Context) error {
	ctx, cancel := WithTimeout(ctx, r.opt.Timeout)
	defer cancel()
	if err := Load(ctx, r.c); err != nil {
		return err
	}
	return nil
}

// Run runs f, one call of the script named name, on the Runner's
// Scripter, bounded by the timeout, and reports it to the observer.
func (r *Runner) Run(ctx context.Context, name string, f func(ctx context.Context, sc redis.Scripter) error) error {
	ctx, cancel := WithTimeout(ctx, r.opt.Timeout)
	defer cancel()
	return r.RunWithin(ctx, name, f)
}

// RunWithin is Run bounded by ctx alone: for a call with a deadline of its
// own that the store's timeout must not shorten (undoing what a failed
// cross-slot decision did).
func (r *Runner) RunWithin(ctx context.Context, name string, f func(ctx context.Context, sc redis.Scripter) error) (err error) {
	start := time.Now()
	defer func() {
		if r.opt.Observe != nil {
			r.opt.Observe(name, time.Since(start), err)
		}
	}()
	if err := f(ctx, r.sc); err != nil {
		return fmt.Errorf("run %s.lua: %w", name, err)
	}
	return nil
}
