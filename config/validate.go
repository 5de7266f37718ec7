package config

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Name rules. Names end up in Redis keys (inside a Cluster hash tag, so no
// braces) and in Prometheus label values, so they are kept to a small, safe
// alphabet.
var (
	nameRe      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	routeNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	nodeIDRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
	keyPrefixRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)
	// tokenRe is an HTTP/SIP header field name (RFC 3261 token).
	tokenRe = regexp.MustCompile("^[A-Za-z0-9.!%*_+`'~-]+$")
)

// MinDialogSecret is the shortest sip.dialog_secret accepted (in bytes).
const MinDialogSecret = 16

// DefaultRoute is the route of a call whose customer and peer name none.
const DefaultRoute = "default"

func oneOf(v string, allowed ...string) bool { return slices.Contains(allowed, v) }

func quoteAll(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// validate checks every rule on a decoded Config and records each violation
// in errs. It never stops early.
func validate(c *Config, errs *errorList) {
	v := validator{c: c, errs: errs}
	v.top()
	v.sip()
	v.store()
	v.http()
	v.records()
	v.peers()
	v.customers()
	v.carriers()
	v.routes()
	v.defaultRoute()
	v.priority()
	v.destinations()
	v.repeatDial()
}

type validator struct {
	c    *Config
	errs *errorList
}

func (v *validator) errf(path, format string, args ...any) { v.errs.errf(path, format, args...) }

func (v *validator) name(path, name string) {
	switch {
	case name == "":
		v.errf(path, "must be set")
	case !nameRe.MatchString(name):
		v.errf(path, "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (got %q)", name)
	}
}

// MaxCPS is the largest cps a peer, customer or carrier may have. A window
// holds one entry per call, so a limit is also memory; far beyond what one
// SIP proxy node carries, a "practically unlimited" 1e9 would make every
// bucket a gigabyte.
const MaxCPS = 100000

// MinCPS is the smallest cps a peer, customer or carrier may have: one
// call every 1000 s. Smaller rates are not limits an operator means, and
// they break the arithmetic: a token bucket's refill rounds to 0 micro-
// tokens a second (it would become a plain window), and a window of one
// call per 1/cps overflows a time.Duration.
const MinCPS = 0.001

// cps checks a cps at path and reports whether it is valid: the checks of
// values bounded by it (a burst, an overload's min_cps) are made only
// against a valid one, so a wrong cps is one error, not one more for
// every value the file did not get wrong.
func (v *validator) cps(path string, cps float64) bool {
	switch {
	case cps == 0 && v.errs.missing(path):
		v.errf(path, "required: the calls a second allowed, > 0")
	case !(cps > 0) || math.IsInf(cps, 0):
		v.errf(path, "must be > 0 (got %g)", cps)
	case cps < MinCPS:
		v.errf(path, "must be >= %g, one call every 1000 s (got %g)", MinCPS, cps)
	case cps > MaxCPS:
		v.errf(path, "must be <= %d (got %g)", MaxCPS, cps)
	default:
		return true
	}
	return false
}

func (v *validator) enum(path, val string, allowed ...string) {
	if !oneOf(val, allowed...) {
		v.errf(path, "must be one of %s (got %q)", quoteAll(allowed), val)
	}
}

// portZero reports a port that is 0 however written ("0", "00").
func portZero(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n == 0
}

// hostPort checks "host:port" with a numeric port 0-65535 (0 = any free
// port, useful in tests) and a host that is an address or a name
// ([hostOK]), or none (":9090").
func hostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port (got %q)", s)
	}
	if host == "" && !strings.HasPrefix(s, ":") {
		return fmt.Errorf("must be host:port (got %q)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port must be 0-65535 (got %q)", s)
	}
	if host != "" && !hostOK(host) {
		return fmt.Errorf("host must be an IP address or a DNS name (got %q in %q)", host, s)
	}
	return nil
}

func (v *validator) top() {
	if !nodeIDRe.MatchString(v.c.NodeID) {
		v.errf("node_id", "must be 1-253 letters, digits, '.', '_' or '-' (got %q)", v.c.NodeID)
	}
	if !tokenRe.MatchString(v.c.CustomerHeader) {
		v.errf("customer_header", "must be a header name like X-Customer (got %q)", v.c.CustomerHeader)
	}
	v.enum("log.level", v.c.Log.Level, "debug", "info", "warn", "error")
	v.enum("log.format", v.c.Log.Format, "json", "text")
	if n := v.c.Log.EventsPerSecond; n < 1 || n > 100000 {
		v.errf("log.events_per_second", "must be between 1 and 100000 (got %d)", n)
	}
}

