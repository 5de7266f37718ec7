package sip

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// stubDNS is a DNS server on 127.0.0.1 that answers SRV, A and AAAA
// queries from its tables (NXDOMAIN for a name it does not know), for a
// net.Resolver whose Dial reaches it: carrier name resolution without the
// network.
type stubDNS struct {
	addr string

	mu      sync.Mutex
	srv     map[string][]dnsmessage.SRVResource // by lower-case name, no trailing dot
	ips     map[string][]netip.Addr
	queries map[string]int // "SRV _sip._udp.carrier.test" → count
}

func startStubDNS(t *testing.T) *stubDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stubDNS{addr: pc.LocalAddr().String(), srv: map[string][]dnsmessage.SRVResource{},
		ips: map[string][]netip.Addr{}, queries: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := s.answer(buf[:n]); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return s
}

// setSRV publishes the SRV records of name (e.g. "_sip._udp.carrier.test").
func (s *stubDNS) setSRV(name string, recs ...dnsmessage.SRVResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv[strings.ToLower(name)] = recs
}

// setIPs publishes the addresses of host.
func (s *stubDNS) setIPs(host string, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var as []netip.Addr
	for _, ip := range ips {
		as = append(as, netip.MustParseAddr(ip))
	}
	s.ips[strings.ToLower(host)] = as
}

func (s *stubDNS) count(q string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[q]
}

func srvRec(prio, weight, port uint16, target string) dnsmessage.SRVResource {
	return dnsmessage.SRVResource{Priority: prio, Weight: weight, Port: port, Target: dnsmessage.MustNewName(target + ".")}
}

func (s *stubDNS) answer(req []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	s.mu.Lock()
	s.queries[q.Type.String()[len("Type"):]+" "+name]++
	srv, srvOK := s.srv[name]
	ips, ipsOK := s.ips[name]
	s.mu.Unlock()
	rcode := dnsmessage.RCodeSuccess
	if !srvOK && !ipsOK {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rcode})
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 30}
	switch q.Type {
	case dnsmessage.TypeSRV:
		for _, r := range srv {
			_ = b.SRVResource(rh, r)
		}
	case dnsmessage.TypeA:
		for _, a := range ips {
			if a.Is4() {
				_ = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			}
		}
	case dnsmessage.TypeAAAA:
		for _, a := range ips {
			if a.Is6() {
				_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// resolver is a net.Resolver that asks only s.
func (s *stubDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.addr)
	}}
}

// TestSRVCarrier: a carrier named "sip:carrier.test" (no port) is reached
// through its _sip._udp SRV records: the lowest priority first, the next
// one once the first is gone from DNS (at the 30 s refresh); its answers
// and BYEs come from an address its SRV targets resolve to.
func TestSRVCarrier(t *testing.T) {
	dns := startStubDNS(t)
	first := siptest.StartCarrier(t, "127.0.0.1", nil)
	backup := siptest.StartCarrier(t, "127.0.0.1", nil)
	dns.setSRV("_sip._udp.carrier.test",
		srvRec(10, 1, uint16(mustPort(t, first.Addr)), "a.carrier.test"),
		srvRec(20, 1, uint16(mustPort(t, backup.Addr)), "b.carrier.test"))
	dns.setIPs("a.carrier.test", "127.0.0.1")
	dns.setIPs("b.carrier.test", "127.0.0.1")
	dns.setIPs("carrier.test", "127.0.0.9") // the A record: not used while SRV answers

	cfg := testConfig(config.Carrier{Name: "a", URI: "sip:carrier.test", CPS: 100, MaxWait: time.Second})
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Resolver: dns.resolver()})
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	if first.Count("INVITE") != 1 || backup.Count("INVITE") != 0 {
		t.Fatalf("INVITEs: priority 10 target %d, priority 20 target %d; want 1, 0", first.Count("INVITE"), backup.Count("INVITE"))
	}
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, "BYE")); res == nil || res.StatusCode != 200 {
		t.Fatalf("BYE: final = %v, want 200", res)
	}

	// The first target leaves DNS; the next refresh moves the carrier.
	dns.setSRV("_sip._udp.carrier.test", srvRec(20, 1, uint16(mustPort(t, backup.Addr)), "b.carrier.test"))
	if errs := h.p.carriers.Resolve(context.Background()); len(errs) != 0 {
		t.Fatalf("refresh: %v", errs)
	}
	answeredCall(t, caller, h.udp)
	if n := backup.Count("INVITE"); n != 1 {
		t.Errorf("INVITEs at the priority 20 target after the refresh = %d, want 1", n)
	}
	if n := dns.count("A carrier.test"); n != 0 {
		t.Errorf("A queries for carrier.test = %d, want 0 (SRV answered)", n)
	}
}

