package sip

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/conns"
)

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// optionsServed reports whether the node answers an OPTIONS written on
// c: false when it closed c at accept (or at all) before answering.
func optionsServed(c net.Conn, target string) bool {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(tcpOptions(c.LocalAddr().String(), target, -1))); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SIP/2.0 200")
}

// tcpInvite is an initial INVITE sent over TCP from local to target.
func tcpInvite(local, target, callID string) string {
	host, _, _ := net.SplitHostPort(local)
	return "INVITE sip:100@" + target + ";transport=tcp SIP/2.0\r\n" +
		"Via: SIP/2.0/TCP " + local + ";branch=z9hG4bK-" + callID + "\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:caller@" + host + ">;tag=f-" + callID + "\r\nTo: <sip:100@" + target + ">\r\n" +
		"Contact: <sip:caller@" + local + ";transport=tcp>\r\n" +
		"Call-ID: " + callID + "\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
}

// finalOver reads responses on c until a final one, and returns its
// status line ("" when the connection ends first).
func finalOver(c net.Conn) string {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	for i := 0; i < 10000; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			return ""
		}
		if strings.HasPrefix(line, "SIP/2.0 ") && !strings.HasPrefix(line, "SIP/2.0 1") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestTCPPeerWithManySourcesLeavesRoom: a peer that owns a /24 opens
// max_connections_per_source connections from each of 8 of its addresses;
// before the per-party bound it held the whole non-stranger room (8 of
// max_connections 8) and another peer found no room at all. Now it holds
// at most its party share, and the other peer connects and has its
// INVITE answered.
func TestTCPPeerWithManySourcesLeavesRoom(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.TCP = config.TCP{IdleTimeout: time.Minute, MaxConnections: 8, MaxConnectionsPerSource: 2}
	cfg.Peers = append(cfg.Peers,
		config.Peer{Name: "wide", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.9.0/24")}, CPS: 50, Customer: "acme"},
		config.Peer{Name: "other", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.10.1/32")}, CPS: 50, Customer: "acme"},
	)
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)

	dial := func(ip string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		return d.Dial("tcp", h.tcp)
	}
	served := 0
	for i := 1; i <= 8; i++ {
		for j := 0; j < 2; j++ {
			c, err := dial("127.0.9." + strconv.Itoa(i))
			if err != nil {
				continue // refused: no place
			}
			t.Cleanup(func() { c.Close() })
			if optionsServed(c, h.tcp) {
				served++
			}
		}
	}
	if served < cfg.SIP.TCP.MaxConnectionsPerSource {
		t.Errorf("the wide peer was served %d connections, want at least max_connections_per_source (%d)", served, cfg.SIP.TCP.MaxConnectionsPerSource)
	}
	if served >= cfg.SIP.TCP.MaxConnections-conns.StrangerMax(cfg.SIP.TCP.MaxConnections) {
		t.Errorf("the wide peer holds %d connections: all the room of known parties", served)
	}

	c, err := dial("127.0.10.1")
	if err != nil {
		t.Fatalf("the other peer's connection: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(tcpInvite(c.LocalAddr().String(), h.tcp, "tcpshare-other-1"))); err != nil {
		t.Fatalf("the other peer's INVITE: %v", err)
	}
	if got := finalOver(c); !strings.HasPrefix(got, "SIP/2.0 200") {
		t.Fatalf("the other peer's INVITE, with the wide peer's connections open: final %q, want 200", got)
	}
}

// TestTLSStrangerHandshakesBounded: strangers' TLS handshakes beyond
// sip.tls.stranger_handshakes_per_second are closed at accept, before
// the node sends a byte of the handshake, and counted
// (tls_handshake_rate); a known peer's handshake during the flood
// completes and its request is answered.
func TestTLSStrangerHandshakesBounded(t *testing.T) {
	k := newTLSPKI(t)
	cfg := k.tlsConfig(false)
	cfg.SIP.TLS.StrangerHandshakesPerSecond = 1
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	addr := tlsAddr(t, h)

	handshake := func(ip string) (*tls.Conn, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		conf := k.clientTLS(t, "", "")
		conf.ServerName = "127.0.0.1"
		tc := tls.Client(c, conf)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			return nil, err
		}
		return tc, nil
	}
	const attempts = 50
	start := time.Now()
	done, refused := 0, 0
	for i := 0; i < attempts && refused == 0; i++ {
		c, err := handshake("127.0.20." + strconv.Itoa(1+i%200))
		if err != nil {
			// Closed at accept: the node sent nothing, not an alert.
			var alert tls.AlertError
			if errors.As(err, &alert) {
				t.Fatalf("stranger %d: handshake failed with an alert (%v): the node started the handshake", i, err)
			}
			refused++
			continue
		}
		done++
		c.Close()
	}
	elapsed := time.Since(start)
	if refused == 0 {
		t.Fatalf("%d strangers' handshakes in %v at 1 a second: none refused", done, elapsed)
	}
	// The bucket holds one second's worth (1) and refills at 1 a second.
	if most := 1 + int(elapsed/time.Second) + 1; done > most {
		t.Errorf("%d strangers' handshakes completed in %v, want at most %d", done, elapsed, most)
	}
	if n := sipErrors(h, "tls_handshake_rate"); int(n) != refused {
		t.Errorf("sip_errors_total{tls_handshake_rate} = %v, want %d", n, refused)
	}
	// The bucket is empty now: a known peer still gets its handshake, and
	// its OPTIONS is answered.
	c, err := handshake("127.0.0.2")
	if err != nil {
		t.Fatalf("the peer's handshake during the strangers' flood: %v", err)
	}
	defer c.Close()
	if !optionsServed(c, addr) {
		t.Error("the peer's OPTIONS over TLS during the strangers' flood was not answered")
	}
}

// TestTLSHandshakeHasADeadline: a stranger that opens TCP to a tls://
// listener and never sends its ClientHello holds its place no longer than
// sip.tcp.idle_timeout: the handshake runs in sipgo's first Read of the
// connection, under the read deadline sipgo sets before it.
func TestTLSHandshakeHasADeadline(t *testing.T) {
	k := newTLSPKI(t)
	cfg := k.tlsConfig(false)
	cfg.SIP.TCP = config.TCP{IdleTimeout: 300 * time.Millisecond, MaxConnections: 10, MaxConnectionsPerSource: 1}
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	addr := tlsAddr(t, h)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 21, 1)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a connection that never sends a ClientHello: read %v, want closed by the node", err)
	}
}
