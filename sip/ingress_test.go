package sip

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/sip/internal/ingress"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/load"
)

// peerSocket is a socket on a peer's address (127.0.0.2 is dialer-1's).
func peerSocket(t testing.TB) (*net.UDPConn, netip.AddrPort) {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// readFrom waits up to d for a datagram on c.
func readFrom(c *net.UDPConn, d time.Duration) (string, bool) {
	buf := make([]byte, 65535)
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, _, err := c.ReadFromUDP(buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// A peer's INVITE that found its share of the new-call lane taken is
// answered 503 by a worker (shedDatagram): from its raw bytes, or parsed
// within the budget when the raw path leaves it (a quoted Via parameter,
// an overload-control client), with the oc values it asks for; a
// re-INVITE or a copy of a live INVITE is not answered, and neither is
// one beyond the budget, too large or with too many parameters.
func TestShedDatagramAnswersWhatTheRawPathLeaves(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	peer, from := peerSocket(t)
	la := from.String()
	conn := h.p.listeners[0].udp
	shed := func(msg string) bool {
		return h.p.shedDatagram(&ingress.Datagram{Data: []byte(msg), From: from, Conn: conn, Known: true})
	}
	for i, via := range []string{
		";rport;x=\"quoted value\"",
		";rport;oc",
		";oc;oc-algo=\"loss\"",
	} {
		msg := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", fmt.Sprintf("parsed%d%s", i, via), 1)
		if _, ok := scanInvite([]byte(msg)); ok && i > 0 {
			t.Fatalf("the raw path reads %q: the test needs a form it leaves", via)
		}
		if !shed(msg) {
			t.Fatalf("INVITE with Via%s not answered", via)
		}
		got, ok := readFrom(peer, 5*time.Second)
		if !ok {
			t.Fatalf("INVITE with Via%s: no answer", via)
		}
		if line, _, _ := strings.Cut(got, "\r\n"); line != "SIP/2.0 503 Overloaded" {
			t.Fatalf("INVITE with Via%s: got %q, want 503 Overloaded", via, line)
		}
		if asks := strings.Contains(via, "oc"); asks != strings.Contains(got, ";oc=") {
			t.Errorf("INVITE with Via%s (asks %v): answer's oc values %q", via, asks, got)
		}
		if !strings.Contains(got, ";tag="+shedTag) {
			t.Errorf("answer's To tag is not a shed tag: %q", got)
		}
	}
	if got := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedOverload)); got != 3 {
		t.Errorf("calls_total{rejected_overload}: got %v, want 3", got)
	}

	reinvite := strings.Replace(strangerRequest("INVITE", h.udp, "127.0.0.1:5999", "dlg")(la), ";rport", ";rport;oc", 1)
	live := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", "live;rport;oc", 1)
	m, err := sipmsg.ParseMessage([]byte(live))
	if err != nil {
		t.Fatal(err)
	}
	m.(*sipmsg.Request).SetSource(la)
	if h.p.invites.Register(m.(*sipmsg.Request), nil, &h.p.inflight) != invites.RegNew {
		t.Fatal("could not register the live INVITE")
	}
	h.p.parsed = parseBudget{start: time.Now(), bytes: parsedBytes}
	spent := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", "spent;rport;oc", 1)
	big := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", "big;rport;oc", 1)
	big = strings.Replace(big, "Content-Length: 0", "X-Pad: "+strings.Repeat("a", parsedMaxSize)+"\r\nContent-Length: 0", 1)
	for name, msg := range map[string]string{"a re-INVITE": reinvite, "a copy of a live INVITE": live} {
		h.p.parsed = parseBudget{}
		if shed(msg) {
			t.Errorf("%s was answered", name)
		}
	}
	h.p.parsed = parseBudget{start: time.Now(), bytes: parsedBytes}
	if shed(spent) {
		t.Error("an INVITE beyond the parse budget was answered")
	}
	h.p.parsed = parseBudget{}
	if shed(big) {
		t.Error("an INVITE too large to parse cheaply was answered")
	}
	if got, ok := readFrom(peer, 200*time.Millisecond); ok {
		t.Errorf("unexpected answer: %q", got[:min(len(got), 200)])
	}
	// The bound was free all along: these sheds were one peer's flood,
	// not the node's overload, and ask no one to back off.
	if got := h.p.ocMeters.ShedTotal(); got != 0 {
		t.Errorf("sheds counted as overload for overload control: %d, want 0", got)
	}
}

// TestParseBudget: parsedBytes of parsing per window, then none until the
// next window (or a clock that stepped back); a nil budget allows none.
func TestParseBudget(t *testing.T) {
	var b parseBudget
	t0 := time.Unix(1764013000, 0)
	for i := range parsedBytes / 1024 {
		if !b.take(t0.Add(time.Duration(i)*time.Microsecond), 1024) {
			t.Fatalf("KB %d of the window refused", i)
		}
	}
	if b.take(t0.Add(parsedWindow-time.Millisecond), 1) {
		t.Fatal("a byte beyond the window's budget allowed")
	}
	if !b.take(t0.Add(parsedWindow), parsedBytes) {
		t.Fatal("the next window's budget refused")
	}
	if !b.take(t0.Add(-time.Second), 1) {
		t.Fatal("a clock that stepped back froze the budget")
	}
	if (*parseBudget)(nil).take(t0, 1) {
		t.Fatal("a nil budget allowed a parse")
	}
}

// A carrier's address inside a peer's prefix is the carrier's own party.
func TestPartyOfCarrierInPeerPrefix(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	cfg2 := testConfig(carrierCfg("a", car))
	cfg2.Peers[0].Sources = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	who, known := h.p.partyOf(cfg2, netip.MustParseAddr("127.0.0.1"))
	if !known || who != (party{ip: netip.MustParseAddr("127.0.0.1")}) {
		t.Errorf("carrier inside a peer's /8: party %+v (known %v), want the carrier's address", who, known)
	}
	if who, _ := h.p.partyOf(cfg2, netip.MustParseAddr("127.0.0.2")); who != (party{peer: "dialer-1"}) {
		t.Errorf("a peer address in the same /8: party %+v, want dialer-1", who)
	}
}

// Nothing is kept per UDP source without bound (issue 22, C8): strangers'
// addresses are never registered in sipgo's pool (each still gets its
// 403), a known party's are, and are forgotten once idle.
func TestUDPSourcesBounded(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	pool := h.p.tp.Pool("udp")
	before := pool.Size()
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	const strangers = 200
	conns := make([]*net.UDPConn, 0, strangers)
	for i := range strangers {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 3, byte(i>>8), byte(i+1))})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		msg := strangerRequest("OPTIONS", h.udp, "", "")(c.LocalAddr().String())
		if _, err := c.WriteToUDP([]byte(msg), ra); err != nil {
			t.Fatal(err)
		}
	}
	answered := 0
	for _, c := range conns {
		if got, ok := readFrom(c, 5*time.Second); ok && strings.HasPrefix(got, "SIP/2.0 403") {
			answered++
		}
	}
	if answered != strangers {
		t.Fatalf("%d of %d strangers got their 403", answered, strangers)
	}
	if got := pool.Size(); got != before {
		t.Fatalf("sipgo's pool grew from %d to %d entries with strangers", before, got)
	}
	if got := h.p.sources.len(); got != 0 {
		t.Fatalf("%d stranger sources registered", got)
	}

	// A known party's request that the screen passes to sipgo's
	// transaction layer (an INVITE) registers its source: the server
	// transaction answers through it. Requests the screen answers (an
	// out-of-dialog BYE) register nothing.
	peer, from := peerSocket(t)
	bye := strangerRequest("BYE", h.udp, "", "")(from.String())
	if _, err := peer.WriteToUDP([]byte(bye), ra); err != nil {
		t.Fatal(err)
	}
	if _, ok := readFrom(peer, 5*time.Second); !ok {
		t.Fatal("the peer's out-of-dialog BYE got no answer")
	}
	if got := h.p.sources.len(); got != 0 {
		t.Fatalf("%d sources registered for a request the screen answered", got)
	}
	invite := strangerRequest("INVITE", h.udp, "", "")(from.String())
	if _, err := peer.WriteToUDP([]byte(invite), ra); err != nil {
		t.Fatal(err)
	}
	if _, ok := readFrom(peer, 5*time.Second); !ok {
		t.Fatal("the peer's INVITE got no answer")
	}
	waitFor(t, func() bool { return h.p.sources.len() == 1 }, "the peer's source registered")
	h.p.sources.expire(time.Now().Add(time.Minute))
	if got := h.p.sources.len(); got != 0 {
		t.Fatalf("after expiry: %d sources, want 0", got)
	}
	if c := pool.Get(from.String()); c != nil {
		c.TryClose()
		t.Fatal("the expired source is still in sipgo's pool")
	}
}

