package httpapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
	"github.com/cpsguard/cpsguard/store"
)

// The real stores satisfy the interfaces the server reads through.
var (
	_ Counter = (*admission.LocalStore)(nil)
	_ Counter = (*admission.RedisStore)(nil)
	_ Counter = (*store.Failover)(nil)
	_ Queuer  = (*pacing.LocalSlots)(nil)
	_ Queuer  = (*pacing.RedisSlots)(nil)
	_ Queuer  = (*store.Failover)(nil)
)

// With the in-process stores, calls admitted and slots reserved the way the
// proxy does show in the status: the server reads the same keys and windows.
func TestStatusReadsWhatTheProxyWrites(t *testing.T) {
	now := time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	adm := admission.NewLocalStore(clock)
	slots := pacing.NewLocalSlots(clock)
	cfg := testConfig()
	ctx := context.Background()

	bucketOf := func(scope policy.Scope, name string, cps float64) admission.Bucket {
		limit, window := admission.LimitFor(cps)
		return admission.Bucket{Key: policy.Key(cfg.Store.KeyPrefix, scope, name), Limit: limit, Window: window}
	}
	for i := range 7 {
		d, err := adm.Admit(ctx, fmt.Sprintf("call-%d", i), []admission.Bucket{
			bucketOf(policy.ScopePeer, "dialer-1", 50), bucketOf(policy.ScopeCustomer, "acme", 20),
		})
		if err != nil || !d.Admit {
			t.Fatalf("admit call %d: %+v, %v", i, d, err)
		}
	}
	// Three calls for carrier-b (5 cps): slots at now, +202ms, +404ms.
	key := policy.Key(cfg.Store.KeyPrefix, policy.ScopeCarrier, "carrier-b")
	for i := range 3 {
		s, err := slots.Reserve(ctx, key, fmt.Sprintf("call-%d", i), pacing.Share{}, pacing.Interval(5), time.Second)
		if err != nil || !s.OK {
			t.Fatalf("reserve %d: %+v, %v", i, s, err)
		}
	}

	st := getStatus(t, New(Options{Config: func() *config.Config { return cfg }, Counts: adm, Queue: slots}))
	if len(st.Errors) > 0 {
		t.Fatalf("status errors: %v", st.Errors)
	}
	for _, c := range []struct {
		what string
		e    Entry
		want int
	}{
		{"peer dialer-1", st.Peers[0], 7},
		{"peer dialer-2", st.Peers[1], 0},
		{"customer acme", st.Customers[0], 7},
	} {
		if c.e.Current == nil || *c.e.Current != c.want {
			t.Errorf("%s current: got %v, want %d", c.what, c.e.Current, c.want)
		}
	}
	b := st.Carriers[1]
	if b.Queued == nil || *b.Queued != 2 {
		t.Errorf("carrier-b queued: got %v, want 2 (the slots after now)", b.Queued)
	}
	if want := (3 * pacing.Interval(5)).Seconds(); b.WaitSeconds == nil || *b.WaitSeconds != want {
		t.Errorf("carrier-b wait: got %v, want %v (last slot + one interval)", b.WaitSeconds, want)
	}
}

