package msgpart

import (
	"net/netip"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Tag returns the tag parameter of a From or To header.
func Tag(ps sipmsg.HeaderParams) string {
	if ps == nil {
		return ""
	}
	v, _ := ps.Get("tag")
	return v
}

// CallID returns m's Call-ID ("" without one).
func CallID(m sipmsg.Message) string {
	if h := m.CallID(); h != nil {
		return h.Value()
	}
	return ""
}

// HasToTag reports whether req's To header has a tag: the mark of a
// request inside a dialog (RFC 3261 12.2) as its sender presents it.
func HasToTag(req *sipmsg.Request) bool {
	to := req.To()
	return to != nil && to.Params.Has("tag")
}

// ToTagged reports whether r's To header carries a tag (not empty).
func ToTagged(r *sipmsg.Response) bool {
	to := r.To()
	return to != nil && Tag(to.Params) != ""
}

// SourceAddr is the packet source of a request, never a header.
func SourceAddr(req *sipmsg.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(req.MessageData.Source())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// HeaderValue returns the trimmed value of the first header called name.
func HeaderValue(req *sipmsg.Request, name string) string {
	if name == "" {
		return ""
	}
	h := req.GetHeader(name)
	if h == nil {
		return ""
	}
	return strings.TrimSpace(h.Value())
}

// HostAddr is host (a URI's or Via's, brackets allowed) as an address;
// invalid when it is a name.
func HostAddr(host string) netip.Addr {
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// HeaderList is a SIP message's header list (*sipmsg.Request and
// *sipmsg.Response): walked in place, where GetHeaders would allocate a
// slice of the matches.
type HeaderList interface {
	Headers() []sipmsg.Header
}

// IsVia reports a Via header, as GetHeaders("Via") matches one (its name
// folded to lower case).
func IsVia(h sipmsg.Header) bool {
	return sipmsg.HeaderToLower(h.Name()) == "via"
}

// TopVias returns the first two Via values of m (the proxy's own and the
// upstream one on a forwarded request), nil when missing.
func TopVias(m HeaderList) (first, second *sipmsg.ViaHeader) {
	for _, h := range m.Headers() {
		if !IsVia(h) {
			continue
		}
		v, ok := h.(*sipmsg.ViaHeader)
		if !ok {
			return nil, nil
		}
		if first == nil {
			first = v
			continue
		}
		return first, v
	}
	return first, nil
}

// RecordRoutes appends the Record-Route entries of m to dst, in order.
func RecordRoutes(m interface{ Headers() []sipmsg.Header }, dst []*sipmsg.RecordRouteHeader) []*sipmsg.RecordRouteHeader {
	out := dst
	for _, h := range m.Headers() {
		if rr, ok := h.(*sipmsg.RecordRouteHeader); ok {
			out = append(out, rr)
		}
	}
	return out
}

// UpstreamOf is where responses to a received request go: the packet's
// source for a stream transport; for UDP its source IP with the port of
// the top Via's sent-by, unless the Via asks for rport (RFC 3261 18.2.2,
// RFC 3581). sipgo's NewResponseFromRequest computes exactly that from the
// address its transport layer stored when the request arrived, which
// req.Source() (the packet's own ip:port) is not: a UA that sends from an
// ephemeral port and listens on its Via port would never see the answer.
func UpstreamOf(req *sipmsg.Request) string {
	return sipmsg.NewResponseFromRequest(req, 100, "Trying", nil).Destination()
}

// LowerTransport is strings.ToLower for a transport name without the
// allocation for the usual upper-case "UDP", "TCP" and "TLS" (once per
// forwarded message).
func LowerTransport(tp string) string {
	switch tp {
	case "UDP":
		return "udp"
	case "TCP":
		return "tcp"
	case "TLS":
		return "tls"
	}
	return strings.ToLower(tp)
}