// TestSRVTLSCarrierVerifiesURIDomain: "sips:carrier.test" is reached
// through _sips._tcp SRV records, and the carrier's certificate must name
// carrier.test, the URI's domain (RFC 5922), not the SRV target.
func TestSRVTLSCarrierVerifiesURIDomain(t *testing.T) {
	k := newTLSPKI(t)
	for _, tc := range []struct {
		name   string
		dns    string // the certificate's one DNS name
		called bool
	}{
		{"certificate names the URI domain", "carrier.test", true},
		{"certificate names only the SRV target", "sbc.carrier.test", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert, key := k.f.Leaf(t, "srv-"+tc.dns, []string{tc.dns}, nil, false)
			car := siptest.StartCarrierTLS(t, "127.0.0.1", &tls.Config{Certificates: []tls.Certificate{pair(t, cert, key)}}, nil)
			next := siptest.StartCarrier(t, "127.0.0.1", nil)
			dns := startStubDNS(t)
			dns.setSRV("_sips._tcp.carrier.test", srvRec(10, 1, uint16(mustPort(t, car.TLSAddr)), "sbc.carrier.test"))
			dns.setIPs("sbc.carrier.test", "127.0.0.1")
			cfg := k.tlsConfig(false, config.Carrier{Name: "a", URI: "sips:carrier.test", CPS: 100, MaxWait: time.Second}, carrierCfg("b", next))
			adm, pacer := newFakes()
			h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Resolver: dns.resolver()})
			caller := siptest.StartCaller(t, "127.0.0.2")
			answeredCall(t, caller, h.udp)
			if got := car.Count("INVITE") == 1; got != tc.called {
				t.Errorf("TLS carrier called = %v, want %v (next carrier: %d INVITEs)", got, tc.called, next.Count("INVITE"))
			}
		})
	}
}

// TestCarrierResolution: which records a carrier's host name is looked up
// in, and what a call is sent to.
func TestCarrierResolution(t *testing.T) {
	dns := startStubDNS(t)
	dns.setIPs("plain.test", "127.0.0.7")
	dns.setIPs("both.test", "::1", "127.0.0.8")
	dns.setSRV("_sip._tcp.tcp.test", srvRec(5, 0, 5099, "sbc.tcp.test"))
	dns.setIPs("sbc.tcp.test", "127.0.0.6")
	dns.setIPs("tcp.test", "127.0.0.5")
	dns.setSRV("_sip._udp.port.test", srvRec(5, 0, 5099, "sbc.port.test"))
	dns.setIPs("port.test", "127.0.0.4")
	dns.setSRV("_sip._udp.none.test", srvRec(0, 0, 0, "")) // "." : no SIP service here
	dns.setIPs("none.test", "127.0.0.3")
	dns.setIPs("v6only.test", "::1")

	p, err := New(Options{Config: func() *config.Config { return testConfig() }, Admission: &fakeAdmitter{}, Pacer: &fakePacer{}, Resolver: dns.resolver()})
	if err != nil {
		t.Fatal(err)
	}
	// Only IPv4 listeners: a name with both families is reached on IPv4.
	p.locals = map[localKey]local{{network: "udp"}: {host: "127.0.0.1", port: 5060, exact: true}, {network: "tcp"}: {host: "127.0.0.1", port: 5060, exact: true}}
	for _, tc := range []struct {
		uri, want string
		srvQuery  string // an SRV query that must have been made ("" none)
	}{
		{"sip:plain.test", "127.0.0.7:5060", "SRV _sip._udp.plain.test"}, // no SRV record: A, port 5060
		{"sip:both.test:5070", "127.0.0.8:5070", ""},                     // a port: no SRV lookup
		{"sip:tcp.test;transport=tcp", "127.0.0.6:5099", "SRV _sip._tcp.tcp.test"},
		{"sip:port.test:5062", "127.0.0.4:5062", ""},
		{"sip:none.test", "", "SRV _sip._udp.none.test"}, // "." : no SIP service, no A fallback
		{"sip:v6only.test:5070", "[::1]:5070", ""},       // sent, and warned of (below)
	} {
		tg, err := parseCarrierURI(tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.carrierAddrPort(tg)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: got %v, want an error", tc.uri, got)
		case tc.want != "" && (err != nil || got.String() != tc.want):
			t.Errorf("%s: got %v, %v; want %s", tc.uri, got, err, tc.want)
		}
		if tc.srvQuery != "" && dns.count(tc.srvQuery) == 0 {
			t.Errorf("%s: no %s query", tc.uri, tc.srvQuery)
		}
	}
	if n := dns.count("SRV _sip._udp.both.test") + dns.count("SRV _sip._udp.port.test"); n != 0 {
		t.Errorf("SRV queries for URIs with a port = %d, want 0", n)
	}
	want := []string{"v6only.test resolves to IPv6 addresses only, and sip.listen has no udp:// listener on IPv6"}
	if got := p.familyGaps(); !slices.Equal(got, want) {
		t.Errorf("family gaps = %q, want %q", got, want)
	}
}