func (v *validator) sip() {
	s := v.c.SIP
	if len(s.Listen) == 0 {
		v.errf("sip.listen", "must list at least one address like udp://127.0.0.1:5060")
	}
	seen := map[string]int{}
	tlsListen := "" // the first tls:// listener's path
	for i, l := range s.Listen {
		path := fmt.Sprintf("sip.listen[%d]", i)
		u, err := url.Parse(l)
		switch {
		case err != nil || (u.Scheme != "udp" && u.Scheme != "tcp" && u.Scheme != "tls"):
			v.errf(path, "must be udp://host:port, tcp://host:port or tls://host:port (got %q)", l)
			continue
		case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			v.errf(path, "must be udp://host:port, tcp://host:port or tls://host:port, nothing more (got %q)", l)
			continue
		}
		if err := hostPort(u.Host); err != nil || u.Hostname() == "" {
			if h := u.Hostname(); h != "" && !hostOK(h) {
				v.errf(path, "host must be an IP address or a DNS name (got %q in %q)", h, l)
			} else {
				v.errf(path, "must be udp://host:port, tcp://host:port or tls://host:port with a numeric port (got %q)", l)
			}
			continue
		}
		if u.Scheme == "tls" && tlsListen == "" {
			tlsListen = path
		}
		key := u.Scheme + "://" + u.Host
		if j, dup := seen[key]; dup {
			v.errf(path, "duplicate of sip.listen[%d] (%q)", j, l)
		}
		seen[key] = i
	}
	if a := s.Advertise; a != "" {
		if strings.Contains(a, "://") || strings.ContainsAny(a, " ;/@") {
			v.errf("sip.advertise", "must be host or host:port (got %q)", a)
		} else if strings.Contains(a, ":") && !strings.HasPrefix(a, "[") && strings.Count(a, ":") > 1 {
			// A bare IPv6 address: fine as a host.
			if _, err := netip.ParseAddr(a); err != nil {
				v.errf("sip.advertise", "must be host or host:port (got %q)", a)
			}
		} else if strings.Contains(a, ":") {
			if err := hostPort(a); err != nil {
				v.errf("sip.advertise", "must be host or host:port (got %q)", a)
			} else if _, port, _ := net.SplitHostPort(a); portZero(port) {
				// Written into Via and Record-Route: port 0 reaches nobody.
				v.errf("sip.advertise", "port must be 1-65535 (got %q): it is written into Via and Record-Route", a)
			}
		} else if !hostOK(a) {
			v.errf("sip.advertise", "must be host or host:port (got %q)", a)
		}
	}
	v.enum("sip.unknown_source", s.UnknownSource, "reject", "drop")
	v.enum("sip.dialog_token_text", s.DialogTokenText, "auto", "base64url")
	if c := s.Reject.Code; c < 400 || c > 699 {
		v.errf("sip.reject.code", "must be a 4xx, 5xx or 6xx SIP status (got %d)", c)
	}
	if r := s.Reject.Reason; r == "" {
		v.errf("sip.reject.reason", "must be set")
	} else if strings.ContainsFunc(r, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		v.errf("sip.reject.reason", "must not contain control characters (got %q)", r)
	}
	if n := len(s.DialogSecret); n > 0 && n < MinDialogSecret {
		// The length only: the value is a secret.
		v.errf("sip.dialog_secret", "must be empty or at least %d characters (got %d)", MinDialogSecret, n)
	}
	if d := s.TCP.IdleTimeout; d <= 0 {
		v.errf("sip.tcp.idle_timeout", "must be > 0 (got %s)", d)
	}
	if n := s.TCP.MaxConnections; n < 1 {
		v.errf("sip.tcp.max_connections", "must be >= 1 (got %d)", n)
	} else if n := s.TCP.MaxConnectionsPerSource; n < 1 || n > s.TCP.MaxConnections {
		v.errf("sip.tcp.max_connections_per_source", "must be between 1 and sip.tcp.max_connections (%d) (got %d)", s.TCP.MaxConnections, n)
	}
	for i, h := range s.StripHeaders {
		if !tokenRe.MatchString(h) {
			v.errf(fmt.Sprintf("sip.strip_headers[%d]", i), "must be a header name like X-Customer (got %q)", h)
		}
	}
	if n := s.MaxInflight; n < 0 {
		v.errf("sip.max_inflight", "must be >= 0 (0 = derived from GOMAXPROCS) (got %d)", n)
	}
	if d := s.InflightWait; d < 0 || d > MaxInflightWait {
		v.errf("sip.inflight_wait", "must be between 0s (shed at once) and %s (got %s)", MaxInflightWait, d)
	}
	if ra := s.Reject.RetryAfter; ra < 0 {
		v.errf("sip.reject.retry_after", "must be >= 0 (got %s)", ra)
	} else if ra%time.Second != 0 {
		v.errf("sip.reject.retry_after", "must be whole seconds: Retry-After counts seconds (got %s)", ra)
	}
	v.reject("sip.reject_calls", s.RejectCalls)
	if !s.RecordRoute && v.c.anyMaxCalls() {
		// The end of a call (its BYE) is seen only through Record-Route:
		// without it every answered call would hold its places until
		// max_call_duration.
		v.errf("sip.record_route", "must be true when a peer, customer, carrier or destination has max_calls (a call's BYE is seen through Record-Route)")
	}
	if d := s.MaxCallDuration; d < time.Second || d > MaxMaxCallDuration {
		v.errf("sip.max_call_duration", "must be >= 1s and <= %s (got %s)", fmtPer(MaxMaxCallDuration), d)
	}
	if d := s.CallRefreshTTL; d < time.Second || d > time.Hour {
		v.errf("sip.call_refresh_ttl", "must be between 1s and 1h (got %s)", d)
	}
	if d := s.DrainGrace; d <= 0 || d > MaxDrainGrace {
		v.errf("sip.drain_grace", "must be > 0 and <= %s (got %s)", fmtPer(MaxDrainGrace), d)
	}
	v.sipTLS(s.TLS, tlsListen)
}

