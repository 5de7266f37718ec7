package sip

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/dialogguard"
	"github.com/cpsguard/cpsguard/sip/internal/dialogtoken"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/opaque"
	"github.com/cpsguard/cpsguard/sip/internal/statelessbranch"
)

// udpEnd is a raw UDP end point: it records every message it reads and,
// for requests, answers through answer (nil: no answer).
type udpEnd struct {
	t    *testing.T
	conn *net.UDPConn
	// answer builds the answer to a received request (nil for none).
	answer func(req *sipmsg.Request) *sipmsg.Response

	mu   sync.Mutex
	reqs []*sipmsg.Request
	ress []*sipmsg.Response
	from []*net.UDPAddr // source of each response, index-aligned with ress
	// wire holds every request as it arrived, with its source.
	wire []rawDatagram
}

// rawDatagram is one datagram as a udpEnd read it, and its source.
type rawDatagram struct {
	b    []byte
	from *net.UDPAddr
}

func startUDPEnd(t *testing.T, ip string, answer func(*sipmsg.Request) *sipmsg.Response) *udpEnd {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e := &udpEnd{t: t, conn: conn, answer: answer}
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			msg, err := sipmsg.ParseMessage(append([]byte(nil), buf[:n]...))
			if err != nil {
				continue
			}
			switch m := msg.(type) {
			case *sipmsg.Request:
				e.mu.Lock()
				e.reqs = append(e.reqs, m)
				e.wire = append(e.wire, rawDatagram{b: append([]byte(nil), buf[:n]...), from: from})
				fn := e.answer
				e.mu.Unlock()
				if fn != nil {
					if res := fn(m); res != nil {
						_, _ = conn.WriteToUDP([]byte(res.String()), from)
					}
				}
			case *sipmsg.Response:
				e.mu.Lock()
				e.ress = append(e.ress, m)
				e.from = append(e.from, from)
				e.mu.Unlock()
			}
		}
	}()
	return e
}

func (e *udpEnd) addr() string { return e.conn.LocalAddr().String() }

// contact is a callee's Contact at e's address (sip:callee@host:port).
func (e *udpEnd) contact() *sipmsg.ContactHeader {
	ua := e.conn.LocalAddr().(*net.UDPAddr)
	return &sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "callee", Host: ua.IP.String(), Port: ua.Port}}
}

// later sends res, an answer to req, to req's top Via after d (a late
// answer), once first (if any) has run; a write after the end is dropped,
// as a closed socket's.
func (e *udpEnd) later(d time.Duration, req *sipmsg.Request, res *sipmsg.Response, first ...func()) {
	via := req.Via()
	to := &net.UDPAddr{IP: net.ParseIP(via.Host), Port: via.Port}
	time.AfterFunc(d, func() {
		for _, f := range first {
			f()
		}
		_, _ = e.conn.WriteToUDP([]byte(res.String()), to)
	})
}

func (e *udpEnd) send(to string, m sipmsg.Message) {
	e.t.Helper()
	ra, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.conn.WriteToUDP([]byte(m.String()), ra); err != nil {
		e.t.Fatal(err)
	}
}

// requests returns the requests of method received so far.
func (e *udpEnd) requests(method sipmsg.RequestMethod) []*sipmsg.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*sipmsg.Request
	for _, r := range e.reqs {
		if r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// responses returns the responses received so far.
func (e *udpEnd) responses() []*sipmsg.Response {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*sipmsg.Response(nil), e.ress...)
}

// rawAnswerer answers an initial INVITE 200 (To tag "raw-callee", Contact
// self) and every other request but ACK 200 when bye is true.
func rawAnswerer(self func() string, bye func() bool) func(*sipmsg.Request) *sipmsg.Response {
	return func(req *sipmsg.Request) *sipmsg.Response {
		switch {
		case req.IsAck():
			return nil
		case req.IsInvite():
			res := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
			res.To().Params.Add("tag", "raw-callee")
			host, port, _ := net.SplitHostPort(self())
			p, _ := strconv.Atoi(port)
			res.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "callee", Host: host, Port: p}})
			return res
		case bye == nil || bye():
			return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
		}
		return nil
	}
}

// startAnsweringEnd starts a raw UDP carrier on 127.0.0.1 that answers
// INVITEs 200 (rawAnswerer) and BYEs 200 while answerBye says so (nil:
// always).
func startAnsweringEnd(t *testing.T, answerBye func() bool) *udpEnd {
	t.Helper()
	car := startUDPEnd(t, "127.0.0.1", nil)
	self := car.addr()
	car.mu.Lock()
	car.answer = rawAnswerer(func() string { return self }, answerBye)
	car.mu.Unlock()
	return car
}

