package carriers

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/pacing"
)

// TestServiceStoreContract runs one suite against both stores: they must
// agree.
func TestServiceStoreContract(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	for name, st := range map[string]ServiceStore{
		"local": NewLocalService(),
		"redis": NewRedisService(c, "test", time.Second, nil),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if l, err := st.List(ctx); err != nil || len(l) != 0 {
				t.Fatalf("empty List = %v, %v", l, err)
			}
			at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
			prev, err := st.TakeOut(ctx, Out{Carrier: "b", Reason: "maintenance window", By: "127.0.0.1:4000", Since: at})
			if err != nil || prev != nil {
				t.Fatalf("first TakeOut = %v, %v; want nil, nil", prev, err)
			}
			prev, err = st.TakeOut(ctx, Out{Carrier: "b", Reason: "still", By: "127.0.0.1:4001", Since: at.Add(time.Minute)})
			if err != nil || prev == nil || prev.Reason != "maintenance window" || prev.By != "127.0.0.1:4000" || !prev.Since.Equal(at) || prev.Carrier != "b" {
				t.Fatalf("second TakeOut returned %+v, %v; want the first mark", prev, err)
			}
			if _, err := st.TakeOut(ctx, Out{Carrier: "a", Since: at}); err != nil {
				t.Fatal(err)
			}
			l, err := st.List(ctx)
			if err != nil || len(l) != 2 || l[0].Carrier != "a" || l[1].Carrier != "b" || l[1].Reason != "still" || l[0].Reason != "" {
				t.Fatalf("List = %+v, %v; want a, then b (still)", l, err)
			}
			prev, err = st.PutBack(ctx, "b")
			if err != nil || prev == nil || prev.Reason != "still" {
				t.Fatalf("PutBack(b) = %+v, %v; want the removed mark", prev, err)
			}
			if prev, err = st.PutBack(ctx, "b"); err != nil || prev != nil {
				t.Fatalf("PutBack(b) again = %+v, %v; want nil, nil", prev, err)
			}
			if prev, err = st.PutBack(ctx, "never"); err != nil || prev != nil {
				t.Fatalf("PutBack of a carrier in service = %+v, %v; want nil, nil", prev, err)
			}
			if l, err := st.List(ctx); err != nil || len(l) != 1 || l[0].Carrier != "a" {
				t.Fatalf("List after PutBack = %+v, %v; want a", l, err)
			}
			if _, err := st.PutBack(ctx, "a"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A RedisService whose Redis is gone reports ErrServiceUnavailable.
func TestRedisServiceUnavailable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	st := NewRedisService(c, "test", 200*time.Millisecond, nil)
	if _, err := st.TakeOut(context.Background(), Out{Carrier: "a"}); !errors.Is(err, ErrServiceUnavailable) {
		t.Errorf("TakeOut without Redis: %v, want ErrServiceUnavailable", err)
	}
	if _, err := st.List(context.Background()); !errors.Is(err, ErrServiceUnavailable) {
		t.Errorf("List without Redis: %v, want ErrServiceUnavailable", err)
	}
}

// Two nodes on one Redis: a carrier taken out through one is skipped by
// the other at its next refresh, and back when put back; a route whose
// carriers are all out refuses its calls.
func TestOutOfServicePoolWide(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	cfg := &config.Config{Carriers: []config.Carrier{
		{Name: "a", URI: "sip:127.0.0.1:5070", CPS: 10, MaxWait: time.Second, Probe: &config.Probe{}},
		{Name: "b", URI: "sip:127.0.0.1:5071", CPS: 10, MaxWait: time.Second, Probe: &config.Probe{}},
	}, Routes: map[string]config.Route{"default": config.OrderedRoute("a", "b"), "solo": config.OrderedRoute("a")}}
	node := func() *Set {
		s, err := New(Options{Config: func() *config.Config { return cfg }, Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil)),
			Service: NewRedisService(c, "test", time.Second, nil), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	n1, n2 := node(), node()
	ctx := context.Background()
	a := &cfg.Carriers[0]
	if _, ok, err := n1.TakeOut(ctx, "nope", "op", ""); ok || err != nil {
		t.Errorf("TakeOut of a carrier not configured: ok %v, %v", ok, err)
	}
	if prev, ok, err := n1.TakeOut(ctx, "a", "127.0.0.1:9", "maintenance"); !ok || err != nil || prev != nil {
		t.Fatalf("TakeOut = %v, %v, %v", prev, ok, err)
	}
	if got := n1.Usable(cfg, a); got != SkipOut {
		t.Errorf("the taking node: usable %q, want out_of_service at once", got)
	}
	if got := n2.Usable(cfg, a); got != "" {
		t.Errorf("the other node before its refresh: usable %q, want \"\" (it reads the store every RefreshEvery)", got)
	}
	n2.refreshService(ctx)
	if got := n2.Usable(cfg, a); got != SkipOut {
		t.Errorf("the other node after its refresh: usable %q, want out_of_service", got)
	}
	st, _ := n2.State("a")
	if st.InService || st.Out == nil || st.Out.Reason != "maintenance" || st.Out.By != "127.0.0.1:9" || !st.Up {
		t.Errorf("state on the other node: %+v (out %+v), want up, out of service by 127.0.0.1:9", st, st.Out)
	}
	if !n2.RouteDown(cfg, "solo") || n2.RouteDown(cfg, "default") {
		t.Errorf("route solo (a only) down %v, default (a, b) down %v; want true, false", n2.RouteDown(cfg, "solo"), n2.RouteDown(cfg, "default"))
	}
	if prev, ok, err := n2.PutBack(ctx, "a"); !ok || err != nil || prev == nil || prev.Reason != "maintenance" {
		t.Fatalf("PutBack = %+v, %v, %v", prev, ok, err)
	}
	n1.refreshService(ctx)
	if n1.Usable(cfg, a) != "" || n2.Usable(cfg, a) != "" {
		t.Errorf("after PutBack: usable %q and %q, want both in service", n1.Usable(cfg, a), n2.Usable(cfg, a))
	}
}
