package sip

import (
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/oc"
)

// SIP overload control toward peers that ask for it (RFC 7339): package
// oc computes each peer's reduction and writes the Via parameters; this
// file says whose responses carry them.
//
// The reduction follows the node's own shedding (sip.max_inflight): an
// initial INVITE given a unit of the inflight bound counts as taken
// (screenInvite), one shed at the bound as shed (noteShed). Shedding for
// a peer's or a customer's CPS limit is not overload and does not count:
// it is the admission decision, and a loss-based reduction of a peer's
// offer would also cut the calls within its limit.
//
// Only responses to a peer's INVITEs, to the requests the node answers
// itself for a peer and to a peer's in-dialog requests relayed through a
// transaction carry the values; a carrier asking learns nothing. The
// stateless relay of in-dialog requests' responses (stateless.go) carries
// none, and removes any a party downstream wrote (oc.Strip).

// ocMark writes peer's current reduction into via, the top Via of a
// response on its way to peer, when it asked (oc.Asked of its request;
// peer "" when it did not ask, or is no peer): oc.Mark.
func (p *Proxy) ocMark(peer string, via *sipmsg.ViaHeader) {
	if peer == "" || via == nil {
		return
	}
	oc.Mark(p.ocMeters.Of(peer).Current(time.Now()), via)
}

// ocRelay readies via, the top Via of a relayed response on its way up,
// for the party that sent the request: peer's values when that peer asked
// (ocMark; peer "" otherwise), else no oc values at all (oc.Strip),
// whatever the party below wrote there.
func (p *Proxy) ocRelay(peer string, via *sipmsg.ViaHeader) {
	if peer != "" {
		p.ocMark(peer, via)
		return
	}
	oc.Strip(via)
}

// ocMarkOwn marks a response the node built for peer's request with
// NewResponseFromRequest: its top Via is a copy of the request's, so it
// says itself whether the client asked. peer "" (a stranger, a carrier)
// gets nothing.
func (p *Proxy) ocMarkOwn(peer string, res *sipmsg.Response) {
	if via := res.Via(); peer != "" && oc.Asked(via) {
		p.ocMark(peer, via)
	}
}

// ocPeer is peer when asked, else "" (what ocMark and ocRelay take).
func ocPeer(peer string, asked bool) string {
	if asked {
		return peer
	}
	return ""
}
