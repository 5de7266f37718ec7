package sip

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// errNoVia is the relay error of a response with no Via left once the
// proxy's own is removed: it was meant for nobody upstream (RFC 3261 16.7
// step 3) and is not forwarded.
var errNoVia = errors.New("sip: response has no Via below the proxy's")

// noVia counts (sip_errors_total{no_via}) and logs, at most once per
// noViaLogEvery, a response msgpart.RelayResponse left without a Via (a next hop
// that returned only the proxy's Via, say), and returns errNoVia for the
// relay to report.
func (p *Proxy) noVia(res *sipmsg.Response) error {
	p.m.SIPErrors.WithLabelValues("no_via").Inc()
	if p.noViaLog.allow(time.Now(), noViaLogEvery) {
		p.log.Warn("response with no Via below the proxy's not relayed (the next hop dropped the upstream Vias)",
			"status", res.StatusCode, "source", res.Source(), "call_id", msgpart.CallID(res))
	}
	return errNoVia
}

// noViaLogEvery bounds the no_via log lines (the counter counts them all).
const noViaLogEvery = 10 * time.Second

// logGate lets a log line through at most once per period. Safe for
// concurrent use; the zero value is ready.
type logGate struct{ last atomic.Int64 }

// allow reports whether a line may be logged at now: none was in the
// period before it.
func (g *logGate) allow(now time.Time, period time.Duration) bool {
	last := g.last.Load()
	if last != 0 && now.UnixNano()-last < int64(period) {
		return false
	}
	return g.last.CompareAndSwap(last, now.UnixNano())
}

// requestCtx is the context for opening a client transaction to t. sipgo
// uses it only to resolve a host name and to open a connection; a UDP
// request to an IP address does neither, so it gets no deadline (a timer
// fewer per forwarded request). The transaction's own timers (B, F) end it.
func requestCtx(t target) (context.Context, context.CancelFunc) {
	if t.transport == "UDP" {
		if _, err := netip.ParseAddr(strings.Trim(t.host, "[]")); err == nil {
			return context.Background(), func() {}
		}
	}
	return context.WithTimeout(context.Background(), connectTimeout)
}
