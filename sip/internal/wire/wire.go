package wire

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Append appends m as sipgo writes it (m.StringWrite) to b. It reports
// false, with b unchanged, for a message it leaves to sipgo: compact
// headers, or a Message type other than *Request and *Response.
func Append(b []byte, m sipmsg.Message) ([]byte, bool) {
	var hs []sipmsg.Header
	switch m := m.(type) {
	case *sipmsg.Request:
		if m == nil || m.CompactHeaders {
			return b, false
		}
		b = append(b, m.Method...)
		b = append(b, ' ')
		b = appendURI(b, &m.Recipient)
		b = append(b, ' ')
		b = append(b, m.SipVersion...)
		hs = m.Headers()
	case *sipmsg.Response:
		if m == nil || m.CompactHeaders {
			return b, false
		}
		b = append(b, m.SipVersion...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(m.StatusCode), 10)
		b = append(b, ' ')
		b = append(b, m.Reason...)
		hs = m.Headers()
	default:
		return b, false
	}
	b = append(b, "\r\n"...)
	for i, h := range hs {
		if i > 0 {
			b = append(b, "\r\n"...)
		}
		b = append(b, h.Name()...)
		b = append(b, ": "...)
		b = appendValue(b, h)
	}
	b = append(b, "\r\n\r\n"...)
	if body := m.Body(); body != nil {
		b = append(b, body...)
	}
	return b, true
}

// appendValue appends h's value as sipgo's valueStringWrite writes it.
func appendValue(b []byte, h sipmsg.Header) []byte {
	switch h := h.(type) {
	case *sipmsg.ViaHeader:
		b = append(b, h.ProtocolName...)
		b = append(b, '/')
		b = append(b, h.ProtocolVersion...)
		b = append(b, '/')
		b = append(b, h.Transport...)
		b = append(b, ' ')
		b = appendHostPort(b, h.Host, h.Port)
		return appendHeaderParams(b, h.Params)
	case *sipmsg.FromHeader:
		return appendNameAddr(b, h.DisplayName, &h.Address, h.Params)
	case *sipmsg.ToHeader:
		return appendNameAddr(b, h.DisplayName, &h.Address, h.Params)
	case *sipmsg.ContactHeader:
		if h.Address.Wildcard {
			return append(b, '*')
		}
		return appendNameAddr(b, h.DisplayName, &h.Address, h.Params)
	case *sipmsg.CallIDHeader:
		return append(b, *h...)
	case *sipmsg.CSeqHeader:
		b = strconv.AppendInt(b, int64(int(h.SeqNo)), 10)
		b = append(b, ' ')
		return append(b, h.MethodName...)
	case *sipmsg.MaxForwardsHeader:
		return strconv.AppendInt(b, int64(int(*h)), 10)
	case *sipmsg.ContentLengthHeader:
		return strconv.AppendInt(b, int64(int(*h)), 10)
	case *sipmsg.ContentTypeHeader:
		return append(b, *h...)
	case *sipmsg.RouteHeader:
		return appendAngle(b, &h.Address)
	case *sipmsg.RecordRouteHeader:
		return appendAngle(b, &h.Address)
	}
	// Every other header (sipgo's generic one above all) writes its Value.
	return append(b, h.Value()...)
}

func appendAngle(b []byte, u *sipmsg.Uri) []byte {
	b = append(b, '<')
	b = appendURI(b, u)
	return append(b, '>')
}

// appendNameAddr is From's, To's and Contact's value: sipgo quotes the
// display name as it holds it (unescaped).
func appendNameAddr(b []byte, display string, u *sipmsg.Uri, params sipmsg.HeaderParams) []byte {
	if display != "" {
		b = append(b, '"')
		b = append(b, display...)
		b = append(b, "\" "...)
	}
	b = appendAngle(b, u)
	return appendHeaderParams(b, params)
}

func appendHeaderParams(b []byte, params sipmsg.HeaderParams) []byte {
	if len(params) == 0 {
		return b
	}
	b = append(b, ';')
	return appendParams(b, params, ';')
}

// appendParams is sipgo's HeaderParams.ToStringWrite (and ToString, which
// writes the same): a value with a blank or tab is quoted, an empty value
// leaves the name alone.
func appendParams(b []byte, params sipmsg.HeaderParams, sep byte) []byte {
	for i, kv := range params {
		if i > 0 {
			b = append(b, sep)
		}
		b = append(b, kv.K...)
		if kv.V == "" {
			continue
		}
		if strings.ContainsAny(kv.V, " \t") {
			b = append(b, "=\""...)
			b = append(b, kv.V...)
			b = append(b, '"')
		} else {
			b = append(b, '=')
			b = append(b, kv.V...)
		}
	}
	return b
}