// sipTLS checks sip.tls: the certificate and key load (and are required
// with a tls:// listener, at tlsListen), the CA files hold certificates.
// The files are read now, so `cpsguard check` finds a wrong path or a key
// that does not match before the node starts.
func (v *validator) sipTLS(t SIPTLS, tlsListen string) {
	switch {
	case t.CertFile == "" && t.KeyFile == "":
		if tlsListen != "" {
			v.errf("sip.tls.cert_file", "must be set with a tls:// listener (%s)", tlsListen)
		}
	case t.CertFile == "":
		v.errf("sip.tls.cert_file", "must be set with sip.tls.key_file")
	case t.KeyFile == "":
		v.errf("sip.tls.key_file", "must be set with sip.tls.cert_file")
	default:
		if _, err := t.Certificate(); err != nil {
			v.errf("sip.tls.cert_file", "cannot load the certificate and key: %v", err)
		}
	}
	if n := t.StrangerHandshakesPerSecond; n < 1 || n > MaxStrangerHandshakesPerSecond {
		v.errf("sip.tls.stranger_handshakes_per_second", "must be between 1 and %d (got %d)", MaxStrangerHandshakesPerSecond, n)
	}
	for _, f := range []struct{ path, file string }{{"sip.tls.client_ca_file", t.ClientCAFile}, {"sip.tls.ca_file", t.CAFile}} {
		if f.file == "" {
			continue
		}
		if _, err := LoadCAs(f.file); err != nil {
			v.errf(f.path, "%v", err)
		}
	}
}

// reject checks a SIP answer of the proxy's own (sip.reject_calls).
func (v *validator) reject(path string, r Reject) {
	if r.Code < 400 || r.Code > 699 {
		v.errf(path+".code", "must be a 4xx, 5xx or 6xx SIP status (got %d)", r.Code)
	}
	if r.Reason == "" {
		v.errf(path+".reason", "must be set")
	} else if strings.ContainsFunc(r.Reason, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		v.errf(path+".reason", "must not contain control characters (got %q)", r.Reason)
	}
	if r.RetryAfter < 0 {
		v.errf(path+".retry_after", "must be >= 0 (got %s)", r.RetryAfter)
	} else if r.RetryAfter%time.Second != 0 {
		v.errf(path+".retry_after", "must be whole seconds: Retry-After counts seconds (got %s)", r.RetryAfter)
	}
}

// maxCalls checks a max_calls limit (0 = none).
func (v *validator) maxCalls(path string, n int) {
	if n < 0 {
		v.errf(path, "must be >= 0 (got %d)", n)
	}
}

