package sip

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/netip"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/policy"
)

// allowed is the Allow header of the proxy's own answers.
const allowed = "INVITE, ACK, CANCEL, BYE, OPTIONS, UPDATE, INFO, PRACK, REFER, NOTIFY, MESSAGE"

// Re-INVITEs are limited per dialog, pool-wide: at most reinviteLimit in
// any reinviteWindow. Session timers refresh every 90 s or more (RFC 4028
// Min-SE), hold and resume are a few per call: six a minute is generous
// for a real call and keeps one dialog from becoming a stream of INVITEs
// at its carrier. Re-INVITEs do not wait for the carrier's pacing slots
// (they are no new calls and must not queue behind them).
const (
	reinviteLimit  = 6
	reinviteWindow = time.Minute
)

// inDialog reports whether req belongs to a dialog (To tag present).
func inDialog(req *sipmsg.Request) bool {
	to := req.To()
	return to != nil && to.Params.Has("tag")
}

// tagOf returns the tag parameter of a From or To header.
func tagOf(ps sipmsg.HeaderParams) string {
	if ps == nil {
		return ""
	}
	v, _ := ps.Get("tag")
	return v
}

// prepareInDialog's statuses besides SIP codes.
const (
	// refuseDialog is for a request whose Route entries of the proxy carry
	// no valid dialog token, or that comes from neither leg of its dialog:
	// 403, sent once (no transaction kept).
	refuseDialog = -2
)

// inDialogHop is where a verified in-dialog request goes.
type inDialogHop struct {
	out  *sipmsg.Request // the request to send (req itself is unchanged)
	to   leg             // the other leg of the dialog
	legs dialogLegs
	dir  direction
}

// prepareInDialog checks an in-dialog request and builds the one it relays.
// The request must name the proxy in its top Route entries (else 481), one
// of those entries must carry a dialog token that verifies with its Call-ID
// and tags, and it must come from the leg its direction says (else
// refuseDialog). It then goes to the other leg, whatever its Request-URI
// and remaining Route entries say (they travel on unchanged): the request
// never reaches a host:port that is neither leg of its dialog. Refusals
// are counted in cpsguard_sip_errors_total when count is set (not for an
// ACK: the ACK of the proxy's own 403 to a forged request would count it
// twice).
func (p *Proxy) prepareInDialog(req *sipmsg.Request, count bool) (inDialogHop, int) {
	cfg := p.cfg()
	refuse := func(reason string) (inDialogHop, int) {
		if count {
			p.m.SIPErrors.WithLabelValues(reason).Inc()
		}
		return inDialogHop{}, refuseDialog
	}
	src, err := netip.ParseAddrPort(req.Source())
	if err != nil {
		return refuse("source")
	}
	out := forwardCopy(req)
	popped, tokens := popOwnRoutesTokens(p, out)
	if popped == 0 {
		return inDialogHop{}, sipmsg.StatusCallTransactionDoesNotExists
	}
	id := callID(req)
	fromTag, toTag := "", ""
	if f := req.From(); f != nil {
		fromTag = tagOf(f.Params)
	}
	if t := req.To(); t != nil {
		toTag = tagOf(t.Params)
	}
	var hop inDialogHop
	ok := false
	for _, tok := range tokens {
		if hop.legs, hop.dir, ok = p.keys.verify(cfg, tok, id, fromTag, toTag); ok {
			break
		}
	}
	if !ok {
		return refuse("bad_dialog_token")
	}
	from := hop.legs.peer
	hop.to = hop.legs.carrier
	if hop.dir == fromCarrier {
		from, hop.to = hop.legs.carrier, hop.legs.peer
	}
	if src.Addr().Unmap() != from.addr.Addr() {
		return refuse("wrong_leg")
	}
	decMaxForwards(out)
	tp := hop.to.transport()
	var below []sipmsg.Header
	if out.IsInvite() {
		// See foldVias: sipgo's ACK of a non-2xx answer keeps one Via.
		if v := foldVias(p, out); v != nil {
			below = []sipmsg.Header{v}
		}
	}
	lo := prependVia(p, out, tp, hop.to.addr.Addr(), below)
	out.SetTransport(tp)
	out.SetDestination(hop.to.addr.String())
	out.Laddr = lo.laddr
	hop.out = out
	return hop, 0
}

// refuseInDialog answers a request prepareInDialog refused, once, keeping
// no transaction (its source may be spoofed or hostile).
func (p *Proxy) refuseInDialog(req *sipmsg.Request, tx sipmsg.ServerTransaction, code int) {
	switch code {
	case refuseDialog:
		if p.log.Enabled(context.Background(), slog.LevelDebug) {
			p.log.Debug("in-dialog request without a valid dialog token or from the wrong leg refused",
				"method", string(req.Method), "call_id", callID(req), "source", req.Source())
		}
		p.answerOnce(req, tx, sipmsg.StatusForbidden, "Forbidden")
	default:
		p.answerOnce(req, tx, code, "Call/Transaction Does Not Exist")
	}
}

