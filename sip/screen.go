package sip

import (
	"net/netip"
	"strings"
	"time"

	"github.com/emiago/sipgo"
	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/statelessbranch"
)

// The screen is the proxy's first look at every parsed message, before
// sipgo's transaction layer creates any state for it. It runs in the
// transport's read loop, so it only does cheap, non-blocking work:
//
//   - strangers (a source that is neither a peer's nor a carrier's) cost
//     nothing: with unknown_source drop they get silence, with reject one
//     stateless 403 (requests other than ACK); their responses are dropped.
//     The one exception is a party a reload removed ending its calls
//     (screenFormerParty): an in-dialog request over UDP that routes a
//     dialog token of the node's, or a response on a stateless branch,
//     goes through the stateless relay's checks (the token must open and
//     name the sender's address; the branch's MAC must hold), at the cost
//     of those checks; what fails them is refused as any stranger's;
//   - a request or response without Via, From, To, Call-ID or CSeq, with a
//     CSeq method other than the request's, with an empty tag, or with two
//     of a header that may appear once (oneEach), is never used: requests
//     get a stateless 400, responses are dropped;
//   - out-of-dialog requests other than INVITE, ACK and CANCEL from known
//     parties are answered here, statelessly (OPTIONS 200, or 503 while
//     draining or while the store cannot decide; anything else 405);
//   - a CANCEL of a call in progress must come from the source its INVITE
//     came from (sipgo matches a CANCEL by Via branch and sent-by only, so a
//     stranger who saw the branch could cancel someone's call); it is
//     answered 200 here and the call is told, which then cancels the
//     carrier's leg and relays the carrier's answer (RFC 3261 16.10).
//
// sipgo v1.7.2 offers no hook between parsing and the transaction layer:
// the transport layer calls a list of handlers, the transaction layer's
// first. New wraps that list once (sipgohook.Screen), before any listener
// is served, so the screen decides what the transaction layer sees. It
// reads an unexported field by reflection; if a sipgo upgrade renames it,
// New fails with an error, never silently.

// screen decides whether sipgo's transaction layer sees m. A panic drops
// the message (counted in cpsguard_panics_total{where="sip.screen"}).
func (p *Proxy) screen(m sipmsg.Message) (pass bool) {
	defer p.panics.Recover("sip.screen", func(error) { pass = false })
	switch m := m.(type) {
	case *sipmsg.Request:
		return p.screenRequest(m)
	case *sipmsg.Response:
		return p.screenResponse(m)
	}
	return false
}

func (p *Proxy) screenRequest(req *sipmsg.Request) bool {
	cfg := p.cfg()
	if cfg == nil {
		return false
	}
	src, ok := msgpart.SourceAddr(req)
	if !ok {
		p.m.SIPErrors.WithLabelValues("source").Inc()
		return false
	}
	if !p.knownSource(cfg, src) {
		if p.screenFormerParty(cfg, req) {
			return false
		}
		p.m.SIPErrors.WithLabelValues("unknown_source").Inc()
		if req.IsInvite() && !msgpart.HasToTag(req) {
			p.m.Calls.WithLabelValues(PeerUnknown, metrics.OutcomeRejectedForbidden).Inc()
		}
		if cfg.SIP.UnknownSource != "drop" && !req.IsAck() && req.Via() != nil {
			p.stateless(req, sipmsg.StatusForbidden, "Forbidden")
		}
		return false
	}
	if !wellFormed(req) {
		p.m.SIPErrors.WithLabelValues("malformed").Inc()
		if !req.IsAck() && req.Via() != nil {
			p.stateless(req, sipmsg.StatusBadRequest, "Bad Request")
		}
		return false
	}
	switch {
	case req.IsCancel():
		return p.screenCancel(req)
	case req.IsInvite():
		if msgpart.Tag(req.From().Params) == "" && !p.inDialog(req) {
			// RFC 3261 8.1.1.3: a UAC puts a tag in From. A call without one
			// has no dialog the carrier's BYE could name (it has no To tag
			// then, and is refused), so it would hold its max_calls places
			// until max_call_duration.
			p.m.SIPErrors.WithLabelValues("malformed").Inc()
			p.stateless(req, sipmsg.StatusBadRequest, "Bad Request: From tag missing")
			return false
		}
		return p.screenInvite(cfg, req, src)
	case req.IsAck() && shedAck(req):
		return false
	case req.IsAck():
		// An ACK of a 2xx to a carrier over UDP: relayed from here, in order with the
		// BYE that may follow (stateless.go).
		return !p.screenAck(req)
	case p.inDialog(req):
		// In-dialog non-INVITE over UDP: relayed from here (stateless.go).
		return !p.screenInDialog(cfg, req, false)
	}
	peer := ""
	if pe := cfg.PeerByAddr(src); pe != nil && !p.isCarrierAddr(cfg, src) {
		peer = pe.Name
	}
	p.answerOutOfDialog(req, peer)
	return false
}