// A datagram with more parameters than a header may have is dropped before
// any parse and counted; the node goes on answering (issue 22, C6).
func TestParameterBoundOnUDP(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	peer, from := peerSocket(t)
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	hostile := strings.Replace(strangerRequest("OPTIONS", h.udp, "", "")(from.String()), ";rport", ";rport"+strings.Repeat(";p", 5000), 1)
	if _, err := peer.WriteToUDP([]byte(hostile), ra); err != nil {
		t.Fatal(err)
	}
	if got, ok := readFrom(peer, 300*time.Millisecond); ok {
		t.Fatalf("the hostile OPTIONS was answered: %q", got[:min(len(got), 80)])
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues(ingress.DropParams)); got != 1 {
		t.Fatalf("sip_errors_total{reason=params}: %v, want 1", got)
	}
	ok := strangerRequest("OPTIONS", h.udp, "", "")(from.String())
	if _, err := peer.WriteToUDP([]byte(ok), ra); err != nil {
		t.Fatal(err)
	}
	if got, ok := readFrom(peer, 5*time.Second); !ok || !strings.HasPrefix(got, "SIP/2.0 200") {
		t.Fatalf("a plain OPTIONS after it: %q (answered %v)", got, ok)
	}
}

// The bounds count what sipgo parses, however the datagram hides it from
// a scan that reads lines apart from sipgo: parameters of the
// Request-URI, past a bare LF (sipgo ends lines at CRLF only), or escaped
// inside quotes (sipgo's To parser knows no escapes). Each of these took
// a worker 10-20 ms to parse.
func TestParameterBoundOnUDPHidden(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	peer, from := peerSocket(t)
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	var params, escaped strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&params, ";%x", i)
		fmt.Fprintf(&escaped, "\\;%x", i)
	}
	req := strangerRequest("OPTIONS", h.udp, "", "")(from.String())
	for i, hostile := range []string{
		strings.Replace(req, " SIP/2.0\r\n", params.String()+" SIP/2.0\r\n", 1),
		strings.Replace(req, "\r\nMax-Forwards", "\n"+params.String()+"\r\nMax-Forwards", 1),
		strings.Replace(req, "\r\nMax-Forwards", "\nX: y\n\r\nX-Hidden: <sip:a>"+params.String()+"\r\nMax-Forwards", 1),
		strings.Replace(req, "\r\nTo: <sip:100@"+h.udp+">", "\r\nTo: <sip:100@"+h.udp+">;x=\""+escaped.String()+"\"", 1),
	} {
		if hostile == req {
			t.Fatalf("%d: not hostile", i)
		}
		if _, err := peer.WriteToUDP([]byte(hostile), ra); err != nil {
			t.Fatal(err)
		}
		if got, ok := readFrom(peer, 300*time.Millisecond); ok {
			t.Fatalf("%d: the hostile OPTIONS was answered: %q", i, got[:min(len(got), 80)])
		}
		if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues(ingress.DropParams)); got != float64(i+1) {
			t.Fatalf("%d: sip_errors_total{reason=params}: %v, want %d", i, got, i+1)
		}
	}
}

