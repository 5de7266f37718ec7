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
//     Route value that may carry a dialog token (";cg=": the screen takes
//     such a request for one inside a dialog, whatever its tags), of the
//     plain form scanInvite accepts, which sipgo would parse (every header
//     sipgo parses with a parser of its own is parsed here too, with
//     sipgo's parser, or by a stricter grammar) and the screen would find
//     well formed,
//   - whose top Via does not ask for overload control (an "oc"
//     parameter: the screen's answer carries the node's values, oc.go),
//   - and that is not a copy of an INVITE in the invite table (a
//     retransmission of a call being decided, or one just answered, which
//     the screen handles: 100 Trying, or a new decision),
//
// and its answer has exactly the screen's content (shedResponse's): the
// request's Via headers (rport and received added to the top one as sipgo
// does), From, To with a shed tag, Call-ID and CSeq, sent to the packet's
// source from the socket it arrived on, counted rejected_overload.
// FuzzRawShed and TestRawShedMatchesScreen hold it to that.

// tokenParamEq is how a dialog token parameter begins in a Route value.
var tokenParamEq = []byte(tokenParam + "=")

// inviteStart is how a datagram the raw path may shed begins.
var inviteStart = []byte("INVITE ")

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
	bound := p.inflight.Load() >= inflightLimit(cfg)
	if !force && !bound {
		return false
	}
	if !force && priorityRaw(cfg, peer, data) {
		// Never shed: the parsed path takes it (priority.go). A forced
		// shed's caller, shedDatagram, has looked already.
		return false
	}
	inv, ok := scanInvite(data)
	if ok && p.invites.has(inv.key()) {
		return false
	}
	raddr := net.UDPAddrFromAddrPort(from)
	bp := shedBufs.Get().(*[]byte)
	defer shedBufs.Put(bp)
	var out []byte
	if ok {
		out, ok = inv.appendShed((*bp)[:0], raddr.String(), shedTag+strconv.FormatUint(rand.Uint64(), 36))
		*bp = out[:0]
	}
	if !ok || len(out) > maxUDPAnswer() {
		return force && p.shedParsed(conn, from, data, peer.Name, bound, budget)
	}
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
// other form it leaves to sipgo): sipgo's parser reads it here, on the
// shed lane's worker, and it gets the content of the screen's stateless
// 503 (shedResponse), with the overload-control values it asks for.
// Dropped instead, it would be retransmitted into a queue that is
// still full until its caller gave up: measured, half of a 10,000 CPS
// flood of such INVITEs got no final answer at all (BENCHMARKS.md, issue
// 15, session 7). bound says whether the inflight bound is taken too
// (noteShed).
//
// As in the raw path, it answers only a well-formed initial INVITE that
// is not a copy of one in the invite table; anything else is dropped by
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
	if !wellFormed(req) || !req.IsInvite() || p.inDialog(req) || tagOf(req.From().Params) == "" || p.invites.has(inviteKeyOf(req)) {
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

// ackStart is how an ACK datagram begins.
var ackStart = []byte("ACK ")

// shedAckRaw reports an ACK of one of the proxy's stateless overload
// answers (its To tag has the shed prefix), read from raw bytes: the screen
// drops those (shedAck) after sipgo parsed them, one parse per shed call.
// Dropping an ACK costs its sender nothing the screen would have given it;
// an ACK of a form scanned here only in part goes on to sipgo.
func shedAckRaw(data []byte) bool {
	if !bytes.HasPrefix(data, ackStart) {
		return false
	}
	_, rest, ok := cutLine(data)
	for ok {
		var line []byte
		if line, rest, ok = cutLine(rest); !ok || len(line) == 0 {
			return false
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return false
		}
		if isName(bytes.TrimSpace(line[:colon]), "to", "t") {
			tag, value, ok := nameAddr(bytes.TrimSpace(line[colon+1:]))
			return ok && tag == tagSet && bytes.HasPrefix(value, []byte(shedTag))
		}
	}
	return false
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

// rawInvite is what scanInvite reads of an INVITE: the raw values (trimmed
// as sipgo trims them) of the header lines a stateless answer copies, and
// the top Via's parts the invite table's key is made of.
type rawInvite struct {
	vias             [][]byte
	from, to, callID []byte
	cseq             []byte

	// The top Via.
	transport, host, branch []byte
	port                    int // 0: none given
	// rportAt is the offset in vias[0] just past a valueless "rport"
	// parameter (RFC 3581: the answer fills it in), or 0.
	rportAt int
}

// key is the invite table's key of the INVITE (inviteKeyOf).
func (r *rawInvite) key() inviteKey {
	port := r.port
	if port <= 0 {
		port = sipmsg.DefaultPort(string(r.transport))
	}
	branch := string(r.branch)
	key := branch + "\x00" + string(r.host) + ":" + strconv.Itoa(port)
	if !isRFC3261Branch(branch) {
		key += "\x00" + string(r.callID)
	}
	return inviteKey(key)
}

// isRFC3261Branch reports whether a branch has RFC 3261's magic cookie and
// more (inviteKeyOf keeps the Call-ID for the others).
func isRFC3261Branch(b string) bool {
	return len(b) > len(sipmsg.RFC3261BranchMagicCookie) && b[:len(sipmsg.RFC3261BranchMagicCookie)] == sipmsg.RFC3261BranchMagicCookie
}

// appendShed appends the 503 the screen sheds r with (shedResponse) to
// dst: src is the packet's source ip:port (where sipgo, which has not
// resolved a destination yet, sends a stateless answer, and what it puts
// in received and rport), tag the To tag.
func (r *rawInvite) appendShed(dst []byte, src, tag string) ([]byte, bool) {
	dst = append(dst, "SIP/2.0 503 Overloaded\r\n"...)
	for i, v := range r.vias {
		dst = append(dst, "Via: "...)
		if i == 0 && r.rportAt > 0 {
			host, port, err := net.SplitHostPort(src)
			if err != nil {
				return dst, false
			}
			dst = append(dst, v[:r.rportAt]...)
			dst = append(dst, '=')
			dst = append(dst, port...)
			dst = append(dst, v[r.rportAt:]...)
			dst = append(dst, ";received="...)
			dst = append(dst, host...)
		} else {
			dst = append(dst, v...)
		}
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "From: "...)
	dst = append(dst, r.from...)
	dst = append(dst, "\r\nTo: "...)
	dst = append(dst, r.to...)
	dst = append(dst, ";tag="...)
	dst = append(dst, tag...)
	dst = append(dst, "\r\nCall-ID: "...)
	dst = append(dst, r.callID...)
	dst = append(dst, "\r\nCSeq: "...)
	dst = append(dst, r.cseq...)
	dst = append(dst, "\r\nContent-Length: 0\r\n\r\n"...)
	return dst, true
}

// sipgoParsers are sipgo's own header parsers, for the headers scanInvite
// does not read itself but sipgo would parse (and fail on).
var sipgoParsers = sipmsg.HeadersParser(sipmsg.DefaultHeadersParser())

// scanInvite reads an INVITE datagram the way sipgo's parser would, for
// the lines a stateless answer needs; false when the message is not an
// out-of-dialog INVITE of the plain form it knows (one Via form per line,
// name-addr From and To, no folded lines...), or sipgo would not parse it,
// or the screen would not find it well formed: such a message goes on to
// sipgo and the screen.
func scanInvite(data []byte) (r rawInvite, ok bool) {
	line, rest, ok := cutLine(data)
	if !ok || !requestLineOK(line) {
		return r, false
	}
	var contentLength = -1
	var fromSeen, toSeen, idSeen, cseqSeen bool
	var scratch []sipmsg.Header
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return r, false
		}
		if len(line) == 0 {
			break
		}
		if len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t') {
			return r, false // folded: left to sipgo
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return r, false
		}
		name := bytes.TrimSpace(line[:colon])
		value := bytes.TrimSpace(line[colon+1:])
		switch {
		case isName(name, "via", "v"):
			if !r.addVia(value) {
				return r, false
			}
		case isName(name, "from", "f"):
			tag, ok := nameAddrTag(value)
			if fromSeen || !ok || tag != tagSet {
				return r, false // no From tag: the screen answers 400
			}
			fromSeen, r.from = true, value
		case isName(name, "to", "t"):
			tag, ok := nameAddrTag(value)
			if toSeen || !ok || tag != tagNone {
				return r, false
			}
			toSeen, r.to = true, value
		case isName(name, "call-id", "i"):
			if idSeen || len(value) == 0 || !plainText(value) {
				return r, false
			}
			idSeen, r.callID = true, value
		case isName(name, "cseq", ""):
			if cseqSeen || !cseqInvite(value) {
				return r, false
			}
			cseqSeen, r.cseq = true, value
		case isName(name, "content-length", "l"):
			n, err := strconv.ParseUint(string(value), 10, 32)
			if err != nil || contentLength >= 0 {
				return r, false
			}
			contentLength = int(n)
		case isName(name, "route", ""):
			if bytes.Contains(value, tokenParamEq) {
				return r, false // may carry the proxy's dialog token: in a dialog, never shed
			}
			if parsedBySipgo(name) {
				var err error
				if scratch, err = sipgoParsers.ParseHeader(scratch[:0], line); err != nil {
					return r, false
				}
			}
		case isName(name, "max-forwards", ""):
			if _, err := strconv.ParseUint(string(value), 10, 32); err != nil {
				return r, false
			}
		default:
			if parsedBySipgo(name) {
				var err error
				if scratch, err = sipgoParsers.ParseHeader(scratch[:0], line); err != nil {
					return r, false
				}
			}
		}
	}
	if len(r.vias) == 0 || !fromSeen || !toSeen || !idSeen || !cseqSeen {
		return r, false
	}
	// A body of the length announced, or none announced: sipgo takes
	// the rest of the datagram then.
	if contentLength >= 0 && contentLength != len(rest) {
		return r, false
	}
	return r, true
}

