package lua

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/panics"
)

// ErrClosed is the error of a script call made through a closed Pipeliner,
// or still queued when it was closed.
var ErrClosed = errors.New("lua: pipeliner closed")

// PipelineOptions tunes a Pipeliner. The zero value is usable.
type PipelineOptions struct {
	// Flushers is the number of goroutines sending batches, each on its own
	// connection; default 2. One batch is in flight per flusher.
	Flushers int
	// MaxBatch caps the script calls in one pipeline; default 64.
	MaxBatch int
	// Queue is the capacity of the call queue; default 1024. A caller that
	// finds it full waits, bounded by its context.
	Queue int
	// Cap bounds a batch none of whose callers has a deadline; default 5 s.
	Cap time.Duration
	// OnNoScript, when set, is called when Redis answers an EVALSHA with
	// NOSCRIPT: it no longer has a script that was loaded (a restart, a
	// failover, SCRIPT FLUSH), so it may have lost what it held too.
	// redis.Script.Run sends the script itself next. It must be fast and
	// safe for concurrent use.
	OnNoScript func()
	// Panics logs and counts a panic while a batch is sent (its calls then
	// fail with the panic as their error); nil logs only.
	Panics *panics.Reporter
}

// Pipeliner is a redis.Scripter that sends the script calls of concurrent
// callers as one pipeline per round trip (implicit pipelining): EVAL and
// EVALSHA calls are queued; each of a few flusher goroutines takes the first
// queued call, without waiting, every other call already queued (up to
// MaxBatch), and sends them as one go-redis Pipeline. Nobody waits for
// company: a lone caller (no other script call of this Pipeliner under way)
// sends its command itself, as the plain client would, and a queued call
// is sent with whatever else is queued at that moment. Each script still
// runs atomically in Redis, so batching changes no decision.
//
// A Pipeliner works on every go-redis UniversalClient: on a ClusterClient
// go-redis splits a pipeline by node and follows MOVED/ASK. NOSCRIPT in a
// reply reaches the caller as the error of its command, so redis.Script.Run
// falls back to EVAL, which goes through the queue as well.
//
// Timeouts: a caller waits for its reply until its context ends and then
// returns the context's error, so a hung Redis (every flusher stuck in a
// pipeline) still fails each caller by its own deadline. A call made with
// WithTimeout has its round trip bounded from when it is sent, not from
// when it was queued. A batch is sent with the latest deadline of its
// callers (at most Cap, and at most the longest round trip bound of the
// batch from the send), so one impatient caller never fails the others'
// commands, and the client needs
// ContextTimeoutEnabled for a hung pipeline to free its flusher before the
// client's read timeout. A caller whose context has ended before its call
// is sent is left out of the batch.
//
// ScriptLoad and ScriptExists go to the client directly. The Pipeliner does
// not own the client: Close stops the flushers, not the client. Pipeliner is
// safe for concurrent use.
type Pipeliner struct {
	c     redis.UniversalClient
	opt   PipelineOptions
	queue chan *pcall

	active atomic.Int64 // callers inside run
	mu     sync.RWMutex // closed, and enqueues against Close
	closed bool
	shut   atomic.Bool // closed, for the lone-caller path
	done   chan struct{}
	wg     sync.WaitGroup
}

// pcall is one queued script call. reply is buffered, so the flusher never
// blocks on a caller that has gone.
type pcall struct {
	ctx   context.Context
	cmd   *redis.Cmd
	reply chan error
}

var _ redis.Scripter = (*Pipeliner)(nil)

// NewPipeliner starts a Pipeliner on c. Close it when done.
func NewPipeliner(c redis.UniversalClient, opt PipelineOptions) *Pipeliner {
	if opt.Flushers <= 0 {
		opt.Flushers = 2
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 64
	}
	if opt.Queue <= 0 {
		opt.Queue = 1024
	}
	if opt.Cap <= 0 {
		opt.Cap = 5 * time.Second
	}
	p := &Pipeliner{c: c, opt: opt, queue: make(chan *pcall, opt.Queue), done: make(chan struct{})}
	p.wg.Add(opt.Flushers)
	for range opt.Flushers {
		go p.flush()
	}
	return p
}

// Close stops the flushers after their batch in flight, fails every queued
// call and every later one with ErrClosed, and waits for the flushers to
// end. It does not close the client. Close is idempotent.
func (p *Pipeliner) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.shut.Store(true)
	close(p.done)
	p.mu.Unlock()
	p.wg.Wait()
	p.drain()
	return nil
}

// drain fails every queued call with ErrClosed.
func (p *Pipeliner) drain() {
	for {
		select {
		case c := <-p.queue:
			c.reply <- ErrClosed
		default:
			return
		}
	}
}

// Eval implements redis.Scripter through the queue.
func (p *Pipeliner) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.run(ctx, "eval", script, keys, args)
}

// EvalSha implements redis.Scripter through the queue.
func (p *Pipeliner) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return p.noScript(p.run(ctx, "evalsha", sha1, keys, args))
}

// EvalRO implements redis.Scripter through the queue.
func (p *Pipeliner) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.run(ctx, "eval_ro", script, keys, args)
}

