//go:build linux

package e2e

// The hostile edge (issue 11), on the wire against a real cpsguard process:
// what a known peer and a stranger can and cannot make the node do.

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// rawPeer is a raw UDP endpoint that sends hand-written SIP and records
// everything it receives.
type rawPeer struct {
	t    testing.TB
	conn *net.UDPConn
	addr string

	mu  sync.Mutex
	got []sipMsg
}

func startRawPeer(t testing.TB, ip string) *rawPeer {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatalf("raw peer: %v", err)
	}
	p := &rawPeer{t: t, conn: conn, addr: conn.LocalAddr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if m, ok := parseSIP(append([]byte(nil), buf[:n]...)); ok {
				p.mu.Lock()
				p.got = append(p.got, m)
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return p
}

func (p *rawPeer) send(to, msg string) {
	p.t.Helper()
	ra, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.conn.WriteToUDP([]byte(strings.ReplaceAll(msg, "\n", "\r\n")), ra); err != nil {
		p.t.Fatal(err)
	}
}

// responses returns the responses received for Call-ID id (and CSeq method
// when not empty).
func (p *rawPeer) responses(id, method string) []sipMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []sipMsg
	for _, m := range p.got {
		cseq := m.get("cseq")
		if m.code > 0 && m.get("call-id") == id && (method == "" || cseq == method || strings.HasSuffix(cseq, " "+method)) {
			out = append(out, m)
		}
	}
	return out
}

// wait polls until f holds or limit passes.
func wait(limit time.Duration, f func() bool) bool {
	deadline := time.Now().Add(limit)
	for !f() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// final returns the first final response for id/method, waiting up to limit.
func (p *rawPeer) final(id, method string, limit time.Duration) (m sipMsg) {
	wait(limit, func() bool {
		for _, r := range p.responses(id, method) {
			if r.code >= 200 {
				m = r
				return true
			}
		}
		return false
	})
	return m
}

// invite is a raw initial INVITE from p for Call-ID id, with extra header
// lines.
func (p *rawPeer) invite(node, id string, extra ...string) string {
	return fmt.Sprintf("INVITE sip:100@%s SIP/2.0\nVia: SIP/2.0/UDP %s;branch=z9hG4bK-%s\nMax-Forwards: 70\n"+
		"From: <sip:e2e@%s>;tag=f-%s\nTo: <sip:100@%s>\nCall-ID: %s\nCSeq: 1 INVITE\nContact: <sip:e2e@%s>\n%s"+
		"Content-Length: 0\n\n", node, p.addr, id, p.addr, id, node, id, p.addr, joinLines(extra))
}

func joinLines(ls []string) string {
	if len(ls) == 0 {
		return ""
	}
	return strings.Join(ls, "\n") + "\n"
}

// inDialog builds a request of the dialog answered by ok (a 200 received
// by p), as a UA does: Route from the Record-Route in reverse, the dialog's
// tags, Request-URI ruri (the remote Contact when empty). Headers listed in
// drop are left out; extra lines are added.
func (p *rawPeer) inDialog(ok sipMsg, method, branch, ruri string, seq int, drop []string, extra ...string) string {
	if ruri == "" {
		ct := ok.get("contact")
		ruri = strings.Trim(ct, "<>")
	}
	skip := map[string]bool{}
	for _, d := range drop {
		skip[d] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s SIP/2.0\nVia: SIP/2.0/UDP %s;branch=z9hG4bK-%s\n", method, ruri, p.addr, branch)
	rr := ok.all("record-route")
	for i := len(rr) - 1; i >= 0; i-- {
		b.WriteString("Route: " + rr[i] + "\n")
	}
	b.WriteString("Max-Forwards: 70\n")
	for _, h := range []struct{ name, v string }{{"from", ok.get("from")}, {"to", ok.get("to")}, {"call-id", ok.get("call-id")}} {
		if !skip[h.name] {
			fmt.Fprintf(&b, "%s: %s\n", h.name, h.v)
		}
	}
	fmt.Fprintf(&b, "CSeq: %d %s\nContact: <sip:e2e@%s>\n%sContent-Length: 0\n\n", seq, method, p.addr, joinLines(extra))
	return b.String()
}

// answeredCall places one call from p and returns its 200.
func (p *rawPeer) answeredCall(t *testing.T, n *node, id string) sipMsg {
	t.Helper()
	p.send(n.sip, p.invite(n.sip, id))
	ok := p.final(id, "INVITE", 5*time.Second)
	if ok.code != 200 {
		t.Fatalf("call %s: final %d, want 200\n%s", id, ok.code, n.logTail())
	}
	p.send(n.sip, ackFor2xx(p, ok))
	return ok
}

// ackFor2xx is the ACK of a 200 along its route set.
func ackFor2xx(p *rawPeer, ok sipMsg) string {
	seq, _, _ := strings.Cut(ok.get("cseq"), " ")
	var n int
	fmt.Sscan(seq, &n)
	return p.inDialog(ok, "ACK", "ack-"+ok.get("call-id"), "", n, nil)
}

func oneCarrierNode(t *testing.T, cps float64, carriers ...*carrier) *node {
	t.Helper()
	conf := nodeConf{id: "edge", peers: []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: cps}}}
	for i, c := range carriers {
		conf.carriers = append(conf.carriers, carrierConf{name: fmt.Sprintf("carrier-%d", i), addr: c.addr, cps: 100})
	}
	return startNode(t, conf, true)
}

