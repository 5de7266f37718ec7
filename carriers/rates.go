package carriers

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// RefreshEvery is how often a node reads the pool's effective rate of
// each adaptive carrier and the pause of every carrier: the decreases and
// pauses other nodes make (and an operator's end of a pause through
// another node) reach it within that, its own at once. A variable so
// tests can shorten it.
var RefreshEvery = 250 * time.Millisecond

// rateCache holds this node's view of the adaptive carriers' effective
// rates, by carrier name. A carrier missing from it runs at its cps.
type rateCache struct {
	mu sync.RWMutex
	m  map[string]float64
}

func (c *rateCache) get(name string) (float64, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[name]
	return v, ok
}

func (c *rateCache) set(name string, v float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]float64{}
	}
	c.m[name] = v
}

// keep forgets every carrier not in names.
func (c *rateCache) keep(names map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.m {
		if !names[n] {
			delete(c.m, n)
		}
	}
}

// oneAtATime admits one background call per key at a time (per-carrier
// store calls started by carriers' answers). Keys come from configured
// carrier names, so the set is bounded.
type oneAtATime struct{ m sync.Map }

// start reports whether key was idle, and marks it busy.
func (o *oneAtATime) start(key string) bool {
	_, busy := o.m.LoadOrStore(key, struct{}{})
	return !busy
}

// done marks key idle again.
func (o *oneAtATime) done(key string) { o.m.Delete(key) }

// LimitCPS is the rate car is held to before adaptive push-back: its cps,
// or a live override's (limits.InForce). An adaptive carrier's AIMD
// climbs back to it; the send gate holds a node's own sends to it.
func (s *Set) LimitCPS(car *config.Carrier) float64 {
	cps, _ := limits.InForce(s.overrides, limits.ScopeCarrier, car.Name, car.CPS, 0)
	return cps
}

// aimdOf is the AIMD of an adaptive carrier: it climbs back to the
// carrier's cps, or to the override's while one is live.
func (s *Set) aimdOf(car *config.Carrier) pacing.AIMD {
	o, cps := car.Overloaded(), s.LimitCPS(car)
	return pacing.AIMD{Max: cps, Min: min(o.MinCPS, cps), Decrease: o.Decrease, Increase: o.Increase, Hold: pacing.DefaultHold}
}

// effectiveCPS is the rate car is paced at now on this node.
func (s *Set) effectiveCPS(car *config.Carrier) float64 {
	cps := s.LimitCPS(car)
	if !car.Adaptive {
		return cps
	}
	if v, ok := s.rates.get(car.Name); ok && v > 0 {
		return min(v, cps)
	}
	return cps
}

// EffectiveCPS is the rate the carrier named name is paced at now on this
// node: its cps (or a live override's), or less while it is adaptive and
// pushing back; 0 for a carrier not configured.
func (s *Set) EffectiveCPS(name string) float64 {
	if _, car := s.carrier(name); car != nil {
		return s.effectiveCPS(car)
	}
	return 0
}

// Pacing is what pacing needs to pace a call to car now: its slot set at
// its effective rate with its max_wait, and the send gate's key of the
// carrier at the rate it is held to (LimitCPS).
func (s *Set) Pacing(cfg *config.Config, car *config.Carrier) (pacing.Carrier, pacing.GateKey) {
	pc, gate := s.pacingAndGate(cfg, car)
	if cfg == s.cfg() {
		// A call of an older snapshot reports the limit it started with.
		s.limits.saw(car.Name, gate.CPS)
	}
	return pc, gate
}

// pacingAndGate is Pacing without watching the limit.
func (s *Set) pacingAndGate(cfg *config.Config, car *config.Carrier) (pacing.Carrier, pacing.GateKey) {
	pc := policy.Of(cfg).Carrier(car)
	return pc.Pacing(s.effectiveCPS(car)), pacing.GateKey{Key: pc.ID, CPS: s.LimitCPS(car)}
}

// OverloadAnswer reports whether a final answer of car (its status code
// and reason phrase) is one of its overload answers: overload.codes, or a
// reason phrase in overload.reasons, matched without case ("CPS
// exceeded" in a 403).
func OverloadAnswer(car *config.Carrier, code int, reason string) bool {
	if code < 300 {
		return false
	}
	o := car.Overloaded()
	for _, c := range o.Codes {
		if code == c {
			return true
		}
	}
	if len(o.Reasons) > 0 {
		reason = strings.ToLower(reason)
		for _, r := range o.Reasons {
			if strings.Contains(reason, strings.ToLower(r)) {
				return true
			}
		}
	}
	return false
}

// runRefresh keeps this node's view of the adaptive carriers' effective
// rates (and cpsguard_carrier_effective_cps), of every carrier's pause and
// of the carriers out of service up to date, and respaces the queue of a
// carrier whose limit changed (applyLimits: at once when a call sees the
// change, else at the next tick), until ctx ends.
func (s *Set) runRefresh(ctx context.Context) {
	defer s.panics.Recover("carriers.refresh", nil)
	t := time.NewTicker(RefreshEvery)
	defer t.Stop()
	for {
		if cfg := s.cfg(); cfg != nil {
			s.applyLimits(ctx, cfg)
			s.refresh(ctx, cfg)
			s.refreshService(ctx)
			s.expireASR(cfg)
		}
		for kicked := true; kicked; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				kicked = false
			case <-s.limits.kick:
				// A call saw a carrier's limit change: its queue now,
				// not at the next tick.
				if cfg := s.cfg(); cfg != nil {
					s.applyLimits(ctx, cfg)
				}
			}
		}
	}
}

// refresh reads every adaptive carrier's rate and every carrier's pause
// from the store (a failed read keeps the last one) and sets
// cpsguard_carrier_effective_cps.
func (s *Set) refresh(ctx context.Context, cfg *config.Config) {
	adaptive := map[string]bool{}
	for i := range cfg.Carriers {
		car := &cfg.Carriers[i]
		pctx, cancel := context.WithTimeout(ctx, storeBudget)
		_, _ = s.pacer.Paused(pctx, s.pacingOf(cfg, car))
		cancel()
		if !car.Adaptive {
			s.m.EffectiveCPS.WithLabelValues(car.Name).Set(s.LimitCPS(car))
			continue
		}
		adaptive[car.Name] = true
		rctx, cancel := context.WithTimeout(ctx, storeBudget)
		r, err := s.pacer.Adapt(rctx, s.pacingOf(cfg, car), s.aimdOf(car), false)
		cancel()
		if err == nil {
			s.rates.set(car.Name, r.CPS)
		}
		s.m.EffectiveCPS.WithLabelValues(car.Name).Set(s.effectiveCPS(car))
	}
	s.rates.keep(adaptive)
}
