package carriers

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
)

// Overload evidence: who may slow a carrier down for the pool.
//
// A carrier answers 503 at once to numbers it cannot route (RFC 3398), so
// a peer dialling such numbers could otherwise cut an adaptive carrier to
// its floor, or pause a carrier, for every other peer of the pool. The
// evidence is the pool's, kept in the pacing store beside the carrier's
// slot set (pacing.SlotStore.Evidence): which peers called the carrier in
// the last evidenceCallers, and which of them it gave an overload answer
// (its overload codes or reasons, or a 503/500 with Retry-After) in the
// last evidenceOverload. An overload answer is acted on when
//
//   - at least two peers of the pool got one within evidenceOverload: the
//     carrier is over its limit for everyone (evidencePool): an AIMD cut,
//     and the pause its Retry-After asks for, up to retry_after_max;
//   - or the peer is the only caller of the carrier in the whole pool
//     (evidenceLone): it can only slow itself down, and for a short while
//     at most: the cut, and a pause of lonePause at most;
//
// and otherwise not at all (evidenceNone): the call moves on, the others
// keep the carrier.
//
// A node reports a peer as a caller of a carrier at most once per
// callerReportEvery (a caller counts for evidenceCallers, so it stays
// counted), and every overload answer; the store calls run in the
// background, one per carrier and peer at a time.

// Windows and bounds of the overload evidence. Variables so tests can
// shorten them.
var (
	// evidenceCallers is how far back a peer counts as a caller of a
	// carrier: the peers the pool must protect from one another.
	evidenceCallers = time.Minute
	// evidenceOverload is how recent two peers' overload answers must be
	// to be one episode of the carrier's overload.
	evidenceOverload = 2 * time.Second
	// callerReportEvery is how often a node reports one peer as a caller
	// of one carrier to the store.
	callerReportEvery = 10 * time.Second
	// lonePause is the longest pause the only caller of a carrier can
	// cause with a Retry-After.
	lonePause = 5 * time.Second
)

// evidenceScope is what an overload answer may do, given the pool's
// evidence.
type evidenceScope int

const (
	evidenceNone evidenceScope = iota // one peer's calls: nothing
	evidenceLone                      // the only caller: a short pause, a cut
	evidencePool                      // several peers: the full answer
)

// judge turns the pool's evidence into what an overload answer may do.
func judge(e pacing.Evidence) evidenceScope {
	switch {
	case e.Overloaded >= 2:
		return evidencePool
	case e.Callers <= 1:
		return evidenceLone
	}
	return evidenceNone
}

func (s evidenceScope) String() string {
	switch s {
	case evidencePool:
		return "several peers"
	case evidenceLone:
		return "its only caller"
	}
	return "one peer of several"
}

// evidenceWindows are the windows passed to the store.
func evidenceWindows() pacing.EvidenceWindows {
	return pacing.EvidenceWindows{Callers: evidenceCallers, Overload: evidenceOverload}
}

// callerReports remembers when this node last reported each peer as a
// caller of each carrier. Keys are configured carrier and peer names (and
// PeerUnknown), so the map is bounded; entries older than evidenceCallers
// are dropped as it is used.
type callerReports struct {
	mu    sync.Mutex
	m     map[string]time.Time
	swept time.Time
}

// due reports whether peer's call of carrier should be reported at now,
// and marks it reported.
func (r *callerReports) due(carrier, peer string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]time.Time{}
	}
	if now.Sub(r.swept) > evidenceCallers {
		r.swept = now
		for k, at := range r.m {
			if now.Sub(at) > evidenceCallers {
				delete(r.m, k)
			}
		}
	}
	k := carrier + "\x00" + peer
	if at, ok := r.m[k]; ok && now.Sub(at) < callerReportEvery {
		return false
	}
	r.m[k] = now
	return true
}

// forget drops the reports of peer's calls of carrier, so the next one is
// reported (its report failed).
func (r *callerReports) forget(carrier, peer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, carrier+"\x00"+peer)
}

// noteCaller reports, in the background, that peer called car (a decisive
// answer that is not an overload answer), at most once per
// callerReportEvery per carrier and peer.
func (s *Set) noteCaller(cfg *config.Config, car *config.Carrier, peer string) {
	if !s.callers.due(car.Name, peer, time.Now()) {
		return
	}
	pc, name := s.pacingOf(cfg, car), car.Name
	key := "caller:" + name + "\x00" + peer
	if !s.storeCalls.start(key) {
		return
	}
	go func() {
		defer s.storeCalls.done(key)
		defer s.panics.Recover("carriers.evidence", nil)
		ctx, cancel := context.WithTimeout(context.Background(), storeBudget)
		defer cancel()
		if _, err := s.pacer.Evidence(ctx, pc, peer, false, evidenceWindows()); err != nil {
			s.callers.forget(name, peer)
			s.log.Debug("carrier caller not recorded: the store failed", "carrier", name, "peer", peer, "error", err)
		}
	}()
}

