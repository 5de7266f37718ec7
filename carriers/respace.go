package carriers

import (
	"context"
	"sync"

	"github.com/cpsguard/cpsguard/config"
)

// limitWatch remembers the limit (LimitCPS) each carrier's queue was last
// paced for on this node, so that a reload or a live override that
// changes it respaces the queue (Set.applyLimits) instead of letting the
// calls already waiting reach the carrier at the old rate for up to
// max_wait. Its map holds one entry per configured carrier.
type limitWatch struct {
	mu sync.RWMutex
	// seen is the limit applied last, by carrier name.
	seen map[string]float64
	// tried is a changed limit whose respace failed, by carrier name: the
	// refresh tries it again; a call that sees it does not kick again.
	tried map[string]float64
	// kick wakes the refresh loop (buffered 1): a call found a carrier's
	// limit changed.
	kick chan struct{}
}

func newLimitWatch() *limitWatch {
	return &limitWatch{seen: map[string]float64{}, tried: map[string]float64{}, kick: make(chan struct{}, 1)}
}

// saw is called with the limit a call is paced for now: a change not yet
// applied wakes the refresh loop, so the queue is respaced within a store
// round trip of the first call that sees it. One read lock and a map
// lookup.
func (w *limitWatch) saw(name string, cps float64) {
	w.mu.RLock()
	v, ok := w.seen[name]
	t, failed := w.tried[name]
	w.mu.RUnlock()
	if !ok || v == cps || (failed && t == cps) {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// applyLimits applies every carrier's limit (LimitCPS) that changed since
// it was last applied, or is new to this node, to the pacer: its calls
// are paced and gated at it from then on, whatever limit they started
// with. A lowered limit also makes this node's calls already waiting take
// a slot again at the new rate (their slots removed from the store). A
// store that fails leaves the change to the next refresh; its first
// failure is logged.
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
		if known && prev == limit {
			continue
		}
		lowered := false
		if known {
			before := prev // the rate its queue was spaced for
			if car.Adaptive {
				if r, ok := s.rates.get(car.Name); ok && r > 0 {
					before = min(before, r)
				}
			}
			lowered = s.effectiveCPS(car) < before
		}
		pc, gate := s.pacingAndGate(cfg, car)
		rctx, cancel := context.WithTimeout(ctx, storeBudget)
		err := s.pacer.Respace(rctx, pc, gate, lowered)
		cancel()
		w.mu.Lock()
		if err != nil {
			first := w.tried[car.Name] != limit
			w.tried[car.Name] = limit
			w.mu.Unlock()
			if first {
				s.log.Warn("carrier limit changed; its waiting calls keep their slots until the store answers (tried again)",
					"carrier", car.Name, "from_cps", prev, "to_cps", limit, "err", err)
			}
			continue
		}
		w.seen[car.Name] = limit
		delete(w.tried, car.Name)
		w.mu.Unlock()
		if known {
			s.log.Info("carrier limit changed; its calls are paced at it from now on", "carrier", car.Name,
				"from_cps", prev, "to_cps", limit, "paced_cps", pc.CPS, "waiting_calls_retake", lowered)
		}
	}
	w.mu.Lock()
	for n := range w.seen {
		if !names[n] {
			delete(w.seen, n)
			delete(w.tried, n)
		}
	}
	w.mu.Unlock()
}