// reinviteAllowed applies the per-dialog re-INVITE limit (see
// reinviteLimit) through the admission store, pool-wide. The bucket is
// named by a hash of the Call-ID and the caller's From tag (header values
// never become key parts).
func (p *Proxy) reinviteAllowed(cfg *config.Config, req *sipmsg.Request, hop inDialogHop) (bool, error) {
	ftag := ""
	if hop.dir == fromPeer {
		ftag = tagOf(req.From().Params)
	} else {
		ftag = tagOf(req.To().Params)
	}
	sum := sha256.Sum256([]byte(callID(req) + "\x00" + ftag))
	b := admission.Bucket{Key: policy.DialogKey(cfg.Store.KeyPrefix, hex.EncodeToString(sum[:12])), Limit: reinviteLimit, Window: reinviteWindow}
	branch, _ := req.Via().Params.Get("branch")
	ctx, cancel := context.WithTimeout(p.base, storeBudget)
	defer cancel()
	dec, err := p.adm.Admit(ctx, "reinvite/"+callID(req)+"/"+branch+"/"+req.Source(), []admission.Bucket{b})
	if err != nil {
		return false, err
	}
	return dec.Admit, nil
}

// forwardInDialog relays a request inside a dialog (BYE, re-INVITE, UPDATE,
// INFO, …) statefully between the dialog's two legs (prepareInDialog).
// A re-INVITE is limited per dialog (reinviteAllowed); nothing else is.
func (p *Proxy) forwardInDialog(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	var entry *inviteEntry
	// sent: the request left for the other leg; a re-INVITE's server
	// transaction then outlives this handler in sipgo (Completed, Timer
	// H, after a non-2xx), which absorbs its copies and the ACK of its
	// failure: its tombstone stays as long (inviteTable, keptTTL), so a
	// late ACK is not relayed as a 2xx ACK would be.
	sent := false
	if req.IsInvite() {
		var done func(bool)
		entry, done = p.invites.claim(req)
		defer func() { done(sent) }()
	}
	hop, code := p.prepareInDialog(req, true)
	if code != 0 {
		p.refuseInDialog(req, tx, code)
		return
	}
	if mf := req.MaxForwards(); mf != nil && mf.Val() == 0 {
		p.answerOnce(req, tx, sipmsg.StatusTooManyHops, "Too Many Hops")
		return
	}
	if req.IsInvite() {
		ok, err := p.reinviteAllowed(p.cfg(), req, hop)
		if err != nil || !ok {
			if err != nil {
				p.log.Debug("re-INVITE limit store failed", "call_id", callID(req), "error", err)
			} else {
				p.m.SIPErrors.WithLabelValues("reinvite_limit").Inc()
			}
			p.answerOnce(req, tx, sipmsg.StatusServiceUnavailable, "Service Unavailable")
			return
		}
	}
	d := &dialogLeg{
		relayLeg: relayLeg{p: p, out: hop.out, ctx: context.Background(), shutdown: p.base.Done()},
		server:   txUpstream{p: p, req: req, tx: tx, dest: upstreamOf(req), oc: hop.dir == fromPeer && ocAsked(req.Via())},
	}
	l := &d.relayLeg
	l.up = &d.server
	if req.IsInvite() {
		// Only an INVITE needs a bound of its own (it may ring for
		// minutes, and a CANCEL shortens the wait); any other client
		// transaction ends on its own Timer F when no final response
		// comes.
		l.setup = ringTimeout
	}
	err := l.send(target{host: hop.to.addr.Addr().String(), port: int(hop.to.addr.Port()), transport: hop.to.transport()})
	// A verified BYE ends its call's max_calls places once it has left: a
	// call the next INVITE takes the place of has had its BYE sent first,
	// so the carrier never sees one call too many. One that could not be
	// sent ends nothing (the call is still up at the other leg; a peer
	// could otherwise free its places with BYEs made too large to send).
	if err == nil {
		p.byeEnds(req, hop)
	}
	if err != nil {
		p.log.Debug("in-dialog forward failed", "method", string(req.Method), "call_id", callID(req), "error", err)
		p.answer(req, tx, sipmsg.StatusServiceUnavailable, "Service Unavailable")
		return
	}
	sent = true
	if entry != nil {
		// A CANCEL of a re-INVITE from its own source is answered 200 by
		// the screen; the leg cancels the re-INVITE downstream and relays
		// the carrier's answer (487, or a 2xx that crossed).
		ch := make(chan struct{})
		entry.onCancel(func() { close(ch) })
		l.cancelled = ch
	}
	l.run()
}

