package carriers

import (
	"context"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
)

// Pauses (issue 22, items A5 and B): a carrier's 503 or 500 with
// Retry-After pauses it for the pool, as the pool's evidence allows
// (evidence.go), for at most its retry_after_max. While the span runs,
// calls skip the carrier at once (reroute reason paused) and calls that
// were waiting for one of its slots give it back at their wake; when the
// span ends, one call tries the carrier (half-open) and the others skip it
// until that call is answered (the pause ends for the pool), or fails (the
// next call tries), or the carrier pauses again. A good OPTIONS probe
// sent after the pause began ends its span early, and an operator can end
// a pause (Unpause; DELETE /api/v1/carriers/{name}/pause). The pause lives
// in the pacing store (pacing.SlotStore.Pause), so every node sees it;
// each node reads it every RefreshEvery and learns its own at once.

// CarrierPause reads the pool's pause of the carrier named name from the
// store (Paused false: none). ok is false for a carrier not configured.
func (s *Set) CarrierPause(ctx context.Context, name string) (st pacing.Pause, ok bool, err error) {
	cfg := s.cfg()
	if cfg == nil {
		return pacing.Pause{}, false, nil
	}
	car := cfg.Carrier(name)
	if car == nil {
		return pacing.Pause{}, false, nil
	}
	st, err = s.pacer.Paused(ctx, s.pacingOf(cfg, car))
	return st, true, err
}

// Unpause ends the pool's pause of the carrier named name at once (an
// operator's request): calls go to it again, on this node at once and on
// the others within RefreshEvery. It returns the pause that ended
// (Changed false: the carrier was not paused); ok is false for a carrier
// not configured.
func (s *Set) Unpause(ctx context.Context, name string) (ended pacing.Pause, ok bool, err error) {
	cfg := s.cfg()
	if cfg == nil {
		return pacing.Pause{}, false, nil
	}
	car := cfg.Carrier(name)
	if car == nil {
		return pacing.Pause{}, false, nil
	}
	ended, err = s.pacer.Unpause(ctx, s.pacingOf(cfg, car))
	if err == nil && ended.Changed {
		s.log.Info("carrier pause lifted by an operator: calls go to it again", "carrier", name, "reason", ended.Reason)
	}
	return ended, true, err
}

// probeAnswered ends the span of car's pause early when car answered an
// OPTIONS probe sent sent ago, after the pause began: one call tries the
// carrier (half-open). Only while this node knows the span runs, so a
// carrier that is not paused costs no store call.
func (s *Set) probeAnswered(ctx context.Context, cfg *config.Config, car *config.Carrier, sent time.Duration) {
	pc := s.pacingOf(cfg, car)
	if lp := s.pacer.LocalPause(pc); !lp.Paused || !time.Now().Before(lp.Until) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, storeBudget)
	defer cancel()
	st, err := s.pacer.OpenPause(ctx, pc, sent)
	switch {
	case err != nil:
		s.log.Debug("carrier answered its probe while paused, but the store failed", "carrier", car.Name, "error", err)
	case st.Changed:
		s.log.Info("carrier paused by its Retry-After answered its probe: one call tries it", "carrier", car.Name)
	}
}
