package sip

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// forwardCopy returns the request the proxy forwards in place of req: a
// copy with its own header list and Request-URI parameters but sharing
// req's header objects and body, instead of sipgo's deep Clone, which
// copies every header of every relayed request (the largest allocation of
// the per-call path).
//
// req itself must stay as received: sipgo's server transaction builds its
// responses from it and matches retransmissions and CANCELs against it.
// Sharing is safe because the forwarding code changes headers only by
// replacing, removing or prepending entries of the copy's own list
// (decMaxForwards, popOwnRoutes, recordRoutes, prependVia), never a shared
// header object in place, with two exceptions copied here: the top Via,
// whose received/rport parameters addVia fills in (RFC 3581), and the
// Request-URI, whose parameters outboundInvite rewrites. The rest matches
// Clone: full header names, Content-Length set from the body.
func forwardCopy(req *sipmsg.Request) *sipmsg.Request {
	out := new(sipmsg.Request)
	*out = *req // no locks inside; the header list is still req's here
	// PrependHeader always builds a new list (even of nothing), so from
	// here on RemoveHeader/ReplaceHeader on out never touch req's.
	out.PrependHeader()
	out.CompactHeaders = false
	if u := out.Recipient.UriParams; u != nil {
		out.Recipient.UriParams = u.Clone()
	}
	if h := out.Recipient.Headers; h != nil {
		out.Recipient.Headers = h.Clone()
	}
	if v := out.Via(); v != nil {
		out.ReplaceHeader(v.Clone())
	}
	out.SetBody(out.Body())
	return out
}

// relayResponse turns a response received on a client transaction into
// the one relayed upstream: the proxy's own Via (the top one) removed,
// addressed to dest over transport tp. It changes and returns res itself
// rather than a copy: sipgo's client transaction does not use a response
// after passing it up (Responses or OnRetransmission); it keeps the last
// one only until the next arrives, and builds its ACK of a non-2xx final
// response before passing that up. Every retransmission is a newly parsed
// message, so each response is relayed at most once.
func relayResponse(res *sipmsg.Response, dest, tp string) *sipmsg.Response {
	res.RemoveHeader("Via")
	res.SetDestination(dest)
	res.SetTransport(tp)
	return res
}

// errNoVia is the relay error of a response with no Via left once the
// proxy's own is removed: it was meant for nobody upstream (RFC 3261 16.7
// step 3) and is not forwarded.
var errNoVia = errors.New("sip: response has no Via below the proxy's")

// noVia counts (sip_errors_total{no_via}) and logs, at most once per
// noViaLogEvery, a response relayResponse left without a Via (a next hop
// that returned only the proxy's Via, say), and returns errNoVia for the
// relay to report.
func (p *Proxy) noVia(res *sipmsg.Response) error {
	p.m.SIPErrors.WithLabelValues("no_via").Inc()
	if p.noViaLog.allow(time.Now(), noViaLogEvery) {
		p.log.Warn("response with no Via below the proxy's not relayed (the next hop dropped the upstream Vias)",
			"status", res.StatusCode, "source", res.Source(), "call_id", callID(res))
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

// upstreamOf is where responses to a received request go: the packet's
// source for a stream transport; for UDP its source IP with the port of
// the top Via's sent-by, unless the Via asks for rport (RFC 3261 18.2.2,
// RFC 3581). sipgo's NewResponseFromRequest computes exactly that from the
// address its transport layer stored when the request arrived, which
// req.Source() (the packet's own ip:port) is not: a UA that sends from an
// ephemeral port and listens on its Via port would never see the answer.
func upstreamOf(req *sipmsg.Request) string {
	return sipmsg.NewResponseFromRequest(req, 100, "Trying", nil).Destination()
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