// cutLine splits data at its first CRLF; false when there is none, or a
// CR before it that is not followed by LF.
func cutLine(data []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(data, '\r')
	if i < 0 || i+1 >= len(data) || data[i+1] != '\n' {
		return nil, nil, false
	}
	line = data[:i]
	if bytes.IndexByte(line, '\n') >= 0 {
		return nil, nil, false
	}
	return line, data[i+2:], true
}

// requestLineOK reports whether line is "INVITE <sip or sips URI> SIP/2.0"
// with single spaces, the URI as sipgo parses it.
func requestLineOK(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, inviteStart)
	if !ok {
		return false
	}
	uri, ok := bytes.CutSuffix(rest, []byte(" SIP/2.0"))
	if !ok || len(uri) == 0 || !plainToken(uri, uriSet) {
		return false
	}
	if !bytes.HasPrefix(uri, []byte("sip:")) && !bytes.HasPrefix(uri, []byte("sips:")) {
		return false
	}
	var u sipmsg.Uri
	return sipmsg.ParseUri(string(uri), &u) == nil && u.Host != ""
}

// isName reports whether a header name is long or compact (ASCII, any
// case); compact "" matches nothing.
// bytes.EqualFold would fold Unicode too ("Cſeq" is "CSeq" to it, not to
// sipgo), so the comparison is ASCII only.
func isName(name []byte, long, compact string) bool {
	return asciiEqualFold(name, long) || (compact != "" && asciiEqualFold(name, compact))
}

