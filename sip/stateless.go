package sip

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/dialogtoken"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/oc"
	"github.com/cpsguard/cpsguard/sip/internal/opaque"
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
// response needs, authenticated: the branch is statelessBranchPrefix
// followed by, in opaque's text (which cannot spell a header name), a
// flags byte (the direction), the call's key
// (ends.go) and the first statelessMACBytes bytes of an HMAC-SHA256 (under
// the dialog-token key, token.go) over
//
//   - the upstream Via as the proxy forwarded it (transport, host, port,
//     branch, and the received and rport parameters the proxy set from the
//     packet's source: where the response will go),
//   - the Call-ID, the CSeq number and method,
//   - the next hop's IP (where the response must come from),
//   - the flags and the call key.
//
// It is deterministic, so a retransmission gets the same branch (16.11)
// and the next hop recognises it. A response whose top Via branch has the
// prefix is never shown to sipgo (it has no transaction for it): it is
// relayed only when the MAC verifies over the response's own second Via,
// Call-ID, CSeq and packet source IP, with the proxy's Via removed and sent
// to the address that second Via names (received, rport: RFC 3261 18.2.2,
// RFC 3581). Anything else is dropped and counted in
// cpsguard_sip_errors_total (reason forged_response, or stateless_response
// for one that cannot be relayed statelessly at all). A response with a
// forged proxy Via is thus never relayed anywhere.

// statelessBranchPrefix begins the branch of the proxy's Via on a request
// relayed statelessly. The proxy's stateful branches are the magic cookie
// and a '.' (opaque.Branch, as sipgo's GenerateBranchN), so none of them
// starts with it.
const statelessBranchPrefix = sipmsg.RFC3261BranchMagicCookie + "-cgs-"

// statelessMACBytes is how much of the HMAC a stateless branch keeps (96 bits).
const statelessMACBytes = 12

// statelessMACDomain starts the MAC's input: a dialog token's payload
// starts with its version byte (2), so the two MACs never share an input.
const statelessMACDomain = "cgs1"

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
	own, up := topVias(out)
	if own == nil || up == nil || viaMangled(up) {
		return false
	}
	if code := p.admitInDialog(&hop, true, req); code != 0 {
		p.stateless(req, code, refusalReason(code))
		return true
	}
	setReceived(up, src)
	var flags byte
	if hop.dir == fromCarrier {
		flags |= branchFromCarrier
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

// topVias returns the first two Via values of m (the proxy's own and the
// upstream one on a forwarded request), nil when missing.
func topVias(m msgpart.HeaderList) (first, second *sipmsg.ViaHeader) {
	for _, h := range m.Headers() {
		if !msgpart.IsVia(h) {
			continue
		}
		v, ok := h.(*sipmsg.ViaHeader)
		if !ok {
			return nil, nil
		}
		if first == nil {
			first = v
			continue
		}
		return first, v
	}
	return first, nil
}

// viaMangled reports a Via whose parameters sipgo's parser (v1.7.2)
// mangled: a quoted value makes the rest of the header one key, and the
// next key start with ';' (oc.Mangled). Such a Via, forwarded,
// comes back in the response parsed differently again (a received set
// after the quoted value is no longer a parameter of its own), so the
// MAC of the stateless relay could not verify it: it is left to the
// stateful relay, whose transaction matches the response instead.
func viaMangled(v *sipmsg.ViaHeader) bool { return oc.Mangled(v) }

// setReceived makes up, the top Via of a request received from src over
// UDP, name where its responses go, as sipgo's stateful path would send
// them (msgpart.UpstreamOf): received is the packet's source IP whenever the
// sent-by host is not that IP or a received is present already (a
// received the sender wrote itself is never trusted), and an rport
// parameter is set to the packet's source port (RFC 3581 4). up is the
// forwarded request's own copy (msgpart.ForwardCopy).
func setReceived(up *sipmsg.ViaHeader, src netip.AddrPort) {
	if up.Params == nil {
		up.Params = sipmsg.NewParams()
	}
	ip := src.Addr().Unmap().WithZone("")
	host, err := netip.ParseAddr(strings.Trim(up.Host, "[]"))
	if err != nil || host.Unmap().WithZone("") != ip || up.Params.Has("received") {
		up.Params.Add("received", ip.String())
	}
	if up.Params.Has("rport") {
		up.Params.Add("rport", strconv.Itoa(int(src.Port())))
	}
}

// statelessDest is where a response whose next Via is up goes: the
// received IP (else the sent-by host, which must be an IP), the rport
// port (else the sent-by port, else 5060). ok is false when up names no
// IP address.
func statelessDest(up *sipmsg.ViaHeader) (netip.AddrPort, bool) {
	host := strings.Trim(up.Host, "[]")
	if r, ok := up.Params.Get("received"); ok {
		host = r
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}, false
	}
	port := up.Port
	if r, ok := up.Params.Get("rport"); ok && r != "" {
		n, err := strconv.Atoi(r)
		if err != nil {
			return netip.AddrPort{}, false
		}
		port = n
	}
	if port <= 0 {
		port = sipmsg.DefaultPort("UDP")
	}
	if port > 65535 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}

