package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// Open runs both Redis stores through one Pipeliner: concurrent decisions
// stay exact, and Close stops the Pipeliner with the client.
func TestOpenPipelinesAndCloseStopsIt(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisConfig(srv.Addr(), "reject")
	cfg.Store.Redis.Timeout = 2 * time.Second
	s, err := Open(context.Background(), cfg, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = s.Close()
		}
	}()
	if s.pipeline == nil {
		t.Fatal("Open built no Pipeliner")
	}
	ctx := context.Background()
	bk := []admission.Bucket{{Key: lua.Key("fo", "peer", "piped"), Limit: 50, Window: time.Minute}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.Admit(ctx, fmt.Sprint("call-", i), bk)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			if d.Admit {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 50 {
		t.Fatalf("admitted %d of 128, want 50", admitted)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := s.pipeline.EvalSha(ctx, lua.SHA(lua.ScriptAdmit), nil).Err(); !errors.Is(err, lua.ErrClosed) {
		t.Fatalf("Pipeliner after Stores.Close: got %v, want lua.ErrClosed", err)
	}
}

// Open with Redis unreachable starts in fallback and logs that switch
// once (operations.md: each switch is logged once), naming the start.
func TestOpenRedisDownLogsTheSwitchOnce(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	cfg := redisConfig("127.0.0.1:1", "local") // nothing listens on port 1
	s, err := Open(context.Background(), cfg, OpenOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Mode() != ModeFallback {
		t.Fatal("Open with Redis unreachable: not in fallback")
	}
	out := buf.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "switching to fallback") || !strings.Contains(out, "op=start") {
		t.Fatalf("%d warnings at start, want the one switch (op=start):\n%s", n, out)
	}
}

// A node that starts while Redis is down shares the limits among
// store.redis.expected_nodes until it has counted the pool in Redis (h49:
// with 1, a pool started during an outage admitted N × its limits).
func TestStartWithRedisDownSharesAmongExpectedNodes(t *testing.T) {
	cfg := redisConfig("127.0.0.1:1", "local") // nothing listens on port 1
	cfg.Store.Redis.ExpectedNodes = 3
	s, err := Open(context.Background(), cfg, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := s.LiveNodes(); n != 3 {
		t.Fatalf("live nodes before any beat: %d, want store.redis.expected_nodes (3)", n)
	}
	admitted := 0
	bk := []admission.Bucket{{Key: lua.Key("fo", "peer", "expected"), Limit: 9, Window: time.Minute}}
	for i := range 9 {
		if d, err := s.Admit(context.Background(), fmt.Sprint("call-", i), bk); err == nil && d.Admit {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("fallback admitted %d of a limit of 9, want 3 (9 shared among 3 nodes)", admitted)
	}
}
