package carriers

import (
	"time"

	"github.com/cpsguard/cpsguard/config"
)

// Result is what became of one call sent to a carrier, as far as the
// carrier is concerned.
type Result int

// Results of a call attempt. A forwarded attempt reports Reached at most
// once, then one of the others at most once (Undecided when none).
const (
	// Reached: the carrier showed life: its first provisional answer
	// above 100, or a final answer that is not a failure.
	Reached Result = iota + 1
	// Answered: the carrier answered the call (2xx).
	Answered
	// Unanswered: the carrier gave the call a final answer other than a
	// 2xx that is not a failure (486, 404, 480, …).
	Unanswered
	// Failed: a 5xx or 408 before any provisional answer above 100 that
	// is not back-pressure, or the request could not be sent (a refused
	// or unverified connection).
	Failed
	// TimedOut: no provisional answer above 100 within the carrier's
	// setup_timeout.
	TimedOut
	// Overloaded: one of the carrier's overload answers (overload.codes,
	// overload.reasons) or a 503/500 with Retry-After: back-pressure,
	// not failure.
	Overloaded
	// Undecided: the attempt ended with no verdict on the carrier (the
	// caller cancelled, the node was behind, shutdown).
	Undecided
)

// Outcome is one report of a call attempt to a carrier (Report).
type Outcome struct {
	Result Result
	// Peer is the calling peer's name (the overload evidence is per peer).
	Peer string
	// Detail says what happened in a few stable words, for the health
	// reason ("answered 503", "no ringing within 2s", "connection
	// refused").
	Detail string
	// Code is the final answer's status code (Failed, Overloaded).
	Code int
	// Cut asks an adaptive carrier's rate to be cut (Overloaded, an
	// overload answer of an adaptive carrier); RetryAfter is the span a
	// Retry-After asked for (Overloaded; 0: none).
	Cut        bool
	RetryAfter time.Duration
	// Probe is the slot member of the half-open probe call of the
	// carrier's pause when this attempt holds it (pacing.Ticket.Probe);
	// its first decisive report ends it (Reached or Answered: the pause
	// is over; otherwise the next call tries). Empty: none.
	Probe string
}

// Report takes what became of one call attempt to car (cfg the call's
// snapshot). It never blocks on I/O: the store calls it starts (overload
// evidence, pauses, cuts) run in the background.
func (s *Set) Report(cfg *config.Config, car *config.Carrier, o Outcome) {
	switch o.Result {
	case Reached:
		s.called(car.Name, true, "")
		s.noteCaller(cfg, car, o.Peer)
		if o.Probe != "" {
			s.probeDone(cfg, car, o.Probe, true)
		}
	case Answered:
		s.seized(car, true)
		if o.Probe != "" {
			s.probeDone(cfg, car, o.Probe, true)
		}
	case Failed:
		s.seized(car, false)
		if o.Code != 0 {
			s.noteCaller(cfg, car, o.Peer)
		}
		s.called(car.Name, false, o.Detail)
		if o.Probe != "" {
			s.probeDone(cfg, car, o.Probe, false)
		}
	case TimedOut:
		s.seized(car, false)
		s.called(car.Name, false, o.Detail)
		if o.Probe != "" {
			s.probeDone(cfg, car, o.Probe, false)
		}
	case Overloaded:
		// Back-pressure, not failure: health is untouched. The pool slows
		// down (an adaptive carrier's AIMD cut) or pauses (Retry-After)
		// only on the pool's evidence, which one peer cannot make up by
		// dialling numbers the carrier refuses (evidence.go). A probe
		// call's claim goes with it.
		s.backPressure(cfg, car, o.Peer, o.Code, o.Cut, o.RetryAfter, o.Probe)
	case Unanswered:
		s.seized(car, false)
		if o.Probe != "" {
			s.probeDone(cfg, car, o.Probe, false)
		}
	case Undecided:
		if o.Probe != "" {
			s.probeDone(cfg, car, o.Probe, false)
		}
	}
}
