package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/cpsguard/cpsguard/pacing"
)

// Pauser reads and ends the pool's Retry-After pauses of carriers, by
// configured name; *carriers.Set satisfies it. ok is false for a name that
// is not a configured carrier.
type Pauser interface {
	// CarrierPause reads the carrier's pause from the store (Paused
	// false: none).
	CarrierPause(ctx context.Context, name string) (st pacing.Pause, ok bool, err error)
	// Unpause ends the carrier's pause for the pool and returns it
	// (Changed false: there was none).
	Unpause(ctx context.Context, name string) (ended pacing.Pause, ok bool, err error)
}

// pauseView is st as the API shows it at now.
func pauseView(st pacing.Pause, now time.Time) *CarrierPause {
	until, since := st.Until, st.Since
	if until.IsZero() {
		until, since = now.Add(st.Left), now.Add(-st.Age)
	}
	return &CarrierPause{
		Until: until.UTC().Truncate(time.Millisecond), SecondsLeft: max(0, st.Left.Round(time.Millisecond).Seconds()),
		Since: since.UTC().Truncate(time.Millisecond), Reason: st.Reason,
		HalfOpen: st.Left <= 0, Probing: st.Probing,
	}
}

// requireToken checks the bearer token of a request that changes the
// pool: with no http.token configured the API is read-only (403).
func (s *server) requireToken(w http.ResponseWriter, r *http.Request, what string) bool {
	if cfg := s.o.Config(); cfg == nil || cfg.HTTP.Token == "" {
		s.refusals.warn(s.o.Logger, r, what+" refused: no http.token is configured, the API is read-only")
		writeError(w, &Error{Code: http.StatusForbidden, Message: "writes need http.token: with no token configured the API is read-only"})
		return false
	}
	return s.authorize(w, r, what)
}

// unpause answers DELETE /api/v1/carriers/{name}/pause.
func (s *server) unpause(w http.ResponseWriter, r *http.Request) {
	if !s.requireToken(w, r, "carrier unpause") {
		return
	}
	if s.o.Pauses == nil {
		writeError(w, &Error{Code: http.StatusNotImplemented, Message: "carrier pauses are not available on this node"})
		return
	}
	name := r.PathValue("name")
	ended, ok, err := s.o.Pauses.Unpause(r.Context(), name)
	switch {
	case !ok:
		writeError(w, &Error{Code: http.StatusNotFound, Message: "no such carrier: " + printable(name)})
		return
	case err != nil:
		s.o.Logger.Warn("carrier unpause failed: the store did not answer", "remote", r.RemoteAddr, "carrier", name, "error", err)
		writeError(w, &Error{Code: http.StatusServiceUnavailable, Message: "the store did not answer; nothing changed: " + err.Error()})
		return
	case !ended.Changed:
		writeError(w, &Error{Code: http.StatusNotFound, Message: "carrier " + name + " is not paused"})
		return
	}
	v := pauseView(ended, time.Now())
	s.o.Logger.Info("carrier pause lifted", "remote", r.RemoteAddr, "carrier", name, "until", v.Until, "reason", ended.Reason)
	writeJSON(w, http.StatusOK, PauseChange{Status: "lifted", Carrier: name, Previous: v})
}
