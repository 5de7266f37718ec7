package limits

import "testing"

type fakeLookup map[string]Override

func (f fakeLookup) Lookup(scope, name string) (Override, bool) {
	o, ok := f[Field(scope, name)]
	return o, ok
}

func TestInForce(t *testing.T) {
	intp := func(n int) *int { return &n }
	l := fakeLookup{
		"peer/low":       {CPS: 20},
		"peer/burst":     {CPS: 5, Burst: intp(0)},
		"customer/raise": {CPS: 80},
		"carrier/c":      {CPS: 3},
		"peer/zero":      {CPS: 0},
	}
	for _, tc := range []struct {
		name      string
		l         Lookup
		scope, n  string
		cps       float64
		burst     int
		wantCPS   float64
		wantBurst int
	}{
		{"no override", l, ScopePeer, "other", 50, 100, 50, 100},
		{"cps only keeps burst", l, ScopePeer, "low", 50, 100, 20, 100},
		{"burst 0 turns the bucket off", l, ScopePeer, "burst", 50, 100, 5, 0},
		{"burst raised to the new cps", l, ScopeCustomer, "raise", 50, 60, 80, 80},
		{"limit on an unlimited scope", l, ScopePeer, "low", 0, 0, 20, 0},
		{"carrier", l, ScopeCarrier, "c", 10, 0, 3, 0},
		{"scope is part of the name", l, ScopeCustomer, "low", 50, 0, 50, 0},
		{"an override of 0 cps is ignored", l, ScopePeer, "zero", 50, 0, 50, 0},
		{"no lookup", nil, ScopePeer, "low", 50, 100, 50, 100},
		{"a nil *Overrides", (*Overrides)(nil), ScopePeer, "low", 50, 100, 50, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cps, burst := InForce(tc.l, tc.scope, tc.n, tc.cps, tc.burst)
			if cps != tc.wantCPS || burst != tc.wantBurst {
				t.Errorf("InForce = %g, %d; want %g, %d", cps, burst, tc.wantCPS, tc.wantBurst)
			}
		})
	}
}
