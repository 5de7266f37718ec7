package sipparse

import (
	"errors"
	"strconv"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// The states of sipgo's Via parser (parse_via.go), one function each
// there.
type viaState uint8

const (
	viaDone viaState = iota
	viaProtocol
	viaProtocolVersion
	viaProtocolTransport
	viaHost
	viaParams
)

// parseViaHeader is sipgo's: one value, or the first of several with a
// commaAt error at the comma's offset.
func (b *builder) parseViaHeader(headerText string, h *sipmsg.ViaHeader) error {
	h.Params = nil
	state := viaProtocol
	str := headerText
	var ind, nextInd int
	var err error
	for state != viaDone {
		state, nextInd, err = b.viaStep(state, h, str[ind:])
		if err != nil {
			if _, ok := err.(commaAt); ok {
				err = commaAt(ind + nextInd)
			}
			return err
		}
		ind += nextInd
	}
	return nil
}

func (b *builder) viaStep(state viaState, h *sipmsg.ViaHeader, s string) (viaState, int, error) {
	switch state {
	case viaProtocol:
		ind := strings.IndexRune(s, '/')
		if ind < 0 {
			return viaDone, 0, errors.New("Malformed protocol name in Via header")
		}
		h.ProtocolName = strings.TrimSpace(s[:ind])
		return viaProtocolVersion, ind + 1, nil
	case viaProtocolVersion:
		ind := strings.IndexRune(s, '/')
		if ind < 0 {
			return viaDone, 0, errors.New("Malformed protocol version in Via header")
		}
		h.ProtocolVersion = strings.TrimSpace(s[:ind])
		return viaProtocolTransport, ind + 1, nil
	case viaProtocolTransport:
		ind := strings.IndexAny(s, " \t")
		if ind < 0 {
			return viaDone, 0, errors.New("Malformed transport in Via header")
		}
		h.Transport = strings.TrimSpace(s[:ind])
		return viaHost, ind + 1, nil
	case viaHost:
		return viaStateHost(h, s)
	case viaParams:
		return b.viaStateParams(h, s)
	}
	return viaDone, 0, nil
}

func viaStateHost(h *sipmsg.ViaHeader, s string) (viaState, int, error) {
	if len(s) > 0 && s[0] == '[' {
		closeIdx := strings.Index(s, "]")
		if closeIdx < 0 {
			return viaDone, 0, errors.New("Malformed IPv6 host in Via header: no closing bracket")
		}
		h.Host = strings.TrimSpace(s[1:closeIdx])
		rest := s[closeIdx+1:]
		baseOff := closeIdx + 1
		if len(rest) == 0 {
			return viaDone, 0, nil
		}
		if rest[0] == ':' {
			endIdx := strings.IndexByte(rest, ';')
			var portStr string
			if endIdx < 0 {
				portStr = rest[1:]
			} else {
				portStr = rest[1:endIdx]
			}
			port, err := strconv.Atoi(strings.TrimSpace(portStr))
			if err != nil {
				return viaDone, 0, nil
			}
			h.Port = port
			if endIdx < 0 {
				return viaDone, 0, nil
			}
			return viaParams, baseOff + endIdx + 1, nil
		}
		if rest[0] == ';' {
			return viaParams, baseOff + 1, nil
		}
		return viaDone, 0, nil
	}

	var colonInd int
	endIndex := len(s)
	var err error
loop:
	for i, c := range s {
		switch c {
		case ';':
			endIndex = i
			break loop
		case ':':
			colonInd = i
		}
	}
	if colonInd > 0 {
		h.Port, err = strconv.Atoi(s[colonInd+1 : endIndex])
		if err != nil {
			return viaDone, 0, nil
		}
		h.Host = strings.TrimSpace(s[:colonInd])
	} else {
		h.Host = strings.TrimSpace(s[:endIndex])
	}
	if endIndex == len(s) {
		return viaDone, 0, nil
	}
	return viaParams, endIndex + 1, nil
}

// viaStateParams is sipgo's; the parameters get room for their count's
// upper bound at once (sipgo appends to nil), and stay nil when none is
// added.
func (b *builder) viaStateParams(h *sipmsg.ViaHeader, s string) (viaState, int, error) {
	var err error
	coma := strings.IndexRune(s, ',')
	if coma > 0 {
		h.Params = b.params(strings.Count(s[:coma], ";") + 1)
		_, err = sipmsg.UnmarshalHeaderParams(s[:coma], ';', ',', &h.Params)
		if len(h.Params) == 0 {
			h.Params = nil
		}
		if err != nil {
			return viaDone, 0, err
		}
		return viaProtocol, coma, commaAt(coma)
	}
	h.Params = b.params(strings.Count(s, ";") + 1)
	_, err = sipmsg.UnmarshalHeaderParams(s, ';', '\r', &h.Params)
	if len(h.Params) == 0 {
		h.Params = nil
	}
	return viaDone, 0, err
}
