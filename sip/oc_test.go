package sip

import (
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/oc"
)

var ocSeqForm = regexp.MustCompile(`^[0-9]{1,12}\.[0-9]{3}$`)

// ocInvite is an INVITE whose top Via, the caller's own, asks for
// overload control: with oc-algo="loss" when algo is set, else with the
// valueless oc alone (a plain form the raw-byte shed can read).
func ocInvite(c *siptest.Caller, proxy string, algo bool) *sipmsg.Request {
	req := c.Invite(proxy)
	host, port, _ := net.SplitHostPort(c.Addr)
	pn, _ := strconv.Atoi(port)
	params := sipmsg.HeaderParams{{K: "branch", V: sipmsg.GenerateBranch()}, {K: "oc", V: ""}}
	if algo {
		params = append(params, sipmsg.HeaderKV{K: "oc-algo", V: `"loss"`})
	}
	req.PrependHeader(&sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP", Host: host, Port: pn, Params: params})
	return req
}

// ocOf returns a response's oc and oc-seq, and whether it carries the
// node's four parameters at all.
func ocOf(t *testing.T, res *sipmsg.Response) (oc int, seq string, ok bool) {
	t.Helper()
	via := res.Via()
	if via == nil {
		return 0, "", false
	}
	v, has := via.Params.Get("oc")
	if !has || v == "" {
		return 0, "", false
	}
	oc, err := strconv.Atoi(v)
	if err != nil || oc < 0 || oc > 100 {
		t.Fatalf("%d response: oc=%q", res.StatusCode, v)
	}
	// sipgo's parser mangles the quoted value (see ocMark): look at the
	// header as it renders back.
	if !strings.HasSuffix(via.Value(), `;oc-algo="loss"`) && !strings.Contains(via.Value(), `;oc-algo="loss"=`) {
		t.Fatalf("%d response: no oc-algo=\"loss\" last in %q", res.StatusCode, via.Value())
	}
	if val, _ := via.Params.Get("oc-validity"); val != "1000" {
		t.Fatalf("%d response: oc-validity=%q", res.StatusCode, val)
	}
	seq, _ = via.Params.Get("oc-seq")
	if !ocSeqForm.MatchString(seq) {
		t.Fatalf("%d response: oc-seq=%q", res.StatusCode, seq)
	}
	return oc, seq, true
}

// TestOverloadControlToPeersThatAsk, over real sockets: a peer that asks
// gets oc=0 on the 100 Trying and on the carrier's relayed 200 while the
// node is not shedding; while the inflight bound is taken its INVITEs are
// shed with 503 carrying a reduction above 0 (the raw-byte shed leaves
// them to the screen); a peer that does not ask, and a stranger that
// does, get no oc values at all.
func TestOverloadControlToPeersThatAsk(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	fa, pacer := newFakes()
	adm := &slowAdmitter{fakeAdmitter: fa, entered: make(chan struct{}, 64)}
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.MaxInflight = 1
	cfg.Peers = append(cfg.Peers, config.Peer{Name: "dialer-2", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")},
		CPS: 50, Customer: "beta"})
	h := startProxy(t, cfg, adm, pacer)
	asker := siptest.StartCaller(t, "127.0.0.2")
	plain := siptest.StartCaller(t, "127.0.0.3")

	// Not shedding: the 100 Trying and the relayed 200 say oc=0. sipgo's
	// client handles each response in a goroutine of its own, so on a busy
	// machine the 200 can end its transaction before the 100 is looked at
	// (the 100 is then dropped by the client, not by the node): up to
	// three calls, until one shows its 100.
	var saw100 bool
	var final *sipmsg.Response
	for attempt := 0; attempt < 3 && !saw100; attempt++ {
		tx, err := asker.Transaction(ctxT(t, 10*time.Second), ocInvite(asker, h.udp, true))
		if err != nil {
			t.Fatal(err)
		}
		final = nil
		for final == nil {
			select {
			case r := <-tx.Responses():
				oc, _, ok := ocOf(t, r)
				if !ok || oc != 0 {
					t.Fatalf("%d to a peer that asks, node not shedding: oc %d (present %v), want 0", r.StatusCode, oc, ok)
				}
				if r.StatusCode == 100 {
					saw100 = true
				}
				if !r.IsProvisional() {
					final = r
				}
			case <-tx.Done():
				t.Fatal("transaction ended without a final response")
			}
		}
		tx.Terminate()
		if final.StatusCode != 200 {
			t.Fatalf("call of a peer that asks: final %d, want 200", final.StatusCode)
		}
	}
	if !saw100 {
		t.Fatalf("calls of a peer that asks: no 100 Trying seen in 3 calls")
	}
	// OPTIONS asking for it: a peer's 200 carries the values, a carrier's
	// does not.
	for _, tc := range []struct {
		ip   string
		want bool
	}{{"127.0.0.2", true}, {"127.0.0.1", false}} {
		got := rawAnswer(t, tc.ip, h.udp, func(la string) string {
			return strings.Replace(strangerRequest("OPTIONS", h.udp, "", "")(la), ";rport", ";rport;oc", 1)
		})
		if !strings.HasPrefix(got, "SIP/2.0 200 ") || strings.Contains(got, ";oc=0;oc-validity=1000;oc-seq=") != tc.want {
			t.Errorf("OPTIONS asking for overload control from %s (values wanted %v): %q", tc.ip, tc.want, got)
		}
	}
	if res := answeredCall(t, plain, h.udp); res != nil {
		if _, _, ok := ocOf(t, res); ok {
			t.Fatalf("200 to a peer that did not ask carries oc: %v", res.Via())
		}
	}
	waitFor(t, func() bool { return h.p.Inflight() == 0 }, "no call in flight")

	// Hold one call in the store: the bound (1) is taken.
	hold := make(chan struct{})
	adm.mu.Lock()
	adm.hold = hold
	adm.mu.Unlock()
	defer close(hold)
	go func() { _ = plain.Final(ctxT(t, 10*time.Second), plain.Invite(h.udp)) }()
	select {
	case <-adm.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the held call never reached the store")
	}

	// The plain peer's shed carries nothing.
	if res := plain.Final(ctxT(t, 5*time.Second), plain.Invite(h.udp)); res == nil || res.StatusCode != 503 {
		t.Fatalf("plain peer's INVITE while the bound is taken: %v, want 503", res)
	} else if _, _, ok := ocOf(t, res); ok {
		t.Fatalf("503 to a peer that did not ask carries oc: %v", res.Via())
	}
	// The asking peer's sheds carry a reduction once a period has seen
	// them (bounded: ten periods). Every other INVITE asks with the bare
	// oc, which the raw-byte shed could read: it must leave those to the
	// screen.
	var lastSeq float64
	deadline := time.Now().Add(10 * oc.Period)
	for i := 0; ; i++ {
		res := asker.Final(ctxT(t, 5*time.Second), ocInvite(asker, h.udp, i%2 == 1))
		if res == nil || res.StatusCode != 503 {
			t.Fatalf("asking peer's INVITE while the bound is taken: %v, want 503", res)
		}
		reduction, seq, ok := ocOf(t, res)
		if !ok {
			t.Fatalf("503 to a peer that asks carries no oc: %v", res.Via())
		}
		s, _ := strconv.ParseFloat(seq, 64)
		if s < lastSeq {
			t.Fatalf("oc-seq went back: %v after %v", s, lastSeq)
		}
		lastSeq = s
		if reduction > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reduction asked after %v of shedding every new call", 10*oc.Period)
		}
		time.Sleep(oc.Period / 5)
	}

	// A stranger that asks learns nothing of the node's load.
	stranger := siptest.StartCaller(t, "127.0.0.9")
	if res := stranger.Final(ctxT(t, 5*time.Second), ocInvite(stranger, h.udp, true)); res == nil || res.StatusCode != 403 {
		t.Fatalf("stranger's INVITE: %v, want 403", res)
	} else if _, _, ok := ocOf(t, res); ok {
		t.Fatalf("403 to a stranger carries oc: %v", res.Via())
	}
}

