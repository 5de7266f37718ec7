package sipparse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Parse parses one datagram as sipmsg.NewParser().ParseSIP(data) does,
// with the size bound sipmsg.ParseMaxMessageLength (see the package
// comment for what is the same and what it costs).
func Parse(data []byte) (sipmsg.Message, error) {
	return ParseMax(data, sipmsg.ParseMaxMessageLength)
}

// ParseMax is Parse with the size bound max, as a sipgo parser whose
// MaxMessageLength is max: a datagram longer than max, or whose header
// section and declared body together exceed it, is
// sipmsg.ErrMessageTooLarge.
func ParseMax(data []byte, max int) (sipmsg.Message, error) {
	msg, err := parse(data, max)
	if err == io.ErrUnexpectedEOF {
		err = sipmsg.ErrParseEOF
	}
	return msg, err
}

// parse is sipgo's Parser.Parse(data, false) (parser.go).
func parse(data []byte, max int) (sipmsg.Message, error) {
	if len(data) > max {
		return nil, sipmsg.ErrMessageTooLarge
	}
	// The one string every part of the message is a substring of: the
	// header section up to its empty line, or all of the datagram when the
	// scan finds none (the parse below then fails where the scan stopped).
	s := string(data[:headerSectionLen(data)])
	msg, contentLength, total, err := parseHeaders(s)
	if err != nil {
		return msg, err
	}
	rest := data[total:]
	bodySize := len(rest)
	if contentLength != nil {
		bodySize = int(*contentLength)
	}
	if bodySize == 0 {
		return msg, nil
	}
	if bodySize > max-total {
		return msg, sipmsg.ErrMessageTooLarge
	}
	if bodySize > len(rest) {
		// sipgo allocates the declared length and sets it as the body
		// before it returns this error; the message is dropped either way.
		return msg, sipmsg.ErrParseReadBodyIncomplete
	}
	body := make([]byte, bodySize)
	copy(body, rest)
	msg.SetBody(body)
	return msg, nil
}

// headerSectionLen is the length of data up to and including the CRLF of
// the empty line that ends the header section, as parse reads lines: the
// start line, then lines each ended by CRLF. Without one (a bare CR, no
// CRLF at the end), it is len(data).
func headerSectionLen(data []byte) int {
	off := 0
	first := true
	for {
		i := bytes.IndexByte(data[off:], '\r')
		if i < 0 || off+i+1 >= len(data) || data[off+i+1] != '\n' {
			return len(data)
		}
		if i == 0 && !first {
			return off + 2
		}
		off += i + 2
		first = false
	}
}

// nextLine is sipgo's nextLine (parser.go) on a string.
func nextLine(data string) (string, int, error) {
	if len(data) == 0 {
		return "", 0, io.EOF
	}
	i := strings.IndexByte(data, '\r')
	if i < 0 {
		return data, len(data), io.ErrUnexpectedEOF
	}
	line := data[:i]
	if i+1 >= len(data) {
		return line, i + 1, io.ErrUnexpectedEOF
	}
	if data[i+1] != '\n' {
		return line, i + 1, sipmsg.ErrParseLineNoCRLF
	}
	return line, i + 2, nil
}

// parseHeaders is sipgo's Parser.parseHeaders(data, false).
func parseHeaders(s string) (sipmsg.Message, *sipmsg.ContentLengthHeader, int, error) {
	startLine, total, err := nextLine(s)
	if err != nil {
		return nil, nil, total, err
	}
	msg, err := parseLine(startLine)
	if err != nil {
		return nil, nil, total, err
	}
	contentLength, n, err := parseHeadersOnly(msg, s[total:])
	total += n
	return msg, contentLength, total, err
}

var errNoMoreHeaders = errors.New("no more headers")

// parseHeadersOnly is sipgo's Parser.parseHeadersOnly.
func parseHeadersOnly(msg sipmsg.Message, s string) (*sipmsg.ContentLengthHeader, int, error) {
	var (
		total, n      int
		contentLength *sipmsg.ContentLengthHeader
		err           error
		buf           [4]sipmsg.Header
		headers       []sipmsg.Header
		b             builder
	)
	for {
		headers, n, err = b.parseNextHeader(buf[:0], s)
		s = s[n:]
		total += n
		for _, h := range headers {
			if h, ok := h.(*sipmsg.ContentLengthHeader); ok {
				contentLength = h
			}
			msg.AppendHeader(h)
		}
		if err == errNoMoreHeaders {
			return contentLength, total, nil
		}
		if err != nil {
			return contentLength, total, err
		}
	}
}

