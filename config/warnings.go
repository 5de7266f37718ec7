package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// LongestWaitBucket is the last finite bucket of the pacing wait histogram
// (metrics.WaitBuckets); a max_wait beyond it cannot be seen in the
// histogram's quantiles.
const LongestWaitBucket = 60 * time.Second

// Warnings returns what is valid in c but weaker than an operator would
// want at the edge, one line per finding, naming the path (empty when
// there is nothing to say). `cpsguard check` prints them as "warning:"
// lines (exit 0) and `serve` logs each at start.
func Warnings(c *Config) []string {
	var w []string
	add := func(path, format string, args ...any) {
		w = append(w, path+": "+fmt.Sprintf(format, args...))
	}
	for i, car := range c.Carriers {
		if host := uriHost(car.URI); host != "" {
			if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err != nil {
				add(fmt.Sprintf("carriers[%d].uri", i), "host name %q is resolved at start and every 30 s "+
					"(its SRV records first when the URI has no port, else A/AAAA); "+
					"its answers and in-dialog requests must come from an address it resolves to (an IP address is exact)", host)
			}
		}
		if car.Overload != nil && !car.Adaptive {
			add(fmt.Sprintf("carriers[%d].overload", i), "set without adaptive: true, so it does nothing "+
				"(a 503 or 500 with Retry-After pauses any carrier; only an adaptive carrier's overload answers lower its cps)")
		}
		if car.MaxWait == 0 {
			add(fmt.Sprintf("carriers[%d].max_wait", i), "0s (the default when unset): a call that would wait at all for one of "+
				"its slots goes to the next carrier of its route, or gets 503; set how long a call may wait, e.g. 2s")
		}
		if car.MaxWait > LongestWaitBucket {
			add(fmt.Sprintf("carriers[%d].max_wait", i), "%s is beyond the wait histogram's last bucket (%s): "+
				"longer waits show only as +Inf in cpsguard_pacing_wait_seconds", car.MaxWait, LongestWaitBucket)
		}
	}
	if c.HTTP.Token == "" && !loopback(c.HTTP.Listen) {
		add("http.token", "not set while http.listen %s is reachable beyond this machine: the API is read-only without it "+
			"(reload, drain, limit changes and call ends answer 403), but anyone who reaches it can read the status "+
			"(peers, carriers, limits) and the live calls", c.HTTP.Listen)
	}
	if c.Store.Redis != nil && c.SIP.DialogSecret == "" {
		add("sip.dialog_secret", "not set with store.redis: each node signs dialogs with a random key of its own, "+
			"so in-dialog requests (BYE included) of calls routed to another node, or after a restart, get 403")
	}
	if c.Store.Redis != nil && c.Store.OnError == "admit" {
		add("store.on_error", "admit lets every call through, without limits, while Redis is down")
	}
	if c.SIP.UnknownSource == "reject" {
		for _, l := range c.SIP.Listen {
			if u, err := url.Parse(l); err == nil && !loopback(u.Host) {
				add("sip.unknown_source", "reject answers every stranger on %s (one 403 per request); drop is silence", l)
				break
			}
		}
	}
	if !c.SIP.RecordRoute {
		add("sip.record_route", "false: in-dialog requests do not come through the proxy, which then refuses any that do")
	}
	if c.SIP.Advertise == "" {
		for _, l := range c.SIP.Listen {
			if u, err := url.Parse(l); err == nil && unspecified(u.Hostname()) {
				add("sip.advertise", "not set while %s listens on every interface: Via and Record-Route carry the host's "+
					"first non-loopback IPv4, which may not be the address peers and carriers reach", l)
				break
			}
		}
	}
	if r := c.Store.Redis; r != nil && r.Password != "" && !r.TLS.Enabled {
		for _, a := range r.Addrs {
			if !loopback(a) {
				add("store.redis.password", "sent in clear to %s: set store.redis.tls.enabled, or keep Redis on loopback", a)
				break
			}
		}
	}
	if c.Shadow {
		add("shadow", "true: limits are counted (result=\"shadow_rejected\"), not enforced; every call over a limit is admitted")
	}
	if c.Log.Level == "debug" {
		add("log.level", "debug writes several lines per call; at a few hundred CPS the log costs more than the calls")
	}
	w = append(w, families(c)...)
	w = append(w, selfCarriers(c)...)
	for i, n := range c.Priority.Numbers {
		// As calls are matched: separators out ("1-1" is "11").
		digits := strings.TrimPrefix(NormalizeNumber(n), "+")
		if !strings.HasSuffix(n, "$") && len(digits) < 3 {
			add(fmt.Sprintf("priority.numbers[%d]", i), "%q is a prefix of %d digit(s): every called number that starts with it "+
				"is a priority call that passes every limit (\"1\" is every North American number in national form); "+
				"write %s$ to match that number only", n, len(digits), n)
		}
	}
	w = append(w, peerSources(c)...)
	w = append(w, unused(c)...)
	for i, p := range c.Peers {
		if p.AllowResourcePriority && len(c.Priority.ResourcePriority) == 0 {
			add(fmt.Sprintf("peers[%d].allow_resource_priority", i), "true, but priority.resource_priority names no namespace: no Resource-Priority header claims priority")
		}
	}
	return w
}

