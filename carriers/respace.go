package carriers

import (
	"context"
	"sync"

	"github.com/cpsguard/cpsguard/config"
)

// limitWatch remembers the limit (LimitCPS) each carrier's calls were
// last paced for on this node, so that a reload or a live override that
// changes it reaches the pacer (Set.applyLimits): otherwise the calls
// already waiting would reach the carrier at the old rate for up to
// max_wait. Its map holds one entry per configured carrier.
type limitWatch struct {
	mu sync.RWMutex
	// seen is what was applied last, by carrier name.
	seen map[string]applied
	// kick wakes the refresh loop (buffered 1): a call found a carrier's
	// limit changed.
	kick chan struct{}
}

// applied is what the pacer was last told of one carrier.
type applied struct {
	// limit is its LimitCPS, adaptive whether it was adaptive.
	limit    float64
	adaptive bool
	// owed is a lowering whose removal of the waiting calls' slots failed
	// (the store): each refresh tries it again. The pacer paces at the
	// new limit meanwhile. spacedFor is the rate the slots still there
	// were spaced for: a later change is a lowering against it.
	owed      bool
	spacedFor float64
}

func newLimitWatch() *limitWatch {
	return &limitWatch{seen: map[string]applied{}, kick: make(chan struct{}, 1)}
}

// saw is called with the limit a call is paced for now: a change not yet
// applied wakes the refresh loop, so it reaches the pacer within a store
// round trip of the first call that sees it. One read lock and a map
// lookup.
func (w *limitWatch) saw(name string, cps float64) {
	w.mu.RLock()
	a, ok := w.seen[name]
	w.mu.RUnlock()
	if !ok || a.limit == cps {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// applyLimits tells the pacer every carrier's limit (LimitCPS) that
// changed since it was last applied, or whose adaptive setting did, or
// that is new to this node: its calls are paced and gated at it from then
// on, whatever limit they started with. A lowered limit also makes this
// node's calls already holding a slot take one again at the new rate
// (their slots removed from the store); when the store fails that part
// is owed, tried again at each refresh (the first failure is logged),
// and forgotten if the limit goes back up to the rate the slots still
// there were spaced for.
func (s *Set) applyLimits(ctx context.Context, cfg *config.Config) {
	w := s.limits
	names := make(map[string]bool, len(cfg.Carriers))
	for i := range cfg.Carriers {
		car := &cfg.Carriers[i]
		names[car.Name] = true
		limit := s.LimitCPS(car)
		w.mu.RLock()
		prev, known := w.seen[car.Name]
		w.mu.RUnlock()
		changed := !known || prev.limit != limit || prev.adaptive != car.Adaptive
		if !changed && !prev.owed {
			continue
		}
		// before is the rate the slots held now were spaced for.
		before := prev.limit
		if prev.adaptive {
			if r, ok := s.rates.get(car.Name); ok && r > 0 {
				before = min(before, r)
			}
		}
		if prev.owed {
			before = prev.spacedFor // those slots are still there
		}
		lowered := prev.owed // unchanged: the owed removal again
		if known && changed {
			lowered = s.effectiveCPS(car) < before
		}
		pc, gate := s.pacingAndGate(cfg, car)
		rctx, cancel := context.WithTimeout(ctx, storeBudget)
		err := s.pacer.Respace(rctx, pc, gate, lowered)
		cancel()
		w.mu.Lock()
		// Paced and gated at the new limit even when the store failed.
		w.seen[car.Name] = applied{limit: limit, adaptive: car.Adaptive, owed: err != nil, spacedFor: before}
		w.mu.Unlock()
		switch {
		case err != nil && !prev.owed:
			s.log.Warn("carrier limit lowered; the calls already waiting keep their slots until the store answers (tried again)",
				"carrier", car.Name, "from_cps", prev.limit, "to_cps", limit, "err", err)
		case err == nil && known && changed:
			s.log.Info("carrier limit changed; its calls are paced at it from now on", "carrier", car.Name,
				"from_cps", prev.limit, "to_cps", limit, "paced_cps", pc.CPS, "waiting_calls_retake", lowered)
		case err == nil && prev.owed:
			s.log.Info("carrier limit lowered earlier; the calls waiting take a slot again at it now", "carrier", car.Name,
				"cps", limit)
		}
	}
	w.mu.Lock()
	for n := range w.seen {
		if !names[n] {
			delete(w.seen, n)
		}
	}
	w.mu.Unlock()
}
