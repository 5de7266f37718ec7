package sip

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// readStreamResponse reads the next response on r (a SIP stream): its
// header section and its Content-Length body.
func readStreamResponse(t *testing.T, r *bufio.Reader) *sipmsg.Response {
	t.Helper()
	var head strings.Builder
	length := 0
	for i := 0; i < 200; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading a response: %v", err)
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("reading a response body: %v", err)
	}
	m, err := sipmsg.ParseMessage(append([]byte(head.String()), body...))
	if err != nil {
		t.Fatalf("parsing %q: %v", head.String(), err)
	}
	res, ok := m.(*sipmsg.Response)
	if !ok {
		t.Fatalf("a request on the caller's connection: %s", m.String())
	}
	return res
}

// TestStreamCallerAckBeforeBye: a caller over TCP that sends its ACK and
// BYE back to back (one write) to a carrier over UDP. sipgo hands every
// message read on a stream to a goroutine of its own, so the BYE could
// reach the carrier before the ACK (a UAS waiting for the ACK fails the
// call). The node now relays such an ACK from the screen, in the
// connection's read loop, as it does over UDP: the carrier gets every
// call's ACK before its BYE.
func TestStreamCallerAckBeforeBye(t *testing.T) {
	h, car, c := streamCallerSetup(t, "127.0.0.2")
	local := c.LocalAddr().String()
	r := bufio.NewReader(c)
	const calls = 30
	for i := range calls {
		id := fmt.Sprint("stream-ack-", i)
		ok := streamAnsweredCall(t, c, r, h.tcp, id)
		var out []byte
		for j, m := range []sipmsg.RequestMethod{sipmsg.ACK, sipmsg.BYE} {
			out = append(out, streamInDialog(t, local, h.tcp, ok, m, fmt.Sprint("z9hG4bK-", id, "-", j)).String()...)
		}
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
		if res := readStreamResponse(t, r); res.StatusCode != 200 || res.CSeq().MethodName != sipmsg.BYE {
			t.Fatalf("call %d: the BYE's answer %s %s, want 200 BYE", i, res.StartLine(), res.CSeq().Value())
		}
	}
	car.mu.Lock()
	defer car.mu.Unlock()
	acked := map[string]bool{}
	byes := 0
	for _, req := range car.reqs {
		id := req.CallID().Value()
		switch req.Method {
		case sipmsg.ACK:
			acked[id] = true
		case sipmsg.BYE:
			byes++
			if !acked[id] {
				t.Errorf("%s: the BYE reached the carrier before the ACK", id)
			}
		}
	}
	if byes != calls || len(acked) != calls {
		t.Fatalf("the carrier got %d ACKs and %d BYEs, want %d each", len(acked), byes, calls)
	}
}

// streamCallerSetup starts a raw UDP carrier, a node with TCP, and a TCP
// connection to it from ip (a peer of testConfig's, or a stranger).
func streamCallerSetup(t *testing.T, ip string) (*harness, *udpEnd, net.Conn) {
	t.Helper()
	car := startAnsweringEnd(t, nil)
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 1000, MaxWait: time.Second})
	cfg.SIP.TCP = config.TCP{IdleTimeout: time.Minute, MaxConnections: 8, MaxConnectionsPerSource: 2}
	h := startProxy(t, cfg, adm, pacer)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return h, car, c
}

// streamAnsweredCall places call id over c and returns its 200.
func streamAnsweredCall(t *testing.T, c net.Conn, r *bufio.Reader, proxy, id string) *sipmsg.Response {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(tcpInvite(c.LocalAddr().String(), proxy, id))); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if res := readStreamResponse(t, r); res.StatusCode >= 200 {
			if res.StatusCode != 200 {
				t.Fatalf("call %s: final %d, want 200", id, res.StatusCode)
			}
			return res
		}
	}
	t.Fatalf("call %s: no final answer", id)
	return nil
}

