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
)

var ocSeqForm = regexp.MustCompile(`^[0-9]{1,12}\.[0-9]{3}$`)

// TestOCMeterFollowsShedding: the reduction starts at 0, follows the share
// of shed calls on top of the reduction already asked, halves in a period
// without a shed and once more per period without any INVITE, and its
// oc-seq strictly increases, also when the clock steps back.
func TestOCMeterFollowsShedding(t *testing.T) {
	var m ocMeter
	t0 := time.Unix(1764013000, 0)
	v := m.current(t0)
	if v.percent != 0 || v.oc != "0" || !ocSeqForm.MatchString(v.seq) {
		t.Fatalf("first value %+v, want 0 with a valid oc-seq", v)
	}
	seqs := []string{v.seq}
	step := func(at time.Time, taken, shed uint64, want int) {
		t.Helper()
		m.taken.Add(taken)
		m.shed.Add(shed)
		v := m.current(at)
		if v.percent != want {
			t.Fatalf("at +%v after %d taken, %d shed: reduction %d, want %d", at.Sub(t0), taken, shed, v.percent, want)
		}
		seqs = append(seqs, v.seq)
	}
	// Within the period nothing changes, whatever was counted.
	step(t0.Add(100*time.Millisecond), 10, 90, 0)
	// Period over: 10 of 100 let in, so 90 % to drop.
	step(t0.Add(ocPeriod), 0, 0, 90)
	// The clients dropped 90 %, yet half of what came was still shed:
	// 1-v' = 0.1·0.5.
	step(t0.Add(2*ocPeriod), 5, 5, 95)
	// A period with no shed halves it.
	step(t0.Add(3*ocPeriod), 20, 0, 47)
	// Three more silent periods in one gap: halved for each.
	step(t0.Add(6*ocPeriod), 0, 0, 5)
	// All shed: everything goes.
	step(t0.Add(7*ocPeriod), 0, 3, 100)
	// Sheds counted just after an update, then a quiet gap: they are the
	// gap's first period's, and each period after it halves the value.
	step(t0.Add(7*ocPeriod+20*ocPeriod), 10, 90, 0)
	// Shedding again after the gap (noteShed recomputes before it counts,
	// so the shed lands in the new period) counts in full.
	again := t0.Add(27*ocPeriod + 3*ocPeriod)
	if v := m.current(again); v.percent != 0 {
		t.Fatalf("after the gap: reduction %d, want 0", v.percent)
	}
	step(again.Add(ocPeriod), 0, 1, 100)
	for i := 1; i < len(seqs); i++ {
		a, _ := strconv.ParseFloat(seqs[i-1], 64)
		b, _ := strconv.ParseFloat(seqs[i], 64)
		if seqs[i] != seqs[i-1] && b <= a {
			t.Fatalf("oc-seq went from %s to %s", seqs[i-1], seqs[i])
		}
		if !ocSeqForm.MatchString(seqs[i]) {
			t.Fatalf("oc-seq %q is not 1*12DIGIT \".\" 3DIGIT", seqs[i])
		}
	}
	// The clock steps back by a minute: the next oc-seq still increases.
	last := m.cur.Load().seq
	m.mu.Lock()
	m.update(t0.Add(-time.Minute))
	m.mu.Unlock()
	a, _ := strconv.ParseFloat(last, 64)
	b, _ := strconv.ParseFloat(m.cur.Load().seq, 64)
	if b <= a {
		t.Fatalf("oc-seq after the clock stepped back: %s after %s", m.cur.Load().seq, last)
	}
}