func (v *validator) store() {
	s := v.c.Store
	if !keyPrefixRe.MatchString(s.KeyPrefix) {
		v.errf("store.key_prefix", "must be 1-64 letters, digits, '.', '_', ':' or '-' (got %q)", s.KeyPrefix)
	}
	v.enum("store.on_error", s.OnError, "local", "admit", "reject")
	r := s.Redis
	if r == nil {
		return
	}
	if len(r.Addrs) == 0 {
		if vars := v.errs.envOnlyVars("store.redis"); len(vars) > 0 {
			// No store.redis in the file: the block is there because
			// of these variables (a password set for a Redis never
			// configured, or left over). Name them, not the file.
			isAre, them := "is", vars[0]
			if len(vars) > 1 {
				isAre, them = "are", "them"
			}
			v.errs.addAt(Position{}, fmt.Sprintf("%s %s set, but store.redis has no addrs: set %s_STORE_REDIS_ADDRS (or store.redis.addrs in the file) to use Redis, or unset %s for the in-process store",
				joinAnd(vars), isAre, EnvPrefix, them))
		} else {
			v.errf("store.redis.addrs", "must list at least one address like 127.0.0.1:6379 (omit store.redis for the in-process store)")
		}
	}
	seen := map[string]int{}
	for i, a := range r.Addrs {
		if err := hostPort(a); err != nil {
			v.errf(fmt.Sprintf("store.redis.addrs[%d]", i), "%v", err)
		} else if _, port, _ := net.SplitHostPort(a); portZero(port) {
			v.errf(fmt.Sprintf("store.redis.addrs[%d]", i), "port must be 1-65535 (got %q): it is an address to dial", a)
		} else if j, dup := seen[strings.ToLower(a)]; dup {
			// Two addresses make a Cluster client, which a standalone
			// server refuses on every call.
			v.errf(fmt.Sprintf("store.redis.addrs[%d]", i), "duplicate of store.redis.addrs[%d] (%q): one address is a standalone server, several a Cluster or Sentinels", j, a)
		} else {
			seen[strings.ToLower(a)] = i
		}
	}
	if r.MasterName != "" && strings.TrimSpace(r.MasterName) != r.MasterName {
		v.errf("store.redis.master_name", "must not start or end with a blank (got %q)", r.MasterName)
	}
	if r.DB < 0 {
		v.errf("store.redis.db", "must be >= 0 (got %d)", r.DB)
	} else if r.DB != 0 && r.MasterName == "" && len(r.Addrs) > 1 {
		v.errf("store.redis.db", "must be 0 with Redis Cluster (several addrs) (got %d)", r.DB)
	}
	if r.Timeout <= 0 {
		v.errf("store.redis.timeout", "must be > 0 (got %s)", r.Timeout)
	} else if r.Timeout > MaxRedisTimeout {
		v.errf("store.redis.timeout", "must be at most %s: a call waits for Redis that long before its fallback (got %s)", MaxRedisTimeout, r.Timeout)
	}
	if r.ExpectedNodes < 0 || r.ExpectedNodes > MaxExpectedNodes {
		v.errf("store.redis.expected_nodes", "must be 0 to %d: the nodes sharing this Redis (got %d)", MaxExpectedNodes, r.ExpectedNodes)
	}
	if t := r.TLS; !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "") {
		v.errf("store.redis.tls.enabled", "must be true when other store.redis.tls settings are given (or remove them)")
	} else if _, err := t.ClientConfig(); err != nil {
		v.errf("store.redis.tls", "%v", err)
	}
}

func (v *validator) http() {
	if err := hostPort(v.c.HTTP.Listen); err != nil {
		v.errf("http.listen", "%v", err)
		return
	}
	for i, l := range v.c.SIP.Listen {
		u, err := url.Parse(l)
		if err != nil || u.Scheme == "udp" {
			continue
		}
		if sameTCPPort(u.Host, v.c.HTTP.Listen) {
			v.errf("http.listen", "%s takes the TCP port of sip.listen[%d] (%s): one of the two cannot listen", v.c.HTTP.Listen, i, l)
		}
	}
}

// sameTCPPort reports whether two host:port listen addresses need the
// same TCP port of one address: the same port, and the same host, or a
// wildcard (or empty) host on either side that covers the other's
// address family.
func sameTCPPort(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	if strings.EqualFold(ha, hb) {
		return true
	}
	ipA, errA := netip.ParseAddr(ha)
	ipB, errB := netip.ParseAddr(hb)
	wild := func(h string, ip netip.Addr, err error) bool { return h == "" || (err == nil && ip.IsUnspecified()) }
	switch {
	case ha == "" || hb == "":
		return true
	case errA != nil || errB != nil:
		return false // a host name: its address is known only when it resolves
	case wild(ha, ipA, errA) && (ipA.Is6() || ipA.Is4() == ipB.Unmap().Is4()):
		return true // [::] covers IPv4 too, on Linux by default
	case wild(hb, ipB, errB) && (ipB.Is6() || ipB.Is4() == ipA.Unmap().Is4()):
		return true
	}
	return ipA.Unmap() == ipB.Unmap()
}

