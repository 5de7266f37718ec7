package redistest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestStartPingKillRestart(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
	out, err := s.CLI(context.Background(), "CONFIG", "GET", "save")
	if err != nil {
		t.Fatalf("redis-cli: %v (%s)", err, out)
	}
	if strings.Contains(out, "3600") {
		t.Fatalf("persistence is on: %q", out)
	}
	s.Kill()
	if err := ping(s.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("server still answers after Kill")
	}
	s.Restart()
	if err := ping(s.Addr(), time.Second); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}
