package sip

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/redis/go-redis/v9"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/httpapi"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/records"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// apiToken is the http.token of the test APIs.
const apiToken = "live-calls-test-token"

// apiFor serves the operations API of h (node name, calls in reg) and
// runs its end queue; it returns the API's base URL.
func apiFor(t *testing.T, h *harness, tr *callplaces.Tracker, reg callplaces.Registry, cfg *config.Config) string {
	t.Helper()
	pool := &callplaces.Pool{Registry: reg, Node: cfg.NodeID, Local: tr.List, End: h.p.EndCalls}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); pool.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	// Ending a call is a write: the API needs a token for it.
	apiCfg := *cfg
	apiCfg.HTTP.Token = apiToken
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Config: func() *config.Config { return &apiCfg }, LiveCalls: pool}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// GET /api/v1/calls lists a live call (filters apply) and DELETE ends it:
// an answered call gets a BYE from the node on both legs, its places are
// freed and its record says the node ended it; a ringing call is
// cancelled at the carrier and refused to the caller.
func TestCallsAPIListsAndEndsACall(t *testing.T) {
	var ring atomic.Bool
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer {
		if ring.Load() {
			return siptest.Answer{Ring: -1}
		}
		return siptest.Answer{}
	})
	c := carrierCfg("a", car)
	c.MaxCalls = 5
	cfg := testConfig(c)
	// A second peer, which sends nothing: a filter by it lists no call.
	cfg.Peers = append(cfg.Peers, config.Peer{Name: "dialer-2", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.99/32")}, CPS: 10, Customer: "acme"})
	h, read, tr, reg := recordsProxy(t, cfg)
	api := apiFor(t, h, tr, reg, cfg)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := ctxT(t, 20*time.Second)

	ok := answeredCall(t, caller, h.udp)
	id := msgpart.CallID(ok)
	var l httpapi.CallList
	waitFor(t, func() bool {
		var err error
		l, err = httpapi.FetchCalls(ctx, api, "dialer-1", "a")
		return err == nil && len(l.Calls) == 1 && l.Calls[0].AnsweredAt != nil
	}, "the answered call listed")
	if got := l.Calls[0]; got.CallID != id || got.Node != "node-a" || got.Customer != "acme" || got.StartedAt.IsZero() {
		t.Fatalf("listed call: %+v", got)
	}
	for _, f := range [][2]string{{"dialer-2", ""}, {"dialer-2", "a"}} {
		if l, err := httpapi.FetchCalls(ctx, api, f[0], f[1]); err != nil || len(l.Calls) != 0 {
			t.Fatalf("filter peer %q carrier %q: got %+v, %v; want none", f[0], f[1], l.Calls, err)
		}
	}
	// A carrier the configuration does not have: 404, saying so.
	if _, err := httpapi.FetchCalls(ctx, api, "", "b"); err == nil || !strings.Contains(err.Error(), `no carrier named "b"`) {
		t.Fatalf("filter by an unknown carrier: %v; want a 404 naming it", err)
	}

	res, err := httpapi.EndCall(ctx, api, apiToken, id)
	if err != nil || res.Ended != 1 {
		t.Fatalf("DELETE: got %+v, %v; want 1 ended here", res, err)
	}
	waitFor(t, func() bool { return len(caller.Byes()) == 1 && car.Count("BYE") == 1 }, "a BYE at the caller and at the carrier")
	bye := caller.Byes()[0]
	if msgpart.CallID(bye) != id || msgpart.Tag(bye.From().Params) != msgpart.Tag(ok.To().Params) || msgpart.Tag(bye.To().Params) != msgpart.Tag(ok.From().Params) {
		t.Errorf("the caller's BYE is not in its dialog:\n%s", bye)
	}
	r := recordOf(t, read, id)
	if r.EndedBy != records.ByNode || r.EndReason != records.EndOperator || r.AnsweredAt == nil || r.Code != 200 {
		t.Errorf("record of the ended call: %+v", r)
	}
	waitFor(t, func() bool {
		l, err := httpapi.FetchCalls(ctx, api, "", "")
		return err == nil && len(l.Calls) == 0 && tr.Live() == 0
	}, "the call no longer listed nor tracked")
	if _, err := httpapi.EndCall(ctx, api, apiToken, id); err == nil || err.(*httpapi.Error).Code != 404 {
		t.Fatalf("DELETE of an ended call: got %v, want 404", err)
	}

	// A ringing call: the carrier gets a CANCEL, the caller a 503.
	ring.Store(true)
	inv := caller.Invite(h.udp)
	tx, err := caller.Transaction(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	waitFor(t, func() bool {
		l, err := httpapi.FetchCalls(ctx, api, "", "")
		return err == nil && len(l.Calls) == 1
	}, "the ringing call listed")
	if res, err := httpapi.EndCall(ctx, api, apiToken, msgpart.CallID(inv)); err != nil || res.Ended != 1 {
		t.Fatalf("DELETE of a ringing call: %+v, %v", res, err)
	}
	var final *sipmsg.Response
	for final == nil {
		select {
		case r := <-tx.Responses():
			if !r.IsProvisional() {
				final = r
			}
		case <-ctx.Done():
			t.Fatal("no final answer to the ended ringing call")
		}
	}
	if final.StatusCode != 503 {
		t.Errorf("ringing call ended: caller got %d, want 503", final.StatusCode)
	}
	waitFor(t, func() bool { return car.Cancelled() == 1 }, "a CANCEL at the carrier")
	if r := recordOf(t, read, msgpart.CallID(inv)); r.EndedBy != records.ByNode || r.EndReason != records.EndOperator {
		t.Errorf("record of the ended ringing call: %+v", r)
	}
}

// A call set up through node b is ended through node a's API: a asks b
// (its end queue), and b sends the BYEs. Both with the in-process
// registry (two nodes in one process) and with Redis, as a pool runs.
func TestCallsAPIEndsAnotherNodesCall(t *testing.T) {
	t.Run("local", func(t *testing.T) { endAnotherNodesCall(t, callplaces.NewLocalRegistry(nil)) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		if err := lua.Load(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		endAnotherNodesCall(t, callplaces.NewRedisRegistry(c, "t", callplaces.RegistryOptions{Timeout: 5 * time.Second}))
	})
}

func endAnotherNodesCall(t *testing.T, reg callplaces.Registry) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	start := func(node string) (*harness, *callplaces.Tracker, *config.Config) {
		cfg := testConfig(carrierCfg("a", car))
		cfg.NodeID = node
		tr := callplaces.NewTracker(callplaces.NewLocalStore(nil), callplaces.TrackerOptions{TTL: time.Minute, Registry: reg})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); tr.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
		adm, pacer := newFakes()
		h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Calls: tr})
		return h, tr, cfg
	}
	ha, tra, cfga := start("node-a")
	hb, trb, cfgb := start("node-b")
	apiA := apiFor(t, ha, tra, reg, cfga)
	apiFor(t, hb, trb, reg, cfgb) // runs b's end queue
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := ctxT(t, 20*time.Second)

	ok := answeredCall(t, caller, hb.udp)
	waitFor(t, func() bool {
		l, err := httpapi.FetchCalls(ctx, apiA, "", "")
		return err == nil && len(l.Calls) == 1 && l.Calls[0].Node == "node-b"
	}, "b's call listed through a")
	res, err := httpapi.EndCall(ctx, apiA, apiToken, msgpart.CallID(ok))
	if err != nil || res.Ended != 0 || len(res.Requested) != 1 || res.Requested[0] != "node-b" || len(res.Pending) != 0 {
		t.Fatalf("DELETE through a: got %+v, %v; want node-b asked and done", res, err)
	}
	waitFor(t, func() bool { return len(caller.Byes()) == 1 && car.Count("BYE") == 1 }, "b's BYEs at the caller and the carrier")
	if trb.Live() != 0 {
		t.Errorf("b still tracks %d calls", trb.Live())
	}
}
