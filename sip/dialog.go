package sip

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// allowed is the Allow header of the proxy's own answers.
const allowed = "INVITE, ACK, CANCEL, BYE, OPTIONS, UPDATE, INFO, PRACK, REFER, NOTIFY, MESSAGE"

// inDialog reports whether req belongs to a dialog (To tag present).
func inDialog(req *sipmsg.Request) bool {
	to := req.To()
	return to != nil && to.Params.Has("tag")
}

// nextHop pops the proxy's own Route entries from out and returns where
// the request goes next: the top remaining Route, else the Request-URI.
// ok is false when the request was not routed through the proxy (no Route
// entry of ours), which the proxy refuses to relay.
func (p *Proxy) nextHop(cfg *config.Config, out *sipmsg.Request) (t target, ok bool) {
	if popOwnRoutes(p, out) == 0 {
		return target{}, false
	}
	return nextTarget(cfg, out), true
}

// nextTarget is where out goes once the proxy's own Route entries are
// popped: the top remaining Route, else the Request-URI.
func nextTarget(cfg *config.Config, out *sipmsg.Request) target {
	u := &out.Recipient
	if r := out.Route(); r != nil {
		u = &r.Address
	}
	t := targetOf(u, "")
	if _, has := u.UriParams.Get("transport"); !has && cfg != nil {
		// No transport named: a carrier's URI decides for its own address.
		for _, c := range carrierTargets(cfg) {
			ct, err := c.t, c.err
			if err == nil && ct.host == t.host && ct.port == t.port {
				t.transport = ct.transport
				break
			}
		}
	}
	return t
}

// knownAddr reports whether addr is a configured party: in a peer's sources
// or the address of a carrier. A carrier named by a host name (not an IP)
// cannot be matched without DNS, so such a configuration makes every address
// known (documented in the README: use IP addresses for carriers).
func knownAddr(cfg *config.Config, addr netip.Addr) bool {
	if cfg.PeerByAddr(addr) != nil {
		return true
	}
	for _, c := range carrierTargets(cfg) {
		t, err := c.t, c.err
		if err != nil {
			continue
		}
		ip, err := netip.ParseAddr(strings.Trim(t.host, "[]"))
		if err != nil || ip.Unmap() == addr.Unmap() {
			return true
		}
	}
	return false
}

// knownHost reports whether a next hop's host is a configured party (see
// knownAddr); a host name is known only when it is a carrier's.
func knownHost(cfg *config.Config, host string) bool {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return knownAddr(cfg, ip)
	}
	for _, c := range carrierTargets(cfg) {
		if c.err == nil && strings.EqualFold(c.t.host, host) {
			return true
		}
	}
	return false
}

// prepareInDialog's statuses besides SIP codes.
const (
	// dropRequest is for a request that gets no answer at all (an unknown
	// source with sip.unknown_source: drop).
	dropRequest = -1
	// badDialogToken is for an in-dialog INVITE from a known party whose
	// Route entries of the proxy carry no valid dialog token: 403, answered
	// statefully (the source is a configured party, not a stranger).
	badDialogToken = -2
)

// prepareInDialog builds the request forwarded along the route set (req
// itself stays unchanged) and returns where it goes. On
// failure it returns the status to answer: 481 for a request not routed
// through the proxy, 403 for one from or to a party the configuration does
// not know (dropRequest for an unknown source when unknown_source is drop).
// Without that check any host could use the proxy as an unlimited open
// relay by adding a To tag and a Route naming it. An INVITE (re-INVITE)
// must also bring back the dialog token of its Call-ID in one of the
// proxy's own Route entries (badDialogToken otherwise): a To tag and a
// Route are easy to forge, and without the token a peer could send new
// calls to a carrier as "re-INVITEs", past admission and pacing. Other
// methods create no call at a carrier and are not checked (a BYE must
// work across a restart whatever the key).
func (p *Proxy) prepareInDialog(req *sipmsg.Request) (*sipmsg.Request, target, int) {
	cfg := p.cfg()
	src, ok := sourceAddr(req)
	if !ok || !knownAddr(cfg, src) {
		p.m.SIPErrors.WithLabelValues("unknown_source").Inc()
		if cfg.SIP.UnknownSource == "drop" {
			return nil, target{}, dropRequest
		}
		return nil, target{}, sipmsg.StatusForbidden
	}
	out := forwardCopy(req)
	var popped int
	tokenOK := true
	if req.IsInvite() {
		popped, tokenOK = popOwnRoutesToken(p, cfg, out)
	} else {
		popped = popOwnRoutes(p, out)
	}
	if popped == 0 {
		return nil, target{}, sipmsg.StatusCallTransactionDoesNotExists
	}
	if !tokenOK {
		p.m.SIPErrors.WithLabelValues("bad_dialog_token").Inc()
		return nil, target{}, badDialogToken
	}
	t := nextTarget(cfg, out)
	if !knownHost(cfg, t.host) {
		p.m.SIPErrors.WithLabelValues("unknown_destination").Inc()
		return nil, target{}, sipmsg.StatusForbidden
	}
	decMaxForwards(out)
	lo := addVia(p, out, t.transport)
	out.SetTransport(t.transport)
	out.SetDestination(t.hostPort())
	out.Laddr = lo.laddr
	return out, t, 0
}

