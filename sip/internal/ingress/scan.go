package ingress

import (
	"bytes"
	"errors"
)

// Bounds are the limits a datagram's header section must keep before
// anything parses it. sipgo's parser looks a parameter list up before each
// insertion, so the parameters of one header cost their square: a 16 KB
// datagram with 5,000 Via parameters took 22–26 ms to parse (issue 22,
// C6), and 50 such datagrams a second from one party delayed every
// party's answers by seconds. The scan that enforces these is linear and
// costs about as much as reading the bytes once.
type Bounds struct {
	// ElementParams bounds the parameter separators (';' and '&') of one
	// header value: of one element of a list header (Via, Route,
	// Record-Route, Contact: split at commas outside quotes and angle
	// brackets), or of the whole value of any other header.
	ElementParams int
	// MessageParams bounds the parameter separators of the whole header
	// section.
	MessageParams int
	// Headers bounds the header fields (a folded field counts once),
	// every comma in the value of a header sipgo splits at commas (Via,
	// Route, Record-Route, Contact, Refer-To: splitsAtCommas) counting
	// one more: sipgo makes a header of each element, and stripping the
	// Routes of a request costs their square.
	Headers int
}

// DefaultBounds are generous for every real message seen (a plain INVITE
// has one or two dozen parameters in all, a Via six to ten, a long
// Record-Route set a few per entry) and keep the parser's worst case near
// a plain message's cost: 32² steps per element at most.
var DefaultBounds = Bounds{ElementParams: 32, MessageParams: 256, Headers: 200}

// Why a scan refuses a datagram (the reason labels of the drop counter).
var (
	// ErrParams: more parameters in one header, or in the message, than
	// Bounds allow.
	ErrParams = errors.New("ingress: too many header parameters")
	// ErrHeaders: more header fields than Bounds allow.
	ErrHeaders = errors.New("ingress: too many header fields")
)

// Kind is what a datagram is, as far as the read path needs to know.
type Kind uint8

const (
	// KindOther is a request of a method not listed below, or anything the
	// scan does not recognise at a glance (sipgo accepts "invite", a
	// leading tab...): it waits with new calls, so no spelling of an
	// INVITE overtakes the others.
	KindOther Kind = iota
	// KindResponse starts "SIP/2.0 ".
	KindResponse
	// KindInDialog is a request of a mostly in-dialog method spelt as RFC
	// 3261 spells it: ACK, BYE, INFO, UPDATE, PRACK, NOTIFY, MESSAGE,
	// REFER, SUBSCRIBE.
	KindInDialog
	// KindInvite starts "INVITE ".
	KindInvite
)

// Fast reports whether the kind goes to the fast lane (answers and
// in-dialog requests of calls already let in).
func (k Kind) Fast() bool { return k == KindResponse || k == KindInDialog }

// Info is what Scan reads of a datagram. Its slices point into the
// datagram.
type Info struct {
	Kind Kind
	// CallID is the first Call-ID (or "i") header's value, trimmed; nil
	// when there is none. The read path shards by it.
	CallID []byte
	// Headers is the number of header fields (with the elements of the
	// headers sipgo splits at commas: Bounds.Headers); Params the
	// parameter separators in all; MaxElement the most in one element.
	Headers, Params, MaxElement int
}

var fastStarts = []string{
	"SIP/2.0 ", "ACK ", "BYE ", "INFO ", "UPDATE ", "PRACK ", "NOTIFY ",
	"MESSAGE ", "REFER ", "SUBSCRIBE ",
}

func hasPrefix(data []byte, s string) bool {
	return len(data) >= len(s) && string(data[:len(s)]) == s
}

// kindOf classifies a datagram by its first bytes.
func kindOf(data []byte) Kind {
	if len(data) == 0 {
		return KindOther
	}
	switch data[0] {
	case 'S':
		if hasPrefix(data, fastStarts[0]) {
			return KindResponse
		}
		if hasPrefix(data, "SUBSCRIBE ") {
			return KindInDialog
		}
	case 'I':
		if hasPrefix(data, "INVITE ") {
			return KindInvite
		}
		if hasPrefix(data, "INFO ") {
			return KindInDialog
		}
	default:
		for _, s := range fastStarts[1:] {
			if hasPrefix(data, s) {
				return KindInDialog
			}
		}
	}
	return KindOther
}

// Classify reads what the read path needs of a datagram before it is
// queued: its kind and its first Call-ID (or "i") header's value. It stops
// at that header, so it costs a few header lines; Scan does the rest on
// a worker. Info's counts are left zero.
func Classify(data []byte) Info {
	info := Info{Kind: kindOf(data)}
	_, i := nextLine(data, 0)
	for i < len(data) {
		var line []byte
		line, i = nextLine(data, i)
		if len(line) == 0 {
			break // end of the header section
		}
		if line[0] == ' ' || line[0] == '\t' || (line[0]|0x20 != 'c' && line[0]|0x20 != 'i') {
			continue
		}
		colon := indexByte(line, ':')
		if colon < 0 {
			continue
		}
		if name := trimSpace(line[:colon]); equalFold(name, "call-id") || equalFold(name, "i") {
			info.CallID = trimSpace(line[colon+1:])
			break
		}
	}
	return info
}