// families reports carriers written as an IP address of a family (IPv4,
// IPv6) that sip.listen has no listener of the carrier's transport for.
// The node names itself to a carrier by such a listener (Via,
// Record-Route) and sends from it; without one, Record-Route names an
// address of the other family, which the carrier cannot reach, and UDP
// leaves from a socket of sipgo's own. Carriers named by host name are
// resolved at run time only.
func families(c *Config) []string {
	type key struct {
		scheme string
		v6     bool
	}
	has := map[key]bool{}
	v4 := map[string]bool{} // schemes with an IPv4 listener
	type lis struct {
		scheme string
		ip     netip.Addr // invalid: a host name
	}
	var ls []lis
	for _, l := range c.SIP.Listen {
		u, err := url.Parse(l)
		if err != nil {
			continue
		}
		ip, err := netip.ParseAddr(u.Hostname())
		if err != nil {
			ip = netip.Addr{}
		}
		ls = append(ls, lis{u.Scheme, ip.Unmap()})
		if !ip.IsValid() || ip.Unmap().Is4() {
			v4[u.Scheme] = true
		}
	}
	for _, l := range ls {
		switch {
		case !l.ip.IsValid(): // a name: either family, as it resolves
			has[key{l.scheme, false}], has[key{l.scheme, true}] = true, true
		case l.ip.Is4():
			has[key{l.scheme, false}] = true
		default:
			has[key{l.scheme, true}] = true
			if l.ip.IsUnspecified() && !v4[l.scheme] {
				has[key{l.scheme, false}] = true // a lone [::] is dual-stack
			}
		}
	}
	var w []string
	for i, car := range c.Carriers {
		ip, err := netip.ParseAddr(strings.Trim(uriHost(car.URI), "[]"))
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		scheme := uriTransport(car.URI)
		if has[key{scheme, ip.Is6()}] {
			continue
		}
		fam, eg := "IPv4", scheme+"://0.0.0.0:5060"
		if ip.Is6() {
			fam, eg = "IPv6", scheme+"://[::]:5060"
		}
		w = append(w, fmt.Sprintf("carriers[%d].uri: %s carrier but sip.listen has no %s:// listener on %s: "+
			"Record-Route names the node by another family's address, which the carrier cannot reach (add e.g. %s)",
			i, fam, scheme, fam, eg))
	}
	return w
}

