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
// the caller's own deadline). The bound is a deadline only, with no timer
// of its own (sendDeadline): go-redis turns a context's deadline into the
// socket's (ContextTimeoutEnabled), which is all that bounds the write and
// the read; a timer and a cancel per call (~400 B and two timer-heap
// operations) bought nothing more.
func sendCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := roundTrip(ctx)
	if !ok {
		return ctx, noCancel
	}
	dl := time.Now().Add(d)
	if pd, ok := ctx.Deadline(); ok && !pd.After(dl) {
		return ctx, noCancel
	}
	return sendDeadline{Context: ctx, dl: dl}, noCancel
}

// sendDeadline is its parent with an earlier deadline and nothing else:
// Done and Err stay the parent's, so a wait for a pooled connection
// (before the send) is bounded by the parent's deadline (WithTimeout's
// twice the timeout) and go-redis's PoolTimeout, while the write and the
// read are bounded by dl through the socket.
type sendDeadline struct {
	context.Context
	dl time.Time
}

// Deadline implements context.Context.
func (c sendDeadline) Deadline() (time.Time, bool) { return c.dl, true }

func noCancel() {}
