package sipparse

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// The whitespace characters of RFC 3261's ABNF (sipgo's abnf).
const abnf = " \t"

// The largest CSeq number (2**31 - 1), sipgo's maxCseq.
const maxCseq = 2147483647

// commaAt is sipgo's errComaDetected: a header parser found a comma at
// this offset of its value, after which another value of the same header
// starts.
type commaAt int

func (e commaAt) Error() string { return "comma detected" }

// kind is which of sipgo's default header parsers (DefaultHeadersParser)
// a header name selects; kindGeneric is none (a generic header).
type kind uint8

const (
	kindGeneric kind = iota
	kindContentType
	kindFrom
	kindTo
	kindContact
	kindCallID
	kindCSeq
	kindVia
	kindMaxForwards
	kindContentLength
	kindRoute
	kindRecordRoute
	kindReferTo
	kindReferredBy
)

// kindOf is the parser sipgo's HeadersParser looks up for a header name:
// its ASCII lower case, full or compact form, in DefaultHeadersParser.
func kindOf(name string) kind {
	var buf [len("content-length")]byte
	if len(name) > len(buf) {
		return kindGeneric
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	switch string(buf[:len(name)]) {
	case "c", "content-type":
		return kindContentType
	case "f", "from":
		return kindFrom
	case "t", "to":
		return kindTo
	case "m", "contact":
		return kindContact
	case "i", "call-id":
		return kindCallID
	case "cseq":
		return kindCSeq
	case "v", "via":
		return kindVia
	case "max-forwards":
		return kindMaxForwards
	case "l", "content-length":
		return kindContentLength
	case "route":
		return kindRoute
	case "record-route":
		return kindRecordRoute
	case "refer-to":
		return kindReferTo
	case "referred-by":
		return kindReferredBy
	}
	return kindGeneric
}

// parseHeader is sipgo's HeadersParser.ParseHeader (parse_header.go) with
// the default parsers: the header's values are appended to out.
func (b *builder) parseHeader(out []sipmsg.Header, line string) ([]sipmsg.Header, error) {
	colonIdx := strings.IndexByte(line, ':')
	if colonIdx == -1 {
		return out, fmt.Errorf("field name with no value in header: %q", line)
	}
	fieldName := strings.TrimSpace(line[:colonIdx])
	fieldValue := strings.TrimSpace(line[colonIdx+1:])
	k := kindOf(fieldName)
	if k == kindGeneric {
		return append(out, sipmsg.NewHeader(fieldName, fieldValue)), nil
	}
	fieldText := fieldValue
	for {
		h, err := b.parseValue(k, fieldText)
		if err == nil {
			return append(out, h), nil
		}
		comma, ok := err.(commaAt)
		if !ok {
			return out, err
		}
		out = append(out, h)
		fieldText = fieldText[comma+1:]
	}
}

// slab holds one of each header a message almost always has, and room
// for their parameters, in one allocation: a message's first header of
// each of these kinds points into it (sipgo allocates each on its own).
// Parameters are handed out as slices capped at their room, so that an
// append to one never reaches the next.
type slab struct {
	via     sipmsg.ViaHeader
	from    sipmsg.FromHeader
	to      sipmsg.ToHeader
	contact sipmsg.ContactHeader
	cseq    sipmsg.CSeqHeader
	callID  sipmsg.CallIDHeader
	ctype   sipmsg.ContentTypeHeader
	maxFwd  sipmsg.MaxForwardsHeader
	clen    sipmsg.ContentLengthHeader
	used    uint16
	nkv     uint8
	kv      [8]sipmsg.HeaderKV
}

// builder is one message's parse: its slab, allocated at the first header
// that uses it.
type builder struct {
	s *slab
}

// take reports whether the slab's header of kind k is still free, and
// marks it taken.
func (b *builder) take(k kind) bool {
	if b.s == nil {
		b.s = new(slab)
	}
	if b.s.used&(1<<k) != 0 {
		return false
	}
	b.s.used |= 1 << k
	return true
}

// params is an empty parameter list with room for n, from the slab while
// it has room.
func (b *builder) params(n int) sipmsg.HeaderParams {
	if n == 0 {
		return nil
	}
	if s := b.s; s != nil && int(s.nkv)+n <= len(s.kv) {
		i := int(s.nkv)
		s.nkv += uint8(n)
		return s.kv[i : i : i+n]
	}
	return make(sipmsg.HeaderParams, 0, n)
}

// addressParamsHint is how many header parameters an address value
// likely has: its semicolons after the URI's closing bracket, or all of
// them without one (a room too small, as in ">x;tag=1", only costs an
// allocation in Add).
func addressParamsHint(text string) int {
	if i := strings.LastIndexByte(text, '>'); i >= 0 {
		text = text[i:]
	}
	return strings.Count(text, ";")
}

// parseValue is sipgo's header parser of kind k on one value (or the
// first of several, with a commaAt error).
func (b *builder) parseValue(k kind, text string) (sipmsg.Header, error) {
	switch k {
	case kindContentType:
		var h *sipmsg.ContentTypeHeader
		if b.take(k) {
			h = &b.s.ctype
		} else {
			h = new(sipmsg.ContentTypeHeader)
		}
		return h, parseContentTypeHeader(text, h)
	case kindFrom:
		var h *sipmsg.FromHeader
		if b.take(k) {
			h = &b.s.from
		} else {
			h = &sipmsg.FromHeader{}
		}
		h.Params = b.params(addressParamsHint(text))
		err := parseFromHeader(text, h)
		if len(h.Params) == 0 {
			h.Params = nil
		}
		return h, err
	case kindTo:
		var h *sipmsg.ToHeader
		if b.take(k) {
			h = &b.s.to
		} else {
			h = &sipmsg.ToHeader{}
		}
		h.Params = b.params(addressParamsHint(text))
		err := parseToHeader(text, h)
		if len(h.Params) == 0 {
			h.Params = nil
		}
		return h, err
	case kindContact:
		var h *sipmsg.ContactHeader
		if b.take(k) {
			h = &b.s.contact
		} else {
			h = &sipmsg.ContactHeader{}
		}
		return h, b.parseContactHeader(text, h)
	case kindCallID:
		var h *sipmsg.CallIDHeader
		if b.take(k) {
			h = &b.s.callID
		} else {
			h = new(sipmsg.CallIDHeader)
		}
		return h, parseCallIDHeader(text, h)
	case kindCSeq:
		var h *sipmsg.CSeqHeader
		if b.take(k) {
			h = &b.s.cseq
		} else {
			h = &sipmsg.CSeqHeader{}
		}
		return h, parseCSeqHeader(text, h)
	case kindVia:
		var h *sipmsg.ViaHeader
		if b.take(k) {
			h = &b.s.via
		} else {
			h = &sipmsg.ViaHeader{}
		}
		return h, b.parseViaHeader(text, h)
	case kindMaxForwards:
		var h *sipmsg.MaxForwardsHeader
		if b.take(k) {
			h = &b.s.maxFwd
		} else {
			h = new(sipmsg.MaxForwardsHeader)
		}
		return h, parseMaxForwardsHeader(text, h)
	case kindContentLength:
		var h *sipmsg.ContentLengthHeader
		if b.take(k) {
			h = &b.s.clen
		} else {
			h = new(sipmsg.ContentLengthHeader)
		}
		return h, parseContentLengthHeader(text, h)
	case kindRoute:
		h := &sipmsg.RouteHeader{}
		return h, parseRouteAddress(text, &h.Address)
	case kindRecordRoute:
		h := &sipmsg.RecordRouteHeader{}
		return h, parseRouteAddress(text, &h.Address)
	case kindReferTo:
		h := &sipmsg.ReferToHeader{}
		return h, parseRouteAddress(text, &h.Address)
	case kindReferredBy:
		h := &sipmsg.ReferredByHeader{}
		return h, parseReferredByHeader(text, h)
	}
	return nil, errors.New("sipparse: no parser for this header") // unreachable: kindGeneric is handled by the caller
}

func parseCallIDHeader(headerText string, callID *sipmsg.CallIDHeader) error {
	headerText = strings.TrimSpace(headerText)
	if len(headerText) == 0 {
		return fmt.Errorf("empty Call-ID body")
	}
	*callID = sipmsg.CallIDHeader(headerText)
	return nil
}

func parseMaxForwardsHeader(headerText string, maxfwd *sipmsg.MaxForwardsHeader) error {
	val, err := strconv.ParseUint(headerText, 10, 32)
	*maxfwd = sipmsg.MaxForwardsHeader(val)
	return err
}

func parseCSeqHeader(headerText string, cseq *sipmsg.CSeqHeader) error {
	ind := strings.IndexAny(headerText, abnf)
	if ind < 1 || len(headerText)-ind < 2 {
		return fmt.Errorf("CSeq field should have precisely one whitespace section: '%s'", headerText)
	}
	seqno, err := strconv.ParseUint(headerText[:ind], 10, 32)
	if err != nil {
		return err
	}
	if seqno > maxCseq {
		return fmt.Errorf("invalid CSeq %d: exceeds maximum permitted value "+"2**31 - 1", seqno)
	}
	cseq.SeqNo = uint32(seqno)
	cseq.MethodName = sipmsg.RequestMethod(headerText[ind+1:])
	return nil
}

func parseContentLengthHeader(headerText string, contentLength *sipmsg.ContentLengthHeader) error {
	value, err := strconv.ParseUint(strings.TrimSpace(headerText), 10, 32)
	*contentLength = sipmsg.ContentLengthHeader(value)
	return err
}

func parseContentTypeHeader(headerText string, contentType *sipmsg.ContentTypeHeader) error {
	headerText = strings.TrimSpace(headerText)
	if len(headerText) == 0 {
		return fmt.Errorf("empty Content-Type body")
	}
	*contentType = sipmsg.ContentTypeHeader(headerText)
	return nil
}

// parseToHeader, parseFromHeader and parseReferredByHeader are sipgo's
// (parse_address.go); all three say "to:" in the wildcard error. The
// first two take h.Params empty (sipgo sets it nil), with room.
func parseToHeader(headerText string, h *sipmsg.ToHeader) error {
	var err error
	h.DisplayName, err = parseAddressValue(headerText, &h.Address, &h.Params)
	if err != nil {
		return err
	}
	if h.Address.Wildcard {
		return fmt.Errorf("wildcard uri not permitted in to: header: %s", headerText)
	}
	return nil
}

func parseFromHeader(headerText string, h *sipmsg.FromHeader) error {
	var err error
	h.DisplayName, err = parseAddressValue(headerText, &h.Address, &h.Params)
	if err != nil {
		return err
	}
	if h.Address.Wildcard {
		return fmt.Errorf("wildcard uri not permitted in to: header: %s", headerText)
	}
	return nil
}

func parseReferredByHeader(headerText string, h *sipmsg.ReferredByHeader) error {
	var err error
	h.Params = nil
	h.DisplayName, err = parseAddressValue(headerText, &h.Address, &h.Params)
	if err != nil {
		return err
	}
	if h.Address.Wildcard {
		return fmt.Errorf("wildcard uri not permitted in to: header: %s", headerText)
	}
	return nil
}

// parseContactHeader is sipgo's: one value, up to a comma outside quotes
// and angle brackets.
func (b *builder) parseContactHeader(headerText string, h *sipmsg.ContactHeader) error {
	inBrackets := false
	inQuotes := false
	endInd := len(headerText)
	end := endInd - 1
	var err error
	for idx, char := range headerText {
		if char == '<' && !inQuotes {
			inBrackets = true
		} else if char == '>' && !inQuotes {
			inBrackets = false
		} else if char == '"' {
			inQuotes = !inQuotes
		} else if !inQuotes && !inBrackets {
			switch {
			case char == ',':
				endInd = idx
				err = commaAt(idx)
			case idx == end:
				endInd = idx + 1
			default:
				continue
			}
			break
		}
	}
	var e error
	h.Params = b.params(addressParamsHint(headerText[:endInd]))
	h.DisplayName, e = parseAddressValue(headerText[:endInd], &h.Address, &h.Params)
	if len(h.Params) == 0 {
		h.Params = nil
	}
	if e != nil {
		return e
	}
	return err
}

// parseRouteAddress is sipgo's (Route, Record-Route, Refer-To).
func parseRouteAddress(headerText string, address *sipmsg.Uri) (err error) {
	inBrackets := false
	inQuotes := false
	end := len(headerText) - 1
	for idx, char := range headerText {
		if char == '<' && !inQuotes {
			inBrackets = true
			continue
		}
		if char == '>' && !inQuotes {
			inBrackets = false
		} else if char == '"' {
			inQuotes = !inQuotes
		}
		if !inQuotes && !inBrackets {
			switch {
			case char == ',':
				err = commaAt(idx)
			case idx == end:
				idx = idx + 1
			default:
				continue
			}
			_, e := parseAddressValue(headerText[:idx], address, nil)
			if e != nil {
				return e
			}
			break
		}
	}
	return
}