// dialogLeg is the leg of an in-dialog request with the server transaction
// its answers go to, in one allocation.
type dialogLeg struct {
	relayLeg
	server txUpstream
}

// txUpstream is the server transaction of an in-dialog request, where its
// leg's answers go (legUpstream).
type txUpstream struct {
	p    *Proxy
	req  *sipmsg.Request
	tx   sipmsg.ServerTransaction
	dest string // upstreamOf(req)
	oc   bool   // req is the dialog's peer's and asks for overload control (oc.go)
}

// relay passes r upstream; a failure is logged at Debug and returned.
func (u *txUpstream) relay(r *sipmsg.Response) error {
	out := relayResponse(r, u.dest, u.req.Transport())
	u.p.ocRelay(u.oc, out.Via())
	err := u.tx.Respond(out)
	if err != nil {
		u.p.log.Debug("relay failed", "status", r.StatusCode, "error", err)
	}
	return err
}

// respond answers upstream with the proxy's own response.
func (u *txUpstream) respond(code int, reason string) { u.p.answer(u.req, u.tx, code, reason) }

// requestOf builds a request the proxy originates in the dialog of inv, a
// request it forwarded: method to ruri, inv's SIP version, its Route set
// (when routes), Max-Forwards 70, inv's From and Call-ID, the given To
// (the answer's, with the callee's tag, or inv's own), CSeq seq, no body.
// Headers missing from inv or to are left out (never a nil header). The
// caller adds the Via and the addressing.
func requestOf(inv *sipmsg.Request, method sipmsg.RequestMethod, ruri sipmsg.Uri, routes bool, to sipmsg.Header, seq uint32) *sipmsg.Request {
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

// onAck forwards ACKs for 2xx between the legs of their dialog,
// statelessly. ACKs for the proxy's own or relayed non-2xx responses are
// absorbed by sipgo's INVITE server transaction and never reach this
// handler; those for a rejection already ended (answered once) are dropped
// here (they carry no Route of the proxy).
func (p *Proxy) onAck(req *sipmsg.Request, _ sipmsg.ServerTransaction) {
	hop, code := p.prepareInDialog(req, false)
	if code != 0 {
		return
	}
	if mf := req.MaxForwards(); mf != nil && mf.Val() == 0 {
		return // no hops left (an ACK is never answered, so just drop it)
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := p.tlsHop(ctx, hop.out, nil); err != nil {
		p.log.Debug("ACK forward failed", "call_id", callID(req), "error", err)
		return
	}
	if err := p.tp.WriteMsg(hop.out); err != nil {
		p.log.Debug("ACK forward failed", "call_id", callID(req), "error", err)
	}
}

// onCancel answers a CANCEL that matches no INVITE in progress (the screen
// handles the ones that do), once: 481.
func (p *Proxy) onCancel(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	p.answerOnce(req, tx, sipmsg.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
}

// onOther handles every method but INVITE, ACK and CANCEL that reaches a
// transaction: in a dialog it is relayed; out of a dialog the screen has
// answered it already, so this is only a guard (405, once).
func (p *Proxy) onOther(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	if inDialog(req) {
		p.forwardInDialog(req, tx)
		return
	}
	res := sipmsg.NewResponseFromRequest(req, sipmsg.StatusMethodNotAllowed, "Method Not Allowed", nil)
	res.AppendHeader(sipmsg.NewHeader("Allow", allowed))
	if err := tx.Respond(res); err != nil {
		p.log.Debug("respond failed", "method", string(req.Method), "error", err)
	}
	tx.Terminate()
}

// answerOnce sends the proxy's own final response once and ends the server
// transaction at once, for requests whose source may be spoofed or that
// the proxy refuses (strangers, bad dialogs, refused calls). Left to sipgo,
// the transaction would live on after the handler returns (TerminateGracefully
// keeps a finalized UDP transaction for its timers) and, for an INVITE,
// retransmit the response on Timer G for 32 s (Timer H): about 11 datagrams
// to the claimed source per request, and the state to go with them.
// Terminate stops those timers and removes the transaction; a retransmitted
// request is then answered again, once per request received.
func (p *Proxy) answerOnce(req *sipmsg.Request, tx sipmsg.ServerTransaction, code int, reason string) {
	p.answer(req, tx, code, reason)
	tx.Terminate()
}

// answer sends the proxy's own response to a request.
func (p *Proxy) answer(req *sipmsg.Request, tx sipmsg.ServerTransaction, code int, reason string) {
	if req.IsAck() {
		return
	}
	if err := tx.Respond(sipmsg.NewResponseFromRequest(req, code, reason, nil)); err != nil && p.log.Enabled(context.Background(), slog.LevelDebug) {
		p.log.Debug("respond failed", "status", code, "error", err)
	}
}
