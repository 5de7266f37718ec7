package sip

import (
	"crypto/tls"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// requireIPv6 skips the test when the machine has no ::1 (a container
// without IPv6); under CI=true a missing ::1 fails it instead, so CI never
// passes by skipping.
func requireIPv6(t *testing.T) {
	t.Helper()
	c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err == nil {
		c.Close()
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no IPv6 loopback (::1) on this machine: %v", err)
	}
	t.Skipf("no IPv6 loopback (::1): %v", err)
}

// dualStackAddrs returns the proxy's listen addresses by "udp4", "udp6",
// "tcp4", "tcp6" (and "tls4", "tls6").
func dualStackAddrs(t *testing.T, h *harness) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range h.p.Addrs() {
		scheme, hp, _ := strings.Cut(a, "://")
		ap, err := netip.ParseAddrPort(hp)
		if err != nil {
			t.Fatalf("listen address %q: %v", a, err)
		}
		fam := "4"
		if !ap.Addr().Is4() {
			fam = "6"
		}
		out[scheme+fam] = hp
	}
	return out
}

// dualStackConfig listens on 127.0.0.1 and ::1 (UDP and TCP); v6Peer adds
// the peer dialer-6 calling from ::1.
func dualStackConfig(v6Peer bool, cars ...config.Carrier) *config.Config {
	cfg := testConfig(cars...)
	cfg.SIP.Listen = []string{"udp://127.0.0.1:0", "udp://[::1]:0", "tcp://127.0.0.1:0", "tcp://[::1]:0"}
	if v6Peer {
		cfg.Peers = append(cfg.Peers, config.Peer{
			Name: "dialer-6", Sources: []netip.Prefix{netip.MustParsePrefix("::1/128")},
			CPS: 50, Customer: "acme", Customers: []string{"acme"},
		})
	}
	return cfg
}

// TestDualStackCarriers: a node listening on 127.0.0.1 and ::1 sends to an
// IPv6 carrier from its IPv6 socket and to an IPv4 carrier from its IPv4
// one, names itself in each family's address (Via, Record-Route: one entry
// per side when the two legs differ in family), and relays the dialog's
// BYEs both ways. Before the fix, the IPv4 listener sent everything ("write
// udp 127.0.0.1:…: address family not supported").
func TestDualStackCarriers(t *testing.T) {
	requireIPv6(t)
	for _, tc := range []struct {
		name      string
		carrierIP string
		transport string // of the carrier
		callerIP  string
		callerFam string
	}{
		{"v4 peer to v6 carrier over udp", "::1", "udp", "127.0.0.2", "4"},
		{"v4 peer to v6 carrier over tcp", "::1", "tcp", "127.0.0.2", "4"},
		{"v6 peer to v4 carrier over udp", "127.0.0.1", "udp", "::1", "6"},
		{"v6 peer to v4 carrier over tcp", "127.0.0.1", "tcp", "::1", "6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			car := siptest.StartCarrier(t, tc.carrierIP, nil)
			cc := carrierCfg("a", car)
			if tc.transport == "tcp" {
				cc.URI += ";transport=tcp"
			}
			adm, pacer := newFakes()
			h := startProxy(t, dualStackConfig(tc.callerFam == "6", cc), adm, pacer)
			addrs := dualStackAddrs(t, h)
			carFam := "4"
			if strings.Contains(tc.carrierIP, ":") {
				carFam = "6"
			}
			proxyIn := addrs["udp"+tc.callerFam]
			proxyOut := addrs[tc.transport+carFam]

			caller := siptest.StartCaller(t, tc.callerIP)
			ok := answeredCall(t, caller, proxyIn)
			inv := car.Invites()
			if len(inv) != 1 {
				t.Fatalf("carrier INVITEs = %d, want 1", len(inv))
			}
			if v := inv[0].Via(); net.JoinHostPort(v.Host, itoa(v.Port)) != proxyOut || !strings.EqualFold(v.Transport, tc.transport) {
				t.Errorf("carrier's top Via = %s, want %s/%s", v.Value(), strings.ToUpper(tc.transport), proxyOut)
			}
			rrs := inv[0].GetHeaders("Record-Route")
			if len(rrs) != 2 {
				t.Fatalf("Record-Route = %v, want two (one per family)", rrs)
			}
			if got := rrs[0].Value(); !strings.Contains(got, bracketed(proxyOut)) {
				t.Errorf("carrier-side Record-Route = %s, want %s", got, proxyOut)
			}
			if got := rrs[1].Value(); !strings.Contains(got, bracketed(proxyIn)) {
				t.Errorf("peer-side Record-Route = %s, want %s", got, proxyIn)
			}

			// The caller's BYE reaches the carrier, the carrier's reaches
			// the caller.
			if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, proxyIn, ok, sipmsg.BYE)); res == nil || res.StatusCode != 200 {
				t.Fatalf("caller's BYE: final = %v, want 200", res)
			}
			if n := car.Count("BYE"); n != 1 {
				t.Errorf("BYEs at the carrier = %d, want 1", n)
			}
			if tc.transport == "udp" {
				// On a second call (the first one's dialog ended with its
				// BYE), from the carrier's own socket (the leg check
				// compares the port).
				ok2 := answeredCall(t, caller, proxyIn)
				carSide := car.Caller(t)
				if res := carSide.Final(ctxT(t, 5*time.Second), calleeBye(t, carSide, proxyOut, ok2)); res == nil || res.StatusCode != 200 {
					t.Fatalf("callee's BYE: final = %v, want 200", res)
				}
			}
		})
	}
}

