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
	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/policy"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/oc"
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

// inDialog reports whether the proxy treats req as a request inside a
// dialog: its To tag is set, or one of the proxy's own entries on top of
// its Route carries a dialog token (";cg="), whatever its tags say. Such a
// request is relayed only when it passes prepareInDialog (which wants both
// tags); it is never taken for a new call (which would lose its Route and
// be admitted) nor answered as an out-of-dialog request.
func (p *Proxy) inDialog(req *sipmsg.Request) bool {
	return msgpart.HasToTag(req) || p.routesOwnToken(req)
}

// routesOwnToken reports whether one of the proxy's own entries on top of
// req's Route carries a dialog token (at most maxRouteTokens entries are
// looked at, without changing req).
func (p *Proxy) routesOwnToken(req *sipmsg.Request) bool {
	n := 0
	for _, h := range req.GetHeaders("Route") {
		r, ok := h.(*sipmsg.RouteHeader)
		if !ok || n >= maxRouteTokens || !p.isMe(&r.Address) {
			return false
		}
		if r.Address.UriParams != nil && r.Address.UriParams.Has(tokenParam) {
			return true
		}
		n++
	}
	return false
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
	// key names the call (ends.go); callee is the callee's tag as the
	// request names it.
	key    callKey
	callee string
	// minted is when the dialog token was minted (Unix seconds): once
	// its call is over (Proxy.callOver) the tokens minted until its end,
	// in that second too, are refused (dialogguard.Guard.Admit).
	minted int64
	// token is the token that opened: its ID (a call attempt that ended
	// unanswered refuses its tokens, tokensOver) and whether this proxy
	// minted it, so knows whether its call is live (ownTokenGone).
	token tokenRef
	// live are the calls this node holds bound to the dialog, as
	// ownTokenGone found them (looked up once: ackPassed reads them too);
	// looked: they were looked up.
	live   []callplaces.Found
	looked bool
}

// prepareInDialog checks an in-dialog request and builds the one it relays.
// The request must name the proxy in its top Route entries (else 481,
// counted no_route), one of those entries must carry a dialog token that
// verifies with its Call-ID and tags, and it must come from the leg its
// direction says (else refuseDialog): from its address, IP and port, when
// it arrived over UDP (where a source is easily forged), from its IP over
// a connection (whose source port is the sender's own choice, and whose
// source cannot be forged off-path). With no hop left (Max-Forwards 0) it
// is not relayed (483, RFC 3261 16.3). It then goes to the other leg,
// whatever its Request-URI and remaining Route entries say (they travel on
// unchanged): the request never reaches a host:port that is neither leg
// of its dialog. Refusals are counted in cpsguard_sip_errors_total when
// count is set (not for an ACK: the ACK of the proxy's own 403 to a
// forged request would count it twice).
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
	out := msgpart.ForwardCopy(req)
	popped, tokens := popOwnRoutesTokens(p, out)
	if popped == 0 {
		// Not routed through the proxy (its Route entries name another
		// host, or there are none): the proxy holds no such dialog.
		if count {
			p.m.SIPErrors.WithLabelValues("no_route").Inc()
		}
		return inDialogHop{}, sipmsg.StatusCallTransactionDoesNotExists
	}
	id := msgpart.CallID(req)
	fromTag, toTag := "", ""
	if f := req.From(); f != nil {
		fromTag = msgpart.Tag(f.Params)
	}
	if t := req.To(); t != nil {
		toTag = msgpart.Tag(t.Params)
	}
	if fromTag == "" || toTag == "" {
		// A request inside a dialog names both ends' tags (every dialog
		// the proxy sets up has them: an initial INVITE without a From tag
		// gets 400). Relayed without its To tag, an INVITE would reach the
		// carrier as a new call.
		return refuse("malformed")
	}
	var hop inDialogHop
	st := tokenBad
	for _, tok := range tokens {
		var s tokenStatus
		var minted time.Time
		if hop.legs, hop.dir, minted, hop.token, s = p.keys.open(cfg, tok, id, fromTag, toTag); s == tokenOK {
			st = s
			hop.minted = minted.Unix()
			break
		}
		st = max(st, s)
	}
	switch st {
	case tokenBad:
		return refuse("bad_dialog_token")
	case tokenExpired:
		// The call is over (max_call_duration): its dialog with it.
		if count {
			p.m.SIPErrors.WithLabelValues("dialog_ended").Inc()
		}
		return inDialogHop{}, sipmsg.StatusCallTransactionDoesNotExists
	}
	sentBy := func(l leg) bool {
		return src.Addr().Unmap() == l.Addr.Addr() && (req.Transport() != "UDP" || src.Port() == l.Addr.Port())
	}
	if fromTag == toTag && hop.dir == fromPeer && sentBy(hop.legs.Carrier) && !sentBy(hop.legs.Peer) {
		// Equal tags (a callee that took the caller's tag for its own) do
		// not say which leg sent the request: its source does.
		hop.dir = fromCarrier
	}
	from := hop.legs.Peer
	hop.to = hop.legs.Carrier
	if hop.dir == fromCarrier {
		from, hop.to = hop.legs.Carrier, hop.legs.Peer
	}
	if !sentBy(from) {
		return refuse("wrong_leg")
	}
	if mf := req.MaxForwards(); mf != nil && mf.Val() == 0 {
		if count {
			p.m.SIPErrors.WithLabelValues("too_many_hops").Inc()
		}
		return inDialogHop{}, sipmsg.StatusTooManyHops
	}
	callerTag, calleeTag := fromTag, toTag
	if hop.dir == fromCarrier {
		callerTag, calleeTag = toTag, fromTag
	}
	hop.key, hop.callee = callKeyOf(id, callerTag, hop.legs.Peer.Addr), calleeTag
	msgpart.DecMaxForwards(out)
	tp := hop.to.Name()
	lo := addVia(p, out, tp, hop.to.Addr.Addr())
	out.SetTransport(tp)
	out.SetDestination(hop.to.Addr.String())
	out.Laddr = lo.laddr
	hop.out = out
	p.sawInDialog(req, hop)
	return hop, 0
}