// rawAnswer sends the datagram build makes (given the local address) from
// ip to proxy and returns the first datagram that comes back.
func rawAnswer(t *testing.T, ip, proxy string, build func(laddr string) string) string {
	t.Helper()
	conn := rawSend(t, ip, proxy, build)
	defer conn.Close()
	buf := make([]byte, 65535)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := conn.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no answer from %s: %v", ip, err)
	}
	return string(buf[:n])
}

// TestOCPerParty: one peer's flood raises its own reduction only. While a
// non-compliant peer's INVITEs are shed at the inflight bound for several
// periods, a compliant peer that had nothing shed yet is still told oc=0
// (a node-wide value told it 90 to 100: issue 22, C9); the flooder's own
// meter rises.
func TestOCPerParty(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	fa, pacer := newFakes()
	adm := &slowAdmitter{fakeAdmitter: fa, entered: make(chan struct{}, 64)}
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.MaxInflight = 1
	cfg.SIP.InflightWait = time.Millisecond
	cfg.Peers = append(cfg.Peers, config.Peer{Name: "dialer-2", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")},
		CPS: 50, Customer: "beta"})
	h := startProxy(t, cfg, adm, pacer)
	asker := siptest.StartCaller(t, "127.0.0.2")
	flooder := siptest.StartCaller(t, "127.0.0.3")

	hold := make(chan struct{})
	adm.mu.Lock()
	adm.hold = hold
	adm.mu.Unlock()
	defer close(hold)
	go func() { _ = flooder.Final(ctxT(t, 10*time.Second), flooder.Invite(h.udp)) }()
	select {
	case <-adm.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the held call never reached the store")
	}
	// The flooder's INVITEs are shed for three periods.
	end := time.Now().Add(3 * oc.Period)
	shed := 0
	for time.Now().Before(end) {
		if res := flooder.Final(ctxT(t, 5*time.Second), flooder.Invite(h.udp)); res != nil && res.StatusCode == 503 {
			shed++
		}
	}
	if shed < 3 {
		t.Fatalf("only %d of the flooder's INVITEs shed: the test proves nothing", shed)
	}
	if v := h.p.ocMeters.Of("dialer-2").Current(time.Now()); v.Percent == 0 {
		t.Errorf("the flooder's own reduction is 0 after %d sheds", shed)
	}
	res := asker.Final(ctxT(t, 5*time.Second), ocInvite(asker, h.udp, true))
	if res == nil || res.StatusCode != 503 {
		t.Fatalf("asking peer's INVITE while the bound is taken: %v, want 503", res)
	}
	if oc, _, ok := ocOf(t, res); !ok || oc != 0 {
		t.Fatalf("compliant peer told oc=%d (present %v) for another peer's flood, want 0", oc, ok)
	}
}
