package rawsip

import (
	"bytes"
	"net"
	"strconv"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/dialogtoken"
)

// InviteStart is how an INVITE datagram begins.
var InviteStart = []byte("INVITE ")

// tokenParam is the name of the dialog token's parameter in a Route value.
const tokenParam = dialogtoken.Param

// ackStart is how an ACK datagram begins.
var ackStart = []byte("ACK ")

// ShedAck reports an ACK whose To tag starts with prefix (the sip
// package's stateless overload answers' tags), read from raw bytes; an ACK
// of a form read here only in part is not one.
func ShedAck(data []byte, prefix string) bool {
	if !bytes.HasPrefix(data, ackStart) {
		return false
	}
	_, rest, ok := CutLine(data)
	for ok {
		var line []byte
		if line, rest, ok = CutLine(rest); !ok || len(line) == 0 {
			return false
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return false
		}
		if IsName(bytes.TrimSpace(line[:colon]), "to", "t") {
			tag, value, ok := NameAddr(bytes.TrimSpace(line[colon+1:]))
			return ok && tag == TagSet && bytes.HasPrefix(value, []byte(prefix))
		}
	}
	return false
}

// Invite is what ScanInvite reads of an INVITE: the raw values (trimmed
// as sipgo trims them) of the header lines a stateless answer copies, and
// the top Via's parts the invite table's key is made of.
type Invite struct {
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

// TxKey is the INVITE's transaction key as sipgo keys it (and the sip
// package's invite table): top Via branch and sent-by, and the Call-ID for
// a branch without RFC 3261's magic cookie.
func (r *Invite) TxKey() string {
	port := r.port
	if port <= 0 {
		port = sipmsg.DefaultPort(string(r.transport))
	}
	branch := string(r.branch)
	key := branch + "\x00" + string(r.host) + ":" + strconv.Itoa(port)
	if !isRFC3261Branch(branch) {
		key += "\x00" + string(r.callID)
	}
	return key
}

// CallID is the INVITE's Call-ID value (trimmed as sipgo trims it; the
// caller must not change it).
func (r *Invite) CallID() []byte { return r.callID }

// FromTag is the value of the INVITE's From tag (ScanInvite accepts only
// a From with one plain "tag" parameter, whose value sipgo reads alike).
func (r *Invite) FromTag() []byte {
	_, tag, _ := NameAddr(r.from)
	return tag
}

// CSeqNo is the number of the INVITE's CSeq (ScanInvite accepts only a
// CSeq of a number sipgo accepts and "INVITE").
func (r *Invite) CSeqNo() uint32 {
	num, _, _ := bytes.Cut(r.cseq, []byte(" "))
	n, _ := strconv.ParseUint(string(num), 10, 32)
	return uint32(n)
}

// isRFC3261Branch reports whether a branch has RFC 3261's magic cookie and
// more (TxKey keeps the Call-ID for the others).
func isRFC3261Branch(b string) bool {
	return len(b) > len(sipmsg.RFC3261BranchMagicCookie) && b[:len(sipmsg.RFC3261BranchMagicCookie)] == sipmsg.RFC3261BranchMagicCookie
}

// AppendShed appends the 503 Overloaded the sip package sheds r with to
// dst: src is the packet's source ip:port (where sipgo, which has not
// resolved a destination yet, sends a stateless answer, and what it puts
// in received and rport), tag the To tag.
func (r *Invite) AppendShed(dst []byte, src, tag string) ([]byte, bool) {
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

// sipgoParsers are sipgo's own header parsers, for the headers ScanInvite
// does not read itself but sipgo would parse (and fail on).
var sipgoParsers = sipmsg.HeadersParser(sipmsg.DefaultHeadersParser())

// ScanInvite reads an INVITE datagram the way sipgo's parser would, for
// the lines a stateless answer needs; false when the message is not an
// out-of-dialog INVITE of the plain form it knows (one Via form per line,
// name-addr From and To, no folded lines...), or sipgo would not parse it,
// or the screen would not find it well formed: such a message goes on to
// sipgo and the screen.
func ScanInvite(data []byte) (r Invite, ok bool) {
	line, rest, ok := CutLine(data)
	if !ok || !requestLineOK(line) || bytes.IndexByte(line, '\n') >= 0 {
		return r, false
	}
	var contentLength = -1
	var fromSeen, toSeen, idSeen, cseqSeen, mfSeen bool
	var scratch []sipmsg.Header
	for {
		line, rest, ok = CutLine(rest)
		if !ok {
			return r, false
		}
		if len(line) == 0 {
			break
		}
		if bytes.IndexByte(line, '\n') >= 0 {
			return r, false // a bare LF: the worker refuses it (BareLineBreak)
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
		case IsName(name, "via", "v"):
			if !r.addVia(value) {
				return r, false
			}
		case IsName(name, "from", "f"):
			tag, ok := nameAddrTag(value)
			if fromSeen || !ok || tag != TagSet {
				return r, false // no From tag: the screen answers 400
			}
			fromSeen, r.from = true, value
		case IsName(name, "to", "t"):
			tag, ok := nameAddrTag(value)
			if toSeen || !ok || tag != TagNone {
				return r, false
			}
			toSeen, r.to = true, value
		case IsName(name, "call-id", "i"):
			if idSeen || len(value) == 0 || !plainText(value) {
				return r, false
			}
			idSeen, r.callID = true, value
		case IsName(name, "cseq", ""):
			if cseqSeen || !cseqInvite(value) {
				return r, false
			}
			cseqSeen, r.cseq = true, value
		case IsName(name, "content-length", "l"):
			n, err := strconv.ParseUint(string(value), 10, 32)
			if err != nil || contentLength >= 0 {
				return r, false
			}
			contentLength = int(n)
		case IsName(name, "route", ""):
			if containsFold(value, tokenParam) {
				// May carry the proxy's dialog token: in a dialog, never
				// shed. The screen takes the parameter with a value or
				// without one (";cg", ";cg="); any "cg" in any case goes
				// on to it, so no form it reads as a token is shed here.
				return r, false
			}
			if parsedBySipgo(name) {
				var err error
				if scratch, err = sipgoParsers.ParseHeader(scratch[:0], line); err != nil {
					return r, false
				}
			}
		case IsName(name, "max-forwards", ""):
			if _, err := strconv.ParseUint(string(value), 10, 32); err != nil || mfSeen {
				return r, false // two: the screen answers 400
			}
			mfSeen = true
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

// BareLineBreak reports whether the start line or header section of data
// (up to its first empty line) holds a CR or an LF that is not part of a
// CRLF. sipgo ends lines at CRLF only and keeps such a byte in the value,
// which the node relays as it came: a next hop whose parser ends lines at
// LF (RFC 3261 7.5 asks parsers to be lenient) would read headers the
// node never saw, or, over TCP, a message of its own.
func BareLineBreak(data []byte) bool {
	for i := 0; i < len(data); {
		j := bytes.IndexAny(data[i:], "\r\n")
		if j < 0 {
			return false
		}
		k := i + j
		if data[k] == '\n' || k+1 >= len(data) || data[k+1] != '\n' {
			return true
		}
		if k+3 < len(data) && data[k+2] == '\r' && data[k+3] == '\n' {
			return false // the empty line: the body follows
		}
		i = k + 2
	}
	return false
}

// CutLine splits data at its first CRLF; false when there is none, or a
// CR before it that is not followed by LF.
func CutLine(data []byte) (line, rest []byte, ok bool) {
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
	rest, ok := bytes.CutPrefix(line, InviteStart)
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

// IsName reports whether a header name is long or compact (ASCII, any
// case); compact "" matches nothing.
// bytes.EqualFold would fold Unicode too ("Cſeq" is "CSeq" to it, not to
// sipgo), so the comparison is ASCII only.
func IsName(name []byte, long, compact string) bool {
	return EqualFold(name, long) || (compact != "" && EqualFold(name, compact))
}

// containsFold reports whether s occurs in b, folding ASCII letters only.
func containsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if EqualFold(b[i:i+len(s)], s) {
			return true
		}
	}
	return false
}

// EqualFold reports whether b equals s, folding ASCII letters only.
func EqualFold(b []byte, s string) bool {
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

// Character classes of the plain forms ScanInvite accepts.
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
func (r *Invite) addVia(v []byte) bool {
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
			return false // asks for overload control: the parsed path answers it with its values
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
	TagNone  = iota // no tag parameter
	TagEmpty        // ";tag" or ";tag="
	TagSet          // a tag with a value
)

// nameAddrTag reads a From or To value of the plain form
// [display name] "<" SIP URI ">" followed by token parameters, and says
// whether it has a tag; false for any other form.
func nameAddrTag(v []byte) (tag int, ok bool) {
	tag, _, ok = NameAddr(v)
	return tag, ok
}

// NameAddr is nameAddrTag, with the tag's value.
func NameAddr(v []byte) (tag int, value []byte, ok bool) {
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
	if sipmsg.ParseUri(string(uri), &u) != nil || u.Host == "" || u.Wildcard {
		// sipgo refuses the wildcard URI "*" in From and To (the whole
		// message fails to parse): no answer from the raw path either.
		return 0, nil, false
	}
	params := v[gt+1:]
	var seen paramNames
	tag = TagNone
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
			if string(name) != "tag" || tag != TagNone {
				return 0, nil, false // "TAG", or two tags: left to sipgo
			}
			tag, value = TagSet, val
			if len(val) == 0 {
				tag = TagEmpty
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

// URIUser is the user part of a raw URI as far as a cheap look sees it:
// after the scheme (and "//"), up to '@' for a sip: or sips: URI (nothing
// without one), the rest for another scheme (tel:). It never drops a
// character sipgo's parser would keep in the user: what it returns starts
// with sipgo's user, so an emergency prefix of that user is one of this.
func URIUser(uri []byte) []byte {
	colon := bytes.IndexByte(uri, ':')
	if colon < 0 {
		return nil
	}
	scheme, rest := uri[:colon], uri[colon+1:]
	if !EqualFold(scheme, "sip") && !EqualFold(scheme, "sips") {
		return rest
	}
	rest = bytes.TrimPrefix(rest, []byte("//"))
	at := bytes.IndexByte(rest, '@')
	if at < 0 {
		return nil
	}
	return rest[:at]
}
