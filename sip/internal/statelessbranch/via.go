package statelessbranch

import (
	"net/netip"
	"strconv"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// SetReceived makes up, the top Via of a request received from src over
// UDP, name where its responses go, as sipgo's stateful path would send
// them (msgpart.UpstreamOf): received is the packet's source IP whenever
// the sent-by host is not that IP or a received is present already (a
// received the sender wrote itself is never trusted), and an rport
// parameter is set to the packet's source port (RFC 3581 4). up is the
// forwarded request's own copy (msgpart.ForwardCopy); Input then covers
// both parameters.
func SetReceived(up *sipmsg.ViaHeader, src netip.AddrPort) {
	if up.Params == nil {
		up.Params = sipmsg.NewParams()
	}
	ip := src.Addr().Unmap().WithZone("")
	host, err := netip.ParseAddr(strings.Trim(up.Host, "[]"))
	if err != nil || host.Unmap().WithZone("") != ip || up.Params.Has("received") {
		up.Params.Add("received", ip.String())
	}
	if up.Params.Has("rport") {
		up.Params.Add("rport", strconv.Itoa(int(src.Port())))
	}
}

// Dest is where a response whose next Via is up goes: the received IP
// (else the sent-by host, which must be an IP), the rport port (else the
// sent-by port, else 5060). ok is false when up names no IP address.
func Dest(up *sipmsg.ViaHeader) (netip.AddrPort, bool) {
	host := strings.Trim(up.Host, "[]")
	if r, ok := up.Params.Get("received"); ok {
		host = r
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}, false
	}
	port := up.Port
	if r, ok := up.Params.Get("rport"); ok && r != "" {
		n, err := strconv.Atoi(r)
		if err != nil {
			return netip.AddrPort{}, false
		}
		port = n
	}
	if port <= 0 {
		port = sipmsg.DefaultPort("UDP")
	}
	if port > 65535 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}