// The same bounds hold on TCP, whatever the chunks the message comes in:
// the connection is closed, counted, and the node serves the next one.
func TestParameterBoundOnTCP(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	dial := func() net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
		c, err := d.Dial("tcp", h.tcp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	tcpRequest := func(c net.Conn, method string) string {
		msg := strangerRequest(method, h.tcp, "", "")(c.LocalAddr().String())
		return strings.Replace(msg, "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
	}
	c := dial()
	hostile := strings.Replace(tcpRequest(c, "OPTIONS"), ";rport", ";rport"+strings.Repeat(";p", 5000), 1)
	for i := 0; i < len(hostile); i += 700 { // in pieces, as a stream may come
		if _, err := c.Write([]byte(hostile[i:min(i+700, len(hostile))])); err != nil {
			break // closed under us: what is tested
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("the hostile OPTIONS was answered: %q", buf[:min(n, 80)])
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues(ingress.DropParams)); got != 1 {
		t.Fatalf("sip_errors_total{reason=params}: %v, want 1", got)
	}
	c2 := dial()
	if _, err := c2.Write([]byte(tcpRequest(c2, "OPTIONS"))); err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c2.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "SIP/2.0 200") {
		t.Fatalf("a plain OPTIONS on a new connection: %q, %v", buf[:n], err)
	}
}

// A read of NULs only is not parsed by sipgo: the scan must not take it
// for body bytes either, or a message sipgo parses would be skipped as a
// body by the scan. Here the scan would skip the hostile OPTIONS as the
// body of the 40 bytes sipgo reads as the body of the first message.
func TestParameterBoundOnTCPAfterNULs(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c, err := d.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := strings.Replace(strangerRequest("OPTIONS", h.tcp, "", "")(c.LocalAddr().String()), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
	var params strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&params, ";%x", i)
	}
	hostile := strings.Replace(req, ";rport", ";rport"+params.String(), 1)
	first := strings.Replace(req, "Content-Length: 0", "Content-Length: 40", 1)
	if first == req {
		t.Fatal("no Content-Length: 0 in the request")
	}
	// The 40 bytes sipgo reads as first's body: a message with a body of
	// len(hostile) to a scan that took the NULs for first's body.
	fake := fmt.Sprintf("X sip:a SIP/2.0\r\nl: %d\r\n\r\n", len(hostile))
	fake = strings.Replace(fake, "X", "X"+strings.Repeat("X", 40-len(fake)), 1)
	// Each write its own read (a reader waits on the other end): the
	// test can pass without the fix if the kernel joins them, never fail
	// with it.
	for _, chunk := range []string{first, strings.Repeat("\x00", 40), fake + hostile} {
		if _, err := c.Write([]byte(chunk)); err != nil {
			break // closed under us: what is tested
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			break
		}
		if strings.Contains(string(buf[:n]), ";rport;0;1;2") {
			t.Fatalf("the hostile OPTIONS was parsed and answered: %q", buf[:min(n, 120)])
		}
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues(ingress.DropParams)); got != 1 {
		t.Fatalf("sip_errors_total{reason=params}: %v, want 1", got)
	}
}

// TestNodeBehind (issue 22, item C10): the node counts as behind (carrier
// timeouts are then not held against carriers) only when its own read
// path delays answers: a fast-lane datagram handled more than load.Lag
// after it was read, or the fast lane full for every party (the ingress
// says so: TestCongested there). An answer handled in time is not.
func TestNodeBehind(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	_, from := peerSocket(t)
	bye := []byte(strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String()))
	d := &ingress.Datagram{Data: bye, From: from, Conn: h.p.listeners[0].udp, Known: true, Lane: ingress.LaneFast, At: time.Now()}
	h.p.handleDatagram(d)
	if h.p.behind.Recent() {
		t.Fatal("behind after a BYE handled at once")
	}
	d.At = time.Now().Add(-2 * load.Lag)
	h.p.handleDatagram(d)
	if !h.p.behind.Recent() {
		t.Fatal("not behind after a BYE waited twice load.Lag")
	}
}

