package sip

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// tlsPKI is the test PKI of the TLS tests: f's CA signed the proxy's
// certificate (f.ServerCert: 127.0.0.1), a client certificate
// (f.ClientCert) and the carrier's (carrier.test and 127.0.0.1).
type tlsPKI struct {
	f                   redistest.TLSFiles
	carrierCert, carKey string
}

func newTLSPKI(t *testing.T) tlsPKI {
	t.Helper()
	f := redistest.NewTLSFiles(t)
	cert, key := f.Leaf(t, "carrier", []string{"carrier.test"}, []net.IP{net.IPv4(127, 0, 0, 1)}, true)
	return tlsPKI{f: f, carrierCert: cert, carKey: key}
}

// pool reads a PEM CA file.
func pool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	p, err := config.LoadCAs(file)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pair loads a certificate and key.
func pair(t *testing.T, cert, key string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientTLS trusts the PKI's CA and presents cert/key when given.
func (k tlsPKI) clientTLS(t *testing.T, cert, key string) *tls.Config {
	c := &tls.Config{RootCAs: pool(t, k.f.CA), MinVersion: tls.VersionTLS12}
	if cert != "" {
		c.Certificates = []tls.Certificate{pair(t, cert, key)}
	}
	return c
}

// carrierTLS is a TLS carrier's server configuration.
func (k tlsPKI) carrierTLS(t *testing.T) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{pair(t, k.carrierCert, k.carKey)}, MinVersion: tls.VersionTLS12}
}

// tlsConfig is testConfig listening on UDP, TCP and TLS (127.0.0.1) with
// the PKI's server certificate, trusting its CA for carriers; mutual
// requires client certificates of that CA.
func (k tlsPKI) tlsConfig(mutual bool, cars ...config.Carrier) *config.Config {
	cfg := testConfig(cars...)
	cfg.SIP.Listen = append(cfg.SIP.Listen, "tls://127.0.0.1:0")
	cfg.SIP.TLS = config.SIPTLS{CertFile: k.f.ServerCert, KeyFile: k.f.ServerKey, CAFile: k.f.CA}
	if mutual {
		cfg.SIP.TLS.ClientCAFile = k.f.CA
	}
	return cfg
}

// tlsAddr is the proxy's TLS listen address.
func tlsAddr(t *testing.T, h *harness) string {
	t.Helper()
	for _, a := range h.p.Addrs() {
		if s, ok := strings.CutPrefix(a, "tls://"); ok {
			return s
		}
	}
	t.Fatalf("no tls listener in %v", h.p.Addrs())
	return ""
}

// overTLS sends req over TLS to the proxy's TLS address.
func overTLS(req *sipmsg.Request, proxy string) *sipmsg.Request {
	req.SetTransport("TLS")
	req.SetDestination(proxy)
	return req
}