// TestNoPacketStopsTheNode: the packets that crashed the node — a
// re-INVITE without From that follows the route, its CANCEL, a 2xx without
// To — are refused or dropped and the node answers the next call.
func TestNoPacketStopsTheNode(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := oneCarrierNode(t, 100, car)
	peer := startRawPeer(t, "127.0.0.2")
	ok := peer.answeredCall(t, n, "crash-1")

	// A re-INVITE without From (then its CANCEL): 400, nothing built from it.
	reinv := peer.inDialog(ok, "INVITE", "nofrom", "sip:e2e@"+peer.addr, 2, []string{"from"})
	peer.send(n.sip, reinv)
	cancel := strings.Replace(strings.Replace(reinv, "INVITE sip:", "CANCEL sip:", 1), "CSeq: 2 INVITE", "CSeq: 2 CANCEL", 1)
	peer.send(n.sip, cancel)
	if r := peer.final("crash-1", "2 INVITE", 3*time.Second); r.code != 400 {
		t.Errorf("re-INVITE without From: final %d, want 400", r.code)
	}
	// An empty To tag is no dialog: 400.
	peer.send(n.sip, strings.Replace(peer.invite(n.sip, "crash-2"), "To: <sip:100@"+n.sip+">", "To: <sip:100@"+n.sip+">;tag=", 1))
	if r := peer.final("crash-2", "INVITE", 3*time.Second); r.code != 400 {
		t.Errorf("INVITE with an empty To tag: final %d, want 400", r.code)
	}
	// A 2xx without To from the carrier's address, for a call in progress.
	car.setAnswerDelay(time.Second)
	peer.send(n.sip, peer.invite(n.sip, "crash-3"))
	wait(3*time.Second, func() bool { return len(car.requests("INVITE")) >= 3 })
	invs := car.requests("INVITE")
	fwd := invs[len(invs)-1]
	bad := strings.Replace(string(response(fwd, 200, "OK", "x")), "To: "+fwd.get("to")+";tag=x\r\n", "", 1)
	fake, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, mustUDPAddr(t, n.sip))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	_, _ = fake.Write([]byte(bad))
	peer.send(n.sip, strings.Replace(strings.Replace(peer.invite(n.sip, "crash-3"), "INVITE sip:", "CANCEL sip:", 1), "CSeq: 1 INVITE", "CSeq: 1 CANCEL", 1))
	time.Sleep(300 * time.Millisecond)
	if !n.alive() {
		t.Fatalf("the node died:\n%s", n.logTail())
	}
	peer.answeredCall(t, n, "after-1")
	if v := n.metric("cpsguard_panics_total"); v != 0 {
		t.Errorf("cpsguard_panics_total = %v, want 0 (nothing should even panic)", v)
	}
}