// streamInDialog is the caller's request of ok's dialog over TCP from
// local (an ACK with the INVITE's CSeq), with a Via of branch.
func streamInDialog(t *testing.T, local, proxy string, ok *sipmsg.Response, m sipmsg.RequestMethod, branch string) *sipmsg.Request {
	t.Helper()
	req := inDialogOf(t, &siptest.Caller{Addr: local}, proxy, ok, m)
	if m == sipmsg.ACK {
		req.CSeq().SeqNo = ok.CSeq().SeqNo
	}
	host, port, _ := net.SplitHostPort(local)
	p, _ := strconv.Atoi(port)
	v := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "TCP", Host: host, Port: p, Params: sipmsg.NewParams()}
	v.Params.Add("branch", branch)
	req.PrependHeader(v)
	req.SetBody(nil)
	return req
}

// TestStreamCallerForgedAcksNotRelayed: the ACK a TCP caller's read loop
// now relays passes the same checks as before. A peer's ACK with its
// dialog token changed, another From tag, another Call-ID, no Route, or
// no hop left, and a stranger's copy of a valid ACK, reach the carrier
// not at all; the valid ACK reaches it once.
func TestStreamCallerForgedAcksNotRelayed(t *testing.T) {
	h, car, c := streamCallerSetup(t, "127.0.0.2")
	local := c.LocalAddr().String()
	r := bufio.NewReader(c)
	ok := streamAnsweredCall(t, c, r, h.tcp, "stream-forged")
	waitFor(t, func() bool { return len(car.requests(sipmsg.INVITE)) == 1 }, "the INVITE at the carrier")
	valid := func(branch string) *sipmsg.Request {
		return streamInDialog(t, local, h.tcp, ok, sipmsg.ACK, branch)
	}
	forged := map[string]func(*sipmsg.Request){
		// Every Route of the node's (two: the legs' transports differ)
		// carries the token; each is changed.
		"token changed": func(a *sipmsg.Request) {
			var routes []string
			for _, rt := range a.GetHeaders("Route") {
				b := []byte(rt.Value())
				if i := strings.Index(string(b), "cg="); i >= 0 && i+5 < len(b) {
					b[i+5] ^= 1
				}
				routes = append(routes, string(b))
			}
			for a.RemoveHeader("Route") {
			}
			for _, v := range routes {
				a.AppendHeader(sipmsg.NewHeader("Route", v))
			}
		},
		"From tag changed": func(a *sipmsg.Request) { a.From().Params.Add("tag", "not-the-callers") },
		"Call-ID changed":  func(a *sipmsg.Request) { a.ReplaceHeader(sipmsg.NewHeader("Call-ID", "another-call")) },
		"no Route": func(a *sipmsg.Request) {
			for a.RemoveHeader("Route") {
			}
		},
		"no hop left": func(a *sipmsg.Request) {
			mf := sipmsg.MaxForwardsHeader(0)
			a.ReplaceHeader(&mf)
		},
	}
	if n := len(valid("z9hG4bK-x").GetHeaders("Route")); n != 2 {
		t.Fatalf("the caller's ACK has %d Routes, want the node's two (TCP in, UDP out)", n)
	}
	for name, f := range forged {
		a := valid("z9hG4bK-forged-" + strings.ReplaceAll(name, " ", "-"))
		f(a)
		if _, err := c.Write([]byte(a.String())); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// A stranger's copy of the valid ACK, on its own connection.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.99")}, Timeout: 5 * time.Second}
	if sc, err := d.Dial("tcp", h.tcp); err == nil {
		defer sc.Close()
		_, _ = sc.Write([]byte(valid("z9hG4bK-stranger").String()))
	}
	// The valid ACK last, on the caller's connection: in order behind
	// the forged ones.
	if _, err := c.Write([]byte(valid("z9hG4bK-valid").String())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) >= 1 }, "the valid ACK at the carrier")
	time.Sleep(200 * time.Millisecond) // a stranger's copy would be on its way
	acks := car.requests(sipmsg.ACK)
	if len(acks) != 1 {
		for _, a := range acks {
			t.Logf("ACK at the carrier: Vias %v, Call-ID %s, From %s", a.GetHeaders("Via"), a.CallID().Value(), a.From().Value())
		}
		t.Fatalf("the carrier got %d ACKs, want only the valid one", len(acks))
	}
	if b := acks[0].GetHeaders("Via")[1].Value(); !strings.Contains(b, "z9hG4bK-valid") {
		t.Fatalf("the ACK at the carrier came from Via %q, want the valid one", b)
	}
}

