package store

import (
	"context"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
)

// A new connection is set up inside its first command's bound, so its
// handshake is HELLO alone: with CLIENT SETNAME, CLIENT MAINT_NOTIFICATIONS
// and CLIENT SETINFO besides, a Redis 20 ms away failed every new
// connection at the default 50 ms (h60).
func TestNewConnectionIsOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c, err := NewClient(&config.Redis{Addrs: []string{srv.Addr()}, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if n := srv.CommandCalls(t, "hello"); n != 1 {
		t.Errorf("HELLO sent %d times, want 1", n)
	}
	for _, cmd := range []string{"client|setname", "client|setinfo", "client|maint_notifications", "select"} {
		if n := srv.CommandCalls(t, cmd); n != 0 {
			t.Errorf("%s sent %d times by one new connection, want 0", cmd, n)
		}
	}
}

// An idle node's heartbeat that needs a new connection (Redis closed the
// old ones) waits for it as long as an outage takes to show, not the
// call's timeout: at 30 ms of round trip HELLO and the script are 60 ms,
// over the 50 ms timeout, and the node fell back with Redis well (each
// read, 30 ms, is within the client's read timeout, 50 ms).
func TestIdleNodeStaysOnADistantRedis(t *testing.T) {
	srv, _, m := openDistant(t, 15*time.Millisecond)
	for range 3 {
		if out, err := srv.CLI(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err != nil {
			t.Fatalf("client kill: %v %s", err, out)
		}
		time.Sleep(400 * time.Millisecond) // 4 beats of the test's 100 ms
	}
	if got := m.list(); len(got) != 0 {
		t.Fatalf("mode switches of an idle node with Redis 30 ms away: %v, want none", got)
	}
}

// A heartbeat's reads wait for Redis as long as the beat may (the
// client's read timeout is BackgroundTimeout; a call's own deadline bounds
// its round trips): with it at store.redis.timeout, each read was cut at
// 50 ms whatever the beat's context allowed, and an idle node switched to
// its fallback on one reply 60 ms late (h61).
func TestIdleNodeStaysThroughSlowReplies(t *testing.T) {
	_, s, m := openDistant(t, 30*time.Millisecond) // every reply 60 ms away
	time.Sleep(time.Second)                        // 10 beats of the test's 100 ms
	if got := m.list(); len(got) != 0 {
		t.Fatalf("mode switches of an idle node with every reply 60 ms away: %v, want none", got)
	}
	// A call's round trip is still bounded by the timeout: it meets it,
	// and is decided on the fallback at once.
	start := time.Now()
	d, err := s.Admit(context.Background(), "late", bucket)
	if err != nil || !d.Admit {
		t.Fatalf("admit: %+v, %v; want it decided by the fallback", d, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("admit took %v: the call's timeout did not bound it", took)
	}
}