// startAnsweringEndWith starts a raw UDP carrier on 127.0.0.1 whose answer
// to each request is answer's, given the carrier itself, the request and
// what rawAnswerer (at the carrier's own address) would answer.
func startAnsweringEndWith(t *testing.T, answer func(car *udpEnd, req *sipmsg.Request, plain func(*sipmsg.Request) *sipmsg.Response) *sipmsg.Response) *udpEnd {
	t.Helper()
	car := startUDPEnd(t, "127.0.0.1", nil)
	self := car.addr()
	plain := rawAnswerer(func() string { return self }, nil)
	car.mu.Lock()
	car.answer = func(req *sipmsg.Request) *sipmsg.Response { return answer(car, req, plain) }
	car.mu.Unlock()
	return car
}

// withVia puts a Via for the raw end point at addr with branch on req and
// addresses it to proxy.
func withVia(req *sipmsg.Request, addr, branch string) *sipmsg.Request {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	v := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP", Host: host, Port: p, Params: sipmsg.NewParams()}
	v.Params.Add("branch", branch)
	v.Params.Add("rport", "")
	req.PrependHeader(v)
	req.SetBody(nil)
	return req
}

// caller is a siptest.Caller naming e (inDialogOf takes the Contact from
// it); e's own socket sends.
func (e *udpEnd) caller() *siptest.Caller { return &siptest.Caller{Addr: e.addr()} }

// reset forgets what e received so far.
func (e *udpEnd) reset() {
	e.mu.Lock()
	e.reqs, e.ress, e.from, e.wire = nil, nil, nil, nil
	e.mu.Unlock()
}

// statelessSetup places an answered call from a raw peer on 127.0.0.2 to
// a raw carrier on 127.0.0.1 and returns the pieces (the peer's and the
// carrier's records start empty, after the call's INVITE and ACK).
func statelessSetup(t *testing.T, answerBye func() bool) (*harness, *udpEnd, *udpEnd, *sipmsg.Response) {
	t.Helper()
	car := startAnsweringEnd(t, answerBye)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	ok := rawAnsweredCall(t, peer, h.udp, "stateless-setup")
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 }, "the call's ACK at the carrier")
	peer.reset()
	car.reset()
	return h, peer, car, ok
}

func sipErrors(h *harness, reason string) float64 {
	return testutil.ToFloat64(h.m.SIPErrors.WithLabelValues(reason))
}

// TestStatelessByeRelayedBothWays: a BYE from either leg is relayed with
// the proxy's stateless Via (no transaction) and its 200 comes back to the
// sender's Via address with the proxy's Via removed; a retransmitted BYE is
// relayed again with the same branch.
func TestStatelessByeRelayedBothWays(t *testing.T) {
	var answer atomic.Bool // the carrier answers BYEs once set
	h, peer, car, ok := statelessSetup(t, answer.Load)
	caller := peer.caller()
	bye := withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.peer-bye-1")
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == 1 }, "the BYE at the carrier")
	// A retransmission before the answer: relayed again, same branch.
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == 2 }, "the retransmitted BYE at the carrier")
	if b1, b2 := car.requests(sipmsg.BYE)[0].Via().Params.GetOr("branch", ""), car.requests(sipmsg.BYE)[1].Via().Params.GetOr("branch", "x"); b1 != b2 {
		t.Errorf("retransmission branch %q, want the first's %q", b2, b1)
	}
	answer.Store(true)
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the BYE's 200 at the caller")
	res := peer.responses()[0]
	if res.StatusCode != 200 || res.CSeq().MethodName != sipmsg.BYE {
		t.Fatalf("caller got %s, want 200 to its BYE", res.StartLine())
	}
	if vias := res.GetHeaders("Via"); len(vias) != 1 || !strings.Contains(vias[0].Value(), "z9hG4bK.peer-bye-1") {
		t.Fatalf("relayed 200 Vias = %v, want only the caller's", vias)
	}
	fwd := car.requests(sipmsg.BYE)
	if len(fwd) != 3 {
		t.Fatalf("BYEs at the carrier = %d, want 3", len(fwd))
	}
	branch, _ := fwd[0].Via().Params.Get("branch")
	if !strings.HasPrefix(branch, statelessbranch.Prefix) {
		t.Fatalf("forwarded BYE branch %q, want the stateless prefix %q", branch, statelessbranch.Prefix)
	}
	if mf := fwd[0].MaxForwards(); mf == nil || mf.Val() != 69 {
		t.Errorf("forwarded Max-Forwards = %v, want 69", mf)
	}
	if vias := fwd[0].GetHeaders("Via"); len(vias) != 2 {
		t.Fatalf("forwarded BYE has %d Vias, want 2 (proxy's, caller's)", len(vias))
	} else if up := vias[1].(*sipmsg.ViaHeader); up.Params.GetOr("rport", "") != strconv.Itoa(mustPort(t, peer.addr())) {
		t.Errorf("caller's Via on the forwarded BYE = %s, want rport filled in", up.Value())
	}

	// A retransmission after the 200 (the 200 was lost on its way, so
	// the caller still waits for it): relayed again, and the carrier's
	// answer reaches the caller (RFC 3261 17.1.2, 17.2.2: the carrier's
	// server transaction answers it; a 481 from the node would end the
	// caller's transaction with a failure).
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(peer.responses()) == 2 }, "the answer to the late retransmission")
	if r := peer.responses()[1]; r.StatusCode != 200 {
		t.Errorf("late retransmission: %s, want the carrier's 200", r.StartLine())
	}
	if n := len(car.requests(sipmsg.BYE)); n != 4 {
		t.Fatalf("BYEs at the carrier after a late retransmission = %d, want 4", n)
	}
	// A new BYE of the ended dialog (another branch, same CSeq): 481 from
	// the node, nothing relayed.
	peer.send(h.udp, withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.peer-bye-2"))
	waitFor(t, func() bool { return len(peer.responses()) == 3 }, "the answer to a new BYE")
	if r := peer.responses()[2]; r.StatusCode != 481 {
		t.Errorf("new BYE of the ended dialog: %s, want 481", r.StartLine())
	}
	if n := len(car.requests(sipmsg.BYE)); n != 4 {
		t.Fatalf("BYEs at the carrier after a new BYE of an ended dialog = %d, want 4", n)
	}

	// The callee's side, in a second call (the first one has ended): a BYE
	// from the carrier's address, to the caller (answering 200), and the
	// 200 back to the carrier.
	peer.mu.Lock()
	peer.answer = func(req *sipmsg.Request) *sipmsg.Response {
		return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
	}
	peer.mu.Unlock()
	ok2 := rawAnsweredCall(t, peer, h.udp, "second")
	car.reset()
	cbye := withVia(calleeBye(t, &siptest.Caller{Addr: car.addr()}, h.udp, ok2), car.addr(), "z9hG4bK.callee-bye-1")
	car.send(h.udp, cbye)
	waitFor(t, func() bool { return len(car.responses()) == 1 }, "the callee BYE's 200 at the carrier")
	if r := car.responses()[0]; r.StatusCode != 200 || len(r.GetHeaders("Via")) != 1 {
		t.Fatalf("carrier got %s with Vias %v, want 200 with its own Via only", r.StartLine(), r.GetHeaders("Via"))
	}
	if n := sipErrors(h, "forged_response") + sipErrors(h, "stateless_response"); n != 0 {
		t.Errorf("stateless response errors = %v, want 0", n)
	}
}

