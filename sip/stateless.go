package sip

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/oc"
	"github.com/cpsguard/cpsguard/sip/internal/statelessbranch"
)

// Stateless relay of in-dialog non-INVITE requests (RFC 3261 16.11).
//
// A BYE (or INFO, UPDATE, NOTIFY, MESSAGE, REFER, PRACK, …) of a dialog
// the proxy set up is relayed from the screen, in the transport's read
// loop, without a sipgo server or client transaction: the end points
// retransmit, and the next hop's server transaction absorbs the copies.
// The request passes exactly the checks of the stateful path
// (prepareInDialog: the dialog token of the proxy's Route entries, the leg
// it comes from; Max-Forwards), a BYE ends its call when the far leg's
// answer says so or none comes (ends.go: pendingByes holds it meanwhile),
// and refusals are one stateless answer, as before. The read loop never waits on the network: only a request that
// arrived over UDP and leaves over UDP to its leg's IP address goes this
// way; anything else (a TCP leg) goes on to sipgo and the stateful path.
//
// The proxy keeps nothing per relayed request (but a BYE's wait for its
// answer, bounded). Its Via on the forwarded request carries everything a
// response needs, authenticated: the branch (package statelessbranch, the
// codec: its bytes, MAC input and text) holds the direction and the
// call's key (ends.go) in clear and a MAC under the dialog-token key
// (token.go) over them, the upstream Via as the proxy forwarded it (with
// the received and rport parameters it set from the packet's source:
// where the response will go), the Call-ID, the CSeq and the next hop's
// IP (where the response must come from). It is deterministic, so a
// retransmission gets the same branch (16.11) and the next hop recognises
// it. A response whose top Via branch has the prefix is never shown to
// sipgo (it has no transaction for it): it is relayed only when the MAC
// verifies over the response's own second Via, Call-ID, CSeq and packet
// source IP, under the current or the previous key, with the proxy's Via
// removed and sent to the address that second Via names (received, rport:
// RFC 3261 18.2.2, RFC 3581). Anything else is dropped and counted in
// cpsguard_sip_errors_total (reason forged_response, or stateless_response
// for one that cannot be relayed statelessly at all). A response with a
// forged proxy Via is thus never relayed anywhere.

// statefulOnly turns the stateless relay off (every in-dialog request goes
// to sipgo's transactions, as before it existed). Only the benchmark of
// the two relays sets it.
var statefulOnly atomic.Bool

// canRelayStateless reports whether the screen relays req itself: an
// in-dialog request other than INVITE, ACK and CANCEL that arrived over UDP.
func (p *Proxy) canRelayStateless(req *sipmsg.Request) bool {
	if req.Transport() != "UDP" || statefulOnly.Load() {
		return false
	}
	switch req.Method {
	case sipmsg.INVITE, sipmsg.ACK, sipmsg.CANCEL:
		return false
	}
	return p.inDialog(req)
}

// screenInDialog relays (or refuses) an in-dialog non-INVITE request that
// arrived over UDP statelessly, from the screen. It returns false when req
// must go on to sipgo instead (another method or transport, or a TCP leg):
// the stateful path then checks it again. From a stranger (screenFormerParty)
// a request whose dialog token does not open, or that does not come from
// its leg, is not answered here either (false: the screen refuses it as
// any stranger's, and counts it so), nor counted as a token's failure: it
// learns nothing of the token.
func (p *Proxy) screenInDialog(cfg *config.Config, req *sipmsg.Request, stranger bool) bool {
	if !p.canRelayStateless(req) {
		return false
	}
	src, err := netip.ParseAddrPort(req.Source())
	if err != nil {
		return false // the stateful path counts it
	}
	hop, code := p.prepareInDialog(req, !stranger)
	if code != 0 && stranger {
		return false
	}
	if code != 0 {
		if code == refuseDialog {
			if p.log.Enabled(context.Background(), slog.LevelDebug) {
				p.log.Debug("in-dialog request without a valid dialog token or from the wrong leg refused",
					"method", string(req.Method), "call_id", msgpart.CallID(req), "source", req.Source())
			}
			p.stateless(req, sipmsg.StatusForbidden, "Forbidden")
		} else {
			p.stateless(req, code, refusalReason(code))
		}
		return true
	}
	if hop.to.Stream() || !hop.to.Addr.Addr().IsValid() {
		return false // a TCP or TLS write may block: the stateful path sends it
	}
	out := hop.out
	own, up := msgpart.TopVias(out)
	if own == nil || up == nil || viaMangled(up) {
		return false
	}
	if code := p.admitInDialog(&hop, true, req); code != 0 {
		p.stateless(req, code, refusalReason(code))
		return true
	}
	statelessbranch.SetReceived(up, src)
	var flags byte
	if hop.dir == fromCarrier {
		flags |= statelessbranch.FromCarrier
	}
	own.Params.Add("branch", p.statelessBranch(cfg, up, out, hop.to.Addr.Addr(), flags, hop.key))
	err = p.writeRequest(context.Background(), out)
	if req.Method == sipmsg.BYE && err == nil {
		// The call ends on the far leg's answer (relayStatelessResponse)
		// or when none comes in time (sweepByes); a BYE that could not be
		// sent (e.g. grown past the largest datagram by the proxy's own
		// headers) leaves the call up, and its places held.
		p.byes.add(pendingBye{key: hop.key, callee: hop.callee}, byOf(hop.dir), time.Now())
	}
	if err != nil {
		p.log.Debug("in-dialog forward failed", "method", string(req.Method), "call_id", msgpart.CallID(req), "error", err)
		p.stateless(req, sipmsg.StatusServiceUnavailable, "Service Unavailable")
	}
	return true
}