// statelessInput is the MAC's input besides the Call-ID (see the top of
// this file): the upstream Via's routing fields, the CSeq and the next
// hop's IP. Every field is length-prefixed and taken byte for byte (no
// case folding), so no two different Vias give one input: a Via whose
// host or parameters hold a separator cannot pass for another that sends
// the response elsewhere. It is appended to b (a caller's stack buffer:
// statelessInputBytes covers the usual input) and returned.
func statelessInput(b []byte, up *sipmsg.ViaHeader, cseq *sipmsg.CSeqHeader, next netip.Addr) []byte {
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(statelessMACDomain)
	field(up.Transport)
	field(up.Host)
	b = binary.AppendVarint(b, int64(up.Port))
	for _, k := range []string{"branch", "received", "rport"} {
		v, ok := up.Params.Get(k)
		if ok {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		field(v)
	}
	if cseq != nil {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(cseq.SeqNo))
		field(string(cseq.MethodName))
	} else {
		b = append(b, 0)
	}
	next = next.Unmap().WithZone("")
	if !next.IsValid() {
		field(next.String()) // "invalid IP", as before; AppendTo writes nothing
		return b
	}
	// Addr.AppendTo writes what Addr.String returns, without a string.
	var ip [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")]byte
	t := next.AppendTo(ip[:0])
	b = binary.AppendUvarint(b, uint64(len(t)))
	return append(b, t...)
}

// statelessInputBytes sizes the stack buffers statelessInput appends to:
// enough for a Via of a usual length (a longer input grows onto the heap).
const statelessInputBytes = 256

// Flags of a stateless branch.
const (
	// branchFromCarrier: the request came from the dialog's carrier leg
	// (its callee's tag is its From tag).
	branchFromCarrier = 1 << 0
)

// statelessBranchBytes is a stateless branch's length before encoding:
// flags, the call key, the MAC.
const statelessBranchBytes = 1 + len(callKey{}) + statelessMACBytes

// statelessMACOf is the MAC of a stateless branch under k.
func statelessMACOf(k *tokenKey, in []byte, flags byte, key callKey, id string) (sum [sha256.Size]byte) {
	in = append(in, flags)
	in = append(in, key[:]...)
	k.Sum(&sum, in, id, "")
	return sum
}

// statelessBranch is the branch of the proxy's Via on a request m relayed
// statelessly to next, whose upstream Via is up, under the current key:
// flags and the call key in clear (the far leg's response brings them
// back: ends.go), then the MAC over them and statelessInput.
func (p *Proxy) statelessBranch(cfg *config.Config, up *sipmsg.ViaHeader, m sipmsg.Message, next netip.Addr, flags byte, key callKey) string {
	var in [statelessInputBytes]byte
	sum := statelessMACOf(p.keys.keys(cfg).cur, statelessInput(in[:0], up, m.CSeq(), next), flags, key, msgpart.CallID(m))
	var b [statelessBranchBytes]byte
	b[0] = flags
	copy(b[1:], key[:])
	copy(b[1+len(key):], sum[:statelessMACBytes])
	// The prefix and the encoding built in place: one allocation, the
	// string's.
	var out [len(statelessBranchPrefix) + statelessBranchChars]byte
	copy(out[:], statelessBranchPrefix)
	if p.keys.text(cfg) == dialogtoken.Base64URL {
		// A node of an older release in the pool reads only this.
		base64.RawURLEncoding.Encode(out[len(statelessBranchPrefix):], b[:])
		return string(out[:len(statelessBranchPrefix)+statelessBranchChars64])
	}
	opaque.Encode(out[len(statelessBranchPrefix):], b[:])
	return string(out[:])
}

// statelessBranchChars is a stateless branch's length in opaque's text
// (no padding), without its prefix.
const statelessBranchChars = (statelessBranchBytes*8 + 4) / 5

// statelessBranchChars64 is the length of a stateless branch of an
// earlier release, in base64url: a pool's nodes of both releases relay
// each other's answers during an upgrade.
const statelessBranchChars64 = (statelessBranchBytes*8 + 5) / 6

// decodeStatelessBranch decodes the part of a stateless branch after its
// prefix, into a stack buffer: exactly statelessBranchChars of opaque's
// text, or statelessBranchChars64 of base64url (an earlier release's, and
// this one's while such a node is in the pool), decode to
// statelessBranchBytes. The two texts of one branch both decode: the MAC
// binds the bytes, and nothing keys on the text.
func decodeStatelessBranch(enc string) (raw [statelessBranchBytes]byte, ok bool) {
	var n int
	switch len(enc) {
	case statelessBranchChars:
		n, ok = opaque.Decode(raw[:], enc)
	case statelessBranchChars64:
		n, ok = dialogtoken.DecodeBase64URL(raw[:], enc)
	}
	return raw, ok && n == statelessBranchBytes
}

// statelessBranchOf reports whether res's top Via is the proxy's on a
// request it relayed statelessly.
func statelessBranchOf(res *sipmsg.Response) bool {
	v := res.Via()
	if v == nil {
		return false
	}
	b, _ := v.Params.Get("branch")
	return strings.HasPrefix(b, statelessBranchPrefix)
}

// relayStatelessResponse relays a response to a request the proxy relayed
// statelessly (its top Via branch has statelessBranchPrefix), from the
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
	own, up := topVias(res)
	if own == nil || up == nil || res.Transport() != "UDP" {
		drop("stateless_response")
		return
	}
	branch, _ := own.Params.Get("branch")
	raw, decoded := decodeStatelessBranch(strings.TrimPrefix(branch, statelessBranchPrefix))
	if !decoded || raw[0]&^branchFromCarrier != 0 {
		drop("forged_response")
		return
	}
	flags := raw[0]
	var key callKey
	copy(key[:], raw[1:])
	mac := raw[1+len(key):]
	var inb [statelessInputBytes]byte
	in := statelessInput(inb[:0], up, res.CSeq(), src)
	s := p.keys.keys(cfg)
	ok := false
	for _, k := range []*tokenKey{s.cur, s.prev} {
		if k == nil {
			continue
		}
		want := statelessMACOf(k, in, flags, key, msgpart.CallID(res))
		if hmac.Equal(mac, want[:statelessMACBytes]) {
			ok = true
			break
		}
	}
	if !ok {
		drop("forged_response")
		return
	}
	dest, ok := statelessDest(up)
	if !ok {
		drop("stateless_response")
		return
	}
	if res.StatusCode == sipmsg.StatusTrying {
		return // hop by hop, as the stateful relay does
	}
	if res.StatusCode >= 200 {
		p.statelessDone(res, up, flags, key)
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
	if flags&branchFromCarrier != 0 {
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
