package msgpart

import (
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// ForwardCopy returns the request the proxy forwards in place of req: a
// copy with its own header list and Request-URI parameters but sharing
// req's header objects and body, instead of sipgo's deep Clone, which
// copies every header of every relayed request (the largest allocation of
// the per-call path).
//
// req itself must stay as received: sipgo's server transaction builds its
// responses from it and matches retransmissions and CANCELs against it.
// Sharing is safe because the forwarding code changes headers only by
// replacing, removing or prepending entries of the copy's own list
// (DecMaxForwards; the sip package's popOwnRoutes, recordRoutes,
// prependVia), never a shared header object in place, with two exceptions
// copied here: the top Via, whose received/rport parameters the sip
// package's addVia fills in (RFC 3581), and the Request-URI, whose
// parameters its outboundInvite rewrites. The rest matches Clone: full
// header names, Content-Length set from the body.
func ForwardCopy(req *sipmsg.Request) *sipmsg.Request {
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

// RequestOf builds a request the proxy originates in the dialog of inv, a
// request it forwarded: method to ruri, inv's SIP version, its Route set
// (when routes), Max-Forwards 70, inv's From and Call-ID, the given To
// (the answer's, with the callee's tag, or inv's own), CSeq seq, no body.
// Headers missing from inv or to are left out (never a nil header). The
// caller adds the Via and the addressing.
func RequestOf(inv *sipmsg.Request, method sipmsg.RequestMethod, ruri sipmsg.Uri, routes bool, to sipmsg.Header, seq uint32) *sipmsg.Request {
	r := sipmsg.NewRequest(method, ruri)
	r.SipVersion = inv.SipVersion
	if routes {
		for _, h := range inv.GetHeaders("Route") {
			r.AppendHeader(sipmsg.HeaderClone(h))
		}
	}
	mf := sipmsg.MaxForwardsHeader(70)
	r.AppendHeader(&mf)
	if f := inv.From(); f != nil {
		r.AppendHeader(sipmsg.HeaderClone(f))
	}
	if to != nil && !isNilHeader(to) {
		r.AppendHeader(sipmsg.HeaderClone(to))
	}
	if id := inv.CallID(); id != nil {
		r.AppendHeader(sipmsg.HeaderClone(id))
	}
	r.AppendHeader(&sipmsg.CSeqHeader{SeqNo: seq, MethodName: method})
	r.SetBody(nil)
	return r
}

// isNilHeader reports a typed nil header (a nil *ToHeader in an interface).
func isNilHeader(h sipmsg.Header) bool {
	switch v := h.(type) {
	case *sipmsg.ToHeader:
		return v == nil
	case *sipmsg.FromHeader:
		return v == nil
	}
	return false
}

// DetachedFrom is a copy of f that shares no memory with the message f
// came from (nil for nil).
func DetachedFrom(f *sipmsg.FromHeader) *sipmsg.FromHeader {
	if f == nil {
		return nil
	}
	return &sipmsg.FromHeader{
		DisplayName: strings.Clone(f.DisplayName),
		Address:     DetachedURI(f.Address),
		Params:      DetachedParams(f.Params),
	}
}

// DetachedURI is a copy of u that shares no memory with the message u
// came from. A URI of another scheme than sip and sips (tel:) keeps its
// text in a field sipgo does not export: it is parsed again from a copy
// of its text (h73).
func DetachedURI(u sipmsg.Uri) sipmsg.Uri {
	if u.Raw() != "" {
		// String writes a new string.
		var c sipmsg.Uri
		if sipmsg.ParseUri(u.String(), &c) == nil {
			return c
		}
	}
	u.Scheme, u.User = strings.Clone(u.Scheme), strings.Clone(u.User)
	u.Password, u.Host = strings.Clone(u.Password), strings.Clone(u.Host)
	u.UriParams, u.Headers = DetachedParams(u.UriParams), DetachedParams(u.Headers)
	return u
}

// DetachedParams is a copy of ps with copies of its strings (nil for nil).
func DetachedParams(ps sipmsg.HeaderParams) sipmsg.HeaderParams {
	if ps == nil {
		return nil
	}
	c := make(sipmsg.HeaderParams, len(ps))
	for i, kv := range ps {
		c[i] = sipmsg.HeaderKV{K: strings.Clone(kv.K), V: strings.Clone(kv.V)}
	}
	return c
}
