package redistest

import (
	"context"
	"strconv"
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

func TestStartCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start is slow")
	}
	c := StartCluster(t, 3, 0)
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("got %d nodes, want 3", got)
	}
}

func TestStartSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("sentinel start is slow")
	}
	s := StartSentinel(t, "cpsg", 1)
	out, err := s.Sentinels[0].CLI(context.Background(), "SENTINEL", "get-master-addr-by-name", "cpsg")
	if err != nil || !strings.Contains(out, strconv.Itoa(s.Master.Port())) {
		t.Fatalf("sentinel master addr: %v %q, want port %d", err, out, s.Master.Port())
	}
}
