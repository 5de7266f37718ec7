package wire

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Parser reads a datagram into a sipgo message exactly as sipgo's own
// parser (sipmsg.NewParser, its default header parsers, ParseSIP) reads
// it, with fewer allocations: sipgo copies every header's value into a
// string of its own (and a generic header's name too), Parser copies the
// start line and the headers once and hands sipgo's header parsers parts
// of that one string; the headers the node reads on every call (Via,
// From, To, Contact, Call-ID, CSeq, Max-Forwards, Content-Length) are
// parsed into one allocation per message, with room for their
// parameters. A value sipgo splits at commas (SIPp answers with every
// Via in one header) is split where sipgo splits it.
//
// Parser takes the common shape of a message: lines ended by CRLF, no
// folded header line, no header sipgo's parsers refuse. A header its own
// code does not read (an IPv6 Via host, a comma in another header than
// Via, a second From) goes to sipgo's parser for that header; any other
// message, and every message sipgo refuses, is left to sipgo's parser,
// which reads it again from its first byte: what ParseSIP returns,
// message or error, is always what sipgo's ParseSIP returns for the same
// bytes (FuzzParse compares the two). It allocates about a third of
// sipgo's objects per message, but 7-33 % more bytes (the block has room
// for every header it may hold).
//
// The strings of a parsed message share one allocation: a part of it kept
// for long (a tag, a Call-ID) keeps the whole start line and headers
// alive; whoever keeps such a string beyond the message should copy it
// (strings.Clone). A Parser is safe for concurrent use.
type Parser struct {
	sipgo   *sipmsg.Parser
	headers sipmsg.HeadersParser
	// longest is the longest name sipgo parses (a longer one is a
	// generic header); 0 when one is longer than maxName, and then
	// sipgo's parser reads every datagram.
	longest int
}

// maxName is the longest header name Parser lower-cases on the stack.
const maxName = 32

// NewParser returns a parser that refuses, as sipgo's does, a datagram
// longer than maxLength bytes (sipmsg.ErrMessageTooLarge).
func NewParser(maxLength int) *Parser {
	p := sipmsg.NewParser()
	p.MaxMessageLength = maxLength
	wp := &Parser{sipgo: p, headers: sipmsg.DefaultHeadersParser()}
	for name := range wp.headers {
		wp.longest = max(wp.longest, len(name))
	}
	if wp.longest > maxName {
		wp.longest = 0
	}
	return wp
}

// Sipgo is the sipgo parser behind p (the same limits), for the
// transports sipgo reads itself (TCP, TLS).
func (p *Parser) Sipgo() *sipmsg.Parser { return p.sipgo }

// ParseSIP parses one whole message, as sipmsg.Parser.ParseSIP does.
func (p *Parser) ParseSIP(data []byte) (sipmsg.Message, error) {
	m := p.parse(data)
	if m == nil {
		var err error
		m, err = p.sipgo.ParseSIP(data)
		if err != nil {
			return m, err
		}
	}
	if VerifyParse != nil {
		VerifyParse(data, m, p.sipgo)
	}
	return m, nil
}

// VerifyParse, when set (by tests), is given every message ParseSIP
// parses with its bytes and sipgo's parser, before the caller sees it; the
// sip package's tests fail unless sipgo parses the same message.
var VerifyParse func(data []byte, m sipmsg.Message, sipgo *sipmsg.Parser)

var headerEnd = []byte("\r\n\r\n")

