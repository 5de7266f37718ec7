package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"

	"github.com/cpsguard/cpsguard/internal/testlog"
)

// syncBuffer is a buffer safe for the heartbeat goroutine and the test.
type syncBuffer = testlog.Buffer

// Two processes started with one node_id on one Redis find each other
// through the heartbeat: each logs it at Error, reports it and counts the
// other as a live node; when one stops, the other clears within the TTL.
func TestDuplicateNodeIDIsDetected(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisConfig(srv.Addr(), PolicyLocal) // node_id node-a for both

	type node struct {
		s    *Stores
		log  *syncBuffer
		dups chan bool
		stop func()
	}
	start := func(instance string) *node {
		n := &node{log: &syncBuffer{}, dups: make(chan bool, 8)}
		// A beat counts for three intervals: at 50 ms a 150 ms stall of
		// one process's beats (its goroutine under -race on a loaded
		// machine, or Redis) let the other clear the duplicate in the
		// middle of the test. 200 ms gives 600 ms, for 0.6 s more run.
		s, err := Open(context.Background(), cfg, OpenOptions{
			HeartbeatInterval: 200 * time.Millisecond,
			Instance:          instance,
			OnDuplicateNodeID: func(d bool) { n.dups <- d },
			Logger:            slog.New(slog.NewJSONHandler(n.log, nil)),
		})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		var once sync.Once
		n.s, n.stop = s, func() { once.Do(func() { cancel(); <-done; _ = s.Close() }) }
		t.Cleanup(n.stop)
		return n
	}
	want := func(n *node, name string, dup bool) {
		t.Helper()
		select {
		case got := <-n.dups:
			if got != dup {
				t.Fatalf("%s: OnDuplicateNodeID(%v), want %v", name, got, dup)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: OnDuplicateNodeID(%v) not called within 5s", name, dup)
		}
		if got := n.s.DuplicateNodeID(); got != dup {
			t.Fatalf("%s: DuplicateNodeID() = %v, want %v", name, got, dup)
		}
	}

	a := start("aaaaaaaaaaaaaaaa")
	time.Sleep(300 * time.Millisecond) // a beats alone: no duplicate
	if a.s.DuplicateNodeID() || a.s.LiveNodes() != 1 {
		t.Fatalf("one process: duplicate %v, live %d; want false, 1", a.s.DuplicateNodeID(), a.s.LiveNodes())
	}
	b := start("bbbbbbbbbbbbbbbb")
	want(a, "first process", true)
	want(b, "second process", true)
	if a.s.LiveNodes() != 2 || b.s.LiveNodes() != 2 {
		t.Errorf("live nodes: got %d and %d, want 2 (two deciders share the fallback limits)", a.s.LiveNodes(), b.s.LiveNodes())
	}
	for name, n := range map[string]*node{"first": a, "second": b} {
		log := n.log.String()
		if !strings.Contains(log, `"level":"ERROR"`) || !strings.Contains(log, "another process is running with this node_id") ||
			!strings.Contains(log, `"node_id":"node-a"`) {
			t.Errorf("%s process log lacks the duplicate error:\n%s", name, log)
		}
	}
	if !strings.Contains(a.log.String(), "bbbbbbbbbbbbbbbb") {
		t.Errorf("first process log does not name the other instance:\n%s", a.log.String())
	}

	b.stop() // the other beats no more, and left the process set as it stopped
	want(a, "first process after the second stopped", false)

	// A restart under the node id: the stopped process left the process
	// set, so its successor counts one live node from its first beat (two
	// until the predecessor's last beat aged out, before the leave).
	a.stop()
	c := start("cccccccccccccccc")
	if c.s.LiveNodes() != 1 || c.s.DuplicateNodeID() {
		t.Errorf("restarted process: live %d, duplicate %v; want 1, false", c.s.LiveNodes(), c.s.DuplicateNodeID())
	}
}

// A node mints dialog tokens in opaque text only once a beat showed no
// node of an older release live (lua.TestHeartbeatCountsOlderNodes counts
// them): not before its first beat, not while one is live; a failed beat
// keeps the last figure; without a shared store, always.
func TestOpaqueTokensFollowTheBeat(t *testing.T) {
	var nilHB *Heartbeat
	if !nilHB.OpaqueTokens() {
		t.Error("without a shared store: OpaqueTokens() = false")
	}
	b := &scriptedBeater{}
	log := &syncBuffer{}
	h := NewHeartbeat(b, HeartbeatOptions{Node: "n", Logger: slog.New(slog.NewJSONHandler(log, nil))})
	if h.OpaqueTokens() {
		t.Error("before the first beat: OpaqueTokens() = true")
	}
	ctx := context.Background()
	for i, step := range []struct {
		reply lua.BeatReply
		err   error
		want  bool
	}{
		{lua.BeatReply{Live: 4, Older: 2}, nil, false},
		{lua.BeatReply{Live: 3, Older: 1}, nil, false},
		{lua.BeatReply{Live: 2}, nil, true},
		{lua.BeatReply{}, errors.New("redis down"), true},
		{lua.BeatReply{Live: 3, Older: 1}, nil, false},
		{lua.BeatReply{}, errors.New("redis down"), false},
	} {
		b.reply, b.err = step.reply, step.err
		_ = h.Beat(ctx, time.Second)
		if got := h.OpaqueTokens(); got != step.want {
			t.Errorf("beat %d (%+v, %v): OpaqueTokens() = %v, want %v", i, step.reply, step.err, got, step.want)
		}
	}
	if n := strings.Count(log.String(), "nodes of an older release are live"); n != 2 {
		t.Errorf("older nodes logged %d times, want 2 (once each time they appear, not as their count changes):\n%s", n, log.String())
	}
	if n := strings.Count(log.String(), "every live node reads dialog tokens in opaque text"); n != 1 {
		t.Errorf("their leaving logged %d times, want 1:\n%s", n, log.String())
	}
}

// scriptedBeater answers each Beat with reply and err.
type scriptedBeater struct {
	reply lua.BeatReply
	err   error
}

func (b *scriptedBeater) Beat(context.Context, string, time.Duration) (lua.BeatReply, error) {
	return b.reply, b.err
}

// steps answers each Beat with the next step (the last one again at the
// end).
type steps struct {
	mu    sync.Mutex
	steps []beatStep
}

type beatStep struct {
	live int
	err  error
}

func (b *steps) Beat(context.Context, string, time.Duration) (lua.BeatReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.steps[0]
	if len(b.steps) > 1 {
		b.steps = b.steps[1:]
	}
	return lua.BeatReply{Live: s.live}, s.err
}

// The fallback's figure falls only after a while: a Redis restarted empty
// answers a node's first beat with that node alone (after an outage of any
// length: failed beats do not age the window, h62), and a node whose beats
// fail still decides calls; dividing by the lower count, the pool would
// admit more than its limits if Redis then failed. The figure is the
// largest count of the last Hold answered beats, expected_nodes among them
// until Hold were answered; a larger count counts at once.
func TestLiveNodesFallSlowly(t *testing.T) {
	ctx := context.Background()
	lost := errors.New("dial tcp: connection refused")
	for _, c := range []struct {
		name  string
		hold  int
		beats []any // a count, or an error
		want  []int // Live after each beat
	}{
		{"a fall waits for 3 beats", 3, []any{4, 3, 1, 1, 1, 1}, []int{5, 5, 4, 3, 1, 1}},
		{"an outage does not age it", 2, []any{3, lost, lost, lost, lost, 1, 1, 1}, []int{5, 5, 5, 5, 5, 3, 1, 1}},
		{"a rise counts at once", 2, []any{1, 7, 2, 2}, []int{5, 7, 7, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &steps{}
			for _, x := range c.beats {
				if err, ok := x.(error); ok {
					b.steps = append(b.steps, beatStep{err: err})
				} else {
					b.steps = append(b.steps, beatStep{live: x.(int)})
				}
			}
			h := NewHeartbeat(b, HeartbeatOptions{MinNodes: 5, Hold: c.hold})
			if got := h.Live(); got != 5 {
				t.Fatalf("before any beat: %d, want expected_nodes 5", got)
			}
			for i, want := range c.want {
				_ = h.Beat(ctx, time.Second)
				if got := h.Live(); got != want {
					t.Fatalf("after beat %d (%v): Live %d, want %d", i, c.beats[i], got, want)
				}
			}
		})
	}
}

// flaky fails its first beats with err, then answers.
type flaky struct {
	mu    sync.Mutex
	fails int
	err   error
	calls int
}

func (f *flaky) Beat(context.Context, string, time.Duration) (lua.BeatReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.fails {
		return lua.BeatReply{}, f.err
	}
	return lua.BeatReply{Live: 2}, nil
}

// A beat that met a pooled connection closed under it (Redis's idle
// timeout, a load balancer's, its close still on the way) beats again on
// a new one before it reports a failure: an idle node's beats come a
// second apart, past the span in which the failover forgives such an
// error, and one stale connection switched the node to its fallback.
// Anything else is reported at once, and a second loss too.
func TestBeatRetriesALostConnectionOnce(t *testing.T) {
	lost := fmt.Errorf("lua: run heartbeat.lua: %w", io.EOF)
	for _, c := range []struct {
		name      string
		fails     int
		err       error
		wantErr   bool
		wantCalls int
	}{
		{"lost once", 1, lost, false, 2},
		{"lost twice", 2, lost, true, 2},
		{"refused", 1, errors.New("dial tcp: connection refused"), true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &flaky{fails: c.fails, err: c.err}
			var reported, observed []error
			h := NewHeartbeat(b, HeartbeatOptions{
				OnError: func(err error) { reported = append(reported, err) },
				Observe: func(script string, _ time.Duration, err error) { observed = append(observed, err) },
			})
			err := h.Beat(context.Background(), time.Second)
			if (err != nil) != c.wantErr || (len(reported) > 0) != c.wantErr {
				t.Fatalf("Beat: %v, reported %v; want an error: %v", err, reported, c.wantErr)
			}
			// One beat, one observation: a retry that answered is no
			// store error (h62).
			if len(observed) != 1 || (observed[0] != nil) != c.wantErr {
				t.Fatalf("observed %v, want one beat, failed: %v", observed, c.wantErr)
			}
			if b.calls != c.wantCalls {
				t.Fatalf("%d beats sent, want %d", b.calls, c.wantCalls)
			}
		})
	}
}