// TestTLSCallsThroughTLSListener: a sipgo UA calls over TLS through a
// tls:// listener to a UDP carrier and to a TLS carrier (its certificate
// verified against sip.tls.ca_file). Via and Record-Route name the TLS
// listener on the TLS side (two Record-Routes when the legs differ in
// transport), and BYEs of either side travel the dialog.
func TestTLSCallsThroughTLSListener(t *testing.T) {
	k := newTLSPKI(t)
	for _, tp := range []string{"udp", "tls"} {
		t.Run("to a "+tp+" carrier", func(t *testing.T) {
			car := siptest.StartCarrierTLS(t, "127.0.0.1", k.carrierTLS(t), nil)
			cc := carrierCfg("a", car)
			if tp == "tls" {
				cc.URI = "sip:" + car.TLSAddr + ";transport=tls"
			}
			adm, pacer := newFakes()
			h := startProxy(t, k.tlsConfig(false, cc), adm, pacer)
			proxyTLS := tlsAddr(t, h)
			caller := siptest.StartTLSCaller(t, "127.0.0.2", k.clientTLS(t, "", ""))

			ok := answeredCall(t, caller, proxyTLS)
			inv := car.Invites()
			if len(inv) != 1 {
				t.Fatalf("carrier INVITEs = %d, want 1", len(inv))
			}
			if got := inv[0].Transport(); got != strings.ToUpper(tp) {
				t.Errorf("carrier got the INVITE over %s, want %s", got, strings.ToUpper(tp))
			}
			out := h.udp
			if tp == "tls" {
				out = proxyTLS
			}
			if v := inv[0].Via(); v.Transport != strings.ToUpper(tp) || net.JoinHostPort(v.Host, itoa(v.Port)) != out {
				t.Errorf("carrier's top Via = %s, want %s %s", v.Value(), strings.ToUpper(tp), out)
			}
			rrs := inv[0].GetHeaders("Record-Route")
			want := []string{out + ";transport=" + tp}
			if tp == "udp" {
				want = append(want, proxyTLS+";transport=tls")
			}
			if len(rrs) != len(want) {
				t.Fatalf("Record-Route = %v, want %d entries", rrs, len(want))
			}
			for i, w := range want {
				if !strings.Contains(rrs[i].Value(), "sip:"+w+";lr") {
					t.Errorf("Record-Route[%d] = %s, want sip:%s;lr", i, rrs[i].Value(), w)
				}
			}

			bye := overTLS(inDialogOf(t, caller, proxyTLS, ok, sipmsg.BYE), proxyTLS)
			if res := caller.Final(ctxT(t, 5*time.Second), bye); res == nil || res.StatusCode != 200 {
				t.Fatalf("caller's BYE over TLS: final = %v, want 200", res)
			}
			if n := car.Count("BYE"); n != 1 {
				t.Errorf("BYEs at the carrier = %d, want 1", n)
			}

			// The callee's BYE, on a second call (the first one's dialog
			// ended with its BYE), goes back to the caller over its TLS
			// connection; over UDP it comes from the carrier's own socket
			// (the leg check compares the port).
			ok2 := answeredCall(t, caller, proxyTLS)
			var carSide *siptest.Caller
			var cbye *sipmsg.Request
			if tp == "tls" {
				carSide = siptest.StartTLSCaller(t, "127.0.0.1", k.clientTLS(t, "", ""))
				cbye = overTLS(calleeBye(t, carSide, proxyTLS, ok2), proxyTLS)
			} else {
				carSide = car.Caller(t)
				cbye = calleeBye(t, carSide, h.udp, ok2)
			}
			if res := carSide.Final(ctxT(t, 5*time.Second), cbye); res == nil || res.StatusCode != 200 {
				t.Fatalf("callee's BYE: final = %v, want 200", res)
			}
		})
	}
}

// TestTLSCarrierCertificateVerified: a TLS carrier whose certificate the
// proxy's CAs did not sign, or that does not name the carrier's address,
// is not called (the call goes on to the next carrier of its route).
func TestTLSCarrierCertificateVerified(t *testing.T) {
	k := newTLSPKI(t)
	other := redistest.NewTLSFiles(t)
	wrongName, wrongNameKey := k.f.Leaf(t, "other", []string{"other.test"}, nil, false)
	for _, tc := range []struct {
		name       string
		cert, key  string
		wantCalled bool
	}{
		{"signed by the CA, names 127.0.0.1", k.carrierCert, k.carKey, true},
		{"signed by another CA", other.ServerCert, other.ServerKey, false},
		{"names another host", wrongName, wrongNameKey, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsCar := siptest.StartCarrierTLS(t, "127.0.0.1", &tls.Config{Certificates: []tls.Certificate{pair(t, tc.cert, tc.key)}}, nil)
			next := siptest.StartCarrier(t, "127.0.0.1", nil)
			a := config.Carrier{Name: "a", URI: "sip:" + tlsCar.TLSAddr + ";transport=tls", CPS: 100, MaxWait: time.Second}
			adm, pacer := newFakes()
			h := startProxy(t, k.tlsConfig(false, a, carrierCfg("b", next)), adm, pacer)
			caller := siptest.StartCaller(t, "127.0.0.2")
			answeredCall(t, caller, h.udp)
			called, nextCalled := tlsCar.Count("INVITE") == 1, next.Count("INVITE") == 1
			if called != tc.wantCalled || nextCalled == tc.wantCalled {
				t.Errorf("TLS carrier called = %v, next carrier called = %v; want %v, %v", called, nextCalled, tc.wantCalled, !tc.wantCalled)
			}
			if n := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("tls_name")); (n > 0) != (tc.name == "names another host") {
				t.Errorf("sip_errors_total{tls_name} = %v", n)
			}
		})
	}
}