// parse is the common shape's path: nil leaves data to sipgo's parser.
func (p *Parser) parse(data []byte) sipmsg.Message {
	if len(data) > p.sipgo.MaxMessageLength || p.longest == 0 {
		return nil
	}
	end := bytes.Index(data, headerEnd)
	if end < 0 {
		return nil
	}
	// The start line and every header line with its CRLF, in one string.
	s := string(data[:end+2])
	nl := strings.IndexByte(s, '\r')
	if s[nl+1] != '\n' {
		return nil
	}
	m := startLine(s[:nl])
	if m == nil {
		return nil
	}
	var length *sipmsg.ContentLengthHeader
	var b *block
	for rest := s[nl+2:]; rest != ""; {
		nl = strings.IndexByte(rest, '\r')
		// A lone CR (sipgo: ErrParseLineNoCRLF) or a folded line.
		// (The last header line is followed by the empty line.)
		if rest[nl+1] != '\n' || nl+2 < len(rest) && (rest[nl+2] == ' ' || rest[nl+2] == '\t') {
			return nil
		}
		if !p.header(m, rest[:nl], &b, &length) {
			return nil
		}
		rest = rest[nl+2:]
	}
	body := data[end+4:]
	size := len(body)
	if length != nil {
		size = int(*length)
	}
	if size == 0 {
		return m
	}
	if size > p.sipgo.MaxMessageLength-(end+4) || size > len(body) {
		return nil
	}
	copied := make([]byte, size)
	copy(copied, body)
	m.SetBody(copied)
	return m
}

// startLine reads a request or status line as sipgo's parser does, nil
// when sipgo would refuse it.
func startLine(line string) sipmsg.Message {
	i := strings.IndexByte(line, ' ')
	if i < 0 {
		return nil
	}
	first, rest := line[:i], line[i+1:]
	i = strings.IndexByte(rest, ' ')
	if i < 0 {
		return nil
	}
	second, third := rest[:i], rest[i+1:]
	if len(third) >= 3 && strings.IndexByte(third, ' ') < 0 && sipmsg.UriIsSIP(third[:3]) {
		var u sipmsg.Uri
		if sipmsg.ParseUri(second, &u) != nil || u.Wildcard {
			return nil
		}
		r := sipmsg.NewRequest(sipmsg.RequestMethod(strings.ToUpper(first)), u)
		r.SipVersion = third
		return r
	}
	if len(first) >= 3 && sipmsg.UriIsSIP(first[:3]) {
		code, err := strconv.ParseUint(second, 10, 16)
		if err != nil {
			return nil
		}
		r := sipmsg.NewResponse(int(code), third)
		r.SipVersion = first
		return r
	}
	return nil
}

// header reads one header line into m as sipgo's
// HeadersParser.ParseHeader does (a value sipgo splits at commas is one
// header for each part), false when sipgo would refuse it. A
// Content-Length header is put in *length too. The headers of every call
// are parsed into b, allocated on the first of them.
func (p *Parser) header(m sipmsg.Message, line string, b **block, length **sipmsg.ContentLengthHeader) bool {
	colon := strings.IndexByte(line, ':')
	if colon < 0 {
		return false
	}
	name := strings.TrimSpace(line[:colon])
	value := strings.TrimSpace(line[colon+1:])
	if len(name) > p.longest {
		// Longer than any name sipgo parses: a generic header.
		m.AppendHeader(sipmsg.NewHeader(name, value))
		return true
	}
	var lower [maxName]byte
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	key := string(lower[:len(name)])
	parse, ok := p.headers[key]
	if !ok {
		m.AppendHeader(sipmsg.NewHeader(name, value))
		return true
	}
	if *b == nil {
		*b = new(block)
	}
	for {
		h, rest, more, ok := (*b).header(key, value)
		if !ok {
			break
		}
		add(m, h, length)
		if !more {
			return true
		}
		value = rest
	}
	for {
		// sipgo's parsers do not read the name (and handing them lower
		// would move it to the heap).
		h, err := parse(nil, value)
		if err == nil {
			add(m, h, length)
			return true
		}
		at, ok := commaAt(err)
		if !ok {
			return false
		}
		// sipgo's parser keeps what it read before the comma and goes on
		// after it.
		add(m, h, length)
		value = value[at+1:]
	}
}

// add appends h to m, and keeps it in *length if it is a Content-Length.
func add(m sipmsg.Message, h sipmsg.Header, length **sipmsg.ContentLengthHeader) {
	if l, ok := h.(*sipmsg.ContentLengthHeader); ok {
		*length = l
	}
	m.AppendHeader(h)
}

