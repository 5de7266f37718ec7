package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/storescope"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/pacing"
)

func redisConfig(addr, policy string) *config.Config {
	return &config.Config{
		NodeID: "node-a",
		Store: config.Store{
			KeyPrefix: "fo",
			OnError:   policy,
			Redis:     &config.Redis{Addrs: []string{addr}, Timeout: 50 * time.Millisecond},
		},
	}
}

type modes struct {
	mu  sync.Mutex
	got []string
}

func (m *modes) add(s string) { m.mu.Lock(); m.got = append(m.got, s); m.mu.Unlock() }
func (m *modes) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.got...)
}

func open(t *testing.T, cfg *config.Config) (*Stores, *modes) {
	t.Helper()
	m := &modes{}
	s, err := Open(context.Background(), cfg, OpenOptions{OnMode: m.add, ProbeInterval: 50 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = s.Close() })
	return s, m
}

func waitMode(t *testing.T, s *Stores, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Mode() != want {
		if time.Now().After(deadline) {
			t.Fatalf("mode: got %s, want %s within 10s", s.Mode(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var bucket = []admission.Bucket{{Key: lua.Key("fo", "peer", "p"), Limit: 4, Window: time.Second}}

func TestInProcessWithoutRedis(t *testing.T) {
	s, _ := open(t, &config.Config{NodeID: "solo", Store: config.Store{KeyPrefix: "fo"}})
	if got := s.Mode(); got != ModeLocal {
		t.Fatalf("mode: got %s, want %s", got, ModeLocal)
	}
	for i := 0; i < 5; i++ {
		d, err := s.Admit(context.Background(), fmt.Sprint("c", i), bucket)
		if err != nil {
			t.Fatalf("admit %d: %v", i, err)
		}
		if want := i < 4; d.Admit != want {
			t.Fatalf("call %d: admit got %v, want %v", i, d.Admit, want)
		}
	}
}

func TestFallbackAndBack(t *testing.T) {
	srv := redistest.Start(t)
	s, m := open(t, redisConfig(srv.Addr(), PolicyLocal))
	ctx := context.Background()
	if got := s.Mode(); got != ModeRedis {
		t.Fatalf("mode: got %s, want redis", got)
	}
	// A second node beats into the pool: the fallback must halve the limits.
	other := &lua.Heartbeater{Client: s.client, Key: lua.Key("fo", "nodes", "all")}
	if r, err := other.Beat(ctx, "node-b", 10*time.Second); err != nil || r.Live != 2 {
		t.Fatalf("second node beat: %d, %v; want 2", r.Live, err)
	}
	if err := s.heartbeat.Beat(ctx, time.Second); err != nil || s.LiveNodes() != 2 {
		t.Fatalf("live nodes: got %d, %v; want 2", s.LiveNodes(), err)
	}
	d, err := s.Admit(ctx, "before", bucket)
	if err != nil || !d.Admit {
		t.Fatalf("admit on redis: %+v, %v", d, err)
	}
	if n := s.client.ZCard(ctx, bucket[0].Key).Val(); n != 1 {
		t.Fatalf("redis bucket holds %d, want 1", n)
	}

	srv.Kill()
	admitted := 0
	for i := 0; i < 4; i++ {
		d, err := s.Admit(ctx, fmt.Sprint("down", i), bucket)
		if err != nil {
			t.Fatalf("admit %d with redis down: %v (a call must never see the store error under local)", i, err)
		}
		if d.Admit {
			admitted++
		}
	}
	// go-redis reports a dead server as timeouts (its pool backs off
	// dialling), and a timeout switches only after Options.Quiet without an
	// answer: the calls above were each decided by the fallback meanwhile,
	// and the next failure (a call or the heartbeat) switches.
	waitMode(t, s, ModeFallback)
	// Limit 4 over 2 live nodes = 2 for this node in fallback, and the call
	// admitted on Redis a moment ago was mirrored into the local window.
	if admitted != 1 {
		t.Fatalf("fallback admitted %d of 4 with limit 4 over 2 live nodes and 1 call in the window, want 1", admitted)
	}
	slot, err := s.Reserve(ctx, lua.Key("fo", "carrier", "c"), "x", pacing.Share{}, 100*time.Millisecond, time.Second)
	if err != nil || !slot.OK {
		t.Fatalf("reserve in fallback: %+v, %v", slot, err)
	}

	srv.Restart()
	waitMode(t, s, ModeRedis)
	// Back on Redis, the node keeps to its share until the window the
	// fallback filled has passed (TestBackFromFallbackKeepsTheShare).
	time.Sleep(bucket[0].Window)
	d, err = s.Admit(ctx, "after", bucket)
	if err != nil || !d.Admit {
		t.Fatalf("admit after recovery: %+v, %v", d, err)
	}
	if n := s.client.ZCard(ctx, bucket[0].Key).Val(); n != 1 {
		t.Fatalf("restarted redis bucket holds %d, want 1", n)
	}
	if got, want := fmt.Sprint(m.list()), "[fallback redis]"; got != want {
		t.Fatalf("mode switches: got %s, want %s", got, want)
	}
}

func TestHungRedisIsBoundedByTimeout(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	d, err := s.Admit(context.Background(), "hung", bucket)
	took := time.Since(start)
	if err != nil || !d.Admit {
		t.Fatalf("admit against a hung redis: %+v, %v", d, err)
	}
	// Not a performance threshold: only a hang (no timeout at all) fails here.
	if took > 5*time.Second {
		t.Fatalf("admit took %v against a hung redis; the 50ms timeout did not apply", took)
	}
	// The node's last beat answered within Options.Quiet, so the timeout
	// was the call's alone; the next failure, a call's or a beat's,
	// switches.
	waitMode(t, s, ModeFallback)
	srv.Resume()
	waitMode(t, s, ModeRedis)
}

func TestPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy    string
		wantErr   error
		wantAdmit bool
	}{
		{PolicyAdmit, nil, true},
		{PolicyReject, ErrStoreDown, false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t)
			s, _ := open(t, redisConfig(srv.Addr(), tc.policy))
			srv.Kill()
			for i := 0; i < 6; i++ { // more than the limit of 4
				d, err := s.Admit(context.Background(), fmt.Sprint("c", i), bucket)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("call %d: err got %v, want %v", i, err, tc.wantErr)
				}
				if d.Admit != tc.wantAdmit {
					t.Fatalf("call %d: admit got %v, want %v", i, d.Admit, tc.wantAdmit)
				}
				if open := d.Mode == admission.ModeOpen; open != (tc.policy == PolicyAdmit) {
					t.Fatalf("call %d: mode %v, want ModeOpen exactly under policy admit", i, d.Mode)
				}
			}
			if got, want := s.Usable(), tc.policy != PolicyReject; got != want {
				t.Fatalf("usable: got %v, want %v", got, want)
			}
			_, err := s.Reserve(context.Background(), "k", "m", pacing.Share{}, time.Millisecond, time.Second)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("reserve: err got %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestStartWithRedisDown(t *testing.T) {
	port := redistest.FreePort(t)
	s, _ := open(t, redisConfig(fmt.Sprintf("127.0.0.1:%d", port), PolicyLocal))
	if got := s.Mode(); got != ModeFallback {
		t.Fatalf("mode with no redis listening: got %s, want fallback", got)
	}
	d, err := s.Admit(context.Background(), "c", bucket)
	if err != nil || !d.Admit {
		t.Fatalf("admit: %+v, %v", d, err)
	}
	srv := redistest.StartOnPort(t, port)
	_ = srv
	waitMode(t, s, ModeRedis)
}

func TestShareDividesLimits(t *testing.T) {
	hb := NewHeartbeat(nil, HeartbeatOptions{MinNodes: 3})
	f := NewFailover(Options{Redis: admission.NewLocalStore(nil), Local: admission.NewLocalStore(nil), LocalSlots: pacing.NewLocalSlots(nil), Nodes: hb})
	got := f.share([]admission.Bucket{{Limit: 10, Window: time.Second}, {Limit: 2, Window: time.Second}})
	if got[0].Limit != 3 || got[0].Window != time.Second {
		t.Fatalf("10 over 3 nodes: got %+v, want limit 3 per 1s", got[0])
	}
	if got[1].Limit != 1 || got[1].Window != 1500*time.Millisecond {
		t.Fatalf("2 over 3 nodes: got %+v, want 1 per 1.5s", got[1])
	}
	if iv := f.shareInterval(100 * time.Millisecond); iv != 300*time.Millisecond {
		t.Fatalf("interval over 3 nodes: got %v, want 300ms", iv)
	}
}

// TestCallerDeadlineEqualToTimeoutStillFallsBack: a caller whose own deadline
// is the Redis timeout sees go-redis's socket timeout, not its context's
// error; the call must still be decided by the fallback, not failed.
func TestCallerDeadlineEqualToTimeoutStillFallsBack(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d, err := s.Admit(ctx, "deadline", bucket)
	if err != nil || !d.Admit {
		t.Fatalf("admit with the caller's deadline = redis timeout: %+v, %v; want admitted by the fallback", d, err)
	}
	waitMode(t, s, ModeFallback)
}

// TestCancelledCallerDoesNotSwitch: a CANCEL is not a Redis failure.
func TestCancelledCallerDoesNotSwitch(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Admit(ctx, "gone", bucket); err == nil {
		t.Fatal("admit with a cancelled context: got no error")
	}
	if got := s.Mode(); got != ModeRedis {
		t.Fatalf("mode after a cancelled caller: got %s, want redis", got)
	}
}

// TestStatusReadsNeverSwitch: Counts and Queue serve the status API; a client
// that gives up (cancelled context) must not move the node off Redis.
func TestStatusReadsNeverSwitch(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyReject))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Counts(ctx, bucket); err == nil {
		t.Fatal("Counts with a cancelled context: got no error")
	}
	if _, err := s.Queue(ctx, "k", time.Millisecond); err == nil {
		t.Fatal("Queue with a cancelled context: got no error")
	}
	if got := s.Mode(); got != ModeRedis || !s.Usable() {
		t.Fatalf("after failed status reads: mode %s usable %v, want redis and usable", got, s.Usable())
	}
}

// TestFallbackStartsWithThisNodesHistory: admissions on Redis are mirrored
// into the in-process windows, so the fallback does not start empty and
// admit a second limit's worth within one second.
func TestFallbackStartsWithThisNodesHistory(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if d, err := s.Admit(ctx, fmt.Sprint("r", i), bucket); err != nil || !d.Admit {
			t.Fatalf("admit %d on redis: %+v, %v", i, d, err)
		}
	}
	srv.Kill()
	admitted := 0
	for i := 0; i < 4; i++ {
		if d, err := s.Admit(ctx, fmt.Sprint("f", i), bucket); err == nil && d.Admit {
			admitted++
		}
	}
	if admitted != 1 {
		t.Fatalf("fallback admitted %d more in the same second, want 1 (limit 4, 3 already admitted on redis)", admitted)
	}
}

// errStore fails every admission with err after ok successes.
type errStore struct {
	admission.Store
	ok  int
	err error
}

func (s *errStore) Admit(ctx context.Context, member string, b []admission.Bucket) (admission.Decision, error) {
	if s.ok > 0 {
		s.ok--
		return s.Store.Admit(ctx, member, b)
	}
	return admission.Decision{}, s.err
}

// TestTimeoutWhileRedisAnswersDoesNotSwitch: on a CPU-saturated node a
// reply read late times out while Redis answers the other calls; that is
// not an outage (issue 15). A timeout with no answer for a whole Quiet,
// or any other error, is; a connection lost under a command is like a
// timeout.
func TestTimeoutWhileRedisAnswersDoesNotSwitch(t *testing.T) {
	timeoutErr := fmt.Errorf("admission: run admit.lua: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name     string
		err      error
		answered bool // Redis answered another call just before
		want     string
	}{
		{"timeout, redis answering", timeoutErr, true, ModeRedis},
		{"timeout, no answer for a timeout", timeoutErr, false, ModeFallback},
		{"refused, redis answering", errors.New("dial tcp: connection refused"), true, ModeFallback},
		// A pooled connection closed under the command (Redis's idle
		// timeout, a load balancer's) says nothing of Redis.
		{"connection lost, redis answering", fmt.Errorf("admission: run admit.lua: %w", io.EOF), true, ModeRedis},
		{"connection reset, redis answering", fmt.Errorf("read: %w", syscall.ECONNRESET), true, ModeRedis},
		{"connection lost, no answer for a timeout", fmt.Errorf("admission: run admit.lua: %w", io.EOF), false, ModeFallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &errStore{Store: admission.NewLocalStore(nil), err: tc.err}
			f := NewFailover(Options{Redis: rs, RedisSlots: pacing.NewLocalSlots(nil), Local: admission.NewLocalStore(nil),
				LocalSlots: pacing.NewLocalSlots(nil), Policy: PolicyReject, Quiet: time.Hour})
			if tc.answered {
				rs.ok = 1
				if _, err := f.Admit(context.Background(), "ok", bucket); err != nil {
					t.Fatalf("first admit: %v", err)
				}
			}
			if _, err := f.Admit(context.Background(), "late", bucket); !errors.Is(err, ErrStoreDown) {
				t.Fatalf("admit meeting %v: got %v, want ErrStoreDown (the call itself is decided by the policy)", tc.err, err)
			}
			if got := f.Mode(); got != tc.want {
				t.Fatalf("mode: got %s, want %s", got, tc.want)
			}
		})
	}
}