// screenAck forwards an ACK of a 2xx from the screen, as onAck does
// (same checks, no transaction either), so that it leaves in the order it
// arrived relative to the BYE that may follow at once: relayed from a
// handler goroutine, the ACK was overtaken by the BYE (relayed from the
// read loop over UDP; over TCP or TLS from another goroutine of sipgo's,
// which hands every message read on a stream to one of its own), and a
// UAS waiting for the ACK (SIPp's, some carriers') failed the call. The
// screen runs in the UDP worker or the stream connection's read loop;
// the ACK leaves over UDP, which never waits. It returns false to leave
// the ACK to sipgo, as before:
//
//   - an ACK whose top Via names an INVITE the proxy is handling or just
//     answered (its invites.Table entry): possibly the ACK of a non-2xx,
//     which sipgo's INVITE server transaction must absorb;
//   - an ACK that fails prepareInDialog (the ACK of the proxy's own or a
//     relayed non-2xx carries no valid token of the proxy): sipgo absorbs
//     it or onAck drops it;
//   - no hop left, Max-Forwards 0 (onAck drops it).
//
// To a carrier over TCP or TLS (a write that may wait) it is sent from a
// goroutine of the node's (ackToStream), with the same checks, and the
// dialog's next requests wait for that (ackorder.go).
func (p *Proxy) screenAck(req *sipmsg.Request) bool {
	if statefulOnly.Load() || !p.inDialog(req) {
		return false
	}
	if p.invites.Has(invites.KeyOf(req)) {
		return false
	}
	hop, code := p.prepareInDialog(req, false)
	if code != 0 {
		return false
	}
	if hop.to.Stream() || !hop.to.Addr.Addr().IsValid() {
		// A write that may wait: sent from a goroutine of the node's, and
		// the dialog's next requests, right behind it, wait for that
		// (ackorder.go).
		p.ackOrder.Begin(ackOrderKey{hop.key, hop.dir}, time.Now())
		go p.ackToStream(hop, req)
		return true
	}
	if p.admitInDialog(&hop, false, req) != 0 {
		return true // ended, or over its rate: dropped
	}
	if err := p.writeRequest(context.Background(), hop.out); err != nil {
		p.log.Debug("ACK forward failed", "call_id", msgpart.CallID(req), "error", err)
		return true
	}
	p.ackPassed(&hop, hop.out)
	return true
}

// ackToStream relays an ACK screenAck let pass to a stream leg (or a leg
// named by host) as onAck does (relayAck), from a goroutine of its own,
// and ends its ackOrder note: every note the screen takes is ended once,
// a copy of the ACK's too (sipgo would absorb a copy with the same
// branch, its note never ended, and the dialog's next request would wait
// out connectTimeout).
func (p *Proxy) ackToStream(hop inDialogHop, req *sipmsg.Request) {
	defer p.panics.Recover("sip.ack", nil)
	defer p.ackOrder.End(ackOrderKey{hop.key, hop.dir})
	p.relayAck(&hop, req)
}

// viaMangled reports a Via whose parameters sipgo's parser (v1.7.2)
// mangled: a quoted value makes the rest of the header one key, and the
// next key start with ';' (oc.Mangled). Such a Via, forwarded,
// comes back in the response parsed differently again (a received set
// after the quoted value is no longer a parameter of its own), so the
// MAC of the stateless relay could not verify it: it is left to the
// stateful relay, whose transaction matches the response instead.
func viaMangled(v *sipmsg.ViaHeader) bool { return oc.Mangled(v) }

