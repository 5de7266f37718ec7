package sip

import (
	"net"
	"net/netip"
	"strconv"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/policy"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/opaque"
)

// target is where a request goes next: host, port and transport.
type target struct {
	host      string
	port      int
	transport string // "UDP", "TCP" or "TLS"
	// portGiven: the URI has a port (else a host name is looked up in
	// SRV records first).
	portGiven bool
	// hp is hostPort() when computed ahead (carriers' targets, parsed
	// once per configuration snapshot); empty otherwise.
	hp string
}

func (t target) hostPort() string {
	if t.hp != "" {
		return t.hp
	}
	return net.JoinHostPort(strings.Trim(t.host, "[]"), strconv.Itoa(t.port))
}

// parseCarrierURI reads a carrier's URI ("sip:host[:port][;transport=tcp]").
func parseCarrierURI(raw string) (target, error) {
	t, err := policy.ParseCarrierURI(raw)
	if err != nil {
		return target{}, err
	}
	return targetFrom(t), nil
}

// targetFrom is the target of a carrier's parsed URI.
func targetFrom(t policy.Target) target {
	return target{host: t.Host, port: t.Port, transport: t.Transport, portGiven: t.PortGiven, hp: t.HostPort}
}

// carrierTargets returns the parsed URIs of cfg.Carriers (policy.Of derives
// them once per snapshot), index-aligned.
func carrierTargets(cfg *config.Config) []policy.Carrier { return policy.Of(cfg).Carriers() }

// carrierIPs returns the carriers' addresses written as IPs in their URIs.
func carrierIPs(cfg *config.Config) map[netip.Addr]struct{} { return policy.Of(cfg).CarrierIPs() }

// carrierTargetOf returns the parsed URI of car, a carrier of cfg.
func carrierTargetOf(cfg *config.Config, car *config.Carrier) (target, error) {
	c := policy.Of(cfg).Carrier(car)
	if c.Err != nil {
		return target{}, c.Err
	}
	return targetFrom(c.Target), nil
}

// targetOf is the next hop named by a URI; fallback is the transport when
// the URI names none (default UDP).
func targetOf(u *sipmsg.Uri, fallback string) target {
	t := policy.TargetOf(u, fallback)
	return target{host: t.Host, port: t.Port, transport: t.Transport, portGiven: t.PortGiven}
}

// popOwnRoutes removes the Route entries at the top of req that point at
// this proxy and reports how many there were.
func popOwnRoutes(p *Proxy, req *sipmsg.Request) int {
	return popOwnRoutesFunc(p, req, nil)
}

// popOwnRoutesFunc is popOwnRoutes that shows each popped entry's URI to
// visit (when not nil) before removing it.
func popOwnRoutesFunc(p *Proxy, req *sipmsg.Request, visit func(*sipmsg.Uri)) int {
	n := 0
	for {
		r := req.Route()
		if r == nil || !p.isMe(&r.Address) {
			return n
		}
		if visit != nil {
			visit(&r.Address)
		}
		if !req.RemoveHeader("Route") {
			return n // bounded even if the parsed header is out of step
		}
		n++
	}
}

// addVia puts the proxy's Via (new branch) on top of req for transport tp
// towards the next hop's address to, and returns how the proxy names
// itself on it (localFor).
func addVia(p *Proxy, req *sipmsg.Request, tp string, to netip.Addr) local {
	return prependVia(p, req, tp, to, nil)
}

// prependVia is addVia that also puts the headers below (Record-Route) right
// under the Via: sipgo rebuilds the whole header list on every prepend, so
// one prepend for both saves a copy of it.
//
// Over UDP without a listener of to's family, the Via is left without a
// sent-by: sipgo fills in the address of the socket it opens to send
// (another listener's address would draw the responses where nothing
// reads them).
func prependVia(p *Proxy, req *sipmsg.Request, tp string, to netip.Addr, below []sipmsg.Header) local {
	lo := p.localFor(tp, to)
	via := &sipmsg.ViaHeader{
		ProtocolName:    "SIP",
		ProtocolVersion: "2.0",
		Transport:       tp,
		Host:            lo.host,
		Port:            lo.port,
		Params:          sipmsg.NewParams(),
	}
	if tp == "UDP" && !lo.exact {
		via.Host, via.Port = "", 0
	}
	// Not sipgo's GenerateBranchN: its letters can spell a header name,
	// and some parsers search a message for those (opaque).
	via.Params.Add("branch", opaque.Branch())
	// RFC 3581: fill received/rport of the previous hop when it asked.
	if prev := req.Via(); prev != nil && prev.Params.Has("rport") {
		if h, port, err := net.SplitHostPort(req.MessageData.Source()); err == nil {
			if v, _ := prev.Params.Get("rport"); v == "" {
				prev.Params.Add("rport", port)
			}
			prev.Params.Add("received", h)
		}
	}
	if len(below) == 0 {
		req.PrependHeader(via)
	} else {
		// The received Vias move up with it, so every Via line stays
		// together above the headers below (each a plain Via line: ack.go).
		var buf [8]sipmsg.Header
		hs := append(buf[:0], via)
		for _, h := range req.Headers() {
			if msgpart.IsVia(h) {
				hs = append(hs, h)
			}
		}
		for req.RemoveHeader("Via") {
		}
		hs = append(hs, below...)
		req.PrependHeader(hs...)
		// PrependHeader points req.Via() at the last Via it was given;
		// replacing the first by itself points it back at the top one.
		req.ReplaceHeader(via)
	}
	if tp != "UDP" {
		lo.laddr = sipmsg.Addr{}
	}
	return lo
}

// stripHeaders returns the names of the headers removed from an initial
// INVITE before it is forwarded (sip.strip_headers; by default the
// customer header).
func stripHeaders(cfg *config.Config) []string { return cfg.Stripped() }

// legSide is one side of a forwarded request, as the proxy's
// Record-Route names itself to it: its transport and address.
type legSide struct {
	transport string
	addr      netip.Addr
}

// recordRoutes appends to dst the proxy's Record-Route headers for a call
// that came in from the in side and leaves to the out side, in the order
// they are prepended. When the two sides reach the proxy differently (a
// transport, or an address family: an IPv4 peer and an IPv6 carrier) the
// proxy records itself twice (RFC 5658), so each side reaches it on its
// own transport and address. Each entry carries the dialog token
// (";cg=token", see token.go) when token is not empty.
func recordRoutes(dst []sipmsg.Header, p *Proxy, in, out legSide, token string) []sipmsg.Header {
	rr := func(tp string, lo local) *sipmsg.RecordRouteHeader {
		h := &sipmsg.RecordRouteHeader{Address: sipmsg.Uri{
			Scheme:    "sip",
			Host:      lo.host,
			Port:      lo.port,
			UriParams: sipmsg.NewParams(),
		}}
		h.Address.UriParams.Add("transport", msgpart.LowerTransport(tp))
		h.Address.UriParams.Add("lr", "")
		if token != "" {
			h.Address.UriParams.Add(tokenParam, token)
		}
		return h
	}
	loOut := p.localFor(out.transport, out.addr)
	dst = append(dst, rr(out.transport, loOut))
	loIn := p.localFor(in.transport, in.addr)
	if !strings.EqualFold(in.transport, out.transport) || loIn.host != loOut.host || loIn.port != loOut.port {
		dst = append(dst, rr(in.transport, loIn))
	}
	return dst
}