// A token bucket's rate and capacity are shared alike; a capacity share
// below one token is one token.
func TestShareDividesTokenBuckets(t *testing.T) {
	hb := NewHeartbeat(nil, HeartbeatOptions{MinNodes: 3})
	f := NewFailover(Options{Redis: admission.NewLocalStore(nil), Local: admission.NewLocalStore(nil), LocalSlots: pacing.NewLocalSlots(nil), Nodes: hb})
	got := f.share([]admission.Bucket{admission.TokenBucket("k", 10, 30), admission.TokenBucket("k2", 1, 2)})
	if got[0].Limit != 10 || got[0].RateMicros != 3_333_333 || got[0].Window != time.Second+admission.WindowGuard {
		t.Fatalf("cps 10 burst 30 over 3 nodes: got %+v, want burst 10 at 3.333333 cps", got[0])
	}
	if got[1].Limit != 1 || got[1].RateMicros != 333_333 {
		t.Fatalf("cps 1 burst 2 over 3 nodes: got %+v, want burst 1 at 0.333333 cps", got[1])
	}
}

// TestPauseGoesToBothStores (issue 22): a carrier's pause is written to
// Redis (the pool) and to this node's local slots, so a node that falls
// back keeps it; evidence and an operator's unpause work in fallback too.
func TestPauseGoesToBothStores(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisConfig(srv.Addr(), PolicyLocal)
	// A store call slower than 50 ms on a busy box would switch the node
	// to its fallback before the pause reached Redis: not this test's case.
	cfg.Store.Redis.Timeout = 2 * time.Second
	s, _ := open(t, cfg)
	ctx := context.Background()
	key := lua.Key("fo", "carrier", "paused")
	if st, err := s.Pause(ctx, key, time.Minute, "Retry-After 60"); err != nil || !st.Paused || !st.Changed {
		t.Fatalf("Pause on redis: %+v, %v", st, err)
	}
	if n := s.client.Exists(ctx, lua.PauseKey(key)).Val(); n != 1 {
		t.Fatalf("pause not in redis (%d keys)", n)
	}
	if st, err := s.Paused(ctx, key); err != nil || !st.Paused || st.Reason != "Retry-After 60" {
		t.Fatalf("Paused on redis: %+v, %v", st, err)
	}
	srv.Kill()
	waitMode(t, s, ModeFallback) // the heartbeat's failure switches
	if sl, err := s.Reserve(ctx, key, "call", pacing.Share{}, 100*time.Millisecond, time.Minute); err != nil || sl.OK || !sl.Paused {
		t.Fatalf("Reserve in fallback: %+v, %v; want refused as paused", sl, err)
	}
	if e, err := s.Evidence(ctx, key, "peer-a", true, pacing.EvidenceWindows{Callers: time.Minute, Overload: time.Second}); err != nil || e.Callers != 1 {
		t.Fatalf("Evidence in fallback: %+v, %v", e, err)
	}
	if st, err := s.Unpause(ctx, key); err != nil || !st.Changed {
		t.Fatalf("Unpause in fallback: %+v, %v", st, err)
	}
	if st, err := s.Paused(ctx, key); err != nil || st.Paused {
		t.Fatalf("Paused after Unpause in fallback: %+v, %v", st, err)
	}
}