// EvalShaRO implements redis.Scripter through the queue.
func (p *Pipeliner) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return p.noScript(p.run(ctx, "evalsha_ro", sha1, keys, args))
}

// noScript tells OnNoScript of cmd's NOSCRIPT reply, and returns cmd.
func (p *Pipeliner) noScript(cmd *redis.Cmd) *redis.Cmd {
	if err := cmd.Err(); p.opt.OnNoScript != nil && err != nil &&
		(errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		p.opt.OnNoScript()
	}
	return cmd
}

// ScriptExists implements redis.Scripter on the client directly.
func (p *Pipeliner) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return p.c.ScriptExists(ctx, hashes...)
}

// ScriptLoad implements redis.Scripter on the client directly (on a
// ClusterClient: every master).
func (p *Pipeliner) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return p.c.ScriptLoad(ctx, script)
}

// run queues one script call and waits for its reply or the end of ctx.
func (p *Pipeliner) run(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 3+len(keys), 3+len(keys)+len(args))
	a[0], a[1], a[2] = name, payload, len(keys)
	for i, k := range keys {
		a[3+i] = k
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	if err := ctx.Err(); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	// A lone caller (no other script call under way) sends its command
	// itself: no hand-off, the latency of the plain client.
	defer p.active.Add(-1)
	if p.active.Add(1) == 1 {
		if p.shut.Load() {
			cmd.SetErr(ErrClosed)
			return cmd
		}
		sctx, cancel := sendCtx(ctx)
		_ = p.c.Process(sctx, cmd)
		cancel()
		return cmd
	}
	c := &pcall{ctx: ctx, cmd: cmd, reply: make(chan error, 1)}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		cmd.SetErr(ErrClosed)
		return cmd
	}
	select {
	case p.queue <- c:
		p.mu.RUnlock()
	case <-ctx.Done():
		p.mu.RUnlock()
		cmd.SetErr(ctx.Err())
		return cmd
	}
	select {
	case err := <-c.reply:
		if err != nil {
			cmd.SetErr(err) // ErrClosed: the flusher never touched cmd
		}
		return cmd
	case <-ctx.Done():
		// A reply that came as the deadline passed (this goroutine ran
		// late) is still the reply: Redis answered in time.
		select {
		case err := <-c.reply:
			if err != nil {
				cmd.SetErr(err)
			}
			return cmd
		default:
		}
		// The flusher may still write to cmd: hand back another one.
		out := redis.NewCmd(ctx, a...)
		out.SetErr(ctx.Err())
		return out
	}
}

// flush is one flusher: it blocks for the first call, then takes whatever
// else is queued without waiting and sends the batch.
func (p *Pipeliner) flush() {
	defer p.wg.Done()
	batch := make([]*pcall, 0, p.opt.MaxBatch)
	for {
		select {
		case c := <-p.queue:
			batch = append(batch[:0], c)
		case <-p.done:
			return
		}
	fill:
		for len(batch) < p.opt.MaxBatch {
			select {
			case c := <-p.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		p.sendSafe(batch)
		clear(batch)
	}
}

// sendSafe is send with a panic turned into the error of every call of the
// batch not answered yet, so the flusher goes on.
func (p *Pipeliner) sendSafe(batch []*pcall) {
	replied := 0
	defer p.opt.Panics.Recover("lua.pipeline", func(err error) {
		for _, c := range batch[replied:] {
			select {
			case c.reply <- err:
			default: // answered before the panic
			}
		}
	})
	p.send(batch)
	replied = len(batch)
}

// send runs one batch: a lone call as a plain command on its own context,
// several as one pipeline bounded by their latest deadline (see below).
func (p *Pipeliner) send(batch []*pcall) {
	live := batch[:0]
	for _, c := range batch {
		if c.ctx.Err() == nil {
			live = append(live, c)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		sctx, cancel := sendCtx(c.ctx)
		_ = p.c.Process(sctx, c.cmd)
		cancel()
		c.reply <- nil
		return
	}
	// The batch is bounded by the latest deadline of its callers (at most
	// Cap from now): with ContextTimeoutEnabled the deadline becomes the
	// socket's, and the earliest one would fail every command of the batch
	// when the most impatient caller's time ran out. Each caller still
	// leaves at its own deadline (run waits on its context).
	//
	// The round trip is bounded from now, when the batch goes to Redis
	// (lua.WithTimeout's bound, the longest of the batch), not from when
	// its callers queued: their wait here is this node's, not Redis's.
	now := time.Now()
	limit := now.Add(p.opt.Cap)
	var dl time.Time
	var rt time.Duration
	open := false
	for _, c := range live {
		if d, ok := roundTrip(c.ctx); ok && d > rt {
			rt = d
		}
		d, ok := c.ctx.Deadline()
		if !ok {
			open = true
		} else if d.After(dl) {
			dl = d
		}
	}
	if open || dl.After(limit) {
		dl = limit
	}
	if rt > 0 && now.Add(rt).Before(dl) {
		dl = now.Add(rt)
	}
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	pipe := p.c.Pipeline()
	for _, c := range live {
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx) // every command carries its own result or error
	cancel()
	for _, c := range live {
		c.reply <- nil
	}
}
