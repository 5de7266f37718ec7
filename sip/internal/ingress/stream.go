package ingress

import "errors"

// ErrStream is a stream whose framing the scanner cannot follow (a
// Content-Length that is not a number, or a header line longer than any
// message may be), or that a lenient next hop would frame otherwise than
// sipgo (a bare LF in a start or header line): the connection is closed,
// as sipgo closes one it cannot frame.
var ErrStream = errors.New("ingress: unframeable SIP stream")

// StreamScanner applies Bounds to the messages of a byte stream (SIP over
// TCP or TLS) as Scan does to a datagram, whatever the chunks the stream
// arrives in: the header section of each message is checked as it comes,
// its body (Content-Length bytes) skipped. It frames the stream as
// sipgo's stream parser does (lines end at CRLF only; a Content-Length is
// one sipgo reads as such; a stream sipgo might frame otherwise, such as a
// header name with a byte sipgo would trim, is ErrStream), so that it
// never skips as a body what sipgo parses. A read sipgo does not parse
// (NULs only, a keepalive) must not be written to it. It is not safe for
// concurrent use: one per connection, fed in order.
type StreamScanner struct {
	b Bounds
	// MaxLine bounds a header line (folded lines joined); 0: 16 KiB.
	MaxLine int

	state   streamState
	line    int  // bytes of the current header line so far
	crSeen  bool // the last byte was a CR
	atStart bool // at the start of a line
	// The current header field.
	name       [16]byte
	nameLen    int
	inName     bool // before the field's colon
	nameGap    bool // a blank after the name's first byte
	nameOdd    bool // a blank inside the name (sipgo knows no such header)
	skip       bool // a continuation of a line without a colon
	list       bool
	split      bool // sipgo splits the field at commas (splitsAtCommas)
	isLength   bool
	length     int64
	lengthSeen bool
	// The Content-Length value's digits began, and ended (a blank).
	lengthDigits, lengthDone bool
	quoted                   bool
	escaped                  bool
	angle                    int
	elem                     int
	// The current message.
	headers, params int
	bodyLeft        int64
	// ended counts the messages whose end was read.
	ended uint64
}

type streamState uint8

const (
	stateStart   streamState = iota // before a start line (CRLFs skipped)
	stateFirst                      // in the start line
	stateHeaders                    // in the header section
	stateBody                       // skipping the body
)

// NewStreamScanner returns a scanner that checks b.
func NewStreamScanner(b Bounds) *StreamScanner { return &StreamScanner{b: b} }

// Write scans the next chunk of the stream. It returns ErrParams or
// ErrHeaders when a message exceeds the bounds, ErrStream when the stream
// cannot be framed; after an error the scanner must not be used again.
func (s *StreamScanner) Write(p []byte) error {
	maxLine := s.MaxLine
	if maxLine <= 0 {
		maxLine = 16 << 10
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if s.state == stateBody {
			n := int64(len(p) - i)
			if n > s.bodyLeft {
				n = s.bodyLeft
			}
			s.bodyLeft -= n
			i += int(n) - 1
			if s.bodyLeft == 0 {
				s.state = stateStart
				s.ended++
			}
			continue
		}
		// Only CRLF ends a line, as in sipgo's parser: a bare LF is a
		// byte of the line, a CR not followed by LF a framing error to
		// sipgo (it closes the connection).
		if s.crSeen {
			s.crSeen = false
			if c != '\n' {
				return ErrStream
			}
			if s.state == stateStart {
				continue // a CRLF before a start line
			}
			if err := s.endLine(); err != nil {
				return err
			}
			continue
		}
		if c == '\r' {
			s.crSeen = true
			continue
		}
		if c == '\n' && s.state != stateStart {
			// A bare LF in a line: sipgo keeps it in the value and the
			// node would relay it as it came, where a lenient next hop
			// ends the line (a header the node never saw, or, with an
			// empty line after, a message of its own).
			return ErrStream
		}
		if s.state == stateStart {
			s.state = stateFirst
			s.line = 0
			s.headers, s.params, s.elem = 0, 0, 0
			s.lengthSeen, s.length = false, 0
		}
		s.line++
		if s.line > maxLine {
			return ErrStream
		}
		if s.state == stateFirst {
			// The start line's separators are one element (the
			// Request-URI's parameters), as Scan counts them.
			if c == ';' || c == '&' {
				if err := s.count(); err != nil {
					return err
				}
			}
			continue
		}
		if s.atStart {
			s.atStart = false
			if c == ' ' || c == '\t' {
				// A continuation of the field before; of nothing, when
				// that line had no colon (not a header).
				s.skip = s.skip || s.inName
				continue
			}
			if err := s.newField(); err != nil {
				return err
			}
		}
		if s.skip {
			continue
		}
		if s.inName {
			switch {
			case c == ':':
				s.inName = false
				s.classify()
			case c == ' ' || c == '\t':
				s.nameGap = true
			case c < 0x20 || c >= 0x7f:
				// sipgo trims any Unicode space around a name (\v, \f,
				// LF, NBSP...): a name with such bytes might be a
				// Content-Length to sipgo and not to the scanner, and the
				// two would frame the stream apart.
				return ErrStream
			default:
				if s.nameGap {
					s.nameOdd = true // a blank inside the name: sipgo keeps it
				}
				if s.nameLen < len(s.name) {
					s.name[s.nameLen] = c
				}
				s.nameLen++
			}
			continue
		}
		if s.isLength {
			// sipgo: strconv.ParseUint of the trimmed value (a folded
			// line joined by a space).
			switch {
			case c == ' ' || c == '\t':
				s.lengthDone = s.lengthDone || s.lengthDigits
			case '0' <= c && c <= '9' && !s.lengthDone:
				s.lengthDigits = true
				s.length = s.length*10 + int64(c-'0')
				if s.length > 1<<30 {
					return ErrStream
				}
			default:
				return ErrStream
			}
		}
		if err := s.value(c); err != nil {
			return err
		}
	}
	return nil
}