// TestOCMarkReplacesParams: a response to a client that asked gets the
// node's four parameters in place of whatever oc parameters its Via held
// (the client's valueless oc, sipgo's mangled parse of a quoted oc-algo,
// values a carrier wrote), other parameters untouched; a response to a
// client that did not ask is left as it is.
func TestOCMarkReplacesParams(t *testing.T) {
	p := &Proxy{}
	raw := "SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;rport=5060;OC;oc-algo=\"loss\";oc-validity=99999;received=127.0.0.2"
	msg := "SIP/2.0 180 Ringing\r\nVia: " + raw + "\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:1@c>;tag=2\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
	m, err := sipmsg.ParseMessage([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	via := m.(*sipmsg.Response).Via()
	if !ocAsked(via) {
		t.Fatal("a Via with OC does not ask")
	}
	p.ocMark("dialer-1", via)
	got := via.Value()
	want := regexp.MustCompile(`^SIP/2\.0/UDP 127\.0\.0\.2:5060;branch=z9hG4bK1;rport=5060;received=127\.0\.0\.2;oc=0;oc-validity=1000;oc-seq=[0-9]+\.[0-9]{3};oc-algo="loss"$`)
	if !want.MatchString(got) {
		t.Fatalf("marked Via %q", got)
	}
	plain := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP", Host: "127.0.0.2", Port: 5060,
		Params: sipmsg.HeaderParams{{K: "branch", V: "z9hG4bK2"}, {K: "oc", V: "100"}}}
	before := plain.Value()
	p.ocMark("", plain)
	if plain.Value() != before {
		t.Fatalf("a Via whose client did not ask was changed: %q to %q", before, plain.Value())
	}
	if ocAsked(&sipmsg.ViaHeader{Params: sipmsg.HeaderParams{{K: "branch", V: "z9hG4bK3"}, {K: "occ", V: ""}, {K: "oc-algo", V: `"loss"`}}}) {
		t.Fatal("a Via without an oc parameter asks")
	}
	if ocAsked(nil) {
		t.Fatal("no Via asks")
	}
}

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
	deadline := time.Now().Add(10 * ocPeriod)
	for i := 0; ; i++ {
		res := asker.Final(ctxT(t, 5*time.Second), ocInvite(asker, h.udp, i%2 == 1))
		if res == nil || res.StatusCode != 503 {
			t.Fatalf("asking peer's INVITE while the bound is taken: %v, want 503", res)
		}
		oc, seq, ok := ocOf(t, res)
		if !ok {
			t.Fatalf("503 to a peer that asks carries no oc: %v", res.Via())
		}
		s, _ := strconv.ParseFloat(seq, 64)
		if s < lastSeq {
			t.Fatalf("oc-seq went back: %v after %v", s, lastSeq)
		}
		lastSeq = s
		if oc > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reduction asked after %v of shedding every new call", 10*ocPeriod)
		}
		time.Sleep(ocPeriod / 5)
	}

	// A stranger that asks learns nothing of the node's load.
	stranger := siptest.StartCaller(t, "127.0.0.9")
	if res := stranger.Final(ctxT(t, 5*time.Second), ocInvite(stranger, h.udp, true)); res == nil || res.StatusCode != 403 {
		t.Fatalf("stranger's INVITE: %v, want 403", res)
	} else if _, _, ok := ocOf(t, res); ok {
		t.Fatalf("403 to a stranger carries oc: %v", res.Via())
	}
}