// Bounds of the records block.
const (
	MaxRecordsSizeMB  = 100 * 1024
	MaxRecordsBackups = 10000
	MinRecordsBuffer  = 16
	MaxRecordsBuffer  = 1 << 20
)

func (v *validator) records() {
	r := v.c.Records
	if n := r.MaxSizeMB; n < 1 || n > MaxRecordsSizeMB {
		v.errf("records.max_size_mb", "must be between 1 and %d (got %d)", MaxRecordsSizeMB, n)
	}
	if n := r.MaxBackups; n < 0 || n > MaxRecordsBackups {
		v.errf("records.max_backups", "must be between 0 and %d (got %d)", MaxRecordsBackups, n)
	}
	if n := r.Buffer; n < MinRecordsBuffer || n > MaxRecordsBuffer {
		v.errf("records.buffer", "must be between %d and %d (got %d)", MinRecordsBuffer, MaxRecordsBuffer, n)
	}
	if f := r.File; f != "" && (strings.HasSuffix(f, "/") || strings.ContainsRune(f, 0)) {
		v.errf("records.file", "must be a file path (got %q)", f)
	}
	if s := r.Syslog; s != "" {
		u, err := url.Parse(s)
		switch {
		case err != nil || (u.Scheme != "udp" && u.Scheme != "tcp"):
			v.errf("records.syslog", "must be udp://host:port or tcp://host:port (got %q)", s)
		case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			v.errf("records.syslog", "must be udp://host:port or tcp://host:port, nothing more (got %q)", s)
		case hostPort(u.Host) != nil || u.Hostname() == "" || u.Port() == "0":
			v.errf("records.syslog", "must be udp://host:port or tcp://host:port with a port 1-65535 (got %q)", s)
		}
	}
}

func (v *validator) route(path, route string) {
	if route == "" {
		return
	}
	if _, ok := v.c.Routes[route]; !ok {
		v.errf(path, "unknown route %q%s", route, known(v.c.Routes))
	}
}

// known lists the defined routes for an "unknown route" message.
func known[V any](routes map[string]V) string {
	if len(routes) == 0 {
		return " (no routes are defined)"
	}
	names := make([]string, 0, len(routes))
	for n := range routes {
		names = append(names, n)
	}
	slices.Sort(names)
	return " (routes: " + strings.Join(names, ", ") + ")"
}

func (v *validator) peers() {
	names := map[string]int{}
	// owner maps each source prefix to "peers[i].sources[j]" and the peer name.
	type owner struct {
		path, peer string
		i          int
	}
	owners := map[netip.Prefix]owner{}
	if len(v.c.Peers) == 0 {
		// An empty or truncated file (a bad ConfigMap mount) must not be
		// swapped in at reload: it would refuse all traffic.
		v.errf("peers", "must list at least one peer (without peers every call is refused)")
	}
	for i, p := range v.c.Peers {
		path := fmt.Sprintf("peers[%d]", i)
		v.name(path+".name", p.Name)
		if j, dup := names[p.Name]; dup && p.Name != "" {
			v.errf(path+".name", "duplicate name %q (also peers[%d])", p.Name, j)
		} else if p.Name != "" {
			names[p.Name] = i
		}
		if len(p.Sources) == 0 {
			v.errf(path+".sources", "must list at least one source address or CIDR")
		}
		for j, pfx := range p.Sources {
			spath := fmt.Sprintf("%s.sources[%d]", path, j)
			if pfx.Addr().Is4In6() {
				v.errf(spath, "IPv4-mapped prefix %s never matches; write it as IPv4", pfx)
				continue
			}
			if o, dup := owners[pfx]; dup {
				if o.i == i {
					v.errf(spath, "duplicate source %s (also %s)", pfx, o.path)
				} else {
					v.errf(spath, "%s is also a source of peer %q (%s): a prefix belongs to one peer; overlapping prefixes of different lengths are allowed, the longest prefix wins", pfx, o.peer, o.path)
				}
				continue
			}
			owners[pfx] = owner{path: spath, peer: p.Name, i: i}
		}
		cpsOK := v.cps(path+".cps", p.CPS)
		v.maxCalls(path+".max_calls", p.MaxCalls)
		v.limits(path, p.CPS, cpsOK, p.Burst, p.Windows)
		if p.Reject != nil {
			v.reject(path+".reject", *p.Reject)
		}
		allowed := map[string]bool{}
		for j, cu := range p.Customers {
			cpath := fmt.Sprintf("%s.customers[%d]", path, j)
			if allowed[cu] {
				v.errf(cpath, "duplicate customer %q", cu)
			}
			allowed[cu] = true
			if v.c.Customer(cu) == nil {
				v.errf(cpath, "unknown customer %q", cu)
			}
		}
		if p.Customer != "" {
			switch {
			case v.c.Customer(p.Customer) == nil:
				v.errf(path+".customer", "unknown customer %q", p.Customer)
			case !allowed[p.Customer]:
				v.errf(path+".customer", "customer %q must also be listed in %s.customers", p.Customer, path)
			}
		}
		v.route(path+".route", p.Route)
		v.weight(path+".weight", p.Weight)
	}
}