// TestAckBeforeByeToStreamCarrier: a caller over UDP sends its ACK (every
// other call twice) and BYE back to back to a carrier over TCP. Neither is
// written from the UDP worker (a stream write may wait), each leaves from
// a goroutine: the BYE could be written to the carrier's connection
// before the ACK (a UAS waiting for the ACK fails the call). The carrier
// must get every call's ACKs before its BYE.
func TestAckBeforeByeToStreamCarrier(t *testing.T) {
	car := startCopyCarrier(t, true, viaLines, 200, 0)
	h := interopProxy(t, car)
	c := startLineCaller(t)
	const calls = 30
	for i := range calls {
		id := fmt.Sprint("tcp-car-ack-", i)
		c.send(h.udp, c.invite(h.udp, id))
		ok := c.final(id, "1 INVITE", 5*time.Second)
		if statusOf(ok) != 200 {
			t.Fatalf("call %s: final %q, want 200", id, ok)
		}
		ack := c.ackOf2xx(ok, 1)
		c.send(h.udp, ack)
		if i%2 == 1 {
			// A copy of the ACK (the same branch: a caller's ACK sent
			// again, or a datagram duplicated on its way).
			c.send(h.udp, ack)
		}
		c.send(h.udp, c.inDialog(ok, "BYE", "bye-"+id, 2))
	}
	waitFor(t, func() bool { return len(car.requests("BYE")) == calls }, "every BYE at the carrier")
	// Every note was ended, the copies' too: none holds a later request
	// of its call back (a copy sipgo absorbed kept its note, and the
	// call's BYE waited out connectTimeout).
	waitFor(t, func() bool { return h.p.ackOrder.Len() == 0 }, "no ACK noted in flight")
	car.mu.Lock()
	got := append([]string(nil), car.got...)
	car.mu.Unlock()
	order := map[string][]string{}
	for _, m := range got {
		method, _, _ := strings.Cut(m, " ")
		for _, l := range rawHeaderLines(m) {
			if n := lineName(l); n == "call-id" || n == "i" {
				_, v, _ := strings.Cut(l, ":")
				order[strings.TrimSpace(v)] = append(order[strings.TrimSpace(v)], method)
			}
		}
	}
	overtaken := 0
	for i := range calls {
		id := fmt.Sprint("tcp-car-ack-", i)
		want := "INVITE,ACK,BYE"
		if i%2 == 1 {
			want = "INVITE,ACK,ACK,BYE"
		}
		if o := strings.Join(order[id], ","); o != want {
			overtaken++
			t.Logf("call %s: the carrier got %s", id, o)
		}
	}
	if overtaken > 0 {
		t.Errorf("%d of %d calls: the carrier did not get INVITE, ACK (and its copy), BYE in that order", overtaken, calls)
	}
}