func mustUDPAddr(t *testing.T, s string) *net.UDPAddr {
	t.Helper()
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestDialogIsNoTicket: one admitted call's dialog token does not let a
// 1-CPS peer send INVITEs to another carrier, to a host that is no carrier,
// or more than a few re-INVITEs a minute to its own carrier; other methods
// go to the dialog's carrier leg only.
func TestDialogIsNoTicket(t *testing.T) {
	a, b := startCarrier(t, "127.0.0.1"), startCarrier(t, "127.0.0.1")
	other := startRawPeer(t, "127.0.0.2") // the peer's own host, another port
	conf := nodeConf{id: "ticket", peers: []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1}},
		carriers: []carrierConf{{name: "carrier-a", addr: a.addr, cps: 100}}}
	// carrier-b is configured (known) but not in the peer's route.
	conf.carriers = append(conf.carriers, carrierConf{name: "carrier-b", addr: b.addr, cps: 100})
	n := startNode(t, conf, true)
	peer := startRawPeer(t, "127.0.0.2")
	ok := peer.answeredCall(t, n, "ticket-1")
	before := len(a.requests("INVITE"))

	for i := 0; i < 20; i++ {
		target := []string{"sip:x@" + b.addr, "sip:x@" + other.addr, ""}[i%3]
		peer.send(n.sip, peer.inDialog(ok, "INVITE", fmt.Sprintf("re-%d", i), target, 10+i, nil))
	}
	for _, m := range []string{"BYE", "MESSAGE", "INFO", "OPTIONS", "NOTIFY", "REFER", "FOOBAR"} {
		peer.send(n.sip, peer.inDialog(ok, m, "m-"+m, "sip:x@"+other.addr, 50, nil))
	}
	time.Sleep(1500 * time.Millisecond)
	// The node's own health probes of carrier-b (OPTIONS with a "probe-"
	// Call-ID) are not the dialog's; anything else is a leak.
	leakedToB := 0
	for _, m := range b.requests("") {
		if !(m.method == "OPTIONS" && strings.HasPrefix(m.get("call-id"), "probe-")) {
			leakedToB++
		}
	}
	if leakedToB != 0 {
		t.Errorf("carrier-b (outside the route) got %d requests from the dialog, want 0", leakedToB)
	}
	other.mu.Lock()
	leaked := len(other.got)
	other.mu.Unlock()
	if leaked != 0 {
		t.Errorf("the peer's other host got %d messages, want 0", leaked)
	}
	if got := len(a.requests("INVITE")) - before; got > 6 {
		t.Errorf("carrier-a got %d re-INVITEs from one dialog within a second, want at most 6", got)
	}
	if got := len(a.requests("BYE")); got != 1 {
		t.Errorf("carrier-a got %d BYEs, want 1 (in-dialog requests go to the dialog's carrier)", got)
	}
}

// TestStrangerCannotCancel: a CANCEL from another source carrying a
// peer's Via branch does not cancel the peer's call; the peer's own CANCEL
// is answered 200 and the carrier's 487 relayed (not minted at once).
func TestStrangerCannotCancel(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	car.setAnswerDelay(1500 * time.Millisecond)
	n := oneCarrierNode(t, 100, car)
	peer := startRawPeer(t, "127.0.0.2")
	stranger := startRawPeer(t, "127.0.0.2") // even the peer's own IP, another port
	inv := peer.invite(n.sip, "victim")
	peer.send(n.sip, inv)
	wait(3*time.Second, func() bool { return car.count("INVITE") == 1 })
	cancel := strings.Replace(strings.Replace(inv, "INVITE sip:", "CANCEL sip:", 1), "CSeq: 1 INVITE", "CSeq: 1 CANCEL", 1)
	stranger.send(n.sip, cancel)
	if r := peer.final("victim", "INVITE", 3*time.Second); r.code != 200 {
		t.Fatalf("victim's call: final %d, want 200 (a stranger's CANCEL must not end it)", r.code)
	}
	if car.count("CANCEL") != 0 {
		t.Errorf("carrier got %d CANCELs, want 0", car.count("CANCEL"))
	}

	// The peer's own CANCEL of a ringing call.
	inv = peer.invite(n.sip, "own-cancel")
	peer.send(n.sip, inv)
	wait(3*time.Second, func() bool { return car.count("INVITE") == 2 })
	peer.send(n.sip, strings.Replace(strings.Replace(inv, "INVITE sip:", "CANCEL sip:", 1), "CSeq: 1 INVITE", "CSeq: 1 CANCEL", 1))
	if r := peer.final("own-cancel", "CANCEL", 3*time.Second); r.code != 200 {
		t.Errorf("own CANCEL: %d, want 200", r.code)
	}
	r := peer.final("own-cancel", "INVITE", 3*time.Second)
	if r.code != 487 {
		t.Fatalf("own-cancel INVITE final %d, want 487", r.code)
	}
	if tag := r.get("to"); !strings.Contains(tag, "tag=car") {
		t.Errorf("487 To %q: want the carrier's (relayed, RFC 3261 16.7), not one the proxy minted", tag)
	}
}

