package sip

import (
	"context"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/metrics"
)

type fakeOverrides map[string]limits.Override

func (f fakeOverrides) Lookup(scope, name string) (limits.Override, bool) {
	o, ok := f[limits.Field(scope, name)]
	return o, ok
}

func TestLimitsOf(t *testing.T) {
	intp := func(n int) *int { return &n }
	p := &Proxy{overrides: fakeOverrides{
		"peer/low":       {CPS: 20},
		"peer/burst":     {CPS: 5, Burst: intp(0)},
		"customer/raise": {CPS: 80},
		"carrier/c":      {CPS: 3},
	}}
	for _, tc := range []struct {
		name      string
		scope, n  string
		cps       float64
		burst     int
		wantCPS   float64
		wantBurst int
	}{
		{"no override", metrics.ScopePeer, "other", 50, 100, 50, 100},
		{"cps only keeps burst", metrics.ScopePeer, "low", 50, 100, 20, 100},
		{"burst 0 turns the bucket off", metrics.ScopePeer, "burst", 50, 100, 5, 0},
		{"burst raised to the new cps", metrics.ScopeCustomer, "raise", 50, 60, 80, 80},
		{"limit on an unlimited scope", metrics.ScopePeer, "low", 0, 0, 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cps, burst := p.limitsOf(tc.scope, tc.n, tc.cps, tc.burst)
			if cps != tc.wantCPS || burst != tc.wantBurst {
				t.Errorf("limitsOf = %g, %d; want %g, %d", cps, burst, tc.wantCPS, tc.wantBurst)
			}
		})
	}
}

// Through the proxy, with the in-process admission store and a real
// limits.Overrides: a live override of the peer refuses the second call at
// once, the carrier's is the rate pacing is asked for, and DELETE restores
// both.
func TestOverrideThroughProxy(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.Peers[0].CPS, cfg.Customers[0].CPS = 100, 100
	_, pacer := newFakes()
	ov := limits.New(limits.NewLocalStore(nil), limits.Options{})
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: admission.NewLocalStore(nil), Pacer: pacer, Overrides: ov})
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := context.Background()
	if _, err := ov.Set(ctx, limits.Override{Scope: "peer", Name: "dialer-1", CPS: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := ov.Set(ctx, limits.Override{Scope: "carrier", Name: "a", CPS: 7}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{200, 503} {
		if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != want {
			t.Fatalf("call %d under a 1 cps override: final %v, want %d", i, res, want)
		}
	}
	pacer.mu.Lock()
	got := append([]float64(nil), pacer.reservedCPS...)
	pacer.mu.Unlock()
	if len(got) != 1 || got[0] != 7 {
		t.Errorf("pacing asked for %v cps, want [7] (the carrier's override)", got)
	}
	if _, err := ov.Delete(ctx, "peer", "dialer-1"); err != nil {
		t.Fatal(err)
	}
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("call after DELETE: final %v, want 200 (cps 100 again)", res)
	}
}
