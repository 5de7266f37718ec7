package store

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/testlog"
)

// Round trips over half of store.redis.timeout, three beats in a row,
// are worth one warning (then none for slowWarnEvery); one slow beat (a
// new connection's set-up) or a failed one is not.
func TestSlowRedisIsWarnedOf(t *testing.T) {
	var buf testlog.Buffer
	w := &slowWatch{timeout: 50 * time.Millisecond, log: slog.New(slog.NewTextHandler(&buf, nil))}
	slow, fast := 30*time.Millisecond, 10*time.Millisecond
	for _, d := range []time.Duration{slow, slow, fast, slow, slow} {
		w.beat(d, nil)
	}
	w.beat(time.Second, errors.New("timeout"))
	if n := strings.Count(buf.String(), "round trip is over half"); n != 0 {
		t.Fatalf("warned %d times with no three slow beats in a row:\n%s", n, buf.String())
	}
	for range 5 {
		w.beat(slow, nil)
	}
	if n := strings.Count(buf.String(), "round trip is over half"); n != 1 {
		t.Fatalf("warned %d times, want once:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "round_trip=30ms timeout=50ms") {
		t.Fatalf("warning without its figures:\n%s", buf.String())
	}
}

// A Redis 40 ms of round trip away from a node with the default 50 ms
// timeout is warned of, from the heartbeat's round trips.
func TestDistantRedisIsWarnedOf(t *testing.T) {
	srv := redistest.Start(t)
	var buf testlog.Buffer
	m := &modes{}
	s, err := Open(t.Context(), redisConfig(redistest.Delayed(t, srv.Addr(), 20*time.Millisecond), PolicyLocal),
		OpenOptions{OnMode: m.add, HeartbeatInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; _ = s.Close() }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), "round trip is over half") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning in 5 s of beats 40 ms long:\n%s", buf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
