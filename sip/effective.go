package sip

import (
	"math"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/metrics"
)

// Overrides finds the live limit override of a peer, customer or carrier
// (scope metrics.ScopePeer, …). *limits.Overrides satisfies it; Lookup must
// not do I/O: it is on the call path.
type Overrides interface {
	Lookup(scope, name string) (limits.Override, bool)
}

// limitsOf is where a scope's effective limits are decided: the configured
// cps and burst, or a live override's. An override without a burst keeps
// the configured one, raised to the override's cps when below it (a token
// bucket holds at least one second of calls, as config validation asks).
func (p *Proxy) limitsOf(scope, name string, cps float64, burst int) (float64, int) {
	if p.overrides == nil {
		return cps, burst
	}
	o, ok := p.overrides.Lookup(scope, name)
	if !ok || !(o.CPS > 0) {
		return cps, burst
	}
	cps = o.CPS
	if o.Burst != nil {
		burst = *o.Burst
	}
	if burst > 0 && float64(burst) < cps {
		burst = int(math.Ceil(cps))
	}
	return cps, burst
}

// carrierCPS is the rate car is held to before adaptive push-back: its cps,
// or a live override's. An adaptive carrier's AIMD climbs back to it.
func (p *Proxy) carrierCPS(car *config.Carrier) float64 {
	cps, _ := p.limitsOf(metrics.ScopeCarrier, car.Name, car.CPS, 0)
	return cps
}