// asciiEqualFold reports whether b equals s, folding ASCII letters only.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// parsedBySipgo reports whether sipgo parses a header of this name with a
// parser of its own (and drops the message when that parser fails).
func parsedBySipgo(name []byte) bool {
	if len(name) > 32 {
		return false
	}
	var buf [32]byte
	lower := buf[:len(name)]
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	_, ok := sipgoParsers[string(lower)]
	return ok
}

// cseqInvite reports whether a CSeq value is "<number> INVITE", the number
// one sipgo accepts.
func cseqInvite(v []byte) bool {
	num, ok := bytes.CutSuffix(v, []byte(" INVITE"))
	if !ok || len(num) == 0 || len(num) > 10 {
		return false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return false
		}
	}
	n, err := strconv.ParseUint(string(num), 10, 32)
	return err == nil && n <= 1<<31-1
}

// Character classes of the plain forms scanInvite accepts.
const (
	// tokenChars are RFC 3261's token characters.
	tokenChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.!%*_+`'~"
	// uriChars are the characters of a plain SIP URI (no escapes of
	// brackets, quotes, commas or spaces).
	uriChars = tokenChars + ":@;=&?$/"
	// hostChars are an IPv4 address's or a host name's.
	hostChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-."
)

// charSet is a set of bytes.
type charSet [256]bool

func newCharSet(chars string) *charSet {
	var s charSet
	for i := 0; i < len(chars); i++ {
		s[chars[i]] = true
	}
	return &s
}

// The character classes as sets.
var (
	tokenSet        = newCharSet(tokenChars)
	displayTokenSet = newCharSet(tokenChars + " ")
	uriSet          = newCharSet(uriChars)
	hostSet         = newCharSet(hostChars)
)

// plainToken reports whether v is made of the set's bytes only.
func plainToken(v []byte, set *charSet) bool {
	for _, c := range v {
		if !set[c] {
			return false
		}
	}
	return true
}

// plainText reports whether v is printable ASCII without spaces (a plain
// Call-ID).
func plainText(v []byte) bool {
	for _, c := range v {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// addVia reads one Via line of the plain form "SIP/2.0/<transport>
// <host>[:<port>]" and token parameters, no comma; the first is the top
// Via, whose parts make the invite table's key.
func (r *rawInvite) addVia(v []byte) bool {
	rest, ok := bytes.CutPrefix(v, []byte("SIP/2.0/"))
	if !ok {
		return false
	}
	sp := bytes.IndexByte(rest, ' ')
	if sp <= 0 || !plainToken(rest[:sp], tokenSet) {
		return false
	}
	transport := rest[:sp]
	rest = rest[sp+1:]
	end := bytes.IndexByte(rest, ';')
	if end < 0 {
		end = len(rest)
	}
	hostPort, params := rest[:end], rest[end:]
	host, portText, hasPort := bytes.Cut(hostPort, []byte(":"))
	if len(host) == 0 || !plainToken(host, hostSet) {
		return false
	}
	port := 0
	if hasPort {
		n, err := strconv.Atoi(string(portText))
		if err != nil || n <= 0 || n > 65535 || len(portText) > 5 {
			return false
		}
		port = n
	}
	top := len(r.vias) == 0
	var branch []byte
	var branchSeen, rportSeen, receivedSeen bool
	rportAt := 0
	var seen paramNames
	off := len(v) - len(params)
	for len(params) > 0 {
		// params is ";name[=value]..."
		params = params[1:]
		off++
		next := bytes.IndexByte(params, ';')
		if next < 0 {
			next = len(params)
		}
		param := params[:next]
		name, val, hasVal := bytes.Cut(param, []byte("="))
		if len(name) == 0 || !plainToken(name, tokenSet) || (hasVal && (len(val) == 0 || !plainToken(val, tokenSet))) {
			return false
		}
		if !seen.add(name) {
			return false
		}
		if top && bytes.EqualFold(name, []byte("oc")) {
			return false // asks for overload control: the screen's answer carries it (oc.go)
		}
		switch string(name) {
		case "branch":
			if !branchSeen {
				branchSeen, branch = true, val
			}
		case "rport":
			if !rportSeen {
				rportSeen = true
				if !hasVal {
					rportAt = off + len(name)
				}
			}
		case "received":
			receivedSeen = true
		}
		params = params[next:]
		off += next
	}
	if top {
		if rportAt > 0 && receivedSeen {
			return false // sipgo would overwrite it in place; left to sipgo
		}
		r.transport, r.host, r.port, r.branch, r.rportAt = transport, host, port, branch, rportAt
	}
	r.vias = append(r.vias, v)
	return true
}

// Tags nameAddrTag finds.
const (
	tagNone  = iota // no tag parameter
	tagEmpty        // ";tag" or ";tag="
	tagSet          // a tag with a value
)

// nameAddrTag reads a From or To value of the plain form
// [display name] "<" SIP URI ">" followed by token parameters, and says
// whether it has a tag; false for any other form.
func nameAddrTag(v []byte) (tag int, ok bool) {
	tag, _, ok = nameAddr(v)
	return tag, ok
}

// nameAddr is nameAddrTag, with the tag's value.
func nameAddr(v []byte) (tag int, value []byte, ok bool) {
	lt := bytes.IndexByte(v, '<')
	if lt < 0 {
		return 0, nil, false
	}
	display := v[:lt]
	if len(display) > 0 {
		d := bytes.TrimRight(display, " ")
		if len(d) == len(display) && len(d) > 0 {
			return 0, nil, false // "name<uri>": left to sipgo
		}
		if len(d) >= 2 && d[0] == '"' && d[len(d)-1] == '"' {
			d = d[1 : len(d)-1]
			if bytes.ContainsAny(d, "\"\\") {
				return 0, nil, false
			}
		} else if !plainToken(d, displayTokenSet) || d[0] == ' ' {
			return 0, nil, false
		}
		for _, c := range d {
			if c < ' ' || c >= 0x7f {
				return 0, nil, false
			}
		}
	}
	gt := bytes.IndexByte(v[lt:], '>')
	if gt < 0 {
		return 0, nil, false
	}
	gt += lt
	uri := v[lt+1 : gt]
	if !plainToken(uri, uriSet) || (!bytes.HasPrefix(uri, []byte("sip:")) && !bytes.HasPrefix(uri, []byte("sips:"))) {
		return 0, nil, false
	}
	var u sipmsg.Uri
	if sipmsg.ParseUri(string(uri), &u) != nil || u.Host == "" {
		return 0, nil, false
	}
	params := v[gt+1:]
	var seen paramNames
	tag = tagNone
	for len(params) > 0 {
		if params[0] != ';' {
			return 0, nil, false
		}
		params = params[1:]
		next := bytes.IndexByte(params, ';')
		if next < 0 {
			next = len(params)
		}
		name, val, hasVal := bytes.Cut(params[:next], []byte("="))
		if len(name) == 0 || !plainToken(name, tokenSet) || (hasVal && !plainToken(val, tokenSet)) {
			return 0, nil, false
		}
		if !seen.add(name) {
			return 0, nil, false
		}
		if bytes.EqualFold(name, []byte("tag")) {
			if string(name) != "tag" || tag != tagNone {
				return 0, nil, false // "TAG", or two tags: left to sipgo
			}
			tag, value = tagSet, val
			if len(val) == 0 {
				tag = tagEmpty
			}
		}
		params = params[next:]
	}
	return tag, value, true
}

// paramNames are the parameter names of one header value, to refuse a
// value that repeats one (sipgo keeps the last, and its parser's other
// choices are not worth following here).
type paramNames struct {
	n     int
	names [16][]byte
}

// add records name; false when it was already there, or there are too
// many to check.
func (p *paramNames) add(name []byte) bool {
	if p.n == len(p.names) {
		return false
	}
	for _, n := range p.names[:p.n] {
		if bytes.Equal(n, name) {
			return false
		}
	}
	p.names[p.n] = name
	p.n++
	return true
}