// A carrier reached over TCP is held to the same bounds as a party that
// connects to the node: a response with thousands of parameters on the
// connection the node dialled closes that connection, is counted, and is
// never parsed nor relayed; the caller gets the node's own answer (the
// carrier's INVITE times out).
func TestParameterBoundOnDialledTCP(t *testing.T) {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "tcp", URI: "sip:" + l.Addr().String() + ";transport=tcp", CPS: 100, MaxWait: time.Second})
	h := startProxy(t, cfg, adm, pacer)

	closed := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			closed <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		// Read the INVITE's header section, then answer 180 with a To
		// carrying 5,000 parameters, in pieces as a stream may come.
		var got []byte
		buf := make([]byte, 8192)
		for !strings.Contains(string(got), "\r\n\r\n") {
			n, err := c.Read(buf)
			if err != nil {
				closed <- fmt.Errorf("reading the INVITE: %w", err)
				return
			}
			got = append(got, buf[:n]...)
		}
		inv, err := sipmsg.ParseMessage(got[:strings.Index(string(got), "\r\n\r\n")+4])
		if err != nil {
			closed <- fmt.Errorf("parsing the INVITE: %w", err)
			return
		}
		res := sipmsg.NewResponseFromRequest(inv.(*sipmsg.Request), 180, "Ringing", nil)
		res.To().Params.Add("tag", "hostile")
		raw := strings.Replace(res.String(), ";tag=hostile", ";tag=hostile"+strings.Repeat(";p", 5000), 1)
		for i := 0; i < len(raw); i += 700 {
			if _, err := c.Write([]byte(raw[i:min(i+700, len(raw))])); err != nil {
				break // closed under us: what is tested
			}
		}
		for {
			if _, err := c.Read(buf); err != nil {
				closed <- err
				return
			}
		}
	}()

	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := ctxT(t, 15*time.Second)
	tx, err := caller.Transaction(ctx, caller.Invite(h.udp))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	var res *sipmsg.Response
	for res == nil {
		select {
		case r := <-tx.Responses():
			if r.StatusCode == 180 {
				t.Fatalf("the carrier's hostile 180 reached the caller")
			}
			if !r.IsProvisional() {
				res = r
			}
		case <-tx.Done():
			t.Fatal("the caller's transaction ended without a final answer")
		case <-ctx.Done():
			t.Fatal("no final answer")
		}
	}
	if res.StatusCode < 400 {
		t.Fatalf("final = %v, want the node's own failure (the carrier's answer is dropped, its INVITE times out)", res)
	}
	select {
	case err := <-closed:
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the node kept the connection that carried the hostile answer open")
		}
	case <-ctx.Done():
		t.Fatal("no end of the carrier's connection")
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues(ingress.DropParams)); got != 1 {
		t.Fatalf("sip_errors_total{reason=params}: %v, want 1", got)
	}
}