// forwardInDialog relays a request inside a dialog (BYE, re-INVITE, UPDATE,
// INFO, …) statefully along its route set. It is not limited.
func (p *Proxy) forwardInDialog(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	out, t, code := p.prepareInDialog(req)
	switch code {
	case 0:
	case dropRequest:
		return
	case sipmsg.StatusForbidden:
		// A stranger's source may be spoofed: answer once, keep no state.
		p.answerOnce(req, tx, code, "Forbidden")
		return
	case badDialogToken:
		if p.log.Enabled(context.Background(), slog.LevelDebug) {
			p.log.Debug("re-INVITE without a valid dialog token refused", "call_id", callID(req), "source", req.Source())
		}
		p.answer(req, tx, sipmsg.StatusForbidden, "Forbidden")
		return
	default:
		p.answer(req, tx, code, "Call/Transaction Does Not Exist")
		return
	}
	if mf := req.MaxForwards(); mf != nil && mf.Val() == 0 {
		p.answer(req, tx, sipmsg.StatusTooManyHops, "Too Many Hops")
		return
	}
	var ticket gateTicket
	if req.IsInvite() {
		cfg := p.cfg()
		if car := carrierAt(cfg, t); car != nil {
			tk, ok := p.paceInDialog(cfg, car, req)
			if !ok {
				p.answer(req, tx, sipmsg.StatusServiceUnavailable, "Service Unavailable")
				return
			}
			ticket = tk
		}
	}
	cctx, cancel := requestCtx(t)
	ctx, err := p.tl.Request(cctx, out)
	cancel()
	if err != nil {
		p.log.Debug("in-dialog forward failed", "method", string(req.Method), "call_id", callID(req), "error", err)
		p.answer(req, tx, sipmsg.StatusServiceUnavailable, "Service Unavailable")
		return
	}
	p.sentAt(ticket)
	upstream := upstreamOf(req)
	relay := func(r *sipmsg.Response) {
		if err := tx.Respond(relayResponse(r, upstream, req.Transport())); err != nil {
			p.log.Debug("relay failed", "status", r.StatusCode, "error", err)
		}
	}
	// A CANCEL of an in-dialog INVITE is answered by sipgo (200, and 487 to
	// the re-INVITE); the forwarded re-INVITE is cancelled here.
	var cancelled <-chan struct{}
	var acked atomic.Pointer[sipmsg.Request]
	if req.IsInvite() {
		ch := make(chan struct{})
		var once sync.Once
		if !tx.OnCancel(func(*sipmsg.Request) { once.Do(func() { close(ch) }) }) {
			once.Do(func() { close(ch) })
		}
		cancelled = ch
		ctx.OnRetransmission(func(r *sipmsg.Response) {
			if !r.IsSuccess() {
				return
			}
			if ack := acked.Load(); ack != nil {
				_ = p.tp.WriteMsg(ack)
				return
			}
			relay(r)
		})
	}
	// Only an INVITE needs a bound of its own (it may ring for minutes, and
	// a CANCEL shortens the wait); any other client transaction ends on its
	// own Timer F (ctx.Done) when no final response comes.
	var (
		limit  *time.Timer
		limitC <-chan time.Time
	)
	if req.IsInvite() {
		limit = time.NewTimer(ringTimeout)
		defer limit.Stop()
		limitC = limit.C
	}
	var gotAny, cancelPending, cancelSent bool
	sendCancel := func() {
		cancelSent = true
		p.cancelUpstream(out)
		limit.Reset(cancelTimeout)
	}
	for {
		select {
		case r := <-ctx.Responses():
			gotAny = true
			if cancelPending && !cancelSent && r.IsProvisional() {
				sendCancel()
			}
			if r.StatusCode == 100 {
				continue
			}
			if cancelSent || cancelPending {
				// The caller already has its 487.
				if r.IsSuccess() {
					// The answer crossed the CANCEL: nobody upstream will
					// ACK it, so ACK it here (the dialog itself goes on).
					acked.Store(p.ackInDialog(out, r))
				}
				if !r.IsProvisional() {
					return
				}
				continue
			}
			relay(r)
			if !r.IsProvisional() {
				return
			}
		case <-cancelled:
			cancelled = nil
			if gotAny {
				sendCancel()
			} else {
				// No CANCEL before a provisional response (RFC 3261 9.1).
				cancelPending = true
				limit.Reset(cancelTimeout)
			}
		case <-ctx.Done():
			p.answer(req, tx, sipmsg.StatusRequestTimeout, "Request Timeout")
			return
		case <-limitC:
			ctx.Terminate()
			if !cancelSent && !cancelPending {
				p.answer(req, tx, sipmsg.StatusRequestTimeout, "Request Timeout")
			}
			return
		case <-p.base.Done():
			// Shutdown: stop waiting; the transaction ends on its own timers.
			p.answer(req, tx, sipmsg.StatusServiceUnavailable, "Service Unavailable")
			return
		}
	}
}