// backPressure acts, in the background, on car's overload answer to a
// call of peer: it records the evidence in the store and, as far as the
// pool's evidence allows (judge), cuts an adaptive carrier's rate (cut)
// and pauses the carrier for the span its Retry-After asked (asked, 0:
// none), capped by retry_after_max (and lonePause for the only caller).
// probe, when not empty, is the member of the call's
// half-open probe slot: unless the carrier is paused again, its claim is
// freed for the next call. The call itself moves on at once.
func (s *Set) backPressure(cfg *config.Config, car *config.Carrier, peer string, code int, cut bool, asked time.Duration, probe string) {
	pc, a, name, capped := s.pacingOf(cfg, car), s.aimdOf(car), car.Name, car.RetryAfterCap()
	key := "overload:" + name + "\x00" + peer
	if !s.storeCalls.start(key) {
		// One at a time per carrier and peer: a carrier answering
		// thousands of calls with 503 must not start thousands of store
		// calls. The one under way records this peer's overload.
		if probe != "" {
			s.probeDone(cfg, car, probe, false)
		}
		return
	}
	go func() {
		defer s.storeCalls.done(key)
		defer s.panics.Recover("carriers.back_pressure", nil)
		ctx, cancel := context.WithTimeout(context.Background(), storeBudget)
		defer cancel()
		paused := false
		defer func() {
			if probe != "" && !paused {
				s.probeDoneNow(ctx, pc, name, probe, false)
			}
		}()
		ev, err := s.pacer.Evidence(ctx, pc, peer, true, evidenceWindows())
		if err != nil {
			s.log.Warn("carrier pushed back, but the store failed", "carrier", name, "status", code, "error", err)
			return
		}
		scope := judge(ev)
		if scope == evidenceNone {
			s.log.Debug("carrier pushed back one peer of several: not acted on", "carrier", name, "peer", peer, "status", code,
				"callers", ev.Callers, "overloaded", ev.Overloaded)
			return
		}
		if cut {
			r, err := s.pacer.Adapt(ctx, pc, a, true)
			if err != nil {
				s.log.Warn("carrier pushed back, but the store failed", "carrier", name, "status", code, "error", err)
			} else {
				s.rates.set(name, r.CPS)
				s.m.EffectiveCPS.WithLabelValues(name).Set(r.CPS)
				if r.Cut {
					s.log.Info("carrier pushed back: its effective cps lowered for the pool", "carrier", name, "status", code,
						"effective_cps", r.CPS, "cps", a.Max, "evidence", scope.String())
				}
			}
		}
		if asked <= 0 {
			return
		}
		span := min(asked, capped)
		if scope == evidenceLone {
			span = min(span, lonePause)
		}
		reason := "Retry-After " + strconv.Itoa(int(asked/time.Second)) + " in a " + strconv.Itoa(code) + " to " + scope.String()
		if span < asked {
			reason += ", paused " + span.String()
		}
		st, err := s.pacer.Pause(ctx, pc, span, reason)
		if err != nil {
			s.log.Warn("carrier asked the pool to wait, but the store failed", "carrier", name, "retry_after", span.String(), "error", err)
			return
		}
		paused = true
		if st.Changed {
			s.log.Info("carrier asked the pool to wait: no new calls to it until the pause ends, then one call tries it",
				"carrier", name, "retry_after", asked.String(), "pause", span.String(), "evidence", scope.String())
		}
	}()
}

// probeDone tells the store, in the background, that the half-open probe
// call member to car ended: ok (the carrier answered it) ends the pause.
func (s *Set) probeDone(cfg *config.Config, car *config.Carrier, member string, ok bool) {
	pc, name := s.pacingOf(cfg, car), car.Name
	go func() {
		defer s.panics.Recover("carriers.probe_done", nil)
		ctx, cancel := context.WithTimeout(context.Background(), storeBudget)
		defer cancel()
		s.probeDoneNow(ctx, pc, name, member, ok)
	}()
}

func (s *Set) probeDoneNow(ctx context.Context, pc pacing.Carrier, name, member string, ok bool) {
	st, err := s.pacer.ProbeDone(ctx, pc, member, ok)
	switch {
	case err != nil:
		s.log.Warn("probe call of a paused carrier ended, but the store failed", "carrier", name, "answered", ok, "error", err)
	case ok && st.Changed:
		s.log.Info("carrier paused by its Retry-After answered the call that tried it: the pause is over", "carrier", name)
	}
}
