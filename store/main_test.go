package store

import (
	"log/slog"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	RouteRedisLogs(slog.New(slog.DiscardHandler))
	os.Exit(m.Run())
}
