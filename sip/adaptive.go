package sip

import (
	"context"
	"strings"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// rateRefreshEvery is how often a node reads the pool's effective rate of
// each adaptive carrier and the pause of every carrier: the decreases and
// pauses other nodes make (and an operator's end of a pause through
// another node) reach it within that, its own at once.
var rateRefreshEvery = 250 * time.Millisecond

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

// aimdOf is the AIMD of an adaptive carrier: it climbs back to the
// carrier's cps, or to the override's while one is live.
func (p *Proxy) aimdOf(car *config.Carrier) pacing.AIMD {
	o, cps := car.Overloaded(), p.carrierCPS(car)
	return pacing.AIMD{Max: cps, Min: min(o.MinCPS, cps), Decrease: o.Decrease, Increase: o.Increase, Hold: pacing.DefaultHold}
}

// pacingCarrier is what pacing needs of car: its slot set, its effective
// rate (an adaptive carrier pushing back runs below its cps) and max_wait.
func (p *Proxy) pacingCarrier(cfg *config.Config, car *config.Carrier) pacing.Carrier {
	return policy.Of(cfg).Carrier(car).Pacing(p.effectiveCPS(car))
}

// effectiveCPS is the rate car is paced at now on this node.
func (p *Proxy) effectiveCPS(car *config.Carrier) float64 {
	cps := p.carrierCPS(car)
	if !car.Adaptive {
		return cps
	}
	if v, ok := p.rates.get(car.Name); ok && v > 0 {
		return min(v, cps)
	}
	return cps
}

// EffectiveCPS is the rate the carrier named name is paced at now on this
// node: its cps (or a live override's), or less while it is adaptive and
// pushing back; 0 for a carrier not configured.
func (p *Proxy) EffectiveCPS(name string) float64 {
	cfg := p.cfg()
	if cfg == nil {
		return 0
	}
	if car := cfg.Carrier(name); car != nil {
		return p.effectiveCPS(car)
	}
	return 0
}

// overloadAnswer reports whether r, a final answer of car, is one of its
// overload answers (overload.codes, or a reason phrase in overload.reasons,
// matched without case: "CPS exceeded" in a 403).
func overloadAnswer(car *config.Carrier, r *sipmsg.Response) bool {
	if r.StatusCode < 300 {
		return false
	}
	o := car.Overloaded()
	for _, c := range o.Codes {
		if r.StatusCode == c {
			return true
		}
	}
	if len(o.Reasons) > 0 {
		reason := strings.ToLower(r.Reason)
		for _, s := range o.Reasons {
			if strings.Contains(reason, strings.ToLower(s)) {
				return true
			}
		}
	}
	return false
}

// runRates keeps this node's view of the adaptive carriers' effective rates
// (and cpsguard_carrier_effective_cps) and of every carrier's pause up to
// date, until ctx ends.
func (p *Proxy) runRates(ctx context.Context) {
	defer p.panics.Recover("sip.rates", nil)
	t := time.NewTicker(rateRefreshEvery)
	defer t.Stop()
	for {
		if cfg := p.cfg(); cfg != nil {
			p.refreshRates(ctx, cfg)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshRates reads every adaptive carrier's rate and every carrier's
// pause from the store (a failed read keeps the last one) and sets
// cpsguard_carrier_effective_cps.
func (p *Proxy) refreshRates(ctx context.Context, cfg *config.Config) {
	adaptive := map[string]bool{}
	for i := range cfg.Carriers {
		car := &cfg.Carriers[i]
		pctx, cancel := context.WithTimeout(ctx, storeBudget)
		_, _ = p.pacer.Paused(pctx, p.pacingCarrier(cfg, car))
		cancel()
		if !car.Adaptive {
			p.m.EffectiveCPS.WithLabelValues(car.Name).Set(p.carrierCPS(car))
			continue
		}
		adaptive[car.Name] = true
		rctx, cancel := context.WithTimeout(ctx, storeBudget)
		r, err := p.pacer.Adapt(rctx, p.pacingCarrier(cfg, car), p.aimdOf(car), false)
		cancel()
		if err == nil {
			p.rates.set(car.Name, r.CPS)
		}
		p.m.EffectiveCPS.WithLabelValues(car.Name).Set(p.effectiveCPS(car))
	}
	p.rates.keep(adaptive)
}