// TestAckThenByeKeepTheirOrder: an ACK of a 2xx and the BYE sent right
// after it reach the carrier in that order (both relayed from the read
// loop; a UAS waiting for the ACK fails a call whose BYE comes first).
func TestAckThenByeKeepTheirOrder(t *testing.T) {
	h, peer, car, _ := statelessSetup(t, nil)
	caller := peer.caller()
	const n = 30
	// One call per ACK and BYE (a BYE ends its dialog).
	oks := make([]*sipmsg.Response, n)
	for i := range oks {
		oks[i] = rawAnsweredCall(t, peer, h.udp, "order-"+strconv.Itoa(i))
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == n }, "every call's ACK at the carrier")
	car.reset()
	for i, ok := range oks {
		ack := inDialogOf(t, caller, h.udp, ok, sipmsg.ACK)
		ack.CSeq().SeqNo = ok.CSeq().SeqNo
		peer.send(h.udp, withVia(ack, peer.addr(), "z9hG4bK.ack-"+strconv.Itoa(i)))
		peer.send(h.udp, withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.bye-"+strconv.Itoa(i)))
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == n }, "every BYE at the carrier")
	car.mu.Lock()
	defer car.mu.Unlock()
	// Per call: the read path keeps a dialog's datagrams in order on one
	// worker, while different calls go on different workers (so one
	// call's BYE may pass the next call's ACK).
	seq := map[string][]sipmsg.RequestMethod{}
	for _, r := range car.reqs {
		if r.Method == sipmsg.ACK || r.Method == sipmsg.BYE {
			seq[msgpart.CallID(r)] = append(seq[msgpart.CallID(r)], r.Method)
		}
	}
	for i, ok := range oks {
		got := seq[msgpart.CallID(ok)]
		if len(got) != 2 || got[0] != sipmsg.ACK || got[1] != sipmsg.BYE {
			t.Fatalf("call %d: carrier saw %v, want ACK then BYE", i, got)
		}
	}
}