// statelessBranch is the branch of the proxy's Via on a request m relayed
// statelessly to next, whose upstream Via is up, under the current key
// and in the text the pool reads: flags and the call key in clear (the
// far leg's response brings them back: ends.go), then the MAC over them
// and statelessbranch.Input.
func (p *Proxy) statelessBranch(cfg *config.Config, up *sipmsg.ViaHeader, m sipmsg.Message, next netip.Addr, flags byte, key callKey) string {
	var in [statelessbranch.InputBytes]byte
	b := statelessbranch.Branch{Flags: flags, Key: key}
	b.Seal(p.keys.keys(cfg).cur, statelessbranch.Input(in[:0], up, m.CSeq(), next), msgpart.CallID(m))
	return b.Text(p.keys.text(cfg))
}

// relayStatelessResponse relays a response to a request the proxy relayed
// statelessly (its top Via branch has statelessbranch.Prefix), from the
// screen, only when the branch's MAC verifies against the response's own
// second Via, Call-ID, CSeq and source IP src; else it drops and counts
// it. sipgo never sees it.
func (p *Proxy) relayStatelessResponse(cfg *config.Config, res *sipmsg.Response, src netip.Addr) {
	drop := func(reason string) {
		p.m.SIPErrors.WithLabelValues(reason).Inc()
		if p.log.Enabled(context.Background(), slog.LevelDebug) {
			p.log.Debug("response to a stateless relay dropped", "reason", reason,
				"status", res.StatusCode, "call_id", msgpart.CallID(res), "source", res.Source())
		}
	}
	own, up := msgpart.TopVias(res)
	if own == nil || up == nil || res.Transport() != "UDP" {
		drop("stateless_response")
		return
	}
	branch, _ := own.Params.Get("branch")
	b, decoded := statelessbranch.Decode(strings.TrimPrefix(branch, statelessbranch.Prefix))
	if !decoded {
		drop("forged_response")
		return
	}
	var inb [statelessbranch.InputBytes]byte
	in := statelessbranch.Input(inb[:0], up, res.CSeq(), src)
	s := p.keys.keys(cfg)
	ok := false
	for _, k := range []*tokenKey{s.cur, s.prev} {
		if k == nil {
			continue
		}
		if b.Verify(k, in, msgpart.CallID(res)) {
			ok = true
			break
		}
	}
	if !ok {
		drop("forged_response")
		return
	}
	dest, ok := statelessbranch.Dest(up)
	if !ok {
		drop("stateless_response")
		return
	}
	if res.StatusCode == sipmsg.StatusTrying {
		return // hop by hop, as the stateful relay does
	}
	if res.StatusCode >= 200 {
		p.statelessDone(res, up, b.Flags, b.Key)
	}
	res.RemoveHeader("Via")
	oc.Strip(res.Via()) // the party below does not speak for the node (oc.go)
	res.SetDestination(dest.String())
	res.SetTransport("UDP")
	p.sendUDPResponse(res)
}

// statelessDone is told of a verified final response to a request the
// proxy relayed statelessly, before it is relayed (up is the Via of the
// request's sender, below the node's): a BYE's ends its wait,
// and its dialog and call when it says so (ends.go). Freeing places may
// wait on the store: not in the read loop.
func (p *Proxy) statelessDone(res *sipmsg.Response, up *sipmsg.ViaHeader, flags byte, key callKey) {
	cseq := res.CSeq()
	if cseq == nil || cseq.MethodName != sipmsg.BYE {
		return
	}
	dir := fromPeer
	if flags&statelessbranch.FromCarrier != 0 {
		dir = fromCarrier
	}
	_, callee := dialogTags(res, dir)
	p.byes.answered(pendingBye{key: key, callee: callee})
	if !endsCall(res.StatusCode, dir) {
		p.challengedBye(key, callee, dir, res.StatusCode)
		return
	}
	// Dead before the answer is relayed: the sender's next request of the
	// dialog is refused (no I/O here; the places are freed below).
	p.dialogEnded(key, callee, res.StatusCode, byeID(cseq.SeqNo, up), dir)
	code := res.StatusCode
	go func() {
		defer p.panics.Recover("sip.bye_ends", nil)
		p.inDialogDone(sipmsg.BYE, key, callee, dir, code)
	}()
}

// sendUDPResponse sends res over UDP to its destination (sendUDP).
func (p *Proxy) sendUDPResponse(res *sipmsg.Response) {
	if err := p.sendUDP(res); err != nil {
		p.log.Debug("stateless relay of a response failed", "status", res.StatusCode, "call_id", msgpart.CallID(res), "error", err)
	}
}