// commaType is the type of the error by which sipgo's header parsers say
// where a value's first part ends (an int: the comma's offset), learnt
// from sipgo's Contact parser; nil if sipgo no longer answers so, and
// then every value with a comma is left to sipgo's parser.
var commaType = func() reflect.Type {
	_, err := sipmsg.DefaultHeadersParser()["contact"](nil, "<sip:a@b>, <sip:c@d>")
	if err == nil || reflect.TypeOf(err).Kind() != reflect.Int || err.Error() != "comma detected" {
		return nil
	}
	return reflect.TypeOf(err)
}()

// commaAt is the offset sipgo's comma error holds.
func commaAt(err error) (int, bool) {
	if commaType == nil || reflect.TypeOf(err) != commaType {
		return 0, false
	}
	return int(reflect.ValueOf(err).Int()), true
}

// block holds, in one allocation, the headers of a message that the node
// reads on every call and their parameters. A header's parameters are a
// part of params whose capacity ends where they end: an append to them
// (a received or rport added) moves them out rather than over the next
// header's.
type block struct {
	via     [2]sipmsg.ViaHeader
	from    sipmsg.FromHeader
	to      sipmsg.ToHeader
	contact sipmsg.ContactHeader
	callID  sipmsg.CallIDHeader
	cseq    sipmsg.CSeqHeader
	maxFwd  sipmsg.MaxForwardsHeader
	length  sipmsg.ContentLengthHeader
	params  [12]sipmsg.HeaderKV
	vias    int
	used    uint8 // which of the single headers below are taken
	nparams int
}

const (
	usedFrom = 1 << iota
	usedTo
	usedContact
	usedCallID
	usedCSeq
	usedMaxFwd
	usedLength
)

// take marks a single header used; false when it already was (a second
// From is parsed by sipgo's parser, into its own allocation).
func (b *block) take(bit uint8) bool {
	if b.used&bit != 0 {
		return false
	}
	b.used |= bit
	return true
}

// paramsFor is an empty slice of params with room for the parameters
// value usually holds (one more than its semicolons), nil when the block
// has no such room (sipgo's Add then allocates as it always does). Its
// capacity ends there: a value that holds more (sipgo reads ;a="x" as two
// parameters) has the rest appended elsewhere, never over the next
// header's.
func (b *block) paramsFor(value string) sipmsg.HeaderParams {
	n := strings.Count(value, ";") + 1
	if b.nparams+n > len(b.params) {
		return nil
	}
	ps := b.params[b.nparams : b.nparams : b.nparams+n]
	b.nparams += n
	return ps
}

// header parses value as the header named key (lower case) into b. A Via
// value of several Vias gives its first, more and the rest as sipgo goes
// on with it. False leaves value to sipgo's parser for that header (which
// then refuses it, or reads a shape this code does not take: an IPv6 Via,
// a comma in any other header, a second From).
func (b *block) header(key, value string) (h sipmsg.Header, rest string, more, ok bool) {
	switch key {
	case "via", "v":
		var v *sipmsg.ViaHeader
		if b.vias < len(b.via) {
			v = &b.via[b.vias]
		} else {
			v = new(sipmsg.ViaHeader)
		}
		if rest, more, ok = b.parseVia(value, v); !ok {
			*v = sipmsg.ViaHeader{}
			return nil, "", false, false
		}
		if b.vias < len(b.via) {
			b.vias++
		}
		return v, rest, more, true
	}
	h, ok = b.single(key, value)
	return h, "", false, ok
}

