package sip

import (
	"bytes"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/load"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/rawsip"
	"github.com/cpsguard/cpsguard/sip/internal/refusals"
)

// Shedding from raw bytes.
//
// sipgo's UDP transport reads and parses every datagram in one loop, and
// only then does the screen see it. Under overload most datagrams are new
// initial INVITEs the screen sheds with a stateless 503 (overload.go), and
// parsing each one and building its 503 through sipgo's message types
// costs that loop ~30 µs and thirty allocations: the loop falls behind,
// the socket buffer holds seconds of datagrams, and the BYEs, ACKs and
// carriers' answers of the calls already admitted wait behind them
// (BENCHMARKS.md, issue 15).
//
// So the UDP worker, which sees the raw bytes before sipgo parses them,
// sheds those INVITEs itself while the node is at its inflight bound (never
// a priority call's, priorityRaw: those go on to the parser): it
// reads the few lines the answer is made of, and writes the 503 the screen
// would have written. It is an optimisation only, and a conservative one:
// any message it does not recognise in full goes on to the parser and the
// screen as before. It answers only
//
//   - a datagram from a peer's source (never a stranger's, nor a
//     carrier's: the screen takes a unit only for peers' INVITEs),
//   - while the inflight bound is taken,
//   - that is an INVITE without a To tag, with a From tag, and without a
//     Route value that may carry a dialog token (any "cg", in any case:
//     the screen takes a request with a cg parameter, valued or not, for
//     one inside a dialog, whatever its tags), of the
//     plain form scanInvite accepts, which sipgo would parse (every header
//     sipgo parses with a parser of its own is parsed here too, with
//     sipgo's parser, or by a stricter grammar) and the screen would find
//     well formed,
//   - whose top Via does not ask for overload control (an "oc"
//     parameter: the screen's answer carries the node's values, oc.go),
//   - and that is not a copy of an INVITE in the invite table (a
//     retransmission of a call being decided, or one just answered, which
//     the screen handles: 100 Trying, or a new decision), nor of one whose
//     transaction key the proxy refused in the last 32 s (refused.go: the
//     screen, or shedParsed when the lane has no room, answers it with
//     that refusal again),
//
// and its answer has exactly the screen's content (shedResponse's): the
// request's Via headers (rport and received added to the top one as sipgo
// does), From, To with a shed tag, Call-ID and CSeq, sent to the packet's
// source from the socket it arrived on, counted rejected_overload, and
// remembered as a refusal, so that its copies get the same answer.
// FuzzRawShed and TestRawShedMatchesScreen hold it to that.

// inviteStart is how a datagram the raw path may shed begins.
var inviteStart = rawsip.InviteStart

// The raw scanner (package rawsip) as this package names it.
type rawInvite = rawsip.Invite

// scanInvite reads an INVITE from raw bytes (rawsip.ScanInvite).
func scanInvite(data []byte) (rawInvite, bool) { return rawsip.ScanInvite(data) }

// shedAckRaw reports an ACK of one of the proxy's stateless overload
// answers (its To tag has the shed prefix), read from raw bytes: the
// screen drops those (shedAck) after sipgo parsed them, one parse per
// shed call. Dropping an ACK costs its sender nothing the screen would
// have given it; an ACK of a form scanned only in part goes on to sipgo.
func shedAckRaw(data []byte) bool { return rawsip.ShedAck(data, shedTag) }

// shedBufs are the buffers raw 503s are written into.
var shedBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxUDPAnswer is the largest datagram sipgo's UDP transport sends
// (UDPMTUSize-200): a larger answer is left to the screen, which fails to
// send it the same way.
func maxUDPAnswer() int { return sipmsg.UDPMTUSize - 200 }