// peerSources reports peer sources the node cannot hear or should not
// trust: a source of an address family (IPv4, IPv6) no sip.listen address
// serves (its calls never reach the node), a source of 0.0.0.0/0 or ::/0
// (every address of the family is that peer, so unknown_source never
// applies and strangers' calls count against its limits), and, when every
// listener is on loopback, a peer's sources beyond this machine (their
// calls cannot reach a loopback address).
func peerSources(c *Config) []string {
	var v4, v6 bool // a listener serves the family
	allLoopback := len(c.SIP.Listen) > 0
	for _, l := range c.SIP.Listen {
		u, err := url.Parse(l)
		if err != nil {
			continue
		}
		if !loopback(u.Host) {
			allLoopback = false
		}
		ip, err := netip.ParseAddr(u.Hostname())
		switch {
		case err != nil: // a name: either family, as it resolves
			v4, v6 = true, true
		case ip.Unmap().Is4():
			v4 = true
		default:
			v6 = true
			if ip.IsUnspecified() {
				v4 = true // [::] takes IPv4 too when no IPv4 listener does
			}
		}
	}
	var w []string
	for i, p := range c.Peers {
		var beyond []string // reachable family, not loopback
		for j, pfx := range p.Sources {
			path := fmt.Sprintf("peers[%d].sources[%d]", i, j)
			is6 := pfx.Addr().Is6()
			if pfx.Bits() == 0 {
				fam := "IPv4"
				if is6 {
					fam = "IPv6"
				}
				w = append(w, fmt.Sprintf("%s: %s makes every %s address on the internet peer %s: unknown_source never "+
					"applies to them and every stranger's call counts against %s's limits; list the peer's own addresses",
					path, pfx, fam, p.Name, p.Name))
			}
			if served := (is6 && v6) || (!is6 && v4); !served {
				fam, eg := "IPv4", "udp://0.0.0.0:5060"
				if is6 {
					fam, eg = "IPv6", "udp://[::]:5060"
				}
				w = append(w, fmt.Sprintf("%s: %s source but sip.listen has no listener on %s: calls from %s cannot reach "+
					"the node (add e.g. %s)", path, fam, fam, pfx, eg))
				continue
			}
			if !loopbackPrefix(pfx) {
				beyond = append(beyond, pfx.String())
			}
		}
		if allLoopback && len(beyond) > 0 {
			isAre := "is"
			if len(beyond) > 1 {
				isAre = "are"
			}
			w = append(w, fmt.Sprintf("peers[%d].sources: %s %s beyond this machine, but every sip.listen address is on "+
				"loopback: calls of %s from there cannot reach the node (listen on an address the peer reaches, e.g. udp://0.0.0.0:5060)",
				i, listed3(beyond), isAre, p.Name))
		}
	}
	return w
}

// loopbackPrefix reports whether every address of pfx is a loopback one.
func loopbackPrefix(pfx netip.Prefix) bool {
	if pfx.Addr().Is4() {
		return pfx.Bits() >= 8 && pfx.Addr().IsLoopback()
	}
	return pfx.Bits() == 128 && pfx.Addr().IsLoopback()
}

// listed3 names up to three items, then how many more: "a, b, c and 4 more".
func listed3(items []string) string {
	if len(items) <= 3 {
		return joinAnd(items)
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:3], ", "), len(items)-3)
}

// selfCarriers reports carriers whose URI is one of the node's own SIP
// listeners (an IP address and port a listener of the carrier's transport
// has, or, under a listener on every interface, a loopback address or an
// address of this host's interfaces): each call to such a carrier comes
// back to the node as a new INVITE, admitted and counted again, until
// Max-Forwards runs out (482).
func selfCarriers(c *Config) []string {
	var w []string
	var own map[netip.Addr]bool // the host's addresses, read once if needed
	for i, car := range c.Carriers {
		ip, port, ok := uriAddrPort(car.URI)
		if !ok {
			continue
		}
		tr := uriTransport(car.URI)
		if adv := c.SIP.Advertise; adv != "" {
			host, aport, err := net.SplitHostPort(adv)
			if err != nil {
				host, aport = adv, ""
			}
			if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil && a.Unmap() == ip && (aport == port || aport == "" && listensOnPort(c, tr, port)) {
				w = append(w, fmt.Sprintf("carriers[%d].uri: %s is this node's sip.advertise %s: its calls come back as new INVITEs, "+
					"admitted and counted again each time, until Max-Forwards runs out (482)", i, car.URI, adv))
				continue
			}
		}
		for _, l := range c.SIP.Listen {
			u, err := url.Parse(l)
			if err != nil || u.Scheme != tr || u.Port() != port {
				continue
			}
			lip, err := netip.ParseAddr(u.Hostname())
			if err != nil {
				continue
			}
			if lip.Unmap() == ip || (lip.IsUnspecified() && ip.IsLoopback() && wildcardTakes(c, lip, tr, ip)) {
				w = append(w, fmt.Sprintf("carriers[%d].uri: %s is this node's own listener %s: its calls come back as new INVITEs, "+
					"admitted and counted again each time, until Max-Forwards runs out (482)", i, car.URI, l))
				break
			}
			if lip.IsUnspecified() && wildcardTakes(c, lip, tr, ip) {
				if own == nil {
					own = hostAddrs()
				}
				if own[ip] {
					w = append(w, fmt.Sprintf("carriers[%d].uri: %s is this node's own listener %s (%s is an address of this host): "+
						"its calls come back as new INVITEs, admitted and counted again each time, until Max-Forwards runs out (482)",
						i, car.URI, l, ip))
					break
				}
			}
		}
	}
	return w
}

