package store

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// slogPrintf adapts go-redis's process-wide logger to slog.
type slogPrintf struct{ l *slog.Logger }

func (s slogPrintf) Printf(ctx context.Context, format string, v ...any) {
	s.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// RouteRedisLogs sends go-redis's own log lines (dial failures, sentinel
// switches) to l at Debug level: the failover already logs each switch once,
// and a dead Redis must not flood the log with a line per dial. go-redis keeps
// one logger per process, so the composition root calls this once.
func RouteRedisLogs(l *slog.Logger) { redis.SetLogger(slogPrintf{l: l}) }