// TestTLSMutual: with client_ca_file the TLS listener takes a peer with a
// client certificate of that CA, and refuses one with another CA's
// certificate or none at the handshake.
func TestTLSMutual(t *testing.T) {
	k := newTLSPKI(t)
	other := redistest.NewTLSFiles(t)
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, k.tlsConfig(true, carrierCfg("a", car)), adm, pacer)
	proxyTLS := tlsAddr(t, h)

	caller := siptest.StartTLSCaller(t, "127.0.0.2", k.clientTLS(t, k.f.ClientCert, k.f.ClientKey))
	answeredCall(t, caller, proxyTLS)

	for _, tc := range []struct{ name, cert, key string }{
		{"another CA's certificate", other.ClientCert, other.ClientKey},
		{"no certificate", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := k.clientTLS(t, tc.cert, tc.key)
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
			conn, err := tls.DialWithDialer(d, "tcp", proxyTLS, conf)
			if err == nil {
				// TLS 1.3: the client's side of the handshake ends before
				// the server has checked its certificate; the refusal
				// comes with the first read.
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = conn.Write([]byte("OPTIONS sip:x@127.0.0.1 SIP/2.0\r\n\r\n"))
				_, err = conn.Read(make([]byte, 1))
			}
			if err == nil || isTimeout(err) || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("TLS with %s: %v, want a certificate refusal", tc.name, err)
			}
		})
	}
	if n := car.Count("INVITE"); n != 1 {
		t.Errorf("carrier INVITEs = %d, want 1 (the good client's)", n)
	}
}

