package panics

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Reporter logs and counts recovered panics. The zero value logs to
// slog.Default() and counts nothing. A Reporter is safe for concurrent use.
type Reporter struct {
	// Log receives one Error line per panic, with the stack.
	Log *slog.Logger
	// Count is cpsguard_panics_total{where}; nil counts nothing.
	Count *prometheus.CounterVec
}

// Recover is meant to be deferred directly (defer r.Recover("where", f)):
// when the function it guards panics, it stops the panic, logs it once with
// its stack, counts it under where, and calls then (when not nil) with the
// panic as an error, so the caller can answer or report a failure.
func (r *Reporter) Recover(where string, then func(err error)) {
	v := recover()
	if v == nil {
		return
	}
	err := r.Report(where, v, debug.Stack())
	if then != nil {
		then(err)
	}
}

// Report logs and counts a panic value already recovered by the caller and
// returns it as an error ("panic in where: value").
func (r *Reporter) Report(where string, v any, stack []byte) error {
	err := fmt.Errorf("panic in %s: %v", where, v)
	if r == nil {
		slog.Error("recovered panic", "where", where, "panic", fmt.Sprint(v), "stack", string(stack))
		return err
	}
	log := r.Log
	if log == nil {
		log = slog.Default()
	}
	log.Error("recovered panic", "where", where, "panic", fmt.Sprint(v), "stack", string(stack))
	if r.Count != nil {
		r.Count.WithLabelValues(where).Inc()
	}
	return err
}
