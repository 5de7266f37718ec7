package limits

import "math"

// Lookup finds the live override of a scope's name without I/O
// (*Overrides satisfies it; a nil *Overrides finds none).
type Lookup interface {
	Lookup(scope, name string) (Override, bool)
}

// InForce is the one place that decides the limits in force of a peer,
// customer or carrier (scope ScopePeer, …): the configured cps and burst,
// or a live override's. The proxy paces and admits by it, the status API
// shows it and cpsguard_limit_cps exports it. An override without a burst
// keeps the configured one, raised to the override's cps when below it (a
// token bucket holds at least one second of calls, as config validation
// asks); an override whose cps is not above 0 (no store keeps one) is
// ignored. l nil: the configured limits. It does no I/O.
func InForce(l Lookup, scope, name string, cps float64, burst int) (float64, int) {
	if l == nil {
		return cps, burst
	}
	o, ok := l.Lookup(scope, name)
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