// TestDualStackProbe: OPTIONS probes reach an IPv6 carrier from the IPv6
// socket of a dual-stack node, and it stays up.
func TestDualStackProbe(t *testing.T) {
	requireIPv6(t)
	car := siptest.StartCarrier(t, "::1", nil)
	cc := carrierCfg("a", car)
	cc.Probe = &config.Probe{Interval: 50 * time.Millisecond, Timeout: time.Second, DownAfter: 1, UpAfter: 1}
	adm, pacer := newFakes()
	h := startProxy(t, dualStackConfig(false, cc), adm, pacer)
	waitFor(t, func() bool { return car.Count("OPTIONS") >= 3 }, "3 probes at the IPv6 carrier")
	if st, _ := h.set().State("a"); !st.Up {
		t.Errorf("IPv6 carrier is down after answering its probes")
	}
}

// bracketed writes an ip:port as SIP writes it (IPv6 in brackets).
func bracketed(hp string) string {
	ap, err := netip.ParseAddrPort(hp)
	if err != nil {
		return hp
	}
	return ap.String()
}

// TestDualStackWildcardsBindTogether: 0.0.0.0 and [::] on one port bind
// side by side (each family its own socket; before, Go opened 0.0.0.0 as a
// dual-stack IPv6 socket and [::] failed with "address already in use"),
// and each answers its own family.
func TestDualStackWildcardsBindTogether(t *testing.T) {
	requireIPv6(t)
	port := itoa(redistest.FreePort(t))
	cfg := testConfig()
	cfg.SIP.Listen = []string{"udp://0.0.0.0:" + port, "udp://[::]:" + port, "tcp://0.0.0.0:" + port, "tcp://[::]:" + port}
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	if n := len(h.p.Addrs()); n != 4 {
		t.Fatalf("listeners = %v, want 4", h.p.Addrs())
	}
	for _, tc := range []struct{ ip, proxy, want string }{
		{"127.0.0.2", "127.0.0.1:" + port, "SIP/2.0 200"}, // the peer's OPTIONS
		{"::1", "[::1]:" + port, "SIP/2.0 403"},           // a stranger's
	} {
		got := rawUDP(t, tc.ip, tc.proxy, strangerRequest("OPTIONS", tc.proxy, "", ""), 0, true)
		if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
			t.Errorf("OPTIONS from %s to %s: got %q, want %q", tc.ip, tc.proxy, got, tc.want)
		}
	}
}

// TestDualStackTLSCarrier: an IPv6 TLS carrier is dialled from, and
// named by, the IPv6 tls:// listener; its certificate names ::1.
func TestDualStackTLSCarrier(t *testing.T) {
	requireIPv6(t)
	k := newTLSPKI(t)
	cert, key := k.f.Leaf(t, "carrier6", nil, []net.IP{net.IPv6loopback}, false)
	car := siptest.StartCarrierTLS(t, "::1", &tls.Config{Certificates: []tls.Certificate{pair(t, cert, key)}}, nil)
	cfg := k.tlsConfig(false, config.Carrier{Name: "a", URI: "sip:" + car.TLSAddr + ";transport=tls", CPS: 100, MaxWait: time.Second})
	cfg.SIP.Listen = []string{"udp://127.0.0.1:0", "tls://127.0.0.1:0", "tls://[::1]:0"}
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	addrs := dualStackAddrs(t, h)
	caller := siptest.StartCaller(t, "127.0.0.2")
	answeredCall(t, caller, addrs["udp4"])
	inv := car.Invites()
	if len(inv) != 1 {
		t.Fatalf("carrier INVITEs = %d, want 1", len(inv))
	}
	if v := inv[0].Via(); v.Transport != "TLS" || net.JoinHostPort(v.Host, itoa(v.Port)) != addrs["tls6"] {
		t.Errorf("carrier's top Via = %s, want TLS %s", v.Value(), addrs["tls6"])
	}
	if rr := inv[0].RecordRoute(); rr == nil || !strings.Contains(rr.Value(), "sip:"+addrs["tls6"]+";transport=tls;lr") {
		t.Errorf("carrier-side Record-Route = %v, want the IPv6 TLS listener %s", rr, addrs["tls6"])
	}
}
