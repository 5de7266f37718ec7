package lua

import (
	"context"
	"time"
)

// WithTimeout bounds one script call by timeout (0 = no bound). A caller's
// deadline that comes sooner is kept as it is, which saves a timer on the
// per-call path. The admission and pacing Redis stores share it.
func WithTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > timeout {
			return context.WithTimeout(ctx, timeout)
		}
	}
	return ctx, noCancel
}

func noCancel() {}