// shedRawFrom answers a new initial INVITE from a peer, read from conn,
// with the screen's stateless 503 from its raw bytes while the inflight
// bound is taken, or whenever force is set (its party's share of the
// new-call lane is full: ingress.go; then an INVITE the raw path does not read is parsed and
// answered by shedParsed, while budget allows); true when it did (the
// datagram is consumed).
func (p *Proxy) shedRawFrom(conn *net.UDPConn, from netip.AddrPort, data []byte, force bool, budget *parseBudget) bool {
	if !bytes.HasPrefix(data, inviteStart) || len(data) > MaxMessageSize {
		return false
	}
	if from.Addr().Zone() != "" {
		return false // a zoned source is matched with its zone by the screen
	}
	cfg := p.cfg()
	if cfg == nil {
		return false
	}
	peer := cfg.PeerByAddr(from.Addr().Unmap())
	if peer == nil {
		return false
	}
	bound := p.inflight.Load() >= load.Limit(cfg)
	if !force && !bound {
		return false
	}
	if !force && priorityRaw(cfg, peer, data) {
		// Never shed: the parsed path takes it (priority.go). A forced
		// shed's caller, shedDatagram, has looked already.
		return false
	}
	inv, ok := scanInvite(data)
	var txKey string
	if ok {
		txKey = inv.TxKey()
		if p.invites.Has(invites.Key(txKey)) {
			return false
		}
		if p.refused.HasTx(p.refused.TxHashString(txKey), time.Now()) {
			// Maybe a copy of an INVITE the proxy refused: the screen
			// answers it again (refused.go), or, when its lane has no
			// room, shedParsed does within its budget.
			return force && p.shedParsed(conn, from, data, peer.Name, bound, budget)
		}
	}
	raddr := net.UDPAddrFromAddrPort(from)
	bp := shedBufs.Get().(*[]byte)
	defer shedBufs.Put(bp)
	var out []byte
	n := rand.Uint64()
	if ok {
		out, ok = inv.AppendShed((*bp)[:0], raddr.String(), shedTag+strconv.FormatUint(n, 36))
		*bp = out[:0]
	}
	if !ok || len(out) > maxUDPAnswer() {
		return force && p.shedParsed(conn, from, data, peer.Name, bound, budget)
	}
	// Its copies get this answer again (refused.go).
	p.refused.Remember(p.refused.TxHashString(txKey),
		refusals.Refusal{Attempt: p.refused.AttemptHash(inv.CallID(), inv.FromTag(), inv.CSeqNo(), from, "UDP"),
			Code: sipmsg.StatusServiceUnavailable, Reason: "Overloaded", Shed: true, ShedN: n}, time.Now())
	p.m.Calls.WithLabelValues(peer.Name, metrics.OutcomeRejectedOverload).Inc()
	p.noteShed(peer.Name, time.Now(), bound)
	p.rawSheds.Add(1)
	if _, err := conn.WriteTo(out, raddr); err != nil {
		p.log.Debug("stateless answer failed", "status", sipmsg.StatusServiceUnavailable, "error", err)
	}
	return true
}