// refuseInDialog answers a request prepareInDialog refused, once, keeping
// no transaction (its source may be spoofed or hostile).
func (p *Proxy) refuseInDialog(req *sipmsg.Request, tx sipmsg.ServerTransaction, code int) {
	switch code {
	case refuseDialog:
		if p.log.Enabled(context.Background(), slog.LevelDebug) {
			p.log.Debug("in-dialog request without a valid dialog token or from the wrong leg refused",
				"method", string(req.Method), "call_id", msgpart.CallID(req), "source", req.Source())
		}
		p.answerOnce(req, tx, sipmsg.StatusForbidden, "Forbidden")
	default:
		p.answerOnce(req, tx, code, refusalReason(code))
	}
}

// refusalReason is the reason phrase of prepareInDialog's SIP codes.
func refusalReason(code int) string {
	switch code {
	case sipmsg.StatusTooManyHops:
		return "Too Many Hops"
	case sipmsg.StatusServiceUnavailable:
		return "Service Unavailable"
	}
	return "Call/Transaction Does Not Exist"
}

// reinviteAllowed applies the per-dialog re-INVITE limit (see
// reinviteLimit) through the admission store, pool-wide. The bucket is
// named by a hash of the Call-ID, the caller's From tag and the token's
// carrier leg (header values never become key parts).
//
// The member is what makes the re-INVITE a new transaction to sipgo (the
// invite table's key: top Via branch and sent-by, RFC 3261 17.2.3) with
// its packet source and transport, hashed: a peer that reuses one branch
// and changes only the Via's sent-by gets a transaction per re-INVITE
// from sipgo, and each counts. A member the store has counted already
// ("duplicate") is refused, never admitted: the handler runs only for a
// request sipgo took for a new transaction, so a duplicate is a copy
// replayed after its first transaction ended, which the far end has
// answered already.
func (p *Proxy) reinviteAllowed(cfg *config.Config, req *sipmsg.Request, hop inDialogHop) (bool, error) {
	ftag := ""
	if hop.dir == fromPeer {
		ftag = msgpart.Tag(req.From().Params)
	} else {
		ftag = msgpart.Tag(req.To().Params)
	}
	// The dialog with its carrier leg: a carrier the call moved on from
	// still holds the token of its own attempt, which another node of the
	// pool (not holding the call) lets through until the token's end
	// reaches it (tokensOver: about a second; never without
	// Options.DialogEnds); its re-INVITEs count against that leg, never
	// the budget of the carrier holding the call.
	sum := sha256.Sum256([]byte(msgpart.CallID(req) + "\x00" + ftag + "\x00" + hop.legs.Carrier.Addr.String()))
	b := admission.Bucket{Key: policy.DialogKey(cfg.Store.KeyPrefix, hex.EncodeToString(sum[:12])), Limit: reinviteLimit, Window: reinviteWindow}
	tx := sha256.Sum256([]byte(msgpart.CallID(req) + "\x00" + string(invites.KeyOf(req)) + "\x00" + req.Source() + "\x00" + req.Transport()))
	ctx, cancel := context.WithTimeout(p.base, storeBudget)
	defer cancel()
	dec, err := p.adm.Admit(ctx, "reinvite/"+hex.EncodeToString(tx[:16]), []admission.Bucket{b})
	if err != nil {
		return false, err
	}
	return dec.Admit && !dec.Duplicate, nil
}