// TestStrangersCostNothing: with unknown_source drop a stranger gets
// silence for every method; with reject exactly one 403 per request, and
// a refused call's 503 is sent once, not retransmitted.
func TestStrangersCostNothing(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	methods := []string{"OPTIONS", "REGISTER", "MESSAGE", "SUBSCRIBE", "BYE", "INFO", "CANCEL", "INVITE"}
	req := func(p *rawPeer, node, method, id string) string {
		return fmt.Sprintf("%s sip:x@%s SIP/2.0\nVia: SIP/2.0/UDP %s;branch=z9hG4bK-%s\nMax-Forwards: 70\n"+
			"From: <sip:s@x>;tag=s\nTo: <sip:x@y>\nCall-ID: %s\nCSeq: 1 %s\nContent-Length: 0\n\n", method, node, p.addr, id, id, method)
	}
	for _, policy := range []string{"drop", "reject"} {
		t.Run(policy, func(t *testing.T) {
			n := startNode(t, nodeConf{id: "strangers-" + policy, unknownSource: policy,
				peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1}},
				carriers: []carrierConf{{name: "c", addr: car.addr, cps: 100}}}, true)
			s := startRawPeer(t, "127.0.0.9")
			for _, m := range methods {
				s.send(n.sip, req(s, n.sip, m, policy+"-"+m))
			}
			time.Sleep(1500 * time.Millisecond)
			for _, m := range methods {
				got := s.responses(policy+"-"+m, "")
				want := map[string]int{"drop": 0, "reject": 1}[policy]
				if len(got) != want {
					t.Errorf("%s from a stranger: %d answers, want %d", m, len(got), want)
				}
				if want == 1 && len(got) == 1 && got[0].code != 403 {
					t.Errorf("%s from a stranger: %d, want 403", m, got[0].code)
				}
			}
		})
	}
	// A 1-CPS peer's second call is refused with one 503, never repeated
	// although it is never ACKed.
	n := oneCarrierNode(t, 1, car)
	peer := startRawPeer(t, "127.0.0.2")
	peer.answeredCall(t, n, "cps-1")
	peer.send(n.sip, peer.invite(n.sip, "cps-2"))
	time.Sleep(2 * time.Second)
	var finals int
	for _, r := range peer.responses("cps-2", "INVITE") {
		if r.code >= 300 {
			finals++
		}
	}
	if finals != 1 {
		t.Errorf("refused call: %d final answers in 2 s without ACK, want exactly 1", finals)
	}
}