// TestStatelessForgedResponsesDropped: responses carrying the proxy's
// stateless Via are relayed only when the branch's MAC verifies over the
// response's Via below it, Call-ID, CSeq and its source IP.
func TestStatelessForgedResponsesDropped(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, func() bool { return false })
	caller := peer.caller()
	peer.send(h.udp, withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.peer-bye-2"))
	waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == 1 }, "the BYE at the carrier")
	fwd := car.requests(sipmsg.BYE)[0]
	genuine := func() *sipmsg.Response { return sipmsg.NewResponseFromRequest(fwd, 200, "OK", nil) }
	forged := sipErrors(h, "forged_response")

	// A bad MAC (one character of the branch's MAC changed to another of
	// opaque's alphabet: it still decodes), from the carrier.
	r := genuine()
	b, _ := r.Via().Params.Get("branch")
	pos := len(b) - 5
	next := opaque.Alphabet[(strings.IndexByte(opaque.Alphabet, b[pos])+1)%len(opaque.Alphabet)]
	if _, ok := statelessbranch.Decode(strings.TrimPrefix(b[:pos]+string(next)+b[pos+1:], statelessbranch.Prefix)); !ok {
		t.Fatalf("the changed branch does not decode: the case would not reach the MAC")
	}
	r.Via().Params.Add("branch", b[:pos]+string(next)+b[pos+1:])
	car.send(h.udp, r)
	// The genuine response from the wrong IP: the caller's own (a known
	// source, so the screen reads it).
	wrongIP := startUDPEnd(t, "127.0.0.2", nil)
	wrongIP.send(h.udp, genuine())
	// The genuine branch with the Via below it redirected elsewhere.
	r = genuine()
	up := r.GetHeaders("Via")[1].(*sipmsg.ViaHeader)
	up.Params.Add("received", "127.0.0.5")
	car.send(h.udp, r)
	// A different CSeq under the genuine branch.
	r = genuine()
	r.CSeq().SeqNo++
	car.send(h.udp, r)
	// A branch in no alphabet at all.
	r = genuine()
	r.Via().Params.Add("branch", statelessbranch.Prefix+"!!")
	car.send(h.udp, r)

	waitFor(t, func() bool { return sipErrors(h, "forged_response")-forged == 5 }, "5 forged responses counted")
	time.Sleep(200 * time.Millisecond)
	if got := peer.responses(); len(got) != 0 {
		t.Fatalf("caller got %d forged responses relayed (first: %s)", len(got), got[0].StartLine())
	}

	// The genuine one passes.
	car.send(h.udp, genuine())
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the genuine 200 at the caller")
	if n := sipErrors(h, "forged_response") - forged; n != 5 {
		t.Errorf("forged responses counted = %v, want 5", n)
	}
}

// TestStatelessRefusals: a forged in-dialog request gets one stateless 403
// and is not relayed; Max-Forwards 0 gets 483.
func TestStatelessRefusals(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	caller := peer.caller()

	bad := inDialogOf(t, caller, h.udp, ok, sipmsg.INFO)
	bad.RemoveHeader("Route")
	bad.AppendHeader(sipmsg.NewHeader("Route", "<sip:"+h.udp+";lr;"+tokenParam+"=AgAAAAA>"))
	withVia(bad, peer.addr(), "z9hG4bK.bad-token")
	peer.send(h.udp, bad)
	hops := withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.INFO), peer.addr(), "z9hG4bK.no-hops")
	mf := sipmsg.MaxForwardsHeader(0)
	hops.ReplaceHeader(&mf)
	peer.send(h.udp, hops)
	waitFor(t, func() bool { return len(peer.responses()) == 2 }, "two refusals")
	codes := map[int]bool{}
	for _, r := range peer.responses() {
		codes[r.StatusCode] = true
	}
	if !codes[403] || !codes[483] {
		t.Fatalf("refusals %v, want 403 and 483", codes)
	}
	if n := len(car.requests(sipmsg.INFO)); n != 0 {
		t.Fatalf("refused INFOs at the carrier = %d, want 0", n)
	}
	if n := sipErrors(h, "too_many_hops"); n != 1 {
		t.Errorf("too_many_hops counted = %v, want 1", n)
	}
	if sipErrors(h, "bad_dialog_token") != 1 {
		t.Errorf("bad_dialog_token = %v, want 1", sipErrors(h, "bad_dialog_token"))
	}
	// A valid INFO is relayed statelessly and answered.
	peer.send(h.udp, withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.INFO), peer.addr(), "z9hG4bK.info"))
	waitFor(t, func() bool { return len(peer.responses()) == 3 }, "the INFO's 200")
	if n := len(car.requests(sipmsg.INFO)); n != 1 {
		t.Fatalf("INFOs at the carrier = %d, want 1", n)
	}
}

// TestStatefulFallbackForTCPCarrier: a BYE whose next hop is over TCP is
// relayed by the stateful path, and answered.
func TestStatefulFallbackForTCPCarrier(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	c := carrierCfg("a", car)
	c.URI += ";transport=tcp"
	h := startProxy(t, testConfig(c), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)); res == nil || res.StatusCode != 200 {
		t.Fatalf("BYE to a TCP carrier: got %v, want 200", res)
	}
	if n := car.Count("BYE"); n != 1 {
		t.Fatalf("BYEs at the carrier = %d, want 1", n)
	}
}

