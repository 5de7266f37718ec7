package sip

import (
	"testing"

	"github.com/cpsguard/cpsguard/config"
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
	car := &config.Carrier{Name: "c", CPS: 10, Adaptive: true}
	if got := p.carrierCPS(car); got != 3 {
		t.Errorf("carrierCPS = %g, want the override's 3", got)
	}
	if a := p.aimdOf(car); a.Max != 3 {
		t.Errorf("adaptive carrier's AIMD Max = %g, want the override's 3", a.Max)
	}
	p.rates.set("c", 8)
	if got := p.effectiveCPS(car); got != 3 {
		t.Errorf("effectiveCPS with a rate of 8 = %g, want 3 (the override caps it)", got)
	}
	if got := (&Proxy{}).carrierCPS(car); got != 10 {
		t.Errorf("carrierCPS without overrides = %g, want 10", got)
	}
}