// shedParsed is shedRawFrom's answer, when the new-call lane has no room
// for it, to a peer's INVITE the raw path does not read (a quoted Via
// parameter, such as an overload-control client's oc-algo="loss", or any
// other form it leaves to sipgo): the node's parser (sipgo's message,
// wire.Parser) reads it here, on the
// shed lane's worker, and it gets the content of the screen's stateless
// 503 (shedResponse), with the overload-control values it asks for.
// Dropped instead, it would be retransmitted into a queue that is
// still full until its caller gave up: measured, half of a 10,000 CPS
// flood of such INVITEs got no final answer at all (BENCHMARKS.md, issue
// 15, session 7). bound says whether the inflight bound is taken too
// (noteShed).
//
// As in the raw path, it answers only a well-formed initial INVITE that
// is not a copy of one in the invite table (a copy of one the proxy
// refused gets that refusal again: refused.go); anything else is dropped by
// the caller and counted read_queue_full. Like the raw path's, the
// answer goes to the packet's source, from the socket the INVITE arrived
// on (the screen's goes to the source IP and the Via's port when the Via
// has no rport).
func (p *Proxy) shedParsed(conn *net.UDPConn, from netip.AddrPort, data []byte, peer string, bound bool, budget *parseBudget) bool {
	if p.parser == nil || len(data) > parsedMaxSize || bytes.Count(data, semicolon)+bytes.Count(data, ampersand) > parsedMaxParams ||
		!budget.take(time.Now(), len(data)) {
		return false
	}
	m, err := p.parser.ParseSIP(data)
	if err != nil {
		return false
	}
	req, ok := m.(*sipmsg.Request)
	if !ok {
		return false
	}
	req.SetTransport("UDP")
	req.SetSource(from.String())
	if !wellFormed(req) || !req.IsInvite() || p.inDialog(req) || msgpart.Tag(req.From().Params) == "" {
		return false
	}
	if p.answerRefusedCopy(req, peer) {
		return true // a copy of an INVITE the proxy refused, answered again
	}
	if p.invites.Has(invites.KeyOf(req)) {
		return false
	}
	if pe := p.cfg().PeerByAddr(from.Addr().Unmap()); pe != nil && isPriority(p.cfg(), pe, req) {
		// Never shed (priority.go): handled as if it had found room.
		p.deliverUDP(conn, from, req)
		return true
	}
	res := shedResponse(req, shedTag+strconv.FormatUint(rand.Uint64(), 36))
	p.ocMarkOwn(peer, res)
	out := []byte(res.String())
	if len(out) > maxUDPAnswer() {
		return false
	}
	p.rememberRefusal(req, res, false) // its copies get this answer again
	p.m.Calls.WithLabelValues(peer, metrics.OutcomeRejectedOverload).Inc()
	p.noteShed(peer, time.Now(), bound)
	if _, err := conn.WriteToUDPAddrPort(out, from); err != nil {
		p.log.Debug("stateless answer failed", "status", sipmsg.StatusServiceUnavailable, "error", err)
	}
	return true
}

// shedParsed's bounds on the node: it parses only datagrams up to
// parsedMaxSize, and at most parsedBytes of them per parsedWindow. sipgo's
// parse and the 503 cost about 1 s per 30-50 MB of INVITE, whatever its
// headers (BenchmarkShedParsed, a plain INVITE: 7 µs;
// BenchmarkShedParsedRecordRoute, 3.9 KB with its Record-Route list:
// 106 µs), so this bounds such parsing to about a seventh of a core.
// Time itself would be a worse measure: on a busy machine a parse's
// wall-clock time is mostly waiting for a core. Beyond the budget such
// INVITEs are dropped and counted as before, so a peer flooding forms the
// raw path does not read cannot make the workers fall behind.
//
// Parameters are the exception: sipgo looks a parameter list up before
// each insertion, so a header of n parameters costs n² (a 4 KB Via of
// 1,000 one-character parameters took 7 ms to parse; 1,000 URI headers
// joined by '&', 2 ms). A datagram with more than parsedMaxParams of
// those separators is not parsed here; a plain INVITE has a dozen or two.
const (
	parsedMaxSize   = 4096
	parsedMaxParams = 128
	parsedWindow    = 100 * time.Millisecond
	parsedBytes     = 512 << 10
)

// The separators of the parameters sipgo parses one lookup at a time:
// header and URI parameters (;) and URI headers (&).
var semicolon, ampersand = []byte{';'}, []byte{'&'}

// parseBudget bounds shedParsed's parsing on the node (all workers
// together). Safe for concurrent use; nil allows nothing.
type parseBudget struct {
	mu    sync.Mutex
	start time.Time // of the current window
	bytes int       // parsed in it
}

// take spends n bytes of parsing at now, or reports false when this
// window has not that many left.
func (b *parseBudget) take(now time.Time, n int) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.start) >= parsedWindow || now.Before(b.start) {
		b.start, b.bytes = now, 0
	}
	if b.bytes+n > parsedBytes {
		return false
	}
	b.bytes += n
	return true
}

// udpConnOf returns the UDP listener whose local address is la, or nil.
func (p *Proxy) udpConnOf(la net.Addr) *net.UDPConn {
	for _, l := range p.listeners {
		if l.udp == nil {
			continue
		}
		if a := l.udp.LocalAddr(); a == la || (la != nil && a.String() == la.String()) {
			return l.udp
		}
	}
	return nil
}