// Idle reports whether the scanner is between messages with nothing of
// the next one read: where sipgo takes a short read of CRs and LFs for a
// keepalive and does not parse it.
func (s *StreamScanner) Idle() bool { return s.state == stateStart && !s.crSeen }

// Ended is how many messages the stream has held so far (the end of each
// was read).
func (s *StreamScanner) Ended() uint64 { return s.ended }

// endLine ends the current line: the start line, a header line, or the
// empty line that ends the header section.
func (s *StreamScanner) endLine() error {
	empty := s.line == 0
	s.line, s.escaped = 0, false
	switch {
	case s.state == stateFirst:
		s.state = stateHeaders
		s.atStart = true
		s.nameLen, s.inName = 0, false
		return nil
	case empty:
		// The end of the header section.
		s.bodyLeft = 0
		if s.lengthSeen {
			s.bodyLeft = s.length
		}
		s.state = stateStart
		if s.bodyLeft > 0 {
			s.state = stateBody
		} else {
			s.ended++
		}
		s.atStart = false
		return nil
	}
	s.atStart = true
	return nil
}

func (s *StreamScanner) newField() error {
	s.headers++
	if s.b.Headers > 0 && s.headers > s.b.Headers {
		return ErrHeaders
	}
	s.nameLen, s.inName, s.skip = 0, true, false
	s.nameGap, s.nameOdd = false, false
	s.list, s.split, s.isLength = false, false, false
	s.quoted, s.escaped, s.angle, s.elem = false, false, 0, 0
	return nil
}

// classify looks at the field's name once its colon is read.
func (s *StreamScanner) classify() {
	if s.nameLen > len(s.name) || s.nameOdd {
		return // no header sipgo knows
	}
	name := s.name[:s.nameLen]
	s.list = isListHeader(name)
	s.split = splitsAtCommas(name)
	if equalFold(name, "content-length") || equalFold(name, "l") {
		s.isLength, s.lengthSeen, s.length = true, true, 0
		s.lengthDigits, s.lengthDone = false, false
	}
}

// value counts one byte of a field's value as Scan does.
func (s *StreamScanner) value(c byte) error {
	if s.escaped {
		s.escaped = false
		if c == '"' || c == '\\' {
			return nil // an escaped quote or backslash; not a separator
		}
	}
	switch c {
	case '"':
		s.quoted = !s.quoted
	case '\\':
		if s.quoted {
			s.escaped = true
		}
	case '<':
		if !s.quoted {
			s.angle++
		}
	case '>':
		if !s.quoted && s.angle > 0 {
			s.angle--
		}
	case ',':
		if s.list && !s.quoted && s.angle == 0 {
			s.elem = 0
		}
		if s.split {
			// One more header to sipgo, counted as Scan counts it.
			s.headers++
			if s.b.Headers > 0 && s.headers > s.b.Headers {
				return ErrHeaders
			}
		}
	case ';', '&':
		return s.count()
	}
	return nil
}

// count counts one parameter separator of the current element.
func (s *StreamScanner) count() error {
	s.elem++
	s.params++
	if (s.b.ElementParams > 0 && s.elem > s.b.ElementParams) || (s.b.MessageParams > 0 && s.params > s.b.MessageParams) {
		return ErrParams
	}
	return nil
}
