package carriers

import (
	"strconv"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
)

// Answer-seizure ratio health, as SBCs do it (carriers[].min_asr): the
// share of the calls a node sent a carrier (seizures) that the carrier
// answered (2xx), over the last asr_window. Once the carrier had
// min_seizures calls there and its ratio is below min_asr, the node takes
// it out of service for one asr_window (reroute reason asr); then it is
// in service again with an empty window and judged afresh after
// min_seizures more calls (a probe window: a carrier that stays bad costs
// at most min_seizures calls per window; one that recovered is back after
// one window). A seizure is a call the carrier answered, refused with a
// final answer (486, 404, …), failed (5xx, 408, a connection refused) or
// did not ring in time; calls the caller cancelled and back-pressure
// answers (overload, Retry-After) are none. Each node judges its own
// calls.

// asrBuckets is how many buckets an ASR window is counted in.
const asrBuckets = 12

type asrBucket struct {
	start            time.Time
	seized, answered int
}

// asrState is one carrier's window and verdict.
type asrState struct {
	window  time.Duration
	buckets [asrBuckets]asrBucket
	// until: out of service below min_asr until then (zero: in service);
	// reason says why.
	until  time.Time
	reason string
}

// totals sums the buckets of the window ending at now.
func (a *asrState) totals(now time.Time) (seized, answered int) {
	for _, b := range a.buckets {
		if now.Sub(b.start) < a.window {
			seized += b.seized
			answered += b.answered
		}
	}
	return seized, answered
}

// asrTracker holds the carriers' ASR windows on this node. Safe for
// concurrent use.
type asrTracker struct {
	mu sync.Mutex
	m  map[string]*asrState
}

// ASR is a carrier's answer-seizure ratio health on this node.
type ASR struct {
	// Seizures and Answered are the calls of the window, and Percent
	// 100 × Answered / Seizures (0 without seizures).
	Seizures, Answered int
	Percent            float64
	// Window is asr_window.
	Window time.Duration
	// Until is when a carrier below min_asr is back in service (zero: in
	// service); Reason says why it is out.
	Until  time.Time
	Reason string
}

// record counts one seizure of car at now (answered or not) and judges
// the window: tripped reports that the carrier just went below min_asr.
func (t *asrTracker) record(car *config.Carrier, now time.Time, answered bool) (st ASR, tripped bool) {
	minASR, minSeizures, window := car.ASRHealth()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*asrState{}
	}
	a := t.m[car.Name]
	if a == nil || a.window != window {
		a = &asrState{window: window}
		t.m[car.Name] = a
	}
	width := window / asrBuckets
	start := now.Truncate(width)
	b := &a.buckets[(start.UnixNano()/int64(width))%asrBuckets]
	if !b.start.Equal(start) {
		*b = asrBucket{start: start}
	}
	b.seized++
	if answered {
		b.answered++
	}
	st = a.view(now)
	if minASR <= 0 || !a.until.IsZero() || st.Seizures < minSeizures || st.Percent >= minASR {
		return st, false
	}
	a.until = now.Add(window)
	a.reason = "asr " + strconv.FormatFloat(st.Percent, 'f', 1, 64) + "% of " + strconv.Itoa(st.Seizures) + " calls in " + window.String() +
		" below min_asr " + strconv.FormatFloat(minASR, 'g', -1, 64) + "%"
	a.buckets = [asrBuckets]asrBucket{}
	st.Until, st.Reason = a.until, a.reason
	return st, true
}

// view is a's health at now; the mutex is held.
func (a *asrState) view(now time.Time) ASR {
	seized, answered := a.totals(now)
	st := ASR{Seizures: seized, Answered: answered, Window: a.window, Until: a.until, Reason: a.reason}
	if seized > 0 {
		st.Percent = 100 * float64(answered) / float64(seized)
	}
	return st
}

// out reports whether the carrier named name is out of service for its
// ASR at now.
func (t *asrTracker) out(name string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.m[name]
	return a != nil && !a.until.IsZero() && now.Before(a.until)
}

// get returns the carrier's ASR health at now (ok false: no seizure yet).
func (t *asrTracker) get(name string, now time.Time) (ASR, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.m[name]
	if a == nil {
		return ASR{}, false
	}
	st := a.view(now)
	if !now.Before(a.until) {
		st.Until, st.Reason = time.Time{}, ""
	}
	return st, true
}

// expire ends the verdicts whose window is over at now and returns their
// carriers; forgets carriers not in keep.
func (t *asrTracker) expire(now time.Time, keep map[string]bool) (back []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, a := range t.m {
		if !keep[name] {
			delete(t.m, name)
			continue
		}
		if !a.until.IsZero() && !now.Before(a.until) {
			a.until, a.reason = time.Time{}, ""
			back = append(back, name)
		}
	}
	return back
}

// seized counts one seizure of car (a call's final outcome at the
// carrier) and takes the carrier out of service when it goes below
// min_asr.
func (s *Set) seized(car *config.Carrier, answered bool) {
	result := metrics.SeizureUnanswered
	if answered {
		result = metrics.SeizureAnswered
	}
	s.m.CarrierSeizures.WithLabelValues(car.Name, result).Inc()
	st, tripped := s.asr.record(car, s.clock(), answered)
	s.m.CarrierASR.WithLabelValues(car.Name).Set(st.Percent)
	if tripped {
		s.m.CarrierASRTrips.WithLabelValues(car.Name).Inc()
		s.log.Warn("carrier out of service: its answer-seizure ratio is below min_asr; calls skip it for one window, then it is judged afresh",
			"carrier", car.Name, "reason", st.Reason, "until", st.Until)
		s.setInService(car.Name)
	}
}

// expireASR puts the carriers whose ASR verdict ended back in service.
func (s *Set) expireASR(cfg *config.Config) {
	keep := make(map[string]bool, len(cfg.Carriers))
	for i := range cfg.Carriers {
		keep[cfg.Carriers[i].Name] = true
	}
	for _, name := range s.asr.expire(s.clock(), keep) {
		s.log.Info("carrier back in service: its answer-seizure window is over; it is judged afresh", "carrier", name)
		s.setInService(name)
	}
}