// TestStatelessByeFreesMaxCallsOnce: a BYE relayed statelessly frees its
// call's max_calls places; its retransmission frees nothing more.
func TestStatelessByeFreesMaxCallsOnce(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h, tr, store := startCallsProxy(t, car, 2, 0)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	live := peerPlaces(t, store)
	ok := rawAnsweredCall(t, peer, h.udp, "calls-1")
	rawAnsweredCall(t, peer, h.udp, "calls-2")
	if live() != 2 {
		t.Fatalf("places before the BYE = %d, want 2", live())
	}
	peer.reset()
	bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.calls-bye")
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the BYE's 200")
	waitFor(t, func() bool { return live() == 1 && tr.Live() == 1 }, "the call's place freed")
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(peer.responses()) == 2 }, "the retransmission's 200")
	time.Sleep(100 * time.Millisecond)
	if live() != 1 || tr.Live() != 1 {
		t.Fatalf("after a retransmitted BYE: places %d, tracked %d, want 1 and 1", live(), tr.Live())
	}
	// The carrier's server transaction absorbed the retransmission and
	// answered it again: the second 200 above is the proof it was relayed.
}

// benchEnd is a raw UDP end point read synchronously by the benchmark.
type benchEnd struct {
	conn *net.UDPConn
	addr string
	buf  []byte
}

func newBenchEnd(b *testing.B, ip string) *benchEnd {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return &benchEnd{conn: conn, addr: conn.LocalAddr().String(), buf: make([]byte, 65535)}
}

// write sends msg to to (errors are reported, not fatal: it runs in
// RunParallel's goroutines too).
func (e *benchEnd) write(b *testing.B, to, msg string) {
	ra, err := net.ResolveUDPAddr("udp", to)
	if err == nil {
		_, err = e.conn.WriteToUDP([]byte(msg), ra)
	}
	if err != nil {
		b.Error(err)
	}
}

// read returns the next message, nil after 5 s without one.
func (e *benchEnd) read(b *testing.B) sipmsg.Message {
	m := e.readWithin(5 * time.Second)
	if m == nil {
		b.Error("no message within 5 s")
	}
	return m
}

// readWithin returns the next message, nil after d without one.
func (e *benchEnd) readWithin(d time.Duration) sipmsg.Message {
	for {
		_ = e.conn.SetReadDeadline(time.Now().Add(d))
		n, _, err := e.conn.ReadFromUDP(e.buf)
		if err != nil {
			return nil
		}
		if m, err := sipmsg.ParseMessage(append([]byte(nil), e.buf[:n]...)); err == nil {
			return m
		}
	}
}

func (e *benchEnd) readRequest(b *testing.B, method sipmsg.RequestMethod) *sipmsg.Request {
	for {
		m := e.read(b)
		if m == nil {
			b.FailNow()
		}
		if r, ok := m.(*sipmsg.Request); ok && r.Method == method {
			return r
		}
	}
}

// readResponseWithin returns the next final response, nil when none
// comes within d (a late answer to an earlier copy is taken too).
func (e *benchEnd) readResponseWithin(_ *testing.B, d time.Duration) *sipmsg.Response {
	for {
		m := e.readWithin(d)
		if m == nil {
			return nil
		}
		if r, ok := m.(*sipmsg.Response); ok && r.StatusCode >= 200 {
			return r
		}
	}
}

// readResponse returns the next final response, nil on a timeout.
func (e *benchEnd) readResponse(b *testing.B) *sipmsg.Response {
	for {
		m := e.read(b)
		if m == nil {
			return nil
		}
		if r, ok := m.(*sipmsg.Response); ok && r.StatusCode >= 200 {
			return r
		}
	}
}

// TestStatelessLeavesMangledViaToStatefulRelay: a BYE whose top Via holds
// a quoted parameter (an RFC 7339 client's oc-algo="loss"), sent from
// behind a NAT (its Via names another host, so the node adds received),
// is relayed through a transaction, not statelessly: sipgo's parser would
// read the forwarded Via back differently in the response, whose MAC
// would then fail and its 200 be lost. The 200 reaches the caller, with
// the node's overload-control values.
func TestStatelessLeavesMangledViaToStatefulRelay(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	caller := peer.caller()
	_, port, _ := net.SplitHostPort(peer.addr())
	bye := withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), "192.0.2.7:"+port, "z9hG4bK.nat-bye-1")
	via := bye.Via()
	via.Params.Add("oc", "")
	via.Params.Add("oc-algo", `"loss"`)
	if !viaMangled(parsedVia(t, via.Value())) {
		t.Fatalf("sipgo parses %q cleanly: the test needs a Via it mangles", via.Value())
	}
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the BYE's 200 at the caller")
	res := peer.responses()[0]
	if res.StatusCode != 200 || !strings.Contains(res.Via().Value(), ";oc=") {
		t.Fatalf("caller got %s with Via %q, want 200 with the node's oc values", res.StartLine(), res.Via().Value())
	}
	fwd := car.requests(sipmsg.BYE)
	if len(fwd) != 1 {
		t.Fatalf("BYEs at the carrier = %d, want 1", len(fwd))
	}
	if b, _ := fwd[0].Via().Params.Get("branch"); strings.HasPrefix(b, statelessbranch.Prefix) {
		t.Fatalf("forwarded BYE branch %q: relayed statelessly", b)
	}
	if n := sipErrors(h, "forged_response") + sipErrors(h, "stateless_response"); n != 0 {
		t.Errorf("stateless response errors = %v, want 0", n)
	}
}