// countingSlots counts the reservations that reach it.
type countingSlots struct {
	pacing.SlotStore
	mu       sync.Mutex
	reserves int
}

func (s *countingSlots) Reserve(ctx context.Context, key, member string, share pacing.Share, interval, maxWait time.Duration) (pacing.Slot, error) {
	s.mu.Lock()
	s.reserves++
	s.mu.Unlock()
	return s.SlotStore.Reserve(ctx, key, member, share, interval, maxWait)
}

func (s *countingSlots) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserves
}

// TestCallMeetsOneRedisTimeout: once Redis timed out a call's admission
// (while answering others, so the node stays on Redis), the call's own
// later store operations go to the fallback at once instead of waiting out
// the timeout again (storescope); another call, or an operation outside
// any call, still asks Redis.
func TestCallMeetsOneRedisTimeout(t *testing.T) {
	timeoutErr := fmt.Errorf("admission: run admit.lua: %w", context.DeadlineExceeded)
	rs := &errStore{Store: admission.NewLocalStore(nil), err: timeoutErr, ok: 1}
	slots := &countingSlots{SlotStore: pacing.NewLocalSlots(nil)}
	f := NewFailover(Options{Redis: rs, RedisSlots: slots, Local: admission.NewLocalStore(nil),
		LocalSlots: pacing.NewLocalSlots(nil), Policy: PolicyLocal, Quiet: time.Hour})
	if _, err := f.Admit(context.Background(), "ok", bucket); err != nil {
		t.Fatalf("first admit: %v", err)
	}
	call := storescope.New(context.Background())
	if d, err := f.Admit(call, "late", bucket); err != nil || !d.Admit {
		t.Fatalf("admit meeting a timeout: %+v, %v; want admitted by the fallback", d, err)
	}
	if got := f.Mode(); got != ModeRedis {
		t.Fatalf("mode %s after a timeout while Redis answers, want redis", got)
	}
	if _, err := f.Reserve(call, "car", "late", pacing.Share{}, 100*time.Millisecond, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := slots.count(); n != 0 {
		t.Fatalf("the timed-out call's reservation reached Redis (%d), want the fallback", n)
	}
	other := storescope.New(context.Background())
	if _, err := f.Reserve(other, "car", "other", pacing.Share{}, 100*time.Millisecond, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reserve(context.Background(), "car", "bare", pacing.Share{}, 100*time.Millisecond, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := slots.count(); n != 2 {
		t.Fatalf("reservations at Redis: %d, want 2 (another call's, and one outside any call)", n)
	}
}

// A respace whose Redis call fails is an error, not the fallback's
// answer: the node's slots are in Redis, and the fallback's empty store
// would say they were removed, the removal then never owed and never
// retried (h58). In fallback the node's own store answers.
func TestRespaceFailsWithRedis(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	ctx := context.Background()
	if _, err := s.Respace(ctx, "t:{carrier:a}", "pX~"); err != nil {
		t.Fatalf("respace on Redis: %v", err)
	}
	srv.Pause()
	defer srv.Resume()
	if _, err := s.Respace(ctx, "t:{carrier:a}", "pX~"); err == nil {
		t.Fatal("respace with Redis hung: nil error, want Redis's (the slots there were not removed)")
	}
	waitMode(t, s, ModeFallback)
	if _, err := s.Respace(ctx, "t:{carrier:a}", "pX~"); err != nil {
		t.Fatalf("respace in fallback: %v, want the node's own store's answer", err)
	}
}

// A Redis a few milliseconds away (another zone) is the usual production
// case: a node that fell back must come back to it. The probe once sent
// PING and every SCRIPT LOAD one after another within store.redis.timeout,
// 21 round trips: with 8 ms of round trip against 50 ms of timeout it
// never succeeded, and the node stayed on the fallback for good.
func TestFallbackReturnsToADistantRedis(t *testing.T) {
	srv, s, m := openDistant(t, 4*time.Millisecond)
	// A script cache lost with the fallback (a restarted Redis) must be
	// loaded again by the probe.
	if out, err := srv.CLI(context.Background(), "SCRIPT", "FLUSH"); err != nil {
		t.Fatalf("script flush: %v %s", err, out)
	}
	s.fail("test", errors.New("a blip"))
	waitMode(t, s, ModeRedis)
	if got, want := fmt.Sprint(m.list()), "[fallback redis]"; got != want {
		t.Fatalf("mode switches: got %s, want %s", got, want)
	}
	out, err := srv.CLI(context.Background(), "SCRIPT", "EXISTS", lua.SHA(lua.ScriptAdmit), lua.SHA(lua.ScriptRespace))
	if err != nil || strings.Count(out, "1") != 2 {
		t.Fatalf("scripts after the probe: %q, %v; want both loaded", out, err)
	}
}

// openDistant opens the stores (timeout 50 ms) on a Redis of its own
// behind a proxy that delays every byte by oneWay each way, and checks
// that they start on Redis.
func openDistant(t *testing.T, oneWay time.Duration) (*redistest.Server, *Stores, *modes) {
	t.Helper()
	srv := redistest.Start(t)
	s, m := open(t, redisConfig(redistest.Delayed(t, srv.Addr(), oneWay), PolicyLocal))
	if got := s.Mode(); got != ModeRedis {
		t.Fatalf("mode at start with Redis %s of round trip away: %s, want redis", 2*oneWay, got)
	}
	return srv, s, m
}

// pingErr is a Pinger that answers err.
type pingErr struct{ err error }

func (p pingErr) Ping(context.Context) error { return p.err }

// A quiet node's call that timed out with no answer within Quiet (a spike
// of latency every node saw; a busy node has a recent answer and stays)
// asks Redis once before it switches: it stays on Redis when Redis answers
// the probe, and switches when it does not (h61: the quiet node alone
// switched, a pool half on Redis and half on the fallback).
func TestQuietNodeAsksBeforeItSwitches(t *testing.T) {
	timeoutErr := fmt.Errorf("admission: run admit.lua: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name  string
		probe error
		want  string
	}{
		{"redis answers the probe", nil, ModeRedis},
		{"redis silent", timeoutErr, ModeFallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &modes{}
			f := NewFailover(Options{Redis: &errStore{Store: admission.NewLocalStore(nil), err: timeoutErr},
				RedisSlots: pacing.NewLocalSlots(nil), Local: admission.NewLocalStore(nil), LocalSlots: pacing.NewLocalSlots(nil),
				Probe: pingErr{tc.probe}, Quiet: 100 * time.Millisecond, OnMode: m.add})
			if d, err := f.Admit(context.Background(), "late", bucket); err != nil || !d.Admit {
				t.Fatalf("admit meeting a timeout: %+v, %v; want it decided by the fallback", d, err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for f.confirming.Load() || (tc.want == ModeFallback && f.Mode() != ModeFallback) {
				if time.Now().After(deadline) {
					t.Fatal("the confirm probe did not end in 5 s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			if got := f.Mode(); got != tc.want {
				t.Fatalf("mode: got %s, want %s (switches %v)", got, tc.want, m.list())
			}
			if tc.want == ModeRedis && !f.answeredLately() {
				t.Fatal("the probe's answer was not counted as Redis answering")
			}
		})
	}
}

// secondNode makes s count two live nodes: another beats into its pool
// for a minute.
func secondNode(t *testing.T, s *Stores) {
	t.Helper()
	ctx := context.Background()
	other := &lua.Heartbeater{Client: s.client, Key: lua.Key("fo", "nodes", "all")}
	if _, err := other.Beat(ctx, "node-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.heartbeat.Beat(ctx, time.Second); err != nil || s.LiveNodes() != 2 {
		t.Fatalf("live nodes: got %d, %v; want 2", s.LiveNodes(), err)
	}
}

// careful10s is a window long enough that a test's outage, restart and
// recovery all fall inside it, however slow the machine.
var careful10s = []admission.Bucket{{Key: lua.Key("fo", "peer", "careful"), Limit: 4, Window: 10 * time.Second}}

// admitted counts how many of n calls named prefix0.. Admit lets through.
func admitted(t *testing.T, s *Stores, prefix string, n int, buckets []admission.Bucket) int {
	t.Helper()
	return admittedBy(t, s, false, prefix, n, buckets)
}

// admittedBy is admitted through AdmitReserve (the proxy's call on the
// shared store, with the first carrier slot) when reserve is set.
func admittedBy(t *testing.T, s *Stores, reserve bool, prefix string, n int, buckets []admission.Bucket) int {
	t.Helper()
	got := 0
	for i := range n {
		m := fmt.Sprint(prefix, i)
		var d admission.Decision
		var err error
		if reserve {
			d, _, _, err = s.AdmitReserve(context.Background(), m, buckets,
				pacing.Ask{Key: lua.Key("fo", "carrier", "careful"), Member: m, Interval: time.Millisecond, MaxWait: time.Second})
		} else {
			d, err = s.Admit(context.Background(), m, buckets)
		}
		if err != nil {
			t.Fatalf("admit %s: %v", m, err)
		}
		if d.Admit {
			got++
		}
	}
	return got
}

// TestBackFromFallbackKeepsTheShare: the calls a node admitted on its
// fallback share are not in Redis; back on Redis, the node keeps to its
// share for the rest of their window, so the pool does not admit its
// limit again on top of them (h61: 50–54 a second at a peer's 30).
func TestBackFromFallbackKeepsTheShare(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	ctx := context.Background()
	secondNode(t, s)
	srv.Kill()
	waitMode(t, s, ModeFallback)
	// Limit 4 over 2 nodes: this node's share is 2.
	if got := admitted(t, s, "down", 4, careful10s); got != 2 {
		t.Fatalf("fallback admitted %d of 4, want its share, 2", got)
	}
	srv.Restart()
	waitMode(t, s, ModeRedis)
	if got := admitted(t, s, "back", 4, careful10s); got != 0 {
		t.Fatalf("back on redis, admitted %d more within the window the fallback filled, want 0 (the share is used)", got)
	}
	if n := s.client.ZCard(ctx, careful10s[0].Key).Val(); n != 0 {
		t.Fatalf("redis counts %d calls, want 0: a call the share refuses is not sent to redis", n)
	}
	// A limit whose window began after the switch back is Redis's alone.
	fresh := []admission.Bucket{{Key: lua.Key("fo", "peer", "fresh"), Limit: 4, Window: 10 * time.Millisecond}}
	time.Sleep(20 * time.Millisecond)
	if got := admitted(t, s, "fresh", 4, fresh); got != 4 {
		t.Fatalf("a window shorter than the time since the switch: admitted %d of 4, want 4", got)
	}
}

// TestRedisThatLostItsScriptsKeepsTheShare: a Redis that restarted empty
// without the node noticing an outage answers NOSCRIPT; from then on, for
// a window, the node admits only what its own windows (its calls of the
// last window, mirrored) allow too (h61: 31–37 at 30 on a restart).
func TestRedisThatLostItsScriptsKeepsTheShare(t *testing.T) {
	for _, reserve := range []bool{false, true} {
		t.Run(fmt.Sprint("reserve=", reserve), func(t *testing.T) {
			srv := redistest.Start(t)
			s, m := open(t, redisConfig(srv.Addr(), PolicyLocal))
			ctx := context.Background()
			if got := admittedBy(t, s, reserve, "before", 4, careful10s); got != 4 {
				t.Fatalf("admitted %d of 4 on redis, want 4", got)
			}
			// What a restart without persistence leaves: no keys, no scripts.
			if out, err := srv.CLI(ctx, "FLUSHALL"); err != nil {
				t.Fatalf("FLUSHALL: %v %s", err, out)
			}
			if out, err := srv.CLI(ctx, "SCRIPT", "FLUSH"); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v %s", err, out)
			}
			// The first call meets NOSCRIPT; Redis (empty) admits it, but
			// the node is careful from then on, that call included: its
			// own 4 in the window are this one node's limit.
			if got := admittedBy(t, s, reserve, "after", 4, careful10s); got != 0 {
				t.Fatalf("admitted %d of 4 after redis lost its keys, want 0 (limit 4, 4 admitted before)", got)
			}
			if got := s.Mode(); got != ModeRedis || len(m.list()) != 0 {
				t.Fatalf("mode %s, switches %v: a Redis that lost its scripts is not an outage", got, m.list())
			}
		})
	}
}

// TestRedisThatLostItsScriptsKeepsTheCarrierShare: a Redis restarted
// empty forgot the carrier's schedule; calls waiting for its slots still
// go while new calls take slots from now. For the carrier's max_wait and
// a window after, this node's send gate holds it to its share of the
// carrier's cps.
func TestRedisThatLostItsScriptsKeepsTheCarrierShare(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	ctx := context.Background()
	secondNode(t, s)
	p := pacing.NewPacer(s)
	// 4 cps over 2 nodes: this node's share is 2 a second.
	c := pacing.Carrier{Key: lua.Key("fo", "carrier", "lost"), CPS: 4, MaxWait: 300 * time.Millisecond}
	gate := pacing.GateKey{Key: "carrier:lost", CPS: 4}
	send := func(name string) bool {
		t.Helper()
		tk, err := p.Acquire(ctx, c, p.MemberOf(name, 0), nil, gate)
		if err != nil {
			t.Fatalf("acquire %s: %v", name, err)
		}
		if tk.OK {
			tk.Sent(time.Now())
		}
		return tk.OK
	}
	for i := range 2 {
		if !send(fmt.Sprint("before", i)) {
			t.Fatalf("call %d before the restart had no slot", i)
		}
	}
	if out, err := srv.CLI(ctx, "FLUSHALL"); err != nil {
		t.Fatalf("FLUSHALL: %v %s", err, out)
	}
	if out, err := srv.CLI(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v %s", err, out)
	}
	// Redis gives a slot at once (its schedule is empty), and the pool's
	// 4 would leave room for this node's third send; its share does not.
	if send("after") {
		t.Fatal("a third send within the second after redis lost the schedule: over this node's share of 2")
	}
}

// fakeRedisFailover is a Failover whose "Redis" is rs and rslots (in
// process, failing as the test makes them), with local as its in-process
// slots; a timeout is never an outage (Quiet: an hour).
func fakeRedisFailover(rs admission.Store, rslots, local pacing.SlotStore, policy string) *Failover {
	return NewFailover(Options{Redis: rs, RedisSlots: rslots, Local: admission.NewLocalStore(nil),
		LocalSlots: local, Policy: policy, Quiet: time.Hour})
}

// onceStore fails the Admits numbered in fail (counting from 1) with err.
type onceStore struct {
	admission.Store
	n    int
	fail map[int]bool
	err  error
}

func (s *onceStore) Admit(ctx context.Context, member string, b []admission.Bucket) (admission.Decision, error) {
	if s.n++; s.fail[s.n] {
		return admission.Decision{}, s.err
	}
	return s.Store.Admit(ctx, member, b)
}

// TestCallDecidedUncountedIsCountedLater: a call that met a timeout while
// Redis answered the others is decided by the fallback; Redis then counts
// it too (Run), so its room does not add to it (h61: 60 a second at 30),
// and the node is not held to its share meanwhile (h65).
func TestCallDecidedUncountedIsCountedLater(t *testing.T) {
	redis := admission.NewLocalStore(nil)
	rs := &onceStore{Store: redis, fail: map[int]bool{3: true},
		err: fmt.Errorf("admission: run admit.lua: %w", context.DeadlineExceeded)}
	f := fakeRedisFailover(rs, pacing.NewLocalSlots(nil), pacing.NewLocalSlots(nil), PolicyLocal)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)
	admit := func(from, to int) int {
		got := 0
		for i := from; i < to; i++ {
			d, err := f.Admit(context.Background(), fmt.Sprint("c", i), careful10s)
			if err != nil {
				t.Fatalf("admit %d: %v", i, err)
			}
			if d.Admit {
				got++
			}
		}
		return got
	}
	// Calls 0-1 on "Redis", 2 on the fallback (Redis failed it).
	if got := admit(0, 3); got != 3 {
		t.Fatalf("admitted %d of 3, want 3", got)
	}
	if f.Mode() != ModeRedis {
		t.Fatalf("mode %s: a timeout while redis answers is no outage", f.Mode())
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := redis.Counts(context.Background(), careful10s)
		if err == nil && n[0] == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis counts %v, %v: want the call the fallback decided counted too (3)", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := admit(3, 6); got != 1 {
		t.Fatalf("then admitted %d of 3 with limit 4 and 3 counted, want 1", got)
	}
}

// TestCarefulCallThatMeetsATimeoutIsAdmittedOnce: a careful call counted
// in this node's share before Redis was asked, then failed by Redis, is
// admitted on that count; deciding it again found it a duplicate, which
// the proxy absorbs as a retransmission: the call was never forwarded
// (TestRedisFailureDuringLoad/hung, 17 of 400 calls unanswered).
func TestCarefulCallThatMeetsATimeoutIsAdmittedOnce(t *testing.T) {
	for _, policy := range []string{PolicyLocal, PolicyAdmit, PolicyReject} {
		t.Run(policy, func(t *testing.T) {
			rs := &onceStore{Store: admission.NewLocalStore(nil), fail: map[int]bool{2: true},
				err: fmt.Errorf("admission: run admit.lua: %w", context.DeadlineExceeded)}
			f := fakeRedisFailover(rs, pacing.NewLocalSlots(nil), pacing.NewLocalSlots(nil), policy)
			ctx := context.Background()
			if d, err := f.Admit(ctx, "first", careful10s); err != nil || !d.Admit {
				t.Fatalf("first call: %+v, %v", d, err)
			}
			f.careful("test")
			d, err := f.Admit(ctx, "careful", careful10s)
			switch policy {
			case PolicyReject:
				if !errors.Is(err, ErrStoreDown) {
					t.Fatalf("careful call meeting a timeout under reject: %+v, %v; want ErrStoreDown", d, err)
				}
			default:
				if err != nil || !d.Admit || d.Duplicate {
					t.Fatalf("careful call meeting a timeout: %+v, %v; want admitted, not a duplicate", d, err)
				}
			}
			if policy != PolicyLocal {
				return
			}
			// A retransmission of it is one.
			if d, err := f.Admit(ctx, "careful", careful10s); err != nil || !d.Admit || !d.Duplicate {
				t.Fatalf("its retransmission: %+v, %v; want a duplicate", d, err)
			}
		})
	}
}

// Under on_error reject the fallback admitted nothing, so Redis missed
// nothing: back from it, the node decides on Redis alone.
func TestBackFromRejectIsNotCareful(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyReject))
	ctx := context.Background()
	secondNode(t, s)
	if got := admitted(t, s, "before", 3, careful10s); got != 3 {
		t.Fatalf("admitted %d of 3 on redis, want 3", got)
	}
	srv.Pause()
	for i := 0; i < 100 && s.Mode() != ModeFallback; i++ {
		_, _ = s.Admit(ctx, fmt.Sprint("hang", i), bucket)
		time.Sleep(20 * time.Millisecond)
	}
	srv.Resume()
	waitMode(t, s, ModeRedis)
	// Share 2, this node's 3 calls are in its window; Redis holds 3 of 4.
	if got := admitted(t, s, "back", 2, careful10s); got != 1 {
		t.Fatalf("back from the reject fallback: admitted %d of 2, want 1 (Redis's limit 4, 3 held)", got)
	}
}

// A window longer than carefulMaxWindow (an extra window, repeat_dial) is
// not kept careful: holding the node to its share of a day's calls for a
// day refused a peer whose calls all came to this node (h64).
func TestLongWindowIsNotCareful(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	ctx := context.Background()
	secondNode(t, s)
	hour := []admission.Bucket{{Key: lua.Key("fo", "peer", "hourly"), Limit: 10, Window: time.Hour}}
	if got := admitted(t, s, "before", 6, hour); got != 6 {
		t.Fatalf("admitted %d of 6, want 6", got)
	}
	if out, err := srv.CLI(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v %s", err, out)
	}
	if got := admitted(t, s, "after", 4, hour); got != 4 {
		t.Fatalf("an hourly window after NOSCRIPT: admitted %d of 4, want 4 (Redis holds 6 of 10)", got)
	}
}

// onceSlots fails its fail-th Reserve (counting from 1) with err.
type onceSlots struct {
	*pacing.LocalSlots
	n, fail int
	err     error
}

func (s *onceSlots) Reserve(ctx context.Context, key, member string, share pacing.Share, interval, maxWait time.Duration) (pacing.Slot, error) {
	if s.n++; s.n == s.fail {
		return pacing.Slot{}, s.err
	}
	return s.LocalSlots.Reserve(ctx, key, member, share, interval, maxWait)
}

// A carrier slot the local slots gave while Redis answered the other
// calls goes into Redis's schedule too (Run), so the next slot Redis
// gives comes after it.
func TestSlotDecidedUncountedIsCountedLater(t *testing.T) {
	redisSlots := &onceSlots{LocalSlots: pacing.NewLocalSlots(nil), fail: 2,
		err: fmt.Errorf("pacing: run pace.lua: %w", context.DeadlineExceeded)}
	local := pacing.NewLocalSlots(nil)
	f := fakeRedisFailover(admission.NewLocalStore(nil), redisSlots, local, PolicyLocal)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)
	const key, interval = "carrier:x", 100 * time.Millisecond
	// The in-process schedule is 300 ms ahead (slots from an earlier
	// fallback): the fallback's slot is due then.
	for i := range 3 {
		if s, err := local.Reserve(context.Background(), key, fmt.Sprint("earlier", i), pacing.Share{}, interval, 5*time.Second); err != nil || !s.OK {
			t.Fatal(s, err)
		}
	}
	for _, m := range []string{"on-redis", "on-fallback"} {
		if s, err := f.Reserve(context.Background(), key, m, pacing.Share{}, interval, 5*time.Second); err != nil || !s.OK {
			t.Fatalf("reserve %s: %+v, %v", m, s, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		q, err := redisSlots.Queue(context.Background(), key, interval)
		if err == nil && q.Queued >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis's schedule %+v, %v: want the fallback's slot in it", q, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s, err := f.Reserve(context.Background(), key, "next", pacing.Share{}, interval, 5*time.Second)
	if err != nil || !s.OK || s.Wait < 300*time.Millisecond {
		t.Fatalf("next slot on redis: %+v, %v; want it after the fallback's (due at 300 ms)", s, err)
	}
}

// A Redis that keeps answering NOSCRIPT (one evicting scripts) counts as
// one loss per carefulMaxWindow: otherwise every call would put this
// node's waiting slots back and take its own twice (h65).
func TestNoScriptCountsOncePerWindow(t *testing.T) {
	f := fakeRedisFailover(admission.NewLocalStore(nil), pacing.NewLocalSlots(nil), pacing.NewLocalSlots(nil), PolicyLocal)
	f.noScript()
	first := f.Lost()
	if first.IsZero() {
		t.Fatal("a NOSCRIPT is no loss")
	}
	time.Sleep(time.Millisecond)
	f.noScript()
	if got := f.Lost(); !got.Equal(first) {
		t.Fatalf("a second NOSCRIPT within %v counted again: %v, then %v", carefulMaxWindow, first, got)
	}
}

// A slot the in-process schedule gave while the node stays on Redis (its
// pace call met a lost connection) is a loss: the Pacer puts this node's
// waiting slots into the in-process schedule as well, and the call takes
// its slot again after them (h66: 38 a second at a carrier's 30 at a
// Redis kill).
func TestSlotFromTheFallbackOnRedisIsALoss(t *testing.T) {
	redisSlots := &onceSlots{LocalSlots: pacing.NewLocalSlots(nil), fail: 1,
		err: fmt.Errorf("pacing: run pace.lua: %w", io.EOF)}
	local := pacing.NewLocalSlots(nil)
	f := fakeRedisFailover(admission.NewLocalStore(nil), redisSlots, local, PolicyLocal)
	f.ok() // Redis answered lately: the lost connection is forgiven
	const key, interval = "carrier:x", 100 * time.Millisecond
	if s, err := f.Reserve(context.Background(), key, "met-eof", pacing.Share{}, interval, 5*time.Second); err != nil || !s.OK {
		t.Fatalf("reserve: %+v, %v", s, err)
	}
	if f.Mode() != ModeRedis || f.Lost().IsZero() {
		t.Fatalf("mode %s, lost %v: want still on redis, and a loss", f.Mode(), f.Lost())
	}
	waiting := []pacing.Waiting{{Member: "waiting", Due: time.Now().Add(400 * time.Millisecond), Keep: time.Second}}
	if err := f.Rebook(context.Background(), key, waiting); err != nil {
		t.Fatal(err)
	}
	// Into the in-process schedule only: Redis's lost nothing, and a
	// round trip to it per slow reply held every call behind it.
	if q, err := local.Queue(context.Background(), key, interval); err != nil || q.Queued < 1 {
		t.Fatalf("in-process schedule %+v, %v: want the waiting slot in it", q, err)
	}
	if q, err := redisSlots.Queue(context.Background(), key, interval); err != nil || q.Queued != 0 {
		t.Fatalf("redis schedule %+v, %v: want it untouched", q, err)
	}
	// A loss of Redis's schedule (a switch, a NOSCRIPT) puts them into
	// both.
	f.markLost()
	if err := f.Rebook(context.Background(), key, waiting); err != nil {
		t.Fatal(err)
	}
	if q, err := redisSlots.Queue(context.Background(), key, interval); err != nil || q.Queued < 1 {
		t.Fatalf("redis schedule %+v, %v: want the waiting slot in it", q, err)
	}
}