// forwardInDialog relays a request inside a dialog (BYE, re-INVITE, UPDATE,
// INFO, …) statefully between the dialog's two legs (prepareInDialog).
// A re-INVITE is limited per dialog (reinviteAllowed); nothing else is.
func (p *Proxy) forwardInDialog(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	var entry *invites.Entry
	// sent: the request left for the other leg; a re-INVITE's server
	// transaction then outlives this handler in sipgo (Completed, Timer
	// H, after a non-2xx), which absorbs its copies and the ACK of its
	// failure: its tombstone stays as long (invites.Table, keptTTL), so a
	// late ACK is not relayed as a 2xx ACK would be.
	// answered: its 2xx was relayed; copies of it are then absorbed by
	// the tombstone itself (sipgo's transaction lasts answeredLinger).
	sent, answered := false, false
	if req.IsInvite() {
		var done func(bool, bool)
		entry, done = p.invites.Claim(req)
		defer func() { done(sent, answered) }()
	}
	hop, code := p.prepareInDialog(req, true)
	if code == 0 {
		code = p.admitInDialog(&hop, true, req)
	}
	if code != 0 {
		p.refuseInDialog(req, tx, code)
		return
	}
	if req.IsInvite() {
		ok, err := p.reinviteAllowed(p.cfg(), req, hop)
		if err != nil || !ok {
			if err != nil {
				p.log.Debug("re-INVITE limit store failed", "call_id", msgpart.CallID(req), "error", err)
			} else {
				p.m.SIPErrors.WithLabelValues("reinvite_limit").Inc()
			}
			p.answerOnce(req, tx, sipmsg.StatusServiceUnavailable, "Service Unavailable")
			return
		}
	}
	if req.IsInvite() {
		// The re-INVITE's one 100 Trying (sipgo sends none by itself:
		// noAutoTrying); its answer may take a while to come.
		p.answer(req, tx, sipmsg.StatusTrying, "Trying")
	}
	// Not ahead of the dialog's ACK that arrived before it, still being
	// sent in another goroutine (ackorder.go).
	p.ackOrder.Wait(ackOrderKey{hop.key, hop.dir})
	d := &dialogLeg{
		relayLeg: relayLeg{p: p, out: hop.out, ctx: context.Background(), shutdown: p.base.Done()},
		server:   txUpstream{p: p, req: req, tx: tx, dest: msgpart.UpstreamOf(req), oc: p.dialogOCPeer(req, &hop), hop: &hop},
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
	err := l.send(target{host: hop.to.Addr.Addr().String(), port: int(hop.to.Addr.Port()), transport: hop.to.Name()})
	if err != nil {
		p.log.Debug("in-dialog forward failed", "method", string(req.Method), "call_id", msgpart.CallID(req), "error", err)
		p.answer(req, tx, sipmsg.StatusServiceUnavailable, "Service Unavailable")
		return
	}
	sent = true
	if entry != nil {
		// A CANCEL of a re-INVITE from its own source is answered 200 by
		// the screen; the leg cancels the re-INVITE downstream and relays
		// the carrier's answer (487, or a 2xx that crossed).
		ch := make(chan struct{})
		entry.OnCancel(func() { close(ch) })
		l.cancelled = ch
	}
	res, _ := l.run()
	answered = res != nil && res.IsSuccess()
	// The far leg's answer says whether a BYE ended the call (ends.go); a
	// BYE that could not be sent ends nothing (the call is still up at the
	// other leg: a peer could otherwise free its places with BYEs made too
	// large to send), nor does one cut short by the node's shutdown.
	code = 0
	if res != nil {
		code = res.StatusCode
	} else if p.base.Err() != nil {
		return
	}
	p.inDialogDone(req.Method, hop.key, hop.callee, hop.dir, code)
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
	dest string // msgpart.UpstreamOf(req)
	oc   string // the dialog's peer's name when req is its and asks for overload control (oc.go), else ""
	hop  *inDialogHop
}

// relay passes r upstream; a failure is logged at Debug and returned
// (errNoVia when r had no Via left for the sender: not relayed). A BYE's
// final answer that ends its call ends its dialog first (dialogs.go), so
// the sender's next request of the dialog is refused.
func (u *txUpstream) relay(r *sipmsg.Response) error {
	if u.hop != nil && u.req.Method == sipmsg.BYE && r.StatusCode >= 200 && endsCall(r.StatusCode, u.hop.dir) {
		var bye uint64
		if c := u.req.CSeq(); c != nil {
			bye = byeID(c.SeqNo, u.req.Via())
		}
		u.p.dialogEnded(u.hop.key, u.hop.callee, r.StatusCode, bye, u.hop.dir)
	}
	out := msgpart.RelayResponse(r, u.dest, u.req.Transport())
	if out.Via() == nil {
		return u.p.noVia(out)
	}
	u.p.ocRelay(u.oc, out.Via())
	err := u.tx.Respond(out)
	if err != nil {
		u.p.log.Debug("relay failed", "status", r.StatusCode, "error", err)
	}
	return err
}

// respond answers upstream with the proxy's own response.
func (u *txUpstream) respond(code int, reason string) { u.p.answer(u.req, u.tx, code, reason) }

// onAck forwards ACKs for 2xx between the legs of their dialog,
// statelessly. ACKs for the proxy's own or relayed non-2xx responses are
// absorbed by sipgo's INVITE server transaction and never reach this
// handler; those for a rejection already ended (answered once) are dropped
// here (they carry no Route of the proxy).
func (p *Proxy) onAck(req *sipmsg.Request, _ sipmsg.ServerTransaction) {
	if hop, code := p.prepareInDialog(req, false); code == 0 {
		p.relayAck(&hop, req)
	} // else refused or no hops left (an ACK is never answered)
}

// relayAck sends req, an ACK whose hop prepareInDialog built, to the other
// leg outside any transaction (sendAck: it may open a connection, so never
// from the screen), unless its call ended or it is over its rate; an ACK
// of the call's answer then ends the call's INVITE transactions
// (ackPassed).
func (p *Proxy) relayAck(hop *inDialogHop, req *sipmsg.Request) {
	if p.admitInDialog(hop, false, req) != 0 {
		return // ended, or over its rate: dropped
	}
	if err := p.sendAck(hop.out, nil); err != nil {
		p.log.Debug("ACK forward failed", "call_id", msgpart.CallID(req), "error", err)
		return
	}
	p.ackPassed(hop, hop.out)
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
	if p.inDialog(req) {
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

// dialogOCPeer is the name of the peer an in-dialog request came from
// when it asks for overload control (its answers carry that peer's
// values), else "".
func (p *Proxy) dialogOCPeer(req *sipmsg.Request, hop *inDialogHop) string {
	if hop.dir != fromPeer || !oc.Asked(req.Via()) {
		return ""
	}
	src, ok := msgpart.SourceAddr(req)
	if !ok {
		return ""
	}
	if pe := p.cfg().PeerByAddr(src); pe != nil {
		return pe.Name
	}
	return ""
}