// TestEndedDialogByeCopiesBounded: after the BYE that ended a dialog was
// answered, copies of it (same CSeq, same branch, same side) are relayed
// only as many times as a real UAC retransmits one (RFC 3261 17.1.2.2);
// past that the node answers 481 itself. Unbounded, the copies (whose
// headers and body are the sender's choice) gave every ended dialog a
// relay to the carrier at the in-dialog rate for hours after its call
// and its max_calls place were gone.
func TestEndedDialogByeCopiesBounded(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.ended-copies")
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the BYE's 200")
	const copies = 3 * dialogguard.MaxByeCopies
	for i := 0; i < copies; i++ {
		peer.send(h.udp, bye)
		waitFor(t, func() bool { return len(peer.responses()) == 2+i }, "the answer to a copy of the BYE")
	}
	relayed := len(car.requests(sipmsg.BYE)) - 1
	if relayed > dialogguard.MaxByeCopies {
		t.Fatalf("copies of the ending BYE relayed after the end = %d of %d, want at most %d", relayed, copies, dialogguard.MaxByeCopies)
	}
	refused := 0
	for _, r := range peer.responses()[1:] {
		if r.StatusCode == 481 {
			refused++
		}
	}
	if refused != copies-relayed {
		t.Fatalf("copies answered 481 by the node = %d, want %d", refused, copies-relayed)
	}
}

// TestEndedCallRefusesEveryDialogOfIt: once an answered call is over (its
// BYE answered 200, or an operator's end), no request of its dialog token
// is relayed, whatever callee tag it names: the dialog token names the
// call by its Call-ID and caller's tag only, and a made-up To tag made a
// "dialog" that had not ended, so the peer kept a relay to the carrier
// (at the in-dialog rate, any method and body) for the token's whole
// life after its call and its max_calls place were gone.
func TestEndedCallRefusesEveryDialogOfIt(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.whole-call-bye")
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the BYE's 200")
	waitFor(t, func() bool { return h.p.calls.(*callplaces.Tracker).Live() == 0 }, "the call's end")
	madeUp := func(ok *sipmsg.Response, method sipmsg.RequestMethod, branch string) *sipmsg.Request {
		r := withVia(inDialogOf(t, peer.caller(), h.udp, ok, method), peer.addr(), branch)
		r.To().Params.Add("tag", "made-up-"+branch)
		return r
	}
	for i, m := range []sipmsg.RequestMethod{sipmsg.INFO, sipmsg.BYE, sipmsg.MESSAGE} {
		peer.send(h.udp, madeUp(ok, m, "z9hG4bK.after-end-"+strconv.Itoa(i)))
		waitFor(t, func() bool { return len(peer.responses()) == 2+i }, "the answer to a request of the ended call")
		if r := peer.responses()[1+i]; r.StatusCode != 481 {
			t.Fatalf("%s with a made-up To tag after the call ended: %s, want 481", m, r.StartLine())
		}
	}
	if n := len(car.requests(sipmsg.INFO)) + len(car.requests(sipmsg.MESSAGE)) + len(car.requests(sipmsg.BYE)); n != 1 {
		t.Fatalf("requests at the carrier after the call ended = %d, want 1 (its BYE)", n)
	}
}

// TestOperatorEndEndsTheDialog: after an operator ended an answered call
// (the node's BYEs to both legs), the peer's requests of that call are
// refused 481 and not relayed (an operator's end ended no dialog: the
// peer's INFOs still reached the carrier).
func TestOperatorEndEndsTheDialog(t *testing.T) {
	h, peer, car, ok2 := statelessSetup(t, nil)
	if n := h.p.EndCalls(context.Background(), ok2.CallID().Value()); n != 1 {
		t.Fatalf("EndCalls = %d, want 1", n)
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == 1 }, "the node's BYE at the carrier")
	info := withVia(inDialogOf(t, peer.caller(), h.udp, ok2, sipmsg.INFO), peer.addr(), "z9hG4bK.after-operator")
	peer.send(h.udp, info)
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the answer to an INFO after the operator's end")
	if r := peer.responses()[0]; r.StatusCode != 481 {
		t.Fatalf("INFO after the operator ended the call: %s, want 481", r.StartLine())
	}
	if n := len(car.requests(sipmsg.INFO)); n != 0 {
		t.Fatalf("INFOs at the carrier after the operator's end = %d, want 0", n)
	}
}