// Every element of a comma-separated list header (Route, Record-Route,
// Contact, Via, Refer-To) is a header of its own to sipgo: the header
// bound counts them, on UDP and on TCP. A 56 KB INVITE of 7,000 bare
// Route elements passed the scan (no parameters, one header line) and
// cost a worker ~2 ms to parse and ~6 ms more to strip (each Route
// removed shifts the rest: quadratic), a thousand plain INVITEs' work.
func TestListElementsCountAsHeaders(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	peer, from := peerSocket(t)
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	req := strangerRequest("OPTIONS", h.udp, "", "")(from.String())
	elems := func(name, elem string) string {
		return strings.Replace(req, "\r\nMax-Forwards", "\r\n"+name+": "+strings.Repeat(elem+",", 250)+elem+"\r\nMax-Forwards", 1)
	}
	for i, hostile := range []string{
		elems("Route", "<sip:a>"),
		elems("Record-Route", "sip:a"),
		elems("Contact", "<sip:a>"),
		elems("m", "<sip:a>"),
		elems("Refer-To", "<sip:a>"),
	} {
		if _, err := peer.WriteToUDP([]byte(hostile), ra); err != nil {
			t.Fatal(err)
		}
		if got, ok := readFrom(peer, 300*time.Millisecond); ok {
			t.Fatalf("%d: the hostile OPTIONS was answered: %q", i, got[:min(len(got), 80)])
		}
		if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues(ingress.DropHeaders)); got != float64(i+1) {
			t.Fatalf("%d: sip_errors_total{reason=headers}: %v, want %d", i, got, i+1)
		}
	}
	// A real list (a few elements) passes.
	if _, err := peer.WriteToUDP([]byte(strings.Replace(req, "\r\nMax-Forwards", "\r\nContact: <sip:a>, \"b, c\" <sip:b>\r\nMax-Forwards", 1)), ra); err != nil {
		t.Fatal(err)
	}
	if got, ok := readFrom(peer, 5*time.Second); !ok || !strings.HasPrefix(got, "SIP/2.0 200") {
		t.Fatalf("an OPTIONS with a short Contact list: %q (answered %v)", got, ok)
	}

	// TCP: the stream scanner counts them too.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c, err := d.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := strings.Replace(strangerRequest("OPTIONS", h.tcp, "", "")(c.LocalAddr().String()), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
	msg = strings.Replace(msg, "\r\nMax-Forwards", "\r\nRoute: "+strings.Repeat("<sip:a>,", 250)+"<sip:a>\r\nMax-Forwards", 1)
	_, _ = c.Write([]byte(msg))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("the hostile OPTIONS over TCP was answered: %q", buf[:min(n, 80)])
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues(ingress.DropHeaders)); got != 6 {
		t.Fatalf("sip_errors_total{reason=headers} after TCP: %v, want 6", got)
	}
}