// single parses the headers of which b holds one.
func (b *block) single(key, value string) (sipmsg.Header, bool) {
	switch key {
	case "from", "f":
		if !b.take(usedFrom) {
			return nil, false
		}
		h := &b.from
		if !b.address(value, &h.DisplayName, &h.Address, &h.Params) || h.Address.Wildcard {
			return nil, false
		}
		return h, true
	case "to", "t":
		if !b.take(usedTo) {
			return nil, false
		}
		h := &b.to
		if !b.address(value, &h.DisplayName, &h.Address, &h.Params) || h.Address.Wildcard {
			return nil, false
		}
		return h, true
	case "contact", "m":
		// sipgo splits a Contact at a comma outside quotes and brackets.
		if strings.IndexByte(value, ',') >= 0 || !b.take(usedContact) {
			return nil, false
		}
		h := &b.contact
		if !b.address(value, &h.DisplayName, &h.Address, &h.Params) {
			return nil, false
		}
		return h, true
	case "call-id", "i":
		if value == "" || !b.take(usedCallID) {
			return nil, false
		}
		b.callID = sipmsg.CallIDHeader(value)
		return &b.callID, true
	case "cseq":
		i := strings.IndexAny(value, " \t")
		if i < 1 || len(value)-i < 2 {
			return nil, false
		}
		seq, err := strconv.ParseUint(value[:i], 10, 32)
		if err != nil || seq > 1<<31-1 || !b.take(usedCSeq) {
			return nil, false
		}
		b.cseq = sipmsg.CSeqHeader{SeqNo: uint32(seq), MethodName: sipmsg.RequestMethod(value[i+1:])}
		return &b.cseq, true
	case "max-forwards":
		n, err := strconv.ParseUint(value, 10, 32)
		if err != nil || !b.take(usedMaxFwd) {
			return nil, false
		}
		b.maxFwd = sipmsg.MaxForwardsHeader(n)
		return &b.maxFwd, true
	case "content-length", "l":
		n, err := strconv.ParseUint(value, 10, 32)
		if err != nil || !b.take(usedLength) {
			return nil, false
		}
		b.length = sipmsg.ContentLengthHeader(n)
		return &b.length, true
	}
	return nil, false
}

// address reads a From, To or Contact value as sipgo's parsers do
// (sipmsg.ParseAddressValue), its parameters into b.
func (b *block) address(value string, display *string, u *sipmsg.Uri, params *sipmsg.HeaderParams) bool {
	*params = b.paramsFor(value)
	name, err := sipmsg.ParseAddressValue(value, u, params)
	if err != nil {
		*u, *params = sipmsg.Uri{}, nil
		return false
	}
	*display = name
	*params = trim(*params)
	return true
}

// trim is params as sipgo leaves them: nil when there are none, and no
// room past the last (see block).
func trim(ps sipmsg.HeaderParams) sipmsg.HeaderParams {
	if len(ps) == 0 {
		return nil
	}
	return ps[:len(ps):len(ps)]
}

// parseVia reads a Via value as sipgo's Via parser does, for a host that
// is not an IPv6 literal; false for any other. A comma after the host's
// parameters ends this Via (sipgo's rule, quotes or not): more, and rest
// is what follows the comma.
func (b *block) parseVia(value string, h *sipmsg.ViaHeader) (rest string, more, ok bool) {
	s := value
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return "", false, false
	}
	h.ProtocolName = strings.TrimSpace(s[:i])
	s = s[i+1:]
	if i = strings.IndexByte(s, '/'); i < 0 {
		return "", false, false
	}
	h.ProtocolVersion = strings.TrimSpace(s[:i])
	s = s[i+1:]
	if i = strings.IndexAny(s, " \t"); i < 0 {
		return "", false, false
	}
	h.Transport = strings.TrimSpace(s[:i])
	s = s[i+1:]
	if s != "" && s[0] == '[' {
		return "", false, false
	}
	colon, end := 0, len(s)
	for i := 0; i < len(s); i++ {
		if s[i] == ';' {
			end = i
			break
		}
		if s[i] == ':' {
			colon = i
		}
	}
	if colon > 0 {
		port, err := strconv.Atoi(s[colon+1 : end])
		if err != nil {
			// sipgo keeps what it read so far and no parameter.
			return "", false, false
		}
		h.Port = port
		h.Host = strings.TrimSpace(s[:colon])
	} else {
		h.Host = strings.TrimSpace(s[:end])
	}
	if end == len(s) {
		return "", false, true
	}
	s = s[end+1:]
	params, ending := s, '\r'
	if comma := strings.IndexByte(s, ','); comma > 0 {
		params, ending = s[:comma], ','
		rest, more = s[comma+1:], true
	}
	h.Params = b.paramsFor(params)
	if _, err := sipmsg.UnmarshalHeaderParams(params, ';', ending, &h.Params); err != nil {
		return "", false, false
	}
	h.Params = trim(h.Params)
	return rest, more, true
}