// wildcardTakes reports whether the wildcard listener lip of scheme
// receives what is sent to ip, as the node binds it (sip's
// socketNetwork): 0.0.0.0 takes IPv4 only; [::] takes IPv6, and IPv4 too
// unless an IPv4 listener of the same scheme is listed (each family then
// has its own socket).
func wildcardTakes(c *Config, lip netip.Addr, scheme string, ip netip.Addr) bool {
	if lip.Is4() {
		return ip.Is4()
	}
	if !ip.Is4() {
		return true
	}
	for _, l := range c.SIP.Listen {
		u, err := url.Parse(l)
		if err != nil || u.Scheme != scheme {
			continue
		}
		if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.Is4() {
			return false
		}
	}
	return true
}

// hostAddrs returns the addresses of this host's network interfaces
// (none when they cannot be read: the check then knows only loopback).
// A variable for tests.
var hostAddrs = func() map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return m
	}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			m[pfx.Addr().Unmap()] = true
		}
	}
	return m
}

// listensOnPort reports whether a sip.listen entry of scheme listens on
// port.
func listensOnPort(c *Config, scheme, port string) bool {
	for _, l := range c.SIP.Listen {
		if u, err := url.Parse(l); err == nil && u.Scheme == scheme && u.Port() == port {
			return true
		}
	}
	return false
}

// uriAddrPort is the IP address and port of a sip: or sips: URI written
// with an IP address (the port its transport's default when not given);
// false for a host name.
func uriAddrPort(uri string) (netip.Addr, string, bool) {
	host := uriHost(uri)
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return netip.Addr{}, "", false
	}
	port := "5060"
	if uriTransport(uri) == "tls" {
		port = "5061"
	}
	if _, p, err := net.SplitHostPort(uriHostPort(uri)); err == nil {
		port = p
	}
	return ip.Unmap(), port, true
}

// uriTransport is the sip.listen scheme a carrier's URI goes over: tls
// for sips: and ;transport=tls, tcp for ;transport=tcp, else udp.
func uriTransport(uri string) string {
	lower := strings.ToLower(uri)
	switch {
	case strings.HasPrefix(lower, "sips:") || strings.Contains(lower, ";transport=tls"):
		return "tls"
	case strings.Contains(lower, ";transport=tcp"):
		return "tcp"
	}
	return "udp"
}

// unused reports carriers that no route names and customers no peer can
// put a call under: their limits never apply, usually a typo.
func unused(c *Config) []string {
	var w []string
	routed := map[string]bool{}
	for _, r := range c.Routes {
		for _, rc := range r.Carriers {
			routed[rc.Name] = true
		}
	}
	for i, car := range c.Carriers {
		if !routed[car.Name] {
			w = append(w, fmt.Sprintf("carriers[%d]: %s is in no route: it never gets a call", i, car.Name))
		}
	}
	named := map[string]bool{}
	for _, p := range c.Peers {
		named[p.Customer] = true
		for _, cu := range p.Customers {
			named[cu] = true
		}
	}
	for i, cu := range c.Customers {
		if !named[cu.Name] {
			w = append(w, fmt.Sprintf("customers[%d]: %s is no peer's customer nor in any peer's customers: "+
				"no call is counted against its limit", i, cu.Name))
		}
	}
	return w
}

// unspecified reports whether host is 0.0.0.0, :: or empty (every interface).
func unspecified(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.IsUnspecified()
}

// uriHost returns the host of a sip: or sips: URI ("" when it has none).
func uriHost(uri string) string {
	rest := uriHostPort(uri)
	if h, _, err := net.SplitHostPort(rest); err == nil {
		return h
	}
	return rest
}

// uriHostPort returns the host[:port] of a sip: or sips: URI, lower case
// ("" when it is neither).
func uriHostPort(uri string) string {
	rest, ok := strings.CutPrefix(strings.ToLower(uri), "sip:")
	if !ok {
		if rest, ok = strings.CutPrefix(strings.ToLower(uri), "sips:"); !ok {
			return ""
		}
	}
	if i := strings.IndexAny(rest, ";?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	return rest
}

// loopback reports whether a host:port listens on loopback only.
func loopback(hostPort string) bool {
	h, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		h = hostPort
	}
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil && a.IsLoopback()
}