func (v *validator) customers() {
	names := map[string]int{}
	for i, cu := range v.c.Customers {
		path := fmt.Sprintf("customers[%d]", i)
		v.name(path+".name", cu.Name)
		if j, dup := names[cu.Name]; dup && cu.Name != "" {
			v.errf(path+".name", "duplicate name %q (also customers[%d])", cu.Name, j)
		} else if cu.Name != "" {
			names[cu.Name] = i
		}
		cpsOK := v.cps(path+".cps", cu.CPS)
		v.maxCalls(path+".max_calls", cu.MaxCalls)
		v.limits(path, cu.CPS, cpsOK, cu.Burst, cu.Windows)
		if cu.Reject != nil {
			v.reject(path+".reject", *cu.Reject)
		}
		v.route(path+".route", cu.Route)
		v.weight(path+".weight", cu.Weight)
	}
}

func (v *validator) weight(path string, w int) {
	if w < 1 || w > MaxWeight {
		v.errf(path, "must be between 1 and %d (got %d)", MaxWeight, w)
	}
}

func (v *validator) carriers() {
	names := map[string]int{}
	for i, ca := range v.c.Carriers {
		path := fmt.Sprintf("carriers[%d]", i)
		v.name(path+".name", ca.Name)
		if j, dup := names[ca.Name]; dup && ca.Name != "" {
			v.errf(path+".name", "duplicate name %q (also carriers[%d])", ca.Name, j)
		} else if ca.Name != "" {
			names[ca.Name] = i
		}
		if err := checkCarrierURI(ca.URI); err != nil {
			v.errf(path+".uri", "%v", err)
		}
		cpsOK := v.cps(path+".cps", ca.CPS)
		v.maxCalls(path+".max_calls", ca.MaxCalls)
		v.carrierLimits(path, ca)
		if d := ca.SetupTimeout; d < 0 || d > 5*time.Minute {
			v.errf(path+".setup_timeout", "must be between 0s (the default, %s) and 5m (got %s)", DefaultSetupTimeout, d)
		}
		if ca.MaxWait < 0 {
			v.errf(path+".max_wait", "must be >= 0 (got %s)", ca.MaxWait)
		} else if ca.MaxWait > MaxMaxWait {
			v.errf(path+".max_wait", "must be at most %s (got %s)", MaxMaxWait, ca.MaxWait)
		}
		v.enum(path+".share_by", ca.ShareBy, ShareByCustomer, ShareByPeer, ShareByNone)
		if d := ca.RetryAfterMax; d < 0 || d > MaxRetryAfterMax {
			v.errf(path+".retry_after_max", "must be between 0s (the default, %s) and %s (got %s)", DefaultRetryAfterMax, MaxRetryAfterMax, d)
		}
		if ca.Probe != nil {
			v.probe(path+".probe", *ca.Probe)
		}
		if ca.Overload != nil {
			v.overload(path+".overload", ca, cpsOK)
		}
		if ca.MinASR < 0 || ca.MinASR > 100 {
			v.errf(path+".min_asr", "must be a percentage between 0 (off) and 100 (got %g)", ca.MinASR)
		}
		if n := ca.MinSeizures; n < 0 || n > maxSeizures {
			v.errf(path+".min_seizures", "must be between 0 (the default, %d) and %d (got %d)", DefaultMinSeizures, maxSeizures, n)
		}
		if d := ca.ASRWindow; d != 0 && (d < time.Second || d > 24*time.Hour) {
			v.errf(path+".asr_window", "must be 0s (the default, %s) or between 1s and 24h (got %s)", DefaultASRWindow, d)
		}
	}
}

