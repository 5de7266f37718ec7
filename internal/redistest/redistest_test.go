package redistest

import (
	"context"
	"os"
	"path/filepath"
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

// Debian installs kamailio in /usr/sbin, which is not on an ordinary
// user's PATH there: Require finds a tool in the sbin directories too, so
// make test as a user with sudo neither skips the Kamailio tests nor, under
// CI=true, fails them with the tool installed.
func TestRequireLooksInSbin(t *testing.T) {
	sbin := t.TempDir()
	tool := filepath.Join(sbin, "cpsguard-sbin-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "true") // not found must fail here, not skip
	old := sbinDirs
	sbinDirs = []string{filepath.Join(sbin, "missing"), sbin}
	t.Cleanup(func() { sbinDirs = old })
	if got := Require(t, "cpsguard-sbin-tool"); got != tool {
		t.Fatalf("Require: got %q, want %q", got, tool)
	}
}