// On Redis, two nodes writing to one pool show the pool's figures in the
// status of either node.
func TestStatusOnRedisShowsThePool(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	newNode := func() (*admission.RedisStore, *pacing.RedisSlots) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		a, s := admission.NewRedisStore(c, admission.RedisOptions{}), pacing.NewRedisSlots(c, pacing.RedisOptions{})
		if err := a.Load(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Load(ctx); err != nil {
			t.Fatal(err)
		}
		return a, s
	}
	adm1, slots1 := newNode()
	adm2, slots2 := newNode()
	cfg := testConfig()
	cfg.Carriers[0].CPS = 1 // slots 1.01 s apart: timing noise cannot empty the queue
	bucket := func(scope policy.Scope, name string, cps float64) admission.Bucket {
		limit, window := admission.LimitFor(cps)
		return admission.Bucket{Key: policy.Key(cfg.Store.KeyPrefix, scope, name), Limit: limit, Window: window}
	}
	for i, a := range []*admission.RedisStore{adm1, adm2, adm1} {
		d, err := a.Admit(ctx, fmt.Sprintf("call-%d", i), []admission.Bucket{bucket(policy.ScopePeer, "dialer-1", 50), bucket(policy.ScopeCustomer, "acme", 20)})
		if err != nil || !d.Admit {
			t.Fatalf("admit %d: %+v, %v", i, d, err)
		}
	}
	key := policy.Key(cfg.Store.KeyPrefix, policy.ScopeCarrier, "carrier-a")
	for i, s := range []*pacing.RedisSlots{slots1, slots2, slots1} {
		if sl, err := s.Reserve(ctx, key, fmt.Sprintf("call-%d", i), pacing.Share{}, pacing.Interval(1), 5*time.Second); err != nil || !sl.OK {
			t.Fatalf("reserve %d: %+v, %v", i, sl, err)
		}
	}

	st := getStatus(t, New(Options{Config: func() *config.Config { return cfg }, Counts: adm2, Queue: slots2}))
	if len(st.Errors) > 0 {
		t.Fatalf("status errors: %v", st.Errors)
	}
	if c := st.Peers[0].Current; c == nil || *c != 3 {
		t.Errorf("dialer-1 current: got %v, want 3 (both nodes' calls)", c)
	}
	if c := st.Customers[0].Current; c == nil || *c != 3 {
		t.Errorf("acme current: got %v, want 3", c)
	}
	// Slots at 0, 1.01 and 2.02 s: the last two are still ahead, and a call
	// reserving now would wait for 3.03 s less the time spent since.
	if q := st.Carriers[0].Queued; q == nil || *q != 2 {
		t.Errorf("carrier-a queued: got %v, want 2", q)
	}
	if w := st.Carriers[0].WaitSeconds; w == nil || *w <= 2 || *w > 3.03 {
		t.Errorf("carrier-a wait: got %v, want in (2, 3.03] s", w)
	}
}

// A burst and an extra window show what admission left in the real stores,
// in-process and on Redis: the token bucket's level and the window's calls,
// from the buckets the proxy admits with (policy).
func TestStatusShowsTokensAndWindows(t *testing.T) {
	srv := redistest.Start(t)
	redisStore := func(t *testing.T) Counter {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		a := admission.NewRedisStore(c, admission.RedisOptions{})
		if err := a.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) Counter
	}{
		{"local", func(*testing.T) Counter { return admission.NewLocalStore(nil) }},
		{"redis", redisStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Store.KeyPrefix = "status-" + tc.name
			// 0.01 cps: one token every 100 s, none refills during the test.
			cfg.Peers[0].CPS, cfg.Peers[0].Burst = 0.01, 30
			cfg.Peers[0].Windows = []config.Window{{Calls: 600, Per: time.Minute}}
			st := tc.store(t)
			adm := st.(admission.Store)
			pe := policy.Of(cfg).Peer(&cfg.Peers[0])
			for i := range 5 {
				d, err := adm.Admit(context.Background(), fmt.Sprintf("call-%d", i), pe.Buckets(pe.CPS, pe.Burst))
				if err != nil || !d.Admit {
					t.Fatalf("admit %d: %+v, %v", i, d, err)
				}
			}
			got := getStatus(t, New(Options{Config: func() *config.Config { return cfg }, Counts: st})).Peers[0]
			if got.Burst != 30 || got.Tokens == nil || *got.Tokens != 25 {
				t.Errorf("tokens: got %v of burst %d, want 25 of 30", got.Tokens, got.Burst)
			}
			if got.Current == nil || *got.Current != 5 {
				t.Errorf("current (tokens in use): got %v, want 5", got.Current)
			}
			if len(got.Windows) != 1 || got.Windows[0].Current == nil || *got.Windows[0].Current != 5 || got.Windows[0].Calls != 600 {
				t.Errorf("windows: got %+v, want one of 600 per 1m holding 5", got.Windows)
			}
		})
	}
}