// maxSeizures bounds a carrier's min_seizures.
const maxSeizures = 1_000_000

func (v *validator) probe(path string, pr Probe) {
	if pr.Interval == 0 {
		return // off: the other fields do not matter
	}
	if pr.Interval < 100*time.Millisecond || pr.Interval > time.Hour {
		v.errf(path+".interval", "must be 0s (off) or between 100ms and 1h (got %s)", pr.Interval)
		// The timeout is not measured against a wrong interval: with
		// interval -5s, the default timeout, 1s, is not wrong, the
		// interval is. It is still held to bounds that hold for every
		// valid interval.
		if pr.Timeout < 10*time.Millisecond || pr.Timeout > time.Hour {
			v.errf(path+".timeout", "must be between 10ms and the interval (got %s)", pr.Timeout)
		}
	} else if pr.Timeout < 10*time.Millisecond || pr.Timeout > pr.Interval {
		v.errf(path+".timeout", "must be between 10ms and the interval, %s (got %s)", pr.Interval, pr.Timeout)
	}
	if pr.DownAfter < 1 || pr.DownAfter > 100 {
		v.errf(path+".down_after", "must be between 1 and 100 (got %d)", pr.DownAfter)
	}
	if pr.UpAfter < 1 || pr.UpAfter > 100 {
		v.errf(path+".up_after", "must be between 1 and 100 (got %d)", pr.UpAfter)
	}
}

func (v *validator) overload(path string, ca Carrier, cpsOK bool) {
	o := ca.Overload
	for i, c := range o.Codes {
		if c < 300 || c > 699 {
			v.errf(fmt.Sprintf("%s.codes[%d]", path, i), "must be a final non-2xx status, 300-699 (got %d)", c)
		}
	}
	for i, r := range o.Reasons {
		if strings.TrimSpace(r) == "" || len(r) > 128 {
			v.errf(fmt.Sprintf("%s.reasons[%d]", path, i), "must be 1-128 characters of a reason phrase (got %q)", r)
		}
	}
	if o.Decrease != 0 && !(o.Decrease > 0 && o.Decrease < 1) {
		v.errf(path+".decrease", "must be between 0 and 1, exclusive (got %g)", o.Decrease)
	}
	switch {
	case o.MinCPS == 0:
	case !(o.MinCPS > 0) || math.IsInf(o.MinCPS, 0):
		v.errf(path+".min_cps", "must be > 0 (got %g)", o.MinCPS)
	case cpsOK && o.MinCPS > ca.CPS:
		v.errf(path+".min_cps", "must be > 0 and <= the carrier's cps, %g (got %g)", ca.CPS, o.MinCPS)
	}
	if o.Increase != 0 && !(o.Increase > 0 && o.Increase <= MaxCPS) {
		v.errf(path+".increase", "must be > 0 cps per second (got %g)", o.Increase)
	}
}

// checkCarrierURI parses uri the way the proxy will (sipgo) and requires a
// sip: URI with a host and, if given, a transport the proxy speaks.
func checkCarrierURI(uri string) error {
	if uri == "" {
		return fmt.Errorf("must be set, like sip:192.0.2.10:5060")
	}
	lower := strings.ToLower(uri)
	if !strings.HasPrefix(lower, "sip:") && !strings.HasPrefix(lower, "sips:") {
		return fmt.Errorf("must be a sip: or sips: URI like sip:192.0.2.10:5060 (got %q)", uri)
	}
	var u sipmsg.Uri
	if err := sipmsg.ParseUri(uri, &u); err != nil || u.Host == "" {
		return fmt.Errorf("must be a sip: or sips: URI with a host, like sip:192.0.2.10:5060 (got %q)", uri)
	}
	if u.Password != "" {
		return fmt.Errorf("must not contain a password (RFC 3261 deprecates user:password in URIs)")
	}
	if !uriHostOK(u.Host) {
		return fmt.Errorf("host must be an IP address or a DNS name like carrier.example (got %q in %q)", u.Host, uri)
	}
	// sipgo parses any integer; 0 is what it reports for no port at all.
	if u.Port < 0 || u.Port > 65535 {
		return fmt.Errorf("port must be 1-65535 (got %d in %q)", u.Port, uri)
	}
	t, ok := u.UriParams.Get("transport")
	if ok && !oneOf(strings.ToLower(t), "udp", "tcp", "tls") {
		return fmt.Errorf("transport must be udp, tcp or tls (got %q in %q)", t, uri)
	}
	if ok && strings.HasPrefix(lower, "sips:") && strings.EqualFold(t, "udp") {
		return fmt.Errorf("a sips: URI goes over TLS (got transport %q in %q)", t, uri)
	}
	return nil
}