// parseNextHeader is sipgo's Parser.parseNextHeader.
func (b *builder) parseNextHeader(out []sipmsg.Header, s string) ([]sipmsg.Header, int, error) {
	line, n, err := nextLine(s)
	if err != nil {
		if err == io.EOF {
			return out, 0, io.ErrUnexpectedEOF
		}
		return out, 0, err
	}
	if len(line) == 0 {
		return out, n, errNoMoreHeaders
	}
	if n < len(s) && isHeaderContinuation(s[n]) {
		line, n, err = foldHeaderLine(line, n, s)
		if err != nil {
			return out, 0, err
		}
	}
	out, err = b.parseHeader(out, line)
	if err != nil {
		return out, n, err
	}
	return out, n, nil
}

// foldHeaderLine is sipgo's foldHeaderLine: the folded line is a string of
// its own (folding is rare).
func foldHeaderLine(line string, n int, s string) (string, int, error) {
	total := n
	baseLen := trimRightHeaderWhitespaceLen(line)
	foldedLen := baseLen
	for total < len(s) && isHeaderContinuation(s[total]) {
		cont, contN, err := nextLine(s[total:])
		if err != nil {
			if err == io.EOF {
				return "", 0, io.ErrUnexpectedEOF
			}
			return "", 0, err
		}
		cont = trimHeaderContinuationLine(cont)
		foldedLen += 1 + len(cont)
		total += contN
	}
	var b strings.Builder
	b.Grow(foldedLen)
	b.WriteString(line[:baseLen])
	offset := n
	for offset < total {
		cont, contN, _ := nextLine(s[offset:])
		b.WriteByte(' ')
		b.WriteString(trimHeaderContinuationLine(cont))
		offset += contN
	}
	return b.String(), total, nil
}

func isHeaderContinuation(c byte) bool {
	return c == ' ' || c == '\t'
}

func trimHeaderContinuationLine(line string) string {
	for len(line) > 0 && isHeaderContinuation(line[0]) {
		line = line[1:]
	}
	return line[:trimRightHeaderWhitespaceLen(line)]
}

func trimRightHeaderWhitespaceLen(line string) int {
	n := len(line)
	for n > 0 && isHeaderContinuation(line[n-1]) {
		n--
	}
	return n
}

// parseLine is sipgo's parseLine (the start line).
func parseLine(startLine string) (sipmsg.Message, error) {
	if parts, ok := split3(startLine); ok {
		if isRequest(parts) {
			// The URI is parsed into the request's own (sipgo parses it
			// into a Uri of its own and has sipmsg.NewRequest clone its
			// parameters).
			m := sipmsg.NewRequest("", sipmsg.Uri{})
			method, sipVersion, err := parseRequestLine(parts, &m.Recipient)
			if err != nil {
				return nil, err
			}
			m.Method = method
			m.SipVersion = sipVersion
			return m, nil
		}
		if isResponse(parts) {
			sipVersion, statusCode, reason, err := parseStatusLine(parts)
			if err != nil {
				return nil, err
			}
			m := sipmsg.NewResponse(statusCode, reason)
			m.SipVersion = sipVersion
			return m, nil
		}
	}
	return nil, fmt.Errorf("transmission beginning '%s' is not a SIP message", startLine)
}

func isRequest(parts [3]string) bool {
	part2 := parts[2]
	if len(part2) < 3 {
		return false
	}
	if strings.IndexByte(part2, ' ') >= 0 {
		return false
	}
	return sipmsg.UriIsSIP(part2[:3])
}

func isResponse(parts [3]string) bool {
	part0 := parts[0]
	if len(part0) < 3 {
		return false
	}
	return sipmsg.UriIsSIP(part0[:3])
}

func split3(s string) (parts [3]string, ok bool) {
	i := strings.IndexByte(s, ' ')
	if i < 0 {
		return
	}
	parts[0] = s[:i]
	s = s[i+1:]
	i = strings.IndexByte(s, ' ')
	if i < 0 {
		return
	}
	parts[1] = s[:i]
	s = s[i+1:]
	parts[2] = s
	return parts, true
}

func parseRequestLine(parts [3]string, recipient *sipmsg.Uri) (method sipmsg.RequestMethod, sipVersion string, err error) {
	method = sipmsg.RequestMethod(strings.ToUpper(parts[0]))
	err = sipmsg.ParseUri(parts[1], recipient)
	sipVersion = parts[2]
	if recipient.Wildcard {
		err = fmt.Errorf("wildcard URI '*' not permitted in request line")
		return
	}
	return
}

func parseStatusLine(parts [3]string) (sipVersion string, statusCode int, reasonPhrase string, err error) {
	sipVersion = parts[0]
	statusCodeRaw, err := strconv.ParseUint(parts[1], 10, 16)
	statusCode = int(statusCodeRaw)
	reasonPhrase = parts[2]
	return
}