// requestOf builds a request the proxy originates in the dialog of inv, a
// request it forwarded: method to ruri, inv's SIP version, its Route set
// (when routes), Max-Forwards 70, inv's From and Call-ID, the given To
// (the answer's, with the callee's tag, or inv's own), CSeq seq, no body.
// The caller adds the Via and the addressing.
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
	r.AppendHeader(sipmsg.HeaderClone(inv.From()))
	r.AppendHeader(sipmsg.HeaderClone(to))
	r.AppendHeader(sipmsg.HeaderClone(inv.CallID()))
	r.AppendHeader(&sipmsg.CSeqHeader{SeqNo: seq, MethodName: method})
	r.SetBody(nil)
	return r
}

// ackInDialog ACKs a 2xx to a forwarded in-dialog INVITE along the same
// route set, and returns the ACK so retransmissions of the 2xx can be
// ACKed again.
func (p *Proxy) ackInDialog(inv *sipmsg.Request, ok *sipmsg.Response) *sipmsg.Request {
	ack := requestOf(inv, sipmsg.ACK, *inv.Recipient.Clone(), true, ok.To(), inv.CSeq().SeqNo)
	lo := addVia(p, ack, inv.Transport())
	ack.SetTransport(inv.Transport())
	ack.SetDestination(inv.Destination())
	ack.Laddr = lo.laddr
	if err := p.tp.WriteMsg(ack); err != nil {
		p.log.Debug("ACK of a crossing 2xx failed", "call_id", callID(inv), "error", err)
	}
	return ack
}

// onAck forwards ACKs for 2xx along the route set, statelessly. ACKs for
// the proxy's own or relayed non-2xx responses are absorbed by sipgo's
// INVITE server transaction and never reach this handler.
func (p *Proxy) onAck(req *sipmsg.Request, _ sipmsg.ServerTransaction) {
	out, _, code := p.prepareInDialog(req)
	if code != 0 {
		return
	}
	if mf := req.MaxForwards(); mf != nil && mf.Val() == 0 {
		return // no hops left (an ACK is never answered, so just drop it)
	}
	if err := p.tp.WriteMsg(out); err != nil {
		p.log.Debug("ACK forward failed", "call_id", callID(req), "error", err)
	}
}

// onCancel answers a CANCEL that matches no INVITE transaction (sipgo
// handles the matching ones: 200 to the CANCEL, 487 to the INVITE, and the
// call's handler is told).
func (p *Proxy) onCancel(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	p.answer(req, tx, sipmsg.StatusCallTransactionDoesNotExists, "Call/Transaction Does Not Exist")
}

// onOptions answers out-of-dialog OPTIONS (keepalives) with 200 OK and
// forwards in-dialog ones.
func (p *Proxy) onOptions(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	if inDialog(req) {
		p.forwardInDialog(req, tx)
		return
	}
	res := sipmsg.NewResponseFromRequest(req, sipmsg.StatusOK, "OK", nil)
	res.AppendHeader(sipmsg.NewHeader("Allow", allowed))
	res.AppendHeader(sipmsg.NewHeader("Accept", "application/sdp"))
	if err := tx.Respond(res); err != nil {
		p.log.Debug("respond failed", "method", "OPTIONS", "error", err)
	}
}

// onOther handles every other method: in a dialog it is forwarded; out of
// a dialog the proxy does not serve it (405).
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
}

// answerOnce sends the proxy's own final response once and ends the server
// transaction at once, for requests from or to parties the configuration
// does not know (their source may be spoofed). Left to sipgo, the
// transaction would live on after the handler returns (TerminateGracefully
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