// TestOCValuesOnlyTheNodes: values a party downstream wrote into the
// client's Via never reach the client, even hidden behind a quoted
// parameter sipgo mangles; a client that asked after a quoted parameter
// or with blanks around the name is still seen asking; the stateless
// relay's ocStrip keeps only a client's valueless oc, and leaves a Via
// without oc parameters untouched.
func TestOCValuesOnlyTheNodes(t *testing.T) {
	p := &Proxy{}
	forged := `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;oc;x="a";oc=100;oc-seq=999999999999.99999;oc-validity=86400000;rport`
	via := parsedVia(t, forged)
	if !ocAsked(via) {
		t.Fatalf("%q does not ask", forged)
	}
	p.ocMark("dialer-1", via)
	got := via.Value()
	if strings.Count(got, ";oc=") != 1 || strings.Contains(got, "99999") || strings.Contains(got, "86400000") || !strings.Contains(got, `;x="a"`) {
		t.Fatalf("marked %q: %q", forged, got)
	}
	if oc, _ := via.Params.Get("oc"); oc != "0" {
		t.Fatalf("marked %q: oc %q, want the node's 0", forged, oc)
	}

	for _, v := range []string{
		`SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;x="a";oc`,
		`SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;oc-algo="loss";oc`,
	} {
		if !ocAsked(parsedVia(t, v)) {
			t.Errorf("%q does not ask", v)
		}
	}
	if !ocAsked(&sipmsg.ViaHeader{Params: sipmsg.HeaderParams{{K: " OC ", V: ""}}}) {
		t.Error("an oc with blanks around it does not ask")
	}

	strip := parsedVia(t, forged)
	ocStrip(strip)
	if got := strip.Value(); strings.Contains(got, "oc=") || strings.Contains(got, "oc-") || !strings.Contains(got, ";oc") {
		t.Fatalf("stripped %q: %q, want the valueless oc alone", forged, got)
	}
	injected := parsedVia(t, "SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;oc-validity=86400000")
	ocStrip(injected)
	if got := injected.Value(); strings.Contains(got, "oc") {
		t.Fatalf("stripped Via of a client that did not ask: %q", got)
	}
	plain := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;x="a";rport`)
	before := plain.Value()
	ocStrip(plain)
	if plain.Value() != before {
		t.Fatalf("ocStrip changed a Via without oc parameters: %q to %q", before, plain.Value())
	}
	ocStrip(nil) // no panic

	// A repair never puts another value in front of a parameter sipgo
	// parsed as it is: the stateless relay's MAC reads the exact branch,
	// received and rport.
	swap := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:45120;x="q";branch=z9hG4bK.EVIL;branch=z9hG4bK.peer-bye-1;received=127.0.0.2;rport=45120;oc=100`)
	macBranch, _ := swap.Params.Get("branch")
	ocStrip(swap)
	if b, _ := swap.Params.Get("branch"); b != macBranch || strings.Contains(swap.Value(), "EVIL") {
		t.Fatalf("stripped Via's branch: %q (MAC read %q): %q", b, macBranch, swap.Value())
	}
	if strings.Contains(swap.Value(), ";oc") {
		t.Fatalf("a valueless oc added where the client sent none: %q", swap.Value())
	}
	// Nor does a repair add one the MAC saw absent.
	for _, v := range []string{
		`SIP/2.0/UDP 127.0.0.2:45120;x="q";branch=z9hG4bKEVIL;received=9.9.9.9;rport;oc=4`,
		`SIP/2.0/UDP 127.0.0.2:45120;branch=z9hG4bK1;x="q";received=9.9.9.9;oc=4`,
		`SIP/2.0/UDP 127.0.0.2:45120;branch=z9hG4bK1;x="q";rport;oc=4`,
	} {
		via := parsedVia(t, v)
		before := map[string]string{}
		for _, k := range []string{"branch", "received", "rport"} {
			if val, ok := via.Params.Get(k); ok {
				before[k] = val
			}
		}
		ocStrip(via)
		for _, k := range []string{"branch", "received", "rport"} {
			val, ok := via.Params.Get(k)
			if want, had := before[k]; ok != had || val != want {
				t.Fatalf("ocStrip of %q: %s %q (present %v), the MAC read %q (present %v): %q", v, k, val, ok, want, had, via.Value())
			}
		}
	}
	// A quoted value with a blank is quoted once.
	blank := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;x="a b";oc`)
	p.ocMark("dialer-1", blank)
	if got := blank.Value(); !strings.Contains(got, `;x="a b";`) {
		t.Fatalf("marked Via with a quoted blank: %q", got)
	}
	// Also when sipgo kept it quoted under its own name.
	last := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1;oc;x="a;b c"`)
	p.ocMark("dialer-1", last)
	if got := last.Value(); !strings.Contains(got, `;x="a;b c";`) {
		t.Fatalf("marked Via with a quoted blank last: %q", got)
	}
	// A quoted value may hold a ';'.
	semi := parsedVia(t, `SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bKreal;x="a;b";rport;oc`)
	if !ocAsked(semi) {
		t.Fatal("an oc after a quoted value holding ';' does not ask")
	}
	p.ocMark("dialer-1", semi)
	if got := semi.Value(); !strings.Contains(got, `;x="a;b";`) || !strings.Contains(got, ";branch=z9hG4bKreal;") || strings.Count(got, ";oc=") != 1 {
		t.Fatalf("marked Via with a quoted ';': %q", got)
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
	end := time.Now().Add(3 * ocPeriod)
	shed := 0
	for time.Now().Before(end) {
		if res := flooder.Final(ctxT(t, 5*time.Second), flooder.Invite(h.udp)); res != nil && res.StatusCode == 503 {
			shed++
		}
	}
	if shed < 3 {
		t.Fatalf("only %d of the flooder's INVITEs shed: the test proves nothing", shed)
	}
	if v := h.p.oc.of("dialer-2").current(time.Now()); v.percent == 0 {
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
