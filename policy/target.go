package policy

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Target is where a request goes next: host, port and transport.
type Target struct {
	// Host is the URI's host, an IPv6 address in brackets.
	Host string
	// Port is the URI's port, or the transport's default.
	Port int
	// PortGiven: the URI has a port. A carrier named by host name
	// without one is looked up in DNS SRV records first (RFC 3263).
	PortGiven bool
	// Transport is "UDP", "TCP" or "TLS".
	Transport string
	// HostPort is Host (without brackets) and Port joined, for dialing.
	HostPort string
}

// TargetOf is the next hop named by u; fallback is the transport when u
// names none (UDP when fallback is none of UDP, TCP and TLS). A sips: URI
// goes over TLS (RFC 3261 26.2.2), whatever its transport parameter.
func TargetOf(u *sipmsg.Uri, fallback string) Target {
	t := Target{Host: u.Host, Port: u.Port, PortGiven: u.Port != 0, Transport: fallback}
	if v, ok := u.UriParams.Get("transport"); ok && v != "" {
		t.Transport = strings.ToUpper(v)
	}
	if strings.EqualFold(u.Scheme, "sips") {
		t.Transport = "TLS"
	}
	if t.Transport != "TCP" && t.Transport != "TLS" {
		t.Transport = "UDP"
	}
	if t.Port == 0 {
		t.Port = sipmsg.DefaultPort(t.Transport)
	}
	return t
}

// ParseCarrierURI reads a carrier's URI ("sip:host[:port][;transport=tcp]",
// "sips:host", "sip:host;transport=tls")
// into its Target, HostPort filled in.
func ParseCarrierURI(raw string) (Target, error) {
	var u sipmsg.Uri
	if err := sipmsg.ParseUri(raw, &u); err != nil {
		return Target{}, fmt.Errorf("parse carrier uri %q: %w", raw, err)
	}
	if u.Host == "" {
		return Target{}, fmt.Errorf("carrier uri %q has no host", raw)
	}
	t := TargetOf(&u, "")
	t.HostPort = net.JoinHostPort(strings.Trim(t.Host, "[]"), strconv.Itoa(t.Port))
	return t, nil
}