// TestCarrierByeBeforeItsAnswerEndsTheCall: a carrier that sends a BYE of
// a dialog it has not answered yet (the caller answers it 481: it knows
// no such dialog), then answers the call with that tag, made the node
// take its answer for the end of the call (the pending end of a BYE that
// raced its 2xx): the call's places were freed and its record closed at
// once, while the caller, who got the 200, was in the call, so a carrier
// could take calls past its max_calls (and the peer's). The node now ends
// such a call on both legs with its own BYEs, as an operator's end does.
func TestCarrierByeBeforeItsAnswerEndsTheCall(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", func(req *sipmsg.Request) *sipmsg.Response {
		if req.Method == sipmsg.BYE {
			if len(req.GetHeaders("Reason")) > 0 {
				return sipmsg.NewResponseFromRequest(req, 200, "OK", nil) // the node's own
			}
			return sipmsg.NewResponseFromRequest(req, 481, "Call/Transaction Does Not Exist", nil)
		}
		return nil
	})
	peer.send(h.udp, rawInviteFrom(peer, h.udp, "early-bye", "ftag-early"))
	waitFor(t, func() bool { return len(car.requests(sipmsg.INVITE)) == 1 }, "the INVITE at the carrier")
	inv := car.requests(sipmsg.INVITE)[0]

	// The carrier's BYE of the dialog it is about to answer with tag evil.
	car.send(h.udp, withVia(calleeByeOf(inv, "evil"), car.addr(), "z9hG4bK.evil-bye"))
	waitFor(t, func() bool { return len(car.responses()) == 1 }, "the caller's 481 at the carrier")
	if r := car.responses()[0]; r.StatusCode != 481 {
		t.Fatalf("the carrier's early BYE: %s, want the caller's 481", r.StartLine())
	}

	ok := sipmsg.NewResponseFromRequest(inv, 200, "OK", nil)
	ok.To().Params.Add("tag", "evil")
	ok.AppendHeader(car.contact())
	car.send(h.udp, ok)
	if res := finalOfRaw(peer, "early-bye", sipmsg.INVITE, 0); res == nil || res.StatusCode != 200 {
		t.Fatalf("the caller's final answer: %v, want the carrier's 200", res)
	}
	waitFor(t, func() bool { return h.p.calls.(*callplaces.Tracker).Live() == 0 }, "the call ended by the node's books")
	// The node holds the call no longer: it must not be up at either leg.
	waitFor(t, func() bool {
		return len(peer.requests(sipmsg.BYE)) == 2 && len(car.requests(sipmsg.BYE)) == 1
	}, "the node's BYEs to both legs of a call it counts as ended")
}

// calleeByeOf is the carrier's BYE (CSeq 1) of the dialog of inv, the
// INVITE it received, answered with callee tag tag: to inv's Contact,
// through its Record-Route.
func calleeByeOf(inv *sipmsg.Request, tag string) *sipmsg.Request {
	bye := sipmsg.NewRequest(sipmsg.BYE, *inv.Contact().Address.Clone())
	for _, rr := range inv.GetHeaders("Record-Route") {
		bye.AppendHeader(sipmsg.NewHeader("Route", rr.Value()))
	}
	mf := sipmsg.MaxForwardsHeader(70)
	bye.AppendHeader(&mf)
	from := inv.To().AsFrom()
	from.Params = sipmsg.NewParams()
	from.Params.Add("tag", tag)
	bye.AppendHeader(&from)
	to := inv.From().AsTo()
	bye.AppendHeader(&to)
	bye.AppendHeader(sipmsg.HeaderClone(inv.CallID()))
	bye.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.BYE})
	return bye
}

// TestMadeUpTagByesRecordNothing: BYEs of a live call that name made-up
// callee tags (the carrier answers each 481: no such dialog) end nothing
// and leave nothing in the node's ended table, so a flood of them cannot
// push the ended calls' records out of it; the call goes on. Each such
// 481 was recorded as an ended dialog (and published to the pool).
func TestMadeUpTagByesRecordNothing(t *testing.T) {
	car := startAnsweringEndWith(t, func(car *udpEnd, req *sipmsg.Request, answer func(*sipmsg.Request) *sipmsg.Response) *sipmsg.Response {
		if req.Method == sipmsg.BYE && req.To().Params.GetOr("tag", "") != "raw-callee" {
			return sipmsg.NewResponseFromRequest(req, 481, "Call/Transaction Does Not Exist", nil)
		}
		return answer(req)
	})
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	ok := rawAnsweredCall(t, peer, h.udp, "made-up-byes")
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 }, "the call's ACK at the carrier")
	peer.reset()
	car.reset()
	const n = 5
	for i := 0; i < n; i++ {
		bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.made-up-"+strconv.Itoa(i))
		bye.To().Params.Add("tag", "made-up-"+strconv.Itoa(i))
		peer.send(h.udp, bye)
		waitFor(t, func() bool { return len(peer.responses()) == 1+i }, "the carrier's 481 to a made-up BYE")
	}
	ends, tokens, _ := h.p.dialogs.Len()
	if ended := ends + tokens; ended != 0 {
		t.Fatalf("ended dialogs after %d BYEs with made-up tags = %d, want 0", n, ended)
	}
	if live := h.p.calls.(*callplaces.Tracker).Live(); live != 1 {
		t.Fatalf("live calls = %d, want 1 (the call goes on)", live)
	}
	info := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.INFO), peer.addr(), "z9hG4bK.still-up")
	peer.send(h.udp, info)
	waitFor(t, func() bool { return len(car.requests(sipmsg.INFO)) == 1 }, "an INFO of the live call at the carrier")
}

