package sip

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/cpsguard/cpsguard/internal/lograte"
	"github.com/cpsguard/cpsguard/internal/safetext"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// Reasons of the event lines ("reason" key): why a call was not forwarded
// on its first try. They are stable tokens for log queries; "detail" says
// more where there is more to say.
const (
	reasonUnknownSource    = "unknown_source"
	reasonCustomerNotAllow = "customer_not_allowed"
	reasonUnknownCustomer  = "unknown_customer"
	reasonMalformed        = "malformed"
	reasonTooManyHops      = "too_many_hops"
	reasonMergedRequest    = "merged_request"
	reasonDraining         = "draining"
	reasonRouteDown        = "route_down"
	reasonPeerCPS          = "peer_cps"
	reasonCustomerCPS      = "customer_cps"
	reasonStore            = "store"
	reasonNoCarrier        = "no_carrier"
	reasonCarrierFailed    = "carrier_failed"
	reasonRerouted         = "rerouted"
	reasonPeerCalls        = "peer_max_calls"
	reasonCustomerCalls    = "customer_max_calls"
	reasonCarrierCalls     = "carrier_max_calls"
	reasonDestinationCPS   = "destination_cps"
	reasonDestinationCalls = "destination_max_calls"
	reasonRepeatDial       = "repeat_dial"
)

// maxEventField bounds a header value copied into an event line: a
// Call-ID or a dialled number can be kilobytes long from a hostile peer.
const maxEventField = 128

// eventLog writes the call event lines, at most a configured number a
// second (a token bucket: a burst of one second's worth, then the rate);
// the lines over it are counted and the count is logged once the bucket
// allows again, or by flush. It is safe for concurrent use.
type eventLog struct {
	log *slog.Logger
	lograte.Bucket
}

// allow takes a token at rate per second; false means the line is
// suppressed (and counted).
func (e *eventLog) allow(now time.Time, rate int) (ok bool, suppressed int64) {
	return e.Allow(now, rate)
}

// flush logs the count of suppressed lines, if any (called every second,
// so a burst's count is not held until the next event).
func (e *eventLog) flush() {
	if n := e.Take(); n > 0 {
		e.log.Info("call events suppressed", "count", n, "reason", "log.events_per_second")
	}
}

// event writes one call's event line, when the configuration asks for
// them and the rate allows.
func (c *call) event() {
	cfg := c.cfg
	if cfg == nil || !cfg.Log.Events || c.p.events == nil {
		return
	}
	// A reason is set exactly when the call was not forwarded on its first
	// try: refused before any carrier, refused after every carrier failed
	// (carrier_failed), or forwarded past skipped carriers (rerouted).
	msg := "call rejected"
	switch c.reason {
	case "":
		return
	case reasonRerouted:
		msg = "call rerouted"
	}
	e := c.p.events
	ok, suppressed := e.allow(time.Now(), cfg.Log.EventsPerSecond)
	if !ok {
		return
	}
	if suppressed > 0 {
		e.log.Info("call events suppressed", "count", suppressed, "reason", "log.events_per_second")
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs,
		slog.String("call_id", clip(msgpart.CallID(c.req))),
		slog.String("source", c.req.Source()),
		slog.String("peer", c.peer),
	)
	if c.customer != "" {
		attrs = append(attrs, slog.String("customer", c.customer))
	}
	if to := c.req.To(); to != nil {
		attrs = append(attrs, slog.String("to_user", clip(to.Address.User)))
	}
	if c.carrier != "" {
		attrs = append(attrs, slog.String("carrier", c.carrier))
	}
	attrs = append(attrs, slog.String("reason", c.reason))
	if c.detail != "" {
		attrs = append(attrs, slog.String("detail", c.detail))
	}
	if c.code != 0 {
		attrs = append(attrs, slog.Int("code", c.code))
	}
	if c.waited {
		attrs = append(attrs, slog.Int64("wait_ms", c.wait.Milliseconds()))
	}
	if c.outcome != "" {
		attrs = append(attrs, slog.String("outcome", c.outcome))
	}
	e.log.LogAttrs(context.Background(), slog.LevelInfo, msg, attrs...)
}

// runEventFlush logs the count of suppressed event lines every second.
func (p *Proxy) runEventFlush(ctx context.Context) {
	defer p.panics.Recover("sip.events", nil)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.events.flush()
			p.prioLog.flush()
			return
		case <-t.C:
			p.events.flush()
			p.prioLog.flush()
		}
	}
}

// phrase makes a reason phrase a peer or a carrier chose fit for logs, the
// health reason and a terminal: C0 and C1 controls, DEL and Unicode format
// characters (a right-to-left override, zero-width characters) are
// escaped (safetext.Escape), and it is clipped like any header value.
// The proxy's loggers escape every string again (New); the health reason
// also reaches the status API and the CLI's table.
func phrase(s string) string {
	return clip(safetext.Escape(s))
}

// clip bounds a header value for a log line.
func clip(s string) string {
	if len(s) <= maxEventField {
		return s
	}
	return strings.ToValidUTF8(s[:maxEventField], "") + "…"
}

// skipped records a carrier the call went past, for its event line.
func (c *call) skipped(carrier, why string) {
	if c.detail != "" {
		c.detail += "; "
	}
	c.detail += carrier + ": " + why
}

// refuse sets a call's outcome and the reason of its event line.
func (c *call) refuse(outcome, reason string) {
	c.outcome, c.reason = outcome, reason
}