// screenFormerParty relays an in-dialog request over UDP from an address
// the configuration no longer names (a peer or a carrier that a reload
// removed while its calls were up): the stateless relay's own checks, a
// dialog token of the node's that opens and a request sent from that
// leg's address and port, are its grant, so the party can still end the
// calls the configuration let it set up, and they free their places (h46:
// the calls stayed up, holding them, until max_call_duration). It reports
// whether it took req; anything else from a stranger (an INVITE, a request
// without a dialog token of the node's, one the stateless relay leaves to
// sipgo) is refused as any stranger's.
func (p *Proxy) screenFormerParty(cfg *config.Config, req *sipmsg.Request) bool {
	if req.Transport() != "UDP" || req.IsInvite() || req.IsCancel() || req.Via() == nil || !msgpart.HasToTag(req) ||
		!p.routesOwnToken(req) || !wellFormed(req) {
		return false
	}
	if req.IsAck() {
		return p.screenAck(req)
	}
	return p.canRelayStateless(req) && p.screenInDialog(cfg, req, true)
}

func (p *Proxy) screenResponse(res *sipmsg.Response) bool {
	src, err := netip.ParseAddrPort(res.Source())
	if err == nil && !p.knownSource(p.cfg(), src.Addr().Unmap()) && wellFormed(res) && statelessbranch.OnTop(res) {
		// The answer to an in-dialog request relayed statelessly to a
		// party a reload removed (screenFormerParty): the branch's MAC
		// names the address the request went to, so only that party's
		// answer is relayed.
		p.relayStatelessResponse(p.cfg(), res, src.Addr().Unmap())
		return false
	}
	if err != nil || !p.knownSource(p.cfg(), src.Addr().Unmap()) {
		p.m.SIPErrors.WithLabelValues("unknown_source").Inc()
		return false
	}
	if !wellFormed(res) {
		p.m.SIPErrors.WithLabelValues("malformed").Inc()
		return false
	}
	if statelessbranch.OnTop(res) {
		// No transaction of sipgo's: relayed or dropped here (stateless.go).
		p.relayStatelessResponse(p.cfg(), res, src.Addr().Unmap())
		return false
	}
	return true
}

// wellFormed reports whether m has every header the proxy builds from:
// Via, From, To, Call-ID (not empty) and CSeq (with the request's method
// for a request), and no empty tag on From or To. A Call-ID or tag with a
// control character (RFC 3261 allows none: word and token characters) is
// not well formed either: the dialog token's MAC takes them as separated
// strings, and a NUL inside one would let two dialogs share an input.
// Nor is a message with two of a header that may appear once (oneEach).
func wellFormed(m sipmsg.Message) bool {
	if m.Via() == nil || m.CSeq() == nil || !oneEach(m) {
		return false
	}
	from, to, id := m.From(), m.To(), m.CallID()
	if from == nil || to == nil || id == nil || id.Value() == "" || hasControl(id.Value()) {
		return false
	}
	if !goodTag(from.Params) || !goodTag(to.Params) {
		return false
	}
	if req, ok := m.(*sipmsg.Request); ok && m.CSeq().MethodName != req.Method {
		return false
	}
	return true
}

// oneEach reports whether m has at most one each of To, From, Call-ID,
// CSeq, Content-Length and Max-Forwards (RFC 3261 7.3.1: none is a list).
// sipgo reads the last of each and writes them all back when the message
// is relayed, where the next hop may read the first: another dialog than
// the one its token was checked for, or, over TCP, another framing (a
// carrier that takes the first Content-Length 0 reads the body as a
// message of its own: an INVITE no admission granted).
func oneEach(m sipmsg.Message) bool {
	hs, ok := m.(interface{ Headers() []sipmsg.Header })
	if !ok {
		return false
	}
	var to, from, id, cseq, length, mf int
	for _, h := range hs.Headers() {
		switch h.(type) {
		case *sipmsg.ToHeader:
			to++
		case *sipmsg.FromHeader:
			from++
		case *sipmsg.CallIDHeader:
			id++
		case *sipmsg.CSeqHeader:
			cseq++
		case *sipmsg.ContentLengthHeader:
			length++
		case *sipmsg.MaxForwardsHeader:
			mf++
		}
	}
	return max(to, from, id, cseq, length, mf) <= 1
}

// goodTag is false for a tag parameter without a value (";tag" or
// ";tag="), and for parameters sipgo may have read otherwise than the
// next hop will (plainParams): the tag it found may be none, or another.
func goodTag(ps sipmsg.HeaderParams) bool {
	if ps == nil {
		return true
	}
	if !plainParams(ps) {
		return false
	}
	v, ok := ps.Get("tag")
	return !ok || (v != "" && !hasControl(v))
}

