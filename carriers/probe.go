package carriers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
)

// Prober sends a node's SIP OPTIONS probes. The probe loops are the
// Set's (when to probe, how many at once, what the answers mean); the
// sending is the SIP stack's, so sip.Proxy provides it: the probe leaves
// from the node's own listener, as its calls do.
type Prober interface {
	// Probe sends one OPTIONS to car and waits up to timeout for its
	// final answer.
	Probe(ctx context.Context, car *config.Carrier, timeout time.Duration) ProbeResult
	// Behind reports that the node is late reading its own queues: a
	// probe it got no answer to then is not held against the carrier
	// (the answer may be waiting in the node's own queue).
	Behind() bool
}

// ProbeResult is the outcome of one OPTIONS probe.
type ProbeResult struct {
	// OK: a final answer other than a 5xx or a 408 (a 404 or 405 comes
	// from a live SIP stack, as Kamailio's dispatcher counts it).
	OK bool
	// Unanswered: no final answer in time (a probe that could not be
	// sent is not OK, but answered: the failure is not the node's
	// lateness).
	Unanswered bool
	// Detail says what happened in a few stable words, for the health
	// reason ("answered 200", "no answer in 1s", "connection refused"):
	// never the SIP stack's error text.
	Detail string
	// Raw is the answer or error as it came ("503 Service Unavailable",
	// the SIP stack's or the system's error text), for the debug log
	// only; empty when Detail says it all.
	Raw string
}

// probeSyncEvery is how often the probe loops look for a new
// configuration snapshot (a reload that adds, removes or changes
// carriers).
var probeSyncEvery = 500 * time.Millisecond

// probeSpec is what one carrier's probe loop runs on; a change of either
// restarts the loop.
type probeSpec struct {
	uri   string
	probe config.Probe
}

// onHealthChange logs and exports a carrier going down or coming up.
func (s *Set) onHealthChange(c healthChange) {
	switch {
	case c.Notice:
		s.log.Warn("carrier probes ignored: calls are answered but probes are not", "carrier", c.Carrier, "reason", c.Reason)
		return
	case c.Confirmed:
		s.log.Warn("carrier down, confirmed by its probes: calls skip it until its probes answer", "carrier", c.Carrier, "reason", c.Reason)
		return
	case c.Suspect:
		s.log.Warn("carrier down: its calls failed; calls skip it while its probes confirm", "carrier", c.Carrier, "reason", c.Reason)
		s.m.CarrierUp.WithLabelValues(c.Carrier).Set(0)
		return
	}
	v := 0.0
	if c.Up {
		v = 1
		s.log.Info("carrier up: calls go to it again", "carrier", c.Carrier, "reason", c.Reason)
	} else {
		s.log.Warn("carrier down: calls skip it until its probes answer", "carrier", c.Carrier, "reason", c.Reason)
	}
	s.m.CarrierUp.WithLabelValues(c.Carrier).Set(v)
}

// healthPolicies derives the health policies of cfg's carriers.
func healthPolicies(cfg *config.Config) map[string]healthPolicy {
	pols := make(map[string]healthPolicy, len(cfg.Carriers))
	for i := range cfg.Carriers {
		pr := cfg.Carriers[i].Probing()
		pols[cfg.Carriers[i].Name] = healthPolicy{Enabled: pr.Interval > 0, DownAfter: pr.DownAfter, UpAfter: pr.UpAfter, Interval: pr.Interval}
	}
	return pols
}

// syncHealth makes the health tracker, cpsguard_carrier_up,
// cpsguard_carrier_in_service and cpsguard_carrier_asr_percent follow cfg
// (every configured carrier has their series from the start; a carrier
// with no seizure in its window yet shows an ASR of 100, as nothing has
// found it wanting).
func (s *Set) syncHealth(cfg *config.Config) {
	s.health.Sync(healthPolicies(cfg))
	now := s.clock()
	for i := range cfg.Carriers {
		name := cfg.Carriers[i].Name
		v := 0.0
		if s.health.Up(name) {
			v = 1
		}
		s.m.CarrierUp.WithLabelValues(name).Set(v)
		s.setInService(name)
		asr := 100.0
		if st, ok := s.asr.get(name, now); ok && st.Seizures > 0 {
			asr = st.Percent
		}
		s.m.CarrierASR.WithLabelValues(name).Set(asr)
	}
}