// TestForgottenEndOwnTokenRefused: once the ended table forgot a call's
// end (it keeps 262,144 ends, about four minutes of a node at 1,000
// answered calls a second, where tokens live 4 h), the call's tokens
// passed again: a re-INVITE of the dialog reached the carrier, which may
// take it for a new call that no admission, slot or place granted. A
// token this node minted names a call its Tracker holds or one that is
// over, so it is refused without the table. A token of another node of
// the pool (same secret, another process) still follows the table alone:
// this node never held its call.
func TestForgottenEndOwnTokenRefused(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.forgotten-bye")
	peer.send(h.udp, bye)
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the BYE's 200")
	waitFor(t, func() bool { return h.p.calls.(*callplaces.Tracker).Live() == 0 }, "the call's end")
	h.p.dialogs.Forget() // as the table's bound does to the oldest ends

	re := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.INVITE), peer.addr(), "z9hG4bK.forgotten-reinvite")
	re.CSeq().SeqNo = 50
	peer.send(h.udp, re)
	waitFor(t, func() bool { return len(peer.responses()) >= 2 }, "the answer to the re-INVITE")
	if r := finalOfRaw(peer, msgpart.CallID(ok), sipmsg.INVITE, 0); r == nil || r.CSeq().SeqNo != 50 || r.StatusCode != 481 {
		t.Fatalf("re-INVITE of the ended call after its end was forgotten: %v, want 481", r)
	}
	if n := len(car.requests(sipmsg.INVITE)); n != 0 {
		t.Fatalf("re-INVITEs at the carrier after the end = %d, want 0", n)
	}

	// The same dialog under a token another node of the pool minted (the
	// node's key, another process's nonces): the table's rule only, which
	// forgot the end, so it is relayed as before.
	cfg := h.p.cfg()
	legs, _, _, _, st := h.p.keys.open(cfg, tokenOf(t, ok), msgpart.CallID(ok), msgpart.Tag(ok.From().Params), msgpart.Tag(ok.To().Params))
	if st != tokenOK {
		t.Fatalf("the call's own token: status %v", st)
	}
	otherNonces, err := dialogtoken.NewNonces()
	if err != nil {
		t.Fatal(err)
	}
	if otherNonces.Instance() == h.p.keys.nonces.Instance() {
		t.Fatal("two processes drew one instance")
	}
	tok, err := h.p.keys.keys(cfg).cur.MintNonce(legs, msgpart.CallID(ok), msgpart.Tag(ok.From().Params), time.Now(), otherNonces.Next())
	if err != nil {
		t.Fatal(err)
	}
	if sealed, _ := dialogtoken.Decode(tok); h.p.keys.own(sealed) {
		t.Fatal("another process's token taken for this node's own")
	}
	m, err := sipmsg.ParseMessage([]byte(strings.Replace(ok.String(), tokenOf(t, ok), tok, 1)))
	if err != nil {
		t.Fatal(err)
	}
	info := withVia(inDialogOf(t, peer.caller(), h.udp, m.(*sipmsg.Response), sipmsg.INFO), peer.addr(), "z9hG4bK.other-node-info")
	info.CSeq().SeqNo = 51
	peer.send(h.udp, info)
	waitFor(t, func() bool { return len(car.requests(sipmsg.INFO)) == 1 }, "the INFO under another node's token at the carrier")
}

// TestOperatorEndsLongCallID: a call whose Call-ID is longer than the list
// keeps is ended by its full Call-ID and by the clipped one the list shows
// (EndCalls compared the full text with the clipped one: no call).
func TestOperatorEndsLongCallID(t *testing.T) {
	for _, clipped := range []bool{false, true} {
		car := startAnsweringEnd(t, nil)
		adm, pacer := newFakes()
		h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
		peer := startUDPEnd(t, "127.0.0.2", nil)
		ok := rawAnsweredCall(t, peer, h.udp, strings.Repeat("long-call-id.", 30))
		waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 }, "the call's ACK at the carrier")
		id := ok.CallID().Value()
		if len(id) <= callplaces.MaxCallID {
			t.Fatalf("Call-ID of %d bytes: the test needs a longer one", len(id))
		}
		if clipped {
			id = callplaces.ClipCallID(id)
		}
		if n := h.p.EndCalls(context.Background(), id); n != 1 {
			t.Fatalf("EndCalls by the %s Call-ID = %d, want 1", map[bool]string{false: "full", true: "clipped"}[clipped], n)
		}
		waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == 1 }, "the node's BYE at the carrier")
	}
}
