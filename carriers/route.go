package carriers

import (
	"context"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
)

// Skip says why a carrier is not tried now (Usable); "" means it is.
// Its values are the reroute reasons of cpsguard_reroutes_total.
type Skip string

// Reasons a carrier is skipped.
const (
	// SkipDown: down on this node (its probes, or failed calls that its
	// probes confirmed).
	SkipDown Skip = metrics.RerouteDown
	// SkipPaused: its Retry-After pause runs (pool-wide).
	SkipPaused Skip = metrics.ReroutePaused
	// SkipOut: taken out of service by hand (pool-wide).
	SkipOut Skip = metrics.RerouteOutOfService
	// SkipASR: its answer-seizure ratio on this node is below its min_asr.
	SkipASR Skip = metrics.RerouteASR
)

// Usable reports whether a call may be sent to car now, on this node, or
// why not. No I/O: it reads what the node knows.
func (s *Set) Usable(cfg *config.Config, car *config.Carrier) Skip {
	if _, out := s.out.get(car.Name); out {
		return SkipOut
	}
	if s.asr.out(car.Name, s.clock()) {
		return SkipASR
	}
	if !s.health.Up(car.Name) {
		return SkipDown
	}
	if lp := s.pacer.LocalPause(s.pacingOf(cfg, car)); lp.Paused && time.Now().Before(lp.Until) {
		// Paused (its Retry-After) and the span still runs.
		return SkipPaused
	}
	return ""
}

// RouteDown reports whether no carrier of the route named route can take
// a call now because each is down on this node or out of service (false
// for a route with no configured carrier: nothing to skip). A call on
// such a route is refused before admission, so it costs its peer
// nothing.
func (s *Set) RouteDown(cfg *config.Config, route string) bool {
	known := 0
	for _, name := range cfg.Routes[route] {
		if cfg.Carrier(name) == nil {
			continue
		}
		known++
		if s.health.Up(name) && s.inService(name) {
			return false
		}
	}
	return known > 0
}

// Order returns the carriers a call on the route named route tries, in
// the order they are tried: the route's list.
func (s *Set) Order(_ context.Context, cfg *config.Config, route string) []string {
	return cfg.Routes[route]
}
