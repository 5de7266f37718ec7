package msgpart

import (
	"slices"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// DecMaxForwards replaces Max-Forwards by its value minus one (70 - 1 when
// absent). The header is replaced, not changed in place: sipgo's clones
// share it with the original request.
func DecMaxForwards(req *sipmsg.Request) {
	v := uint32(70)
	if mf := req.MaxForwards(); mf != nil {
		v = mf.Val()
	}
	if v > 0 {
		v--
	}
	mf := sipmsg.MaxForwardsHeader(v)
	if req.MaxForwards() != nil {
		req.ReplaceHeader(&mf)
	} else {
		req.AppendHeader(&mf)
	}
}

// RemoveHeaders removes every header of m named name, in any case: header
// names are case-insensitive (RFC 3261 7.3.1), but sipgo's RemoveHeader
// matches a name exactly as the sender wrote it, and keeps the sender's
// spelling of the headers it does not know (x-customer stayed in a
// forwarded INVITE that sip.strip_headers said to strip as X-Customer).
func RemoveHeaders(m interface {
	Headers() []sipmsg.Header
	RemoveHeader(string) bool
}, name string) {
	var spellings []string
	for _, h := range m.Headers() {
		if n := h.Name(); strings.EqualFold(n, name) && !slices.Contains(spellings, n) {
			spellings = append(spellings, n)
		}
	}
	for _, n := range spellings {
		for m.RemoveHeader(n) {
		}
	}
}

// KeepTopVia removes every Via of r but the first, which stays on top.
func KeepTopVia(r *sipmsg.Request) {
	vias := r.GetHeaders("Via")
	if len(vias) < 2 {
		return
	}
	top := vias[0]
	for r.RemoveHeader("Via") {
	}
	r.PrependHeader(top)
}

// RelayResponse turns a response received on a client transaction into
// the one relayed upstream: the proxy's own Via (the top one) removed,
// addressed to dest over transport tp. It changes and returns res itself
// rather than a copy: sipgo's client transaction does not use a response
// after passing it up (Responses or OnRetransmission); it keeps the last
// one only until the next arrives, and builds its ACK of a non-2xx final
// response before passing that up. Every retransmission is a newly parsed
// message, so each response is relayed at most once.
func RelayResponse(res *sipmsg.Response, dest, tp string) *sipmsg.Response {
	res.RemoveHeader("Via")
	res.SetDestination(dest)
	res.SetTransport(tp)
	return res
}
