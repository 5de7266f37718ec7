package sip

import (
	"github.com/cpsguard/cpsguard/limits"
)

// Overrides finds the live limit override of a peer, customer or carrier
// (scope metrics.ScopePeer, …). *limits.Overrides satisfies it; Lookup must
// not do I/O: it is on the call path.
type Overrides interface {
	Lookup(scope, name string) (limits.Override, bool)
}

// limitsOf is a scope's limits in force: limits.InForce, the one place
// that decides them for the proxy, the status API and the metrics.
func (p *Proxy) limitsOf(scope, name string, cps float64, burst int) (float64, int) {
	if p.overrides == nil {
		return cps, burst
	}
	return limits.InForce(p.overrides, scope, name, cps, burst)
}