// TestInitialInviteCannotSteer: a peer's Route headers, the Request-URI's
// maddr and URI headers and the customer header never reach the carrier,
// and the proxy's ACK of a carrier's non-2xx answer carries one Via.
func TestInitialInviteCannotSteer(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	car.setCode(486)
	n := oneCarrierNode(t, 100, car)
	peer := startRawPeer(t, "127.0.0.2")
	inv := strings.Replace(peer.invite(n.sip, "steer", "Route: <sip:192.0.2.1;lr>", "X-Customer: any"),
		"INVITE sip:100@"+n.sip, "INVITE sip:100@"+n.sip+";maddr=192.0.2.2?X-Evil=1", 1)
	peer.send(n.sip, inv)
	if r := peer.final("steer", "INVITE", 5*time.Second); r.code != 486 {
		t.Fatalf("final %d, want the carrier's 486", r.code)
	}
	invs := car.requests("INVITE")
	if len(invs) != 1 {
		t.Fatalf("carrier INVITEs %d, want 1", len(invs))
	}
	fwd := invs[0]
	if r := fwd.all("route"); len(r) != 0 {
		t.Errorf("Route at the carrier: %v", r)
	}
	if c := fwd.get("x-customer"); c != "" {
		t.Errorf("customer header at the carrier: %q", c)
	}
	if !wait(3*time.Second, func() bool { return len(car.requests("ACK")) == 1 }) {
		t.Fatal("no ACK of the 486 at the carrier")
	}
	ack := car.requests("ACK")[0]
	var vias int
	for _, v := range ack.all("via") {
		vias += len(strings.Split(v, ","))
	}
	if vias != 1 {
		t.Errorf("ACK of the 486 has %d Via values, want 1 (RFC 3261 17.1.1.3): %v", vias, ack.all("via"))
	}
}

// TestEveryCallCountedOnce: INVITEs that share Call-ID and top Via branch
// but differ in the Via's sent-by port are separate sipgo transactions of
// one call attempt: the first is admitted, the others absorbed, never
// admitted again (a 1-CPS peer got all ten through before).
func TestEveryCallCountedOnce(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := oneCarrierNode(t, 1, car)
	peer := startRawPeer(t, "127.0.0.2")
	inv := peer.invite(n.sip, "dup-1")
	for i := 0; i < 10; i++ {
		peer.send(n.sip, strings.Replace(inv, "Via: SIP/2.0/UDP "+peer.addr, fmt.Sprintf("Via: SIP/2.0/UDP 127.0.0.2:%d", 6000+i), 1))
	}
	time.Sleep(1500 * time.Millisecond)
	if got := car.count("INVITE"); got != 1 {
		t.Errorf("carrier INVITEs = %d, want 1 (one call attempt)", got)
	}
	// The node's own send gate hides extra admissions from one node's
	// carrier; the admissions themselves must not happen.
	if v := n.metric("cpsguard_admission_total", "scope", "peer", "result", "admitted"); v != 1 {
		t.Errorf("admission_total{peer,admitted} = %v, want 1", v)
	}
	if v := n.metric("cpsguard_sip_errors_total", "reason", "duplicate"); v < 1 {
		t.Errorf("sip_errors_total{duplicate} = %v, want >= 1", v)
	}
}

// TestHostileRedisDoesNotStopTheNode: a "Redis" whose replies announce an
// impossible length (go-redis' reader panics on them) is a store failure:
// the node runs on its fallback, answers calls and counts the panics.
func TestHostileRedisDoesNotStopTheNode(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, nodeConf{id: "hostile-redis", redis: redistest.StartHostile(t), onError: "local",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 100}},
		carriers: []carrierConf{{name: "c", addr: car.addr, cps: 100}}}, true)
	peer := startRawPeer(t, "127.0.0.2")
	for i := 0; i < 3; i++ {
		peer.answeredCall(t, n, fmt.Sprintf("hostile-%d", i))
	}
	time.Sleep(time.Second) // heartbeats and probes meet the hostile replies too
	if !n.alive() {
		t.Fatalf("the node died:\n%s", n.logTail())
	}
	if v := n.metric("cpsguard_panics_total"); v < 1 {
		t.Errorf("cpsguard_panics_total = %v, want >= 1 (the hostile replies were read)", v)
	}
	if v := n.metric("cpsguard_store_up"); v != 0 {
		t.Errorf("cpsguard_store_up = %v, want 0 (fallback)", v)
	}
}