// Scan classifies a datagram and checks it against b, reading its header
// section once: the start line (its separators are one element), then
// every header line up to the first empty one (or the end of the data).
// Lines end in CRLF only, as sipgo reads them; a line that starts with a
// blank continues the field before it. It fails
// only with ErrParams or ErrHeaders; anything else it does not understand
// is left to the parser (Info says what it could read).
func Scan(data []byte, b Bounds) (Info, error) {
	info := Info{Kind: kindOf(data)}
	// The start line's separators are one element (the Request-URI's
	// parameters and headers: sipgo parses them as a header's).
	start, i := nextLine(data, 0)
	for _, c := range start {
		if c == ';' || c == '&' {
			info.Params++
			info.MaxElement = info.Params
			if (b.ElementParams > 0 && info.Params > b.ElementParams) || (b.MessageParams > 0 && info.Params > b.MessageParams) {
				return info, ErrParams
			}
		}
	}
	list := false  // the current field is a list header
	split := false // sipgo splits the current field at commas
	elem := 0      // separators in the current element
	// Quotes and angle brackets of the current field (a folded line goes
	// on with them).
	quoted, angle := false, 0
	skip := false // the current field has no colon: not a header
	for i < len(data) {
		line, next := nextLine(data, i)
		if len(line) == 0 {
			break // end of the header section
		}
		var value []byte
		if line[0] == ' ' || line[0] == '\t' {
			if skip {
				i = next
				continue // the continuation of a line without a colon
			}
			value = line // a continuation: same field, same element
		} else {
			skip = false
			info.Headers++
			if b.Headers > 0 && info.Headers > b.Headers {
				return info, ErrHeaders
			}
			colon := indexByte(line, ':')
			if colon < 0 {
				i = next
				elem, quoted, angle, list, split, skip = 0, false, 0, false, false, true
				continue
			}
			name := trimSpace(line[:colon])
			value = line[colon+1:]
			list = isListHeader(name)
			split = splitsAtCommas(name)
			elem, quoted, angle = 0, false, 0
			if info.CallID == nil && (equalFold(name, "call-id") || equalFold(name, "i")) {
				info.CallID = trimSpace(value)
			}
		}
		for j := 0; j < len(value); j++ {
			switch c := value[j]; c {
			case '"':
				quoted = !quoted
			case '\\':
				// An escaped quote or backslash; an escaped separator is
				// counted (sipgo's parameter parsers know no escapes).
				if quoted && j+1 < len(value) && (value[j+1] == '"' || value[j+1] == '\\') {
					j++
				}
			case '<':
				if !quoted {
					angle++
				}
			case '>':
				if !quoted && angle > 0 {
					angle--
				}
			case ',':
				if list && !quoted && angle == 0 {
					elem = 0
				}
				if split {
					// Inside quotes and brackets too: sipgo's parsers
					// split where their own reading of those says, so
					// this is an upper bound.
					info.Headers++
					if b.Headers > 0 && info.Headers > b.Headers {
						return info, ErrHeaders
					}
				}
			case ';', '&':
				// Counted inside quotes too: sipgo's parsers do not all
				// honour them, so this is an upper bound.
				elem++
				info.Params++
				if elem > info.MaxElement {
					info.MaxElement = elem
				}
				if (b.ElementParams > 0 && elem > b.ElementParams) || (b.MessageParams > 0 && info.Params > b.MessageParams) {
					return info, ErrParams
				}
			}
		}
		i = next
	}
	return info, nil
}

// isListHeader reports the headers whose values are comma-separated lists
// of elements that each have parameters of their own.
func isListHeader(name []byte) bool {
	switch len(name) {
	case 1:
		return equalFold(name, "v") || equalFold(name, "m")
	case 3:
		return equalFold(name, "via")
	case 5:
		return equalFold(name, "route")
	case 7:
		return equalFold(name, "contact")
	case 12:
		return equalFold(name, "record-route")
	}
	return false
}

// splitsAtCommas reports the headers sipgo (v1.7.2) parses as a list,
// one header per comma-separated element: the list headers and Refer-To.
func splitsAtCommas(name []byte) bool {
	return isListHeader(name) || equalFold(name, "refer-to")
}

// nextLine returns the line that starts at from, without its CRLF, and
// where the next one starts. Only CRLF ends a line, as in sipgo's parser:
// a bare LF (or CR) is a byte of the line, so that no line break the
// parser does not see (a bare LF before a line without a colon, or before
// an empty line) hides what follows from the scan. The last line may lack
// its CRLF.
func nextLine(data []byte, from int) (line []byte, next int) {
	for k := from; k < len(data); {
		j := bytes.IndexByte(data[k:], '\n')
		if j < 0 {
			break
		}
		k += j
		if k > from && data[k-1] == '\r' {
			return data[from : k-1], k + 1
		}
		k++
	}
	return data[from:], len(data)
}

func indexByte(b []byte, c byte) int { return bytes.IndexByte(b, c) }

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold compares ASCII letters without case (never Unicode folding:
// "Cſeq" is not "CSeq" to sipgo).
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for k := range len(b) {
		x, y := b[k], s[k]
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
