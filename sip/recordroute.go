package sip

import (
	"slices"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// A UAS copies the Record-Route of the request into its 2xx, in order
// (RFC 3261 12.1.1), and the caller takes its route set from that list:
// the proxy's own entries, and those of the proxies before it, must end
// the list as the forwarded INVITE had them. A carrier whose 2xx drops
// them, or puts entries of its own below them, makes the caller send its
// ACK and BYE around the node: the node never sees the call end, and its
// max_calls places stay taken until max_call_duration (h67). Such a 2xx
// is mended before the node reads it and relays it: what the carrier put
// above the node's entries stays, the tail is the forwarded INVITE's.

// mendRecordRoute makes the Record-Route list of r, a 2xx to the INVITE
// out, end with out's Record-Route list, and reports whether it had to
// (counted as sip_errors_total{reason="record_route"}). Nothing is done
// when out's list does not start with the node's own entry
// (sip.record_route false: only the entries of the proxies before the
// node, if any, which are theirs to keep).
func (p *Proxy) mendRecordRoute(out *sipmsg.Request, r *sipmsg.Response) bool {
	var wantBuf, gotBuf [8]*sipmsg.RecordRouteHeader
	want := msgpart.RecordRoutes(out, wantBuf[:0])
	if len(want) == 0 || !p.isMe(&want[0].Address) {
		return false
	}
	got := msgpart.RecordRoutes(r, gotBuf[:0])
	if n := len(got) - len(want); n >= 0 {
		same := true
		for i, w := range want {
			if !sameHop(got[n+i], w) {
				same = false
				break
			}
		}
		if same {
			return false
		}
	}
	// What the carrier's side put above the entries out had: the list up
	// to the first of them (the node's, or, when the carrier dropped the
	// node's, one of the proxies' before it), less any entry naming the
	// node. Each of out's entries is then written once, in its place.
	var above []*sipmsg.RecordRouteHeader
	for _, g := range got {
		if slices.ContainsFunc(want, func(w *sipmsg.RecordRouteHeader) bool { return sameHop(g, w) }) {
			break
		}
		if !p.isMe(&g.Address) {
			above = append(above, g)
		}
	}
	for r.RemoveHeader("Record-Route") {
	}
	for _, h := range above {
		r.AppendHeader(h)
	}
	for _, w := range want {
		r.AppendHeader(sipmsg.HeaderClone(w))
	}
	p.m.SIPErrors.WithLabelValues("record_route").Inc()
	return true
}

// sameHop reports whether the Record-Route entry got is want as a next
// hop reads it: the same host, port and transport, and, when want
// carries the node's dialog token, the same token (a carrier may write
// the entry anew: brackets, parameter order, case).
func sameHop(got, want *sipmsg.RecordRouteHeader) bool {
	g, w := &got.Address, &want.Address
	if !strings.EqualFold(strings.Trim(g.Host, "[]"), strings.Trim(w.Host, "[]")) || g.Port != w.Port {
		return false
	}
	gt, _ := g.UriParams.Get("transport")
	wt, _ := w.UriParams.Get("transport")
	if !strings.EqualFold(gt, wt) {
		return false
	}
	if tok, ok := w.UriParams.Get(tokenParam); ok {
		if gtok, _ := g.UriParams.Get(tokenParam); gtok != tok {
			return false
		}
	}
	return true
}