// TestTCPBounded: a source cannot hold more TCP connections than
// sip.tcp.max_connections_per_source, and a half-sent message does not
// keep its connection past sip.tcp.idle_timeout.
func TestTCPBounded(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, nodeConf{id: "tcp", tcp: "{idle_timeout: 1s, max_connections_per_source: 3}",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 100}},
		carriers: []carrierConf{{name: "c", addr: car.addr, cps: 100}}}, true)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var conns []net.Conn
	for i := 0; i < 6; i++ {
		c, err := d.Dial("tcp", n.sip)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("INVITE sip:x@y SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.2;branch=z9hG4bK-half\r\n")) // half a message
		conns = append(conns, c)
	}
	closed := func(c net.Conn, within time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(within))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	open := 0
	for _, c := range conns {
		if !closed(c, 200*time.Millisecond) {
			open++
		}
	}
	if open != 3 {
		t.Errorf("%d of 6 connections from one source stayed open, want 3 (max_connections_per_source)", open)
	}
	time.Sleep(1500 * time.Millisecond)
	for i, c := range conns {
		if !closed(c, 500*time.Millisecond) {
			t.Errorf("connection %d with a half-sent message still open after idle_timeout", i)
		}
	}
	if v := n.metric("cpsguard_sip_errors_total", "reason", "tcp_limit"); v != 3 {
		t.Errorf("sip_errors_total{tcp_limit} = %v, want 3", v)
	}
	if v := n.metric("cpsguard_build_info"); v != 1 {
		t.Errorf("cpsguard_build_info = %v, want one series at 1", v)
	}
}

// TestEarlyDialogRequestsPass: interop in the early dialog. A carrier's
// reliable 183 establishes it; the caller's PRACK and UPDATE, routed by the
// 183's Record-Route, reach the carrier; then the call is answered and the
// BYE ends it.
func TestEarlyDialogRequestsPass(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	car.mu.Lock()
	car.early = true
	car.mu.Unlock()
	car.setAnswerDelay(1500 * time.Millisecond)
	n := oneCarrierNode(t, 100, car)
	peer := startRawPeer(t, "127.0.0.2")
	peer.send(n.sip, peer.invite(n.sip, "early-1"))
	var early sipMsg
	if !wait(3*time.Second, func() bool {
		for _, r := range peer.responses("early-1", "INVITE") {
			if r.code == 183 {
				early = r
				return true
			}
		}
		return false
	}) {
		t.Fatal("no 183 relayed")
	}
	peer.send(n.sip, peer.inDialog(early, "PRACK", "prack-1", "", 2, nil, "RAck: 1 1 INVITE"))
	peer.send(n.sip, peer.inDialog(early, "UPDATE", "update-1", "", 3, nil))
	for _, m := range []string{"PRACK", "UPDATE"} {
		if r := peer.final("early-1", m, 3*time.Second); r.code != 200 {
			t.Errorf("%s in the early dialog: final %d, want 200", m, r.code)
		}
	}
	if car.count("PRACK") != 1 || car.count("UPDATE") != 1 {
		t.Errorf("carrier got PRACK %d, UPDATE %d; want 1 each", car.count("PRACK"), car.count("UPDATE"))
	}
	ok := peer.final("early-1", "INVITE", 3*time.Second)
	if ok.code != 200 {
		t.Fatalf("INVITE final %d, want 200", ok.code)
	}
	peer.send(n.sip, ackFor2xx(peer, ok))
	peer.send(n.sip, peer.inDialog(ok, "BYE", "bye-1", "", 4, nil))
	if r := peer.final("early-1", "BYE", 3*time.Second); r.code != 200 {
		t.Errorf("BYE final %d, want 200", r.code)
	}
}