// TestTLSCertificateReloaded: a certificate file replaced on disk is
// served from the next handshakes on, without a restart or a reload.
func TestTLSCertificateReloaded(t *testing.T) {
	k := newTLSPKI(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "sip.crt"), filepath.Join(dir, "sip.key")
	install := func(name string) {
		c, kk := k.f.Leaf(t, name, nil, []net.IP{net.IPv4(127, 0, 0, 1)}, false)
		for _, f := range [][2]string{{kk, key}, {c, cert}} {
			b, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			// Written beside, then renamed over: what cert-manager, a
			// Kubernetes secret or certbot's deploy hooks do.
			if err := os.WriteFile(f[1]+".new", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f[1]+".new", f[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	install("first")
	cfg := k.tlsConfig(false)
	cfg.SIP.TLS.CertFile, cfg.SIP.TLS.KeyFile = cert, key
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	proxyTLS := tlsAddr(t, h)
	served := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", proxyTLS, k.clientTLS(t, "", ""))
		if err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "first" {
		t.Fatalf("served certificate %q, want first", got)
	}
	install("second")
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		got := served()
		if got == "second" {
			break
		}
		if i > 200 || time.Now().After(deadline) {
			t.Fatalf("served certificate still %q after the file was replaced, want second", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTLSConnectionBounds: the TLS listener is bounded as TCP is: a
// connection over sip.tcp.max_connections_per_source is closed at
// accept, and an idle one after sip.tcp.idle_timeout.
func TestTLSConnectionBounds(t *testing.T) {
	k := newTLSPKI(t)
	cfg := k.tlsConfig(false)
	cfg.SIP.TCP = config.TCP{IdleTimeout: 300 * time.Millisecond, MaxConnections: 10, MaxConnectionsPerSource: 1}
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	proxyTLS := tlsAddr(t, h)
	dial := func() (*tls.Conn, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
		return tls.DialWithDialer(d, "tcp", proxyTLS, k.clientTLS(t, "", ""))
	}
	first, err := dial()
	if err != nil {
		t.Fatalf("first TLS connection: %v", err)
	}
	defer first.Close()
	if second, err := dial(); err == nil {
		second.Close()
		t.Errorf("second TLS connection from one source with max_connections_per_source 1: handshake succeeded, want it closed at accept")
	}
	if n := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("tcp_limit")); n != 1 {
		t.Errorf("sip_errors_total{tcp_limit} = %v, want 1", n)
	}
	// The idle first connection is closed by the node.
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := first.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("idle TLS connection: read %v, want closed by the node", err)
	}
}

// TestTLSOpenSSLClient: openssl s_client, a TLS client that is not sipgo,
// places a call through the tls:// listener (INVITE, 200, ACK, BYE, 200),
// verifying the proxy's certificate against the test CA.
func TestTLSOpenSSLClient(t *testing.T) {
	bin := redistest.Require(t, "openssl") // a missing openssl fails under CI=true
	k := newTLSPKI(t)
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, k.tlsConfig(false, carrierCfg("a", car)), adm, pacer)
	proxyTLS := tlsAddr(t, h)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "s_client", "-connect", proxyTLS, "-bind", "127.0.0.2:0",
		"-CAfile", k.f.CA, "-verify_return_error", "-quiet")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); cancel(); _ = cmd.Wait() }()
	var (
		mu  sync.Mutex
		got strings.Builder
	)
	go func() {
		r := bufio.NewReader(stdout)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			mu.Lock()
			got.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	// response waits for the final response to CSeq cseq and returns it.
	response := func(cseq string) string {
		t.Helper()
		re := regexp.MustCompile(`(?s)SIP/2\.0 [2-6]\d\d [^\r]*\r\n(?:[^\r]+\r\n)*?CSeq: ` + cseq + `\r\n(?:[^\r]+\r\n)*\r\n`)
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			s := got.String()
			mu.Unlock()
			if m := re.FindString(s); m != "" {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("no final response to %s from openssl's connection; read:\n%s\nstderr:\n%s", cseq, s, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(stdin, msg); err != nil {
			t.Fatalf("write to openssl: %v (stderr: %s)", err, stderr.String())
		}
	}
	common := "From: <sip:openssl@127.0.0.2>;tag=ossl\r\nCall-ID: openssl-call-1\r\nMax-Forwards: 70\r\n"
	send("INVITE sip:100@" + proxyTLS + ";transport=tls SIP/2.0\r\n" +
		"Via: SIP/2.0/TLS 127.0.0.2:5061;branch=z9hG4bK-ossl-1;rport\r\n" + common +
		"To: <sip:100@" + proxyTLS + ">\r\nCSeq: 1 INVITE\r\n" +
		"Contact: <sip:openssl@127.0.0.2:5061;transport=tls>\r\nContent-Length: 0\r\n\r\n")
	ok := response("1 INVITE")
	if !strings.HasPrefix(ok, "SIP/2.0 200") {
		t.Fatalf("INVITE over openssl: got\n%s\nwant 200", ok)
	}
	msg, err := sipmsg.ParseMessage([]byte(ok))
	if err != nil {
		t.Fatalf("parse the 200: %v\n%s", err, ok)
	}
	res := msg.(*sipmsg.Response)
	var routes string
	rrs := res.GetHeaders("Record-Route")
	for i := len(rrs) - 1; i >= 0; i-- {
		routes += "Route: " + rrs[i].Value() + "\r\n"
	}
	to := "To: " + res.To().Value() + "\r\n"
	ruri := res.Contact().Address.String()
	send("ACK " + ruri + " SIP/2.0\r\nVia: SIP/2.0/TLS 127.0.0.2:5061;branch=z9hG4bK-ossl-2;rport\r\n" + routes + common + to +
		"CSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n")
	// The ACK reaches the carrier before the BYE is sent: over TLS each
	// request runs in a goroutine of sipgo's, and an ACK that a quicker BYE
	// overtook finds its dialog ended and is dropped (harmless, not what
	// this test is about).
	waitFor(t, func() bool { return car.Count("ACK") == 1 }, "the ACK at the carrier")
	send("BYE " + ruri + " SIP/2.0\r\nVia: SIP/2.0/TLS 127.0.0.2:5061;branch=z9hG4bK-ossl-3;rport\r\n" + routes + common + to +
		"CSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n")
	if bye := response("2 BYE"); !strings.HasPrefix(bye, "SIP/2.0 200") {
		t.Fatalf("BYE over openssl: got\n%s\nwant 200", bye)
	}
	// The BYE may be retransmitted to the carrier (UDP) before its 200.
	waitFor(t, func() bool { return car.Count("ACK") == 1 && car.Count("BYE") >= 1 }, "the ACK and the BYE at the carrier")
}