// appendURI is sipgo's Uri.StringWrite.
func appendURI(b []byte, u *sipmsg.Uri) []byte {
	if u.Scheme == "" {
		b = append(b, "sip"...)
	} else {
		b = append(b, u.Scheme...)
	}
	b = append(b, ':')
	if raw := u.Raw(); raw != "" {
		return append(b, raw...)
	}
	if u.HierarhicalSlashes {
		b = append(b, "//"...)
	}
	if u.User != "" {
		b = append(b, u.User...)
		if u.Password != "" {
			b = append(b, ':')
			b = append(b, u.Password...)
		}
		b = append(b, '@')
	}
	b = appendHostPort(b, u.Host, u.Port)
	if len(u.UriParams) > 0 {
		b = append(b, ';')
		b = appendParams(b, u.UriParams, ';')
	}
	if len(u.Headers) > 0 {
		b = append(b, '?')
		b = appendParams(b, u.Headers, '&')
	}
	return b
}

// appendHostPort is a Via's sent-by or a URI's hostport as sipgo writes
// them: the host (appendHost), then the port when above 0.
func appendHostPort(b []byte, host string, port int) []byte {
	b = appendHost(b, host)
	if port > 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(port), 10)
	}
	return b
}

// appendHost is sipgo's uriIP: an IPv6 address gets brackets.
func appendHost(b []byte, host string) []byte {
	if isIPv6(host) {
		b = append(b, '[')
		b = append(b, host...)
		return append(b, ']')
	}
	return append(b, host...)
}

// isIPv6 is sipgo's isIPV6, which ranges over the host's byte indexes
// (not its characters): a host of more than 46 bytes is never IPv6 to it;
// otherwise net.ParseIP must read it (no zone) as an address that is not
// IPv4 (nor IPv4-mapped). Only hex digits, dots and colons can be one;
// anything else is refused before netip parses it (a failed parse
// allocates its error).
func isIPv6(host string) bool {
	if len(host) > 46 || strings.IndexByte(host, ':') < 0 {
		return false
	}
	for i := 0; i < len(host); i++ {
		switch c := host[i]; {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F', c == ':', c == '.':
		default:
			return false
		}
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Zone() == "" && a.Is6() && !a.Is4In6()
}

// Verify, when set (by tests), is given every message WriteUDP writes
// itself with the bytes it wrote and sipgo's (m.String()); the sip
// package's tests fail on any difference.
var Verify func(m sipmsg.Message, got []byte, want string)

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooled is the largest buffer put back in the pool: a message near
// the UDP limit is written in a buffer of its own.
const maxPooled = 64 << 10

// WriteUDP sends m from c to m's destination as c.WriteMsg would (same
// bytes, same checks, same errors), or through c.WriteMsg when it cannot
// (see the package doc). A request goes where its destination, set
// explicitly, says: the node sets it on every request it sends, and
// sipgo's transport layer resolves the address it sends to from it; a
// request without one (the ACK of a non-2xx answer sipgo's INVITE
// transaction builds) goes through c.WriteMsg.
func WriteUDP(c *sipmsg.UDPConnection, m sipmsg.Message) error {
	uc, ok := c.PacketConn.(*net.UDPConn)
	if !ok || sipmsg.SIPDebug {
		return c.WriteMsg(m)
	}
	if r, ok := m.(*sipmsg.Request); ok && r.MessageData.Destination() == "" {
		// sipgo sends a request to the address its transport layer
		// resolved (raddr, which it does not show), and the ACK its INVITE
		// transaction builds for a non-2xx answer has only the INVITE's:
		// Destination() of a request with none set is its top Route's or
		// Request-URI's, which a party chooses (h71).
		return c.WriteMsg(m)
	}
	ap, err := netip.ParseAddrPort(m.Destination())
	if err != nil || ap.Addr().Zone() != "" || ap.Addr().Unmap().IsUnspecified() {
		// A name, a zone, or 0.0.0.0 (which sipgo's net.UDPAddr sends to
		// [::] on a dual-stack socket, netip to 127.0.0.1): sipgo's way.
		return c.WriteMsg(m)
	}
	port := ap.Port()
	if port == 0 {
		port = uint16(sipmsg.DefaultUdpPort)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), port)
	bp := bufs.Get().(*[]byte)
	data, ok := Append((*bp)[:0], m)
	if !ok {
		bufs.Put(bp)
		return c.WriteMsg(m)
	}
	defer func() {
		if cap(data) <= maxPooled {
			*bp = data[:0]
			bufs.Put(bp)
		}
	}()
	if Verify != nil {
		Verify(m, data, m.String())
	}
	if len(data) > sipmsg.UDPMTUSize-200 {
		return sipmsg.ErrUDPMTUCongestion
	}
	n, err := uc.WriteToUDPAddrPort(data, ap)
	if err != nil {
		return fmt.Errorf("udp conn %s err. %w", uc.LocalAddr().String(), err)
	}
	if n == 0 {
		return errors.New("wrote 0 bytes")
	}
	if n != len(data) {
		return errors.New("fail to write full message")
	}
	return nil
}