// TestStreamCarrierAckPathAttacked: the ACK path to a carrier over TCP
// (ackToStream, ackOrder) under attack from the peer's address and a
// stranger's. ACKs with the dialog token changed, another From tag,
// another Call-ID, no Route or no hop left, and a stranger's copy of the
// valid ACK, are not relayed and leave no note; a flood of copies of the
// valid ACK is relayed only within the dialog's rate and leaves no note
// and no goroutine behind, and the call's BYE still reaches the carrier
// after its ACK. Nothing panics.
func TestStreamCarrierAckPathAttacked(t *testing.T) {
	car := startCopyCarrier(t, true, viaLines, 200, 0)
	h := interopProxy(t, car)
	c := startLineCaller(t)
	const id = "tcp-car-attack"
	c.send(h.udp, c.invite(h.udp, id))
	ok := c.final(id, "1 INVITE", 5*time.Second)
	if statusOf(ok) != 200 {
		t.Fatalf("final %q, want 200", ok)
	}
	base := runtime.NumGoroutine()
	valid := c.ackOf2xx(ok, 1)
	if !strings.Contains(valid, ";cg=") {
		t.Fatalf("the caller's ACK carries no dialog token: %s", valid)
	}
	lines := func(msg string, f func(l string) (string, bool)) string {
		var out []string
		for _, l := range strings.Split(msg, "\r\n") {
			if nl, keep := f(l); keep {
				out = append(out, nl)
			}
		}
		return strings.Join(out, "\r\n")
	}
	forged := map[string]string{
		"token changed": lines(valid, func(l string) (string, bool) {
			if i := strings.Index(l, ";cg="); strings.HasPrefix(l, "Route:") && i >= 0 && i+6 < len(l) {
				b := []byte(l)
				b[i+6] ^= 1
				return string(b), true
			}
			return l, true
		}),
		"From tag changed": strings.Replace(valid, ";tag=f-"+id, ";tag=not-the-callers", 1),
		"Call-ID changed":  strings.Replace(valid, "Call-ID: "+id, "Call-ID: another-call", 1),
		"no Route":         lines(valid, func(l string) (string, bool) { return l, !strings.HasPrefix(l, "Route:") }),
		"no hop left":      strings.Replace(valid, "Max-Forwards: 70", "Max-Forwards: 0", 1),
	}
	for name, msg := range forged {
		if msg == valid {
			t.Fatalf("%s: the forged ACK is the valid one", name)
		}
		c.send(h.udp, strings.Replace(msg, "branch=z9hG4bK-", "branch=z9hG4bK-forged-"+strings.ReplaceAll(name, " ", "-")+"-", 1))
	}
	stranger, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	ra, err := net.ResolveUDPAddr("udp", h.udp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.WriteToUDP([]byte(valid), ra); err != nil {
		t.Fatal(err)
	}
	// A flood of copies of the valid ACK. It spends the dialog's in-dialog
	// rate: a BYE right behind it gets 503 (dialog_rate), and the caller
	// hangs up again a little later, with a new transaction, until the
	// carrier has it (at most 20 tries).
	const copies = 300
	for range copies {
		c.send(h.udp, valid)
	}
	for seq := 2; seq < 22 && len(car.requests("BYE")) == 0; seq++ {
		c.send(h.udp, c.inDialog(ok, "BYE", "bye-"+id+"-"+strconv.Itoa(seq), seq))
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) && len(car.requests("BYE")) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := len(car.requests("BYE")); n != 1 {
		t.Fatalf("the carrier got %d BYEs after 20 tries, want 1", n)
	}
	waitFor(t, func() bool { return h.p.ackOrder.Len() == 0 }, "no ACK noted in flight")
	waitFor(t, func() bool { return runtime.NumGoroutine() <= base+10 }, "the ACK goroutines gone")

	car.mu.Lock()
	got := append([]string(nil), car.got...)
	car.mu.Unlock()
	var acks int
	for _, m := range got {
		method, _, _ := strings.Cut(m, " ")
		switch method {
		case "ACK":
			acks++
			vias := linesNamed(m, "via")
			if len(vias) < 2 || !strings.Contains(vias[1], "branch=z9hG4bK-ack-1-") || !strings.Contains(m, "Call-ID: "+id) {
				t.Errorf("an ACK at the carrier other than the valid one's copies: %q", vias)
			}
		case "BYE":
			if acks == 0 {
				t.Error("the BYE reached the carrier before any ACK")
			}
		}
	}
	if acks == 0 || acks > copies/2 {
		t.Errorf("the carrier got %d of %d copies of the ACK, want at least one and no more than the dialog's rate lets through", acks, copies+1)
	}
	if v := testutil.ToFloat64(h.m.Panics.WithLabelValues("sip.ack")); v != 0 {
		t.Errorf("%v panics on the ACK path", v)
	}
}