// runProbes keeps one probe loop per carrier whose probing is on, in step
// with the configuration, until ctx ends.
func (s *Set) runProbes(ctx context.Context, prober Prober) {
	defer s.panics.Recover("carriers.prober", nil)
	type loop struct {
		spec   probeSpec
		cancel context.CancelFunc
	}
	loops := map[string]loop{}
	var wg sync.WaitGroup
	defer func() {
		for name, l := range loops {
			l.cancel()
			s.kicks.Delete(name)
		}
		wg.Wait() // a probe in flight ends with its context
	}()
	var last *config.Config
	t := time.NewTicker(probeSyncEvery)
	defer t.Stop()
	for {
		if cfg := s.cfg(); cfg != nil && cfg != last {
			last = cfg
			s.syncHealth(cfg)
			want := map[string]probeSpec{}
			for i := range cfg.Carriers {
				car := &cfg.Carriers[i]
				if pr := car.Probing(); pr.Interval > 0 {
					want[car.Name] = probeSpec{uri: car.URI, probe: pr}
				}
			}
			for name, l := range loops {
				if spec, ok := want[name]; !ok || spec != l.spec {
					l.cancel()
					delete(loops, name)
					s.kicks.Delete(name)
				}
			}
			for name, spec := range want {
				if _, ok := loops[name]; ok {
					continue
				}
				lctx, cancel := context.WithCancel(ctx)
				loops[name] = loop{spec: spec, cancel: cancel}
				kick := make(chan struct{}, 1)
				s.kicks.Store(name, kick)
				wg.Go(func() { s.probeLoop(lctx, prober, name, spec, kick) })
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeLoop probes one carrier at once, then every interval, one probe at
// a time, until ctx ends. When kick fires (failed calls took the carrier
// down and ask for a confirmation), it sends down_after probes at once,
// together (confirm): a dead carrier is confirmed down within one probe
// timeout, not down_after of them. A good probe of a paused carrier ends
// its pause's span (probeAnswered).
func (s *Set) probeLoop(ctx context.Context, prober Prober, name string, spec probeSpec, kick <-chan struct{}) {
	defer s.panics.Recover("carriers.probe", nil)
	t := time.NewTicker(spec.probe.Interval)
	defer t.Stop()
	confirming := false
	for {
		var again bool
		if confirming {
			again = s.confirm(ctx, prober, name, spec)
		} else {
			again = s.probeOnce(ctx, prober, name, spec)
		}
		if ctx.Err() != nil {
			return
		}
		if again {
			// A confirmation under way and not decided yet (a probe was
			// not counted): confirm again now (a failed probe has
			// already waited its timeout, or had its answer).
			confirming = true
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			confirming = false
		case <-kick:
			confirming = true
		}
	}
}

// maxConfirming bounds the probes one confirmation sends at once (a
// down_after above it takes more than one round).
const maxConfirming = 10

// confirm sends down_after probes (at most maxConfirming) of the carrier
// named name at once and feeds their answers to the health tracker as
// they come; again asks for another round (not decided yet).
func (s *Set) confirm(ctx context.Context, prober Prober, name string, spec probeSpec) (again bool) {
	cfg, car := s.carrier(name)
	if car == nil {
		return false
	}
	n := min(max(spec.probe.DownAfter, 1), maxConfirming)
	type answer struct {
		r    ProbeResult
		took time.Duration
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			defer s.panics.Recover("carriers.confirm", func(error) { answers <- answer{r: ProbeResult{Detail: "probe panicked"}} })
			sent := time.Now()
			r := prober.Probe(ctx, car, spec.probe.Timeout)
			answers <- answer{r, time.Since(sent)}
		}()
	}
	for range n {
		a := <-answers
		if ctx.Err() != nil {
			continue
		}
		again = s.probed(ctx, prober, cfg, car, a.r, a.took)
	}
	return again && ctx.Err() == nil
}

// probeOnce sends one probe of the carrier named name and feeds its
// answer to the health tracker; again asks for a confirmation round.
func (s *Set) probeOnce(ctx context.Context, prober Prober, name string, spec probeSpec) (again bool) {
	cfg, car := s.carrier(name)
	if car == nil {
		return false
	}
	sent := time.Now()
	r := prober.Probe(ctx, car, spec.probe.Timeout)
	if ctx.Err() != nil {
		return false
	}
	return s.probed(ctx, prober, cfg, car, r, time.Since(sent))
}

// probed takes the answer r to a probe of car sent took ago: it ends the
// span of its pause (a good answer), feeds the health tracker (unless the
// node was behind and got no answer) and counts it. again is the health
// tracker's: a confirmation is under way and not decided.
func (s *Set) probed(ctx context.Context, prober Prober, cfg *config.Config, car *config.Carrier, r ProbeResult, took time.Duration) (again bool) {
	name := car.Name
	if r.OK {
		s.probeAnswered(ctx, cfg, car, took)
	}
	if r.Unanswered && prober.Behind() {
		// Unanswered while this node is behind: the answer may be in its
		// own queue. Not evidence against the carrier.
		r.Detail += " (node overloaded: not counted)"
		again = s.health.Confirming(name)
	} else {
		again = s.health.Probed(name, r.OK, r.Detail)
	}
	result := metrics.ProbeOK
	if !r.OK {
		result = metrics.ProbeFailed
	}
	s.m.CarrierProbes.WithLabelValues(name, result).Inc()
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("carrier probed", "carrier", name, "ok", r.OK, "answer", r.Detail, "raw", r.Raw)
	}
	return again
}

// called feeds the outcome of a forwarded call to the health tracker
// (passive detection). When failed calls ask for a confirming probe, the
// carrier's probe loop is woken at once.
func (s *Set) called(name string, ok bool, detail string) {
	if !s.health.Called(name, ok, detail) {
		return
	}
	if k, found := s.kicks.Load(name); found {
		select {
		case k.(chan struct{}) <- struct{}{}:
		default: // a probe is asked for already
		}
	}
}
