package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// PathDrain starts the node's drain (POST): it stops taking calls, lets
// those in progress finish within sip.drain_grace, and keeps serving the
// operations API (readyz answers 503) until the process is stopped.
const PathDrain = "/api/v1/drain"

// Drain states of DrainResult.Status.
const (
	DrainDone    = "drained"  // no call in progress any more; the SIP listeners are closed
	DrainRunning = "draining" // started, not finished within this answer's wait
)

// DrainResult is the JSON answer of POST /api/v1/drain.
type DrainResult struct {
	// Status is DrainDone or DrainRunning; ask again (the request is
	// idempotent) to wait longer.
	Status string `json:"status"`
}

// drainWait bounds how long one POST /api/v1/drain waits for the drain to
// end before it answers DrainRunning: under NewServer's WriteTimeout (30 s),
// so the answer is never cut off.
var drainWait = 20 * time.Second

// drain serves POST /api/v1/drain: a write, so the token is required when
// http.token is set. It answers 200 with DrainDone once the drain is over,
// or with DrainRunning after drainWait.
func (s *server) drain(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r, "drain") {
		return
	}
	if s.o.Drain == nil {
		writeError(w, &Error{Code: http.StatusNotImplemented, Message: "drain is not available on this node"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), drainWait)
	defer cancel()
	s.o.Logger.Info("drain requested via api", "remote", r.RemoteAddr)
	err := s.o.Drain(ctx)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, DrainResult{Status: DrainDone})
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		writeJSON(w, http.StatusOK, DrainResult{Status: DrainRunning})
	case r.Context().Err() != nil:
		// The client went away; the drain goes on.
	default:
		writeError(w, &Error{Code: http.StatusInternalServerError, Message: "drain: " + err.Error()})
	}
}

// Drain asks the node at base to drain (POST /api/v1/drain with token) and
// waits, asking again while it answers DrainRunning, until it is drained
// (nil) or ctx ends (ctx's error, wrapped). Other failures are as for the
// other client calls: *Error for an answer that is not 2xx, *Unreachable
// for none.
func Drain(ctx context.Context, base, token string) error {
	for {
		var res DrainResult
		if err := call(ctx, http.MethodPost, base, PathDrain, token, nil, &res); err != nil {
			return err
		}
		if res.Status == DrainDone {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