// uriHostOK reports whether host, as sipgo parsed it out of a URI, is
// somewhere a packet can go: an IPv4 address, an IPv6 address in brackets,
// or a host name ([hostOK]).
func uriHostOK(host string) bool {
	if inner, ok := strings.CutPrefix(host, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		a, err := netip.ParseAddr(inner)
		return ok && err == nil && a.Is6()
	}
	return !strings.Contains(host, ":") && hostOK(host)
}

// hostOK reports whether host (no brackets, no port) is an IP address or
// a DNS host name: dot-separated labels of 1-63 letters, digits, '-' (not
// first or last) or '_' (Docker's resolver answers such names), at most
// 253 characters with an optional trailing dot, the last label not all
// digits, so 300.0.0.1 and 10.0.0 are neither.
func hostOK(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := strings.TrimSuffix(host, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}

func (v *validator) routes() {
	for _, name := range sortedRouteNames(v.c.Routes) {
		path := "routes." + name
		if !routeNameRe.MatchString(name) {
			v.errf(path, "route name must be 1-64 lower-case letters, digits, '.', '_' or '-' (got %q)", name)
		}
		r := v.c.Routes[name]
		list := path // where a route's carriers are
		if !r.list {
			list = path + ".carriers"
		}
		pol := r.PolicyName()
		switch pol {
		case RouteOrdered, RouteWeighted, RouteLeastWait:
		default:
			v.errf(path+".policy", "must be one of %q, %q, %q (got %q)", RouteOrdered, RouteWeighted, RouteLeastWait, r.Policy)
		}
		if len(r.Carriers) == 0 {
			v.errf(list, "must list at least one carrier")
		}
		seen := map[string]bool{}
		total := 0
		for i, rc := range r.Carriers {
			cpath := fmt.Sprintf("%s[%d]", list, i)
			switch {
			case rc.Name == "":
				v.errf(cpath, "must name a carrier")
			case seen[rc.Name]:
				v.errf(cpath, "carrier %q is listed twice", rc.Name)
			case v.c.Carrier(rc.Name) == nil:
				v.errf(cpath, "unknown carrier %q", rc.Name)
			}
			seen[rc.Name] = true
			switch {
			case pol != RouteWeighted && rc.Weight != 0:
				v.errf(cpath+".weight", "only a weighted route weighs its carriers (policy %q; got %s)", RouteWeighted, pol)
			case rc.Weight < 0 || rc.Weight > maxRouteWeight:
				v.errf(cpath+".weight", "must be between 0 (only when the others are busy or down) and %d (got %d)", maxRouteWeight, rc.Weight)
			default:
				total += rc.Weight
			}
		}
		if pol == RouteWeighted && len(r.Carriers) > 0 && total == 0 {
			v.errf(list, "a weighted route needs a carrier of weight > 0 (a carrier takes weight/sum of the calls)")
		}
	}
}

// maxRouteWeight bounds the weight of a route's carrier.
const maxRouteWeight = 1_000_000

func sortedRouteNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// defaultRoute requires route "default" when some call of some peer can end
// up on it: the peer names no route and it can carry a call whose customer
// names none either (including a call with no customer at all, when the peer
// has no default customer).
func (v *validator) defaultRoute() {
	if _, ok := v.c.Routes[DefaultRoute]; ok {
		return
	}
	for i, p := range v.c.Peers {
		if p.Route != "" {
			continue
		}
		reason := ""
		if p.Customer == "" {
			reason = "calls without a customer header have no customer"
		}
		for _, name := range p.Customers {
			if cu := v.c.Customer(name); cu != nil && cu.Route == "" && reason == "" {
				reason = fmt.Sprintf("customer %q has no route", name)
			}
		}
		if reason != "" {
			v.errf(fmt.Sprintf("peers[%d].route", i),
				"not set and %s, so calls use route %q, which is not defined in routes", reason, DefaultRoute)
		}
	}
}

// joinAnd writes names as "a", "a and b" or "a, b and c".
func joinAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
