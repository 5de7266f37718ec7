package sip

import (
	"context"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// sipgoHandler routes sipgo's logs into the proxy's handler. It counts the
// messages sipgo drops (parse failures, requests too malformed for a
// transaction) in cpsguard_sip_errors_total, logs them at Debug without
// their raw bytes (a flood of garbage must not become a flood of Error
// logs), and lowers sipgo's Info chatter to Debug.
type sipgoHandler struct {
	inner slog.Handler
	errs  *prometheus.CounterVec
}

// sipgo v1.7.2 messages the handler recognises.
const (
	msgParseFailed  = "failed to parse"
	msgServerTxFail = "Server tx failed to handle request"
)

func (h *sipgoHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || h.inner.Enabled(ctx, l)
}

func (h *sipgoHandler) Handle(ctx context.Context, r slog.Record) error {
	level := r.Level
	drop := ""
	switch r.Message {
	case msgParseFailed:
		reason := "parse"
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" && strings.Contains(a.Value.String(), "exceeds") {
				reason = "oversized"
			}
			return true
		})
		h.errs.WithLabelValues(reason).Inc()
		level, drop = slog.LevelDebug, "data"
	case msgServerTxFail:
		reason := "transaction"
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" && strings.Contains(a.Value.String(), "make key failed") {
				reason = "malformed"
			}
			return true
		})
		h.errs.WithLabelValues(reason).Inc()
		level = slog.LevelDebug
	default:
		if level < slog.LevelWarn {
			level = slog.LevelDebug
		}
	}
	if !h.inner.Enabled(ctx, level) {
		return nil
	}
	if level == r.Level && drop == "" {
		return h.inner.Handle(ctx, r)
	}
	nr := slog.NewRecord(r.Time, level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != drop {
			nr.AddAttrs(a)
		}
		return true
	})
	return h.inner.Handle(ctx, nr)
}

func (h *sipgoHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &sipgoHandler{inner: h.inner.WithAttrs(as), errs: h.errs}
}

func (h *sipgoHandler) WithGroup(name string) slog.Handler {
	return &sipgoHandler{inner: h.inner.WithGroup(name), errs: h.errs}
}