// TestRetryAfterStopsThePool: a carrier's 503 with Retry-After: 3 through
// one node of a two-node pool stops both nodes sending it new calls for
// those 3 s (calls go to the next carrier); afterwards it gets calls again.
func TestRetryAfterStopsThePool(t *testing.T) {
	rd := redistest.Start(t)
	a, b := startCarrier(t, "127.0.0.1"), startCarrier(t, "127.0.0.1")
	a.mu.Lock()
	a.code, a.retry = 503, "3"
	a.mu.Unlock()
	carriers := []carrierConf{{name: "carrier-a", addr: a.addr, cps: 100}, {name: "carrier-b", addr: b.addr, cps: 100}}
	peers := []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 100}}
	n1 := startNode(t, nodeConf{id: "ra-1", redis: rd.Addr(), peers: peers, carriers: carriers}, true)
	n2 := startNode(t, nodeConf{id: "ra-2", redis: rd.Addr(), peers: peers, carriers: carriers}, true)
	peer := startRawPeer(t, "127.0.0.2")
	peer.answeredCall(t, n1, "ra-first") // carrier-a: 503 Retry-After 3, then carrier-b
	if a.count("INVITE") != 1 {
		t.Fatalf("carrier-a INVITEs %d, want 1", a.count("INVITE"))
	}
	a.mu.Lock()
	a.code, a.retry = 0, ""
	a.mu.Unlock()
	time.Sleep(200 * time.Millisecond) // the block is written in the background
	for i := 0; i < 4; i++ {
		peer.answeredCall(t, []*node{n1, n2}[i%2], fmt.Sprintf("ra-blocked-%d", i))
	}
	if got := a.count("INVITE"); got != 1 {
		t.Errorf("carrier-a got %d INVITEs during its Retry-After, want 1 (none new from either node)", got)
	}
	time.Sleep(3 * time.Second)
	peer.answeredCall(t, n2, "ra-after")
	if got := a.count("INVITE"); got != 2 {
		t.Errorf("carrier-a got %d INVITEs after its Retry-After, want 2 (used again)", got)
	}
}

// TestStrangersCannotFillTCP: strangers from many loopback addresses take
// at most their share of sip.tcp.max_connections (a quarter); a peer's
// connection still succeeds and its call over TCP is answered.
func TestStrangersCannotFillTCP(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, nodeConf{id: "tcp-share", tcp: "{idle_timeout: 30s, max_connections: 8, max_connections_per_source: 2}",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 100}},
		carriers: []carrierConf{{name: "c", addr: car.addr, cps: 100}}}, true)
	closedAtOnce := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	// 10 strangers (127.0.1.1 … 127.0.1.10), 2 connections each: 20 tries.
	open := 0
	for i := 1; i <= 10; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(i))}, Timeout: 2 * time.Second}
		for j := 0; j < 2; j++ {
			c, err := d.Dial("tcp", n.sip)
			if err != nil {
				continue
			}
			defer c.Close()
			if !closedAtOnce(c) {
				open++
			}
		}
	}
	if open > 2 {
		t.Errorf("strangers hold %d TCP connections, want at most 2 (a quarter of max_connections 8)", open)
	}
	// The peer connects and calls over TCP.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", n.sip)
	if err != nil {
		t.Fatalf("peer's TCP connection: %v", err)
	}
	defer c.Close()
	local := c.LocalAddr().String()
	inv := fmt.Sprintf("INVITE sip:100@%s;transport=tcp SIP/2.0\r\nVia: SIP/2.0/TCP %s;branch=z9hG4bK-tcpshare\r\nMax-Forwards: 70\r\n"+
		"From: <sip:e2e@%s>;tag=f-tcpshare\r\nTo: <sip:100@%s>\r\nCall-ID: tcpshare\r\nCSeq: 1 INVITE\r\n"+
		"Contact: <sip:e2e@%s;transport=tcp>\r\nContent-Length: 0\r\n\r\n", n.sip, local, local, n.sip, local)
	if _, err := c.Write([]byte(inv)); err != nil {
		t.Fatalf("peer's INVITE over TCP: %v", err)
	}
	var got []byte
	buf := make([]byte, 65536)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(string(got), "SIP/2.0 200 ") && time.Now().Before(deadline) {
		_ = c.SetReadDeadline(deadline)
		k, err := c.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			break
		}
	}
	if !strings.Contains(string(got), "SIP/2.0 200 ") {
		t.Errorf("peer's call over TCP with strangers connected: got %q, want the carrier's 200", got)
	}
	if v := n.metric("cpsguard_sip_errors_total", "reason", "tcp_limit"); v < 18 {
		t.Errorf("sip_errors_total{tcp_limit} = %v, want >= 18 (the strangers' connections over their share)", v)
	}
}