// plainParams reports whether no parameter of a From or To holds what
// sipgo's parameter parser (v1.7.2) reads otherwise than the next hop: it
// knows no quoted strings, so from ;x="a;tag=b" it reads a tag, and the
// node writes the header back as it came, where the next hop reads none (a
// re-INVITE that is a new call to the carrier, or a BYE of another dialog
// whose 481 would end the node's call). RFC 3261 allows a quoted value
// there; no user agent needs one in From or To. So a name or value may not
// hold a quote, a backslash, '<', '>', ',', a blank inside it or a
// control character; other characters outside RFC 3261's token (an '@' in
// a tag, say) are read alike by every parser and pass, as they did.
// Blanks around a name or value (RFC 3261's SWS, which sipgo keeps) are
// allowed, as is the blank "parameter" sipgo makes of a blank before the
// first ';'.
func plainParams(ps sipmsg.HeaderParams) bool {
	for _, kv := range ps {
		k, v := strings.TrimSpace(kv.K), strings.TrimSpace(kv.V)
		if k == "" && v == "" {
			continue
		}
		if k == "" || !paramText(k) || !paramText(v) {
			return false
		}
	}
	return true
}

// paramText reports whether s holds none of the characters plainParams
// refuses.
func paramText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f || strings.IndexByte("\"\\<>,", c) >= 0 {
			return false
		}
	}
	return true
}

// hasControl reports whether s holds an ASCII control character (NUL to
// US, or DEL).
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// screenCancel handles a CANCEL of a call in progress (see the screen).
// A CANCEL that matches no INVITE this proxy is handling goes on to sipgo
// (which answers it 481 through onCancel, or matches an INVITE transaction
// that already ended, on which it has no effect).
func (p *Proxy) screenCancel(req *sipmsg.Request) bool {
	e := p.invites.Lookup(invites.KeyOf(req))
	if e == nil {
		return true
	}
	if e.Src != req.Source() || e.Transport != req.Transport() {
		p.m.SIPErrors.WithLabelValues("cancel_source").Inc()
		return false // not from the INVITE's source: not a hop-by-hop CANCEL
	}
	p.stateless(req, sipmsg.StatusOK, "OK")
	e.Cancel()
	return false
}

// answerOutOfDialog answers an out-of-dialog request other than INVITE,
// ACK and CANCEL from a known party, statelessly: OPTIONS (keepalives of
// upstream dispatchers) 200, or 503 while draining or while the store
// cannot decide calls, so the dispatcher routes around this node; any other
// method 405. A peer's answer (peer: its name, "" for a carrier) carries
// the overload-control values it asks for (oc.go).
func (p *Proxy) answerOutOfDialog(req *sipmsg.Request, peer string) {
	var res *sipmsg.Response
	switch {
	case req.Method == sipmsg.OPTIONS && (p.draining.Load() || !p.usable()):
		res = sipmsg.NewResponseFromRequest(req, sipmsg.StatusServiceUnavailable, "Service Unavailable", nil)
	case req.Method == sipmsg.OPTIONS:
		res = sipmsg.NewResponseFromRequest(req, sipmsg.StatusOK, "OK", nil)
		res.AppendHeader(sipmsg.NewHeader("Allow", allowed))
		res.AppendHeader(sipmsg.NewHeader("Accept", "application/sdp"))
	default:
		res = sipmsg.NewResponseFromRequest(req, sipmsg.StatusMethodNotAllowed, "Method Not Allowed", nil)
		res.AppendHeader(sipmsg.NewHeader("Allow", allowed))
	}
	p.ocMarkOwn(peer, res)
	p.writeStateless(res)
}

// stateless sends the proxy's own response to req without a transaction.
func (p *Proxy) stateless(req *sipmsg.Request, code int, reason string) {
	p.writeStateless(sipmsg.NewResponseFromRequest(req, code, reason, nil))
}

func (p *Proxy) writeStateless(res *sipmsg.Response) {
	var err error
	if res.Transport() == "UDP" {
		err = p.sendUDP(res)
	} else {
		err = p.tp.WriteMsg(res)
	}
	if err != nil {
		p.log.Debug("stateless answer failed", "status", res.StatusCode, "error", err)
	}
}

// usable reports whether the store can decide calls (Options.Usable).
func (p *Proxy) usable() bool { return p.storeUsable == nil || p.storeUsable() }

// knownSource reports whether addr is a configured party: in a peer's
// sources or one of the carriers' addresses (resolved host names included).
func (p *Proxy) knownSource(cfg *config.Config, addr netip.Addr) bool {
	if cfg == nil {
		return false
	}
	if cfg.PeerByAddr(addr) != nil {
		return true
	}
	return p.isCarrierAddr(cfg, addr)
}

// guarded wraps a request handler so that a panic in it is logged once with
// its stack, counted in cpsguard_panics_total{where}, answered 500 when the
// transaction can still answer, and the transaction ended: the node goes on.
func (p *Proxy) guarded(where string, h sipgo.RequestHandler) sipgo.RequestHandler {
	return func(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
		defer p.panics.Recover(where, func(error) {
			defer func() { _ = recover() }() // the answer must not panic again
			if !req.IsAck() {
				_ = tx.Respond(sipmsg.NewResponseFromRequest(req, sipmsg.StatusInternalServerError, "Server Internal Error", nil))
			}
			tx.Terminate()
		})
		h(req, tx)
	}
}

// sweepEvery is the sweep's period (sweepInvites).
const sweepEvery = time.Second
