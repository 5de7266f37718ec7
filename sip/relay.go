package sip

import (
	"context"
	"net/netip"
	"strings"

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
