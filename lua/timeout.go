package lua

import (
	"context"
	"time"
)

// WithTimeout bounds one script call by timeout (0 = no bound), measured
// on Redis, not on this node's own queue: the round trip counts from when
// the command is handed to the client (a Pipeliner reads the timeout from
// ctx and applies it when it sends the call; go-redis's socket deadlines
// then bound the write and the read), and the whole call, the wait in a
// Pipeliner's queue included, gets twice the timeout as a safety bound.
// Under CPU saturation the queue is the node's own (the proxy sheds its
// excess before it reaches the store, sip.max_inflight); a slow node must
// not look like a slow Redis. A caller's deadline that comes sooner is
// kept as it is, which saves a timer on the per-call path. The admission
// and pacing Redis stores share it.
func WithTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return ctx, noCancel
	}
	ctx = context.WithValue(ctx, roundTripKey{}, timeout)
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > 2*timeout {
		return context.WithTimeout(ctx, 2*timeout)
	}
	return ctx, noCancel
}

// roundTripKey carries WithTimeout's bound on the Redis round trip.
type roundTripKey struct{}

// roundTrip returns the bound WithTimeout put on the Redis round trip of a
// call made with ctx.
func roundTrip(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(roundTripKey{}).(time.Duration)
	return d, ok && d > 0
}

// sendCtx bounds a command sent now by its caller's round trip bound (and
// the caller's own deadline). The bound needs a Done of its own, not only
// a deadline: go-redis turns the deadline into the socket's
// (ContextTimeoutEnabled), but it waits for a new connection (a dial, in
// the background) on the context's Done alone, so with the parent's Done
// a lone call, or a flusher sending one, would wait for a connect that
// hangs until the whole call's bound (twice the round trip's).
func sendCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := roundTrip(ctx); ok {
		return context.WithTimeout(ctx, d)
	}
	return ctx, noCancel
}

func noCancel() {}
