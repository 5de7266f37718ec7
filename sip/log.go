package sip

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus"
)

// sipgoHandler routes sipgo's logs into the proxy's handler. It counts the
// messages sipgo drops (parse failures, requests too malformed for a
// transaction) in cpsguard_sip_errors_total, logs them at Debug without
// their raw bytes (a flood of garbage must not become a flood of Error
// logs), and lowers sipgo's Info chatter to Debug. A connection's read
// error is Debug too: the idle timeout (sip.tcp.idle_timeout) is how idle
// SIP/TCP connections end, and any other read error (a peer's reset) ends
// one connection whose sender reconnects; those others are counted as
// tcp_read. sipgo's reference-count warnings about a connection already
// closed ("TCP ref went negative") are its own bookkeeping, and its "ACK
// loop" error is a next hop's retransmitted final answer: Debug.
type sipgoHandler struct {
	inner slog.Handler
	errs  *prometheus.CounterVec // nil: count nothing
}

// sipgo v1.7.2 messages the handler recognises.
const (
	msgParseFailed  = "failed to parse"
	msgServerTxFail = "Server tx failed to handle request"
	// msgReadError: a connection's read failed (transport_tcp.go); logged
	// through sipgo's package logger, see sipgoDefault.
	msgReadError = "Read error"
	// msgRefNegative ends "TCP ref went negative", "WS ref went negative"
	// and "UDP ref went negative on try close" (package logger too).
	msgRefNegative = "ref went negative"
	// msgAckLoop starts what an INVITE client transaction logs when the
	// next hop sends its non-2xx final again after the ACK ("ACK loop
	// retransimission. Resending after T2", sic): a lost ACK, or a carrier
	// that retransmits; routine, and a carrier's to repeat at will (h67).
	msgAckLoop = "ACK loop retrans"
)

// timeoutErr reports whether the error attribute of a record is a timeout.
func timeoutErr(v slog.Value) bool {
	err, ok := v.Any().(error)
	if !ok {
		return strings.Contains(v.String(), "i/o timeout")
	}
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func (h *sipgoHandler) count(reason string) {
	if h.errs != nil {
		h.errs.WithLabelValues(reason).Inc()
	}
}

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
		h.count(reason)
		level, drop = slog.LevelDebug, "data"
	case msgServerTxFail:
		reason := "transaction"
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" && strings.Contains(a.Value.String(), "make key failed") {
				reason = "malformed"
			}
			return true
		})
		h.count(reason)
		level = slog.LevelDebug
	case msgReadError:
		timeout := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" {
				timeout = timeoutErr(a.Value)
			}
			return true
		})
		if !timeout {
			reason := "tcp_read"
			h.count(reason)
		}
		level = slog.LevelDebug
	default:
		if level < slog.LevelWarn || strings.HasSuffix(r.Message, msgRefNegative) || strings.HasPrefix(r.Message, msgAckLoop) ||
			strings.HasSuffix(r.Message, msgRefNegative+" on try close") {
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

// sipgoDefault is the handler behind sipgo's package logger
// (sipmsg.DefaultLogger). sipgo logs through it wherever it was given no
// logger of its own: the connections of a TCP transport built from the
// proxy's TransportsConfig (their read errors, an idle timeout among them),
// and every connection's reference counting. It hands each record to the
// sipgo handler of the proxy created last (its levels, its counters), or,
// before any, to slog.Default's handler with the same levels and no
// counting. It is installed once, before any of sipgo runs (init), so no
// goroutine of sipgo ever reads its logger while it is set.
var sipgoDefault = &defaultRoute{to: new(atomic.Pointer[slog.Handler])}

func init() { sipmsg.SetDefaultLogger(slog.New(sipgoDefault)) }

// defaultRoute forwards to the handler *to points at, applying the
// attributes and groups its logger was derived with.
type defaultRoute struct {
	to  *atomic.Pointer[slog.Handler]
	ops []func(slog.Handler) slog.Handler
}

// route makes h (a proxy's sipgo handler) the target; it returns a func
// that clears it again if it is still h.
func (d *defaultRoute) route(h slog.Handler) (unroute func()) {
	p := &h
	d.to.Store(p)
	return func() { d.to.CompareAndSwap(p, nil) }
}

func (d *defaultRoute) target() slog.Handler {
	if p := d.to.Load(); p != nil {
		return *p
	}
	return &sipgoHandler{inner: slog.Default().Handler()}
}

func (d *defaultRoute) Enabled(ctx context.Context, l slog.Level) bool {
	return d.target().Enabled(ctx, l)
}

func (d *defaultRoute) Handle(ctx context.Context, r slog.Record) error {
	h := d.target()
	for _, op := range d.ops {
		h = op(h)
	}
	return h.Handle(ctx, r)
}

func (d *defaultRoute) WithAttrs(as []slog.Attr) slog.Handler {
	as = slices.Clone(as)
	return &defaultRoute{to: d.to, ops: append(slices.Clip(d.ops), func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })}
}

func (d *defaultRoute) WithGroup(name string) slog.Handler {
	return &defaultRoute{to: d.to, ops: append(slices.Clip(d.ops), func(h slog.Handler) slog.Handler { return h.WithGroup(name) })}
}
