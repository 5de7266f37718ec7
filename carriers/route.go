package carriers

import (
	"context"
	"sync"
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
	r := s.routeOf(cfg, route)
	if r == nil {
		return false
	}
	known := 0
	for _, name := range r.names {
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
// the order they are tried. The route's policy chooses the first:
//
//   - ordered: the route's first carrier;
//   - weighted: among the carriers usable now, one at random in
//     proportion to its weight (a carrier of weight w takes w/Σw of the
//     calls; the weights of carriers down, paused or out of service go to
//     the others);
//   - least_wait: among the carriers usable now, the one whose next free
//     pacing slot is soonest, pool-wide (pacing's queue read: a call never
//     waits on one carrier while another is idle); ties go to the earlier
//     one in the route, and a carrier whose queue cannot be read counts
//     as busiest;
//
// and the others follow in the route's order. The slice returned for an
// ordered route is shared: the caller must not modify it.
func (s *Set) Order(ctx context.Context, cfg *config.Config, route string) []string {
	r := s.routeOf(cfg, route)
	if r == nil {
		return nil
	}
	first := -1
	switch r.policy {
	case config.RouteWeighted:
		first = s.pickWeighted(cfg, r)
	case config.RouteLeastWait:
		first = s.pickLeastWait(ctx, cfg, r)
	}
	if first <= 0 {
		return r.names
	}
	out := make([]string, 0, len(r.names))
	out = append(out, r.names[first])
	out = append(out, r.names[:first]...)
	return append(out, r.names[first+1:]...)
}

// usable reports whether the carrier named name of cfg is usable now.
func (s *Set) usable(cfg *config.Config, name string) *config.Carrier {
	car := cfg.Carrier(name)
	if car == nil || s.Usable(cfg, car) != "" {
		return nil
	}
	return car
}

// pickWeighted chooses the index of a weighted route's first carrier
// among those usable now, by weight (-1: none has weight).
func (s *Set) pickWeighted(cfg *config.Config, r *route) int {
	var usable [maxInline]int
	idx := usable[:0]
	sum := 0
	for i, name := range r.names {
		if r.weights[i] > 0 && s.usable(cfg, name) != nil {
			idx = append(idx, i)
			sum += r.weights[i]
		}
	}
	if sum == 0 {
		return -1
	}
	n := s.intN(sum)
	for _, i := range idx {
		if n -= r.weights[i]; n < 0 {
			return i
		}
	}
	return -1 // unreachable: n < sum
}

// pickLeastWait chooses the index of a least_wait route's first carrier:
// the usable one whose next free slot is soonest (-1: none usable, or
// one only).
func (s *Set) pickLeastWait(ctx context.Context, cfg *config.Config, r *route) int {
	type cand struct {
		i   int
		car *config.Carrier
	}
	var buf [maxInline]cand
	cands := buf[:0]
	for i, name := range r.names {
		if car := s.usable(cfg, name); car != nil {
			cands = append(cands, cand{i, car})
		}
	}
	if len(cands) < 2 {
		return -1
	}
	ctx, cancel := context.WithTimeout(ctx, storeBudget)
	defer cancel()
	waits := make([]time.Duration, len(cands))
	var wg sync.WaitGroup
	for k := 1; k < len(cands); k++ {
		wg.Go(func() {
			defer s.panics.Recover("carriers.least_wait", func(error) { waits[k] = -1 })
			waits[k] = s.queueWait(ctx, cfg, cands[k].car)
		})
	}
	waits[0] = s.queueWait(ctx, cfg, cands[0].car)
	wg.Wait()
	best := -1
	for k, w := range waits {
		if w >= 0 && (best < 0 || w < waits[best]) {
			best = k
		}
	}
	if best < 0 {
		return -1
	}
	return cands[best].i
}

// queueWait is the least wait of a call reserving a slot of car now,
// pool-wide (-1: unknown, the store failed).
func (s *Set) queueWait(ctx context.Context, cfg *config.Config, car *config.Carrier) time.Duration {
	q, err := s.pacer.Queue(ctx, s.pacingOf(cfg, car))
	if err != nil {
		return -1
	}
	return max(q.Wait, 0)
}

// maxInline is how many carriers a route's choice keeps on the stack.
const maxInline = 8

// route is one route of a snapshot, derived once (routeOf).
type route struct {
	policy  string
	names   []string
	weights []int
}

// routeTable is the routes of one snapshot.
type routeTable struct {
	cfg    *config.Config
	routes map[string]*route
}

// routeOf returns the route named name of cfg (nil: none), derived once
// per snapshot: the last snapshot asked for is kept.
func (s *Set) routeOf(cfg *config.Config, name string) *route {
	if cfg == nil {
		return nil
	}
	t := s.routes.Load()
	if t == nil || t.cfg != cfg || len(t.routes) != len(cfg.Routes) {
		t = &routeTable{cfg: cfg, routes: make(map[string]*route, len(cfg.Routes))}
		for n, r := range cfg.Routes {
			rt := &route{policy: r.PolicyName(), names: r.Names(), weights: make([]int, len(r.Carriers))}
			for i, rc := range r.Carriers {
				rt.weights[i] = rc.Weight
			}
			t.routes[n] = rt
		}
		s.routes.Store(t)
	}
	return t.routes[name]
}
