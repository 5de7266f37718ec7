package sip

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/refusals"
)

// Refused INVITEs: the Completed state of their transactions, kept cheap.
//
// The proxy's own final answer to a call it never forwarded (a limit's
// 503 or 486, 403, max_calls full, route down, a store failure, a shed at
// the inflight bound, 483, 487 to a call cancelled while queued) ends the
// call's transaction at once: sent once, no retransmissions towards a
// source that may be spoofed, no timers. RFC 3261 17.2.1 keeps an INVITE
// server transaction in Completed state for Timer H (64·T1 = 32 s), where
// a retransmitted INVITE gets the final answer again and never reaches
// the TU. Without it, a copy of a refused INVITE (one that crossed the
// refusal on the wire, or a UDP retransmission after the caller's Timer A)
// was a new transaction to sipgo and a new decision: counted and recorded
// a second time, and, once the rolling window had room again, admitted
// and forwarded to a carrier although its caller had the final refusal of
// that transaction (and ACKed it): a call nobody ACKs, on a carrier slot
// and window place the configuration never granted.
//
// So every such refusal is remembered for refusals.TTL in a refusals.Table: the
// attempt (its transaction key as sipgo and the invite table form it: top
// Via branch and sent-by; and, as the admission member adds them, its
// Call-ID, CSeq number, packet source and transport; and its From tag,
// which a spoofer of the peer's source cannot guess: refusals.Table.AttemptHash) and the answer
// (code, reason, To tag, Retry-After). A copy that matches all of them
// gets the same final answer again from the screen, statelessly and built
// from the copy (one answer per datagram received: no amplification), and
// goes no further: no decision, no count in cpsguard_calls_total, no
// record, no forward; it is counted in
// cpsguard_sip_errors_total{reason="refused_copy"}. Its ACK ends as the
// first one's did. An INVITE that differs in any of them is another
// attempt, decided as any.
//
// A forwarded call's final refusal (the carrier's, relayed, or the
// node's own after the forward: all carriers failed) is remembered too:
// sipgo's server transaction absorbs the INVITE's copies only until the
// caller's ACK and Timer I (T4, 5 s) after it, and a copy after that was
// decided and forwarded again. An answered call's copies are the invite
// table's (its tombstone absorbs them, screen.go).
//
// The table is the bound on what this costs under a flood of refusals:
// at most refusals.Max attempts (the oldest go first when it is full), two
// 64-bit hashes and the answer's few fields each (about 16 MB at the
// bound; a carrier's reason phrase and To tag are copies of
// refusedMaxText bytes at most, so its answers of kilobytes add no more
// than 16 MB), nothing per source, no timer; remembering one of the
// proxy's own is two hashes and a map write under one of the table's 16
// locks, with no allocation (TestRememberOwnRefusalAllocatesNothing,
// BenchmarkRefusedRemember), and a carrier's costs the two copies more.
// An attempt the table
// forgot (more than refusals.Max refusals in refusals.TTL) is decided again,
// as every copy was before. Hashes are keyed with a random seed per
// process, so a peer cannot make two of its attempts collide on purpose;
// a chance collision could only refuse an attempt, never admit one.
//
// Priority calls need nothing of their own: they are refused by no limit,
// but a refusal of one for another reason (its route down, the store
// failing, a forbidden customer) is its transaction's end like any other,
// and its caller's next attempt (a new branch) is decided afresh.

// refusedMaxText bounds the reason phrase and the To tag a refusal keeps
// (bytes): a forwarded call's are the carrier's, up to MaxMessageSize.
// A longer reason is kept clipped (it is for people); a refusal with a
// longer To tag is not remembered (its copies are left to sipgo's
// transaction while it lasts, then decided again).
const refusedMaxText = 128

// refusalTag is the To tag of the refusal r.
func refusalTag(r *refusals.Refusal) string {
	if r.Shed {
		return shedTag + strconv.FormatUint(r.ShedN, 36)
	}
	return r.Tag
}

// refusedKeys returns the transaction and attempt hashes of an initial
// INVITE (false when its source cannot be read).
func (p *Proxy) refusedKeys(req *sipmsg.Request) (tx, attempt uint64, ok bool) {
	src, err := netip.ParseAddrPort(req.Source())
	cseq := req.CSeq()
	from := req.From()
	if err != nil || cseq == nil || from == nil || req.Via() == nil {
		return 0, 0, false
	}
	var buf [128]byte
	tx = p.refused.TxHash(invites.AppendKey(buf[:0], req))
	var idBuf [128]byte
	id := append(idBuf[:0], msgpart.CallID(req)...)
	var tagBuf [64]byte
	tag := append(tagBuf[:0], msgpart.Tag(from.Params)...)
	return tx, p.refused.AttemptHash(id, tag, cseq.SeqNo, src, req.Transport()), true
}

// rememberRefusal records res, the final refusal of the initial INVITE
// req (refused.go): the proxy's own, or a carrier's when relayed is set.
func (p *Proxy) rememberRefusal(req *sipmsg.Request, res *sipmsg.Response, relayed bool) {
	tx, attempt, ok := p.refusedKeys(req)
	if !ok {
		return
	}
	r := refusals.Refusal{Attempt: attempt, Code: int32(res.StatusCode), Reason: res.Reason}
	if len(r.Reason) > refusedMaxText {
		r.Reason = strings.ToValidUTF8(r.Reason[:refusedMaxText], "")
	}
	if to := res.To(); to != nil {
		tag := msgpart.Tag(to.Params)
		if len(tag) > refusedMaxText {
			return
		}
		r.Tag = tag
	}
	if relayed {
		// Copies, of refusedMaxText at most: a carrier's strings are
		// substrings of its message, which would be held with them. The
		// proxy's own (a constant or configured reason, a To tag made for
		// the answer) are held as they are: no allocation.
		r.Reason, r.Tag = strings.Clone(r.Reason), strings.Clone(r.Tag)
	}
	for _, h := range res.Headers() {
		// Not GetHeader: it lowers the name into a new string each time.
		if strings.EqualFold(h.Name(), "Retry-After") {
			if n, err := strconv.Atoi(strings.TrimSpace(h.Value())); err == nil && n > 0 {
				r.RetryAfter = int32(min(n, 1<<31-1))
			}
			break
		}
	}
	p.refused.Remember(tx, r, time.Now())
}

// answerRefusedCopy answers req, from a peer (its name, for the
// overload-control values it may ask for), with the remembered refusal of
// its attempt, statelessly, and reports whether it did: req is then a
// copy of an INVITE the proxy refused and goes no further.
func (p *Proxy) answerRefusedCopy(req *sipmsg.Request, peer string) bool {
	tx, attempt, ok := p.refusedKeys(req)
	if !ok {
		return false
	}
	r, ok := p.refused.Lookup(tx, attempt, time.Now())
	if !ok {
		return false
	}
	res := sipmsg.NewResponseFromRequest(req, int(r.Code), r.Reason, nil)
	if tag := refusalTag(&r); tag != "" {
		if to := res.To(); to != nil {
			to.Params.Add("tag", tag) // the first answer's, not a new one
		}
	}
	if r.RetryAfter > 0 {
		res.AppendHeader(sipmsg.NewHeader("Retry-After", strconv.Itoa(int(r.RetryAfter))))
	}
	p.ocMarkOwn(peer, res)
	p.m.SIPErrors.WithLabelValues("refused_copy").Inc()
	p.writeStateless(res)
	return true
}
