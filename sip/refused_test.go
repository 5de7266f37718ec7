package sip

import (
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/sip/internal/ingress"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/refusals"
)

// skewedClock is a clock for the admission store that a test moves on by
// hand: the rolling window passes without the test waiting for it.
type skewedClock struct{ skew atomic.Int64 }

func (c *skewedClock) now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

// pass moves the clock on by d.
func (c *skewedClock) pass(d time.Duration) { c.skew.Add(int64(d)) }

// callsTotal sums cpsguard_calls_total over every peer and outcome.
func callsTotal(h *harness) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { h.m.Calls.Collect(ch); close(ch) }()
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil && d.Counter != nil {
			sum += d.Counter.GetValue()
		}
	}
	return sum
}

// refusedSetup starts a proxy whose peer dialer-1 (the raw end point on
// 127.0.0.2 it returns) may place 1 call a second, on an in-process
// admission store whose clock the test moves, in front of a carrier that
// answers every INVITE 486 (so each forwarded call ends, and leaves its
// record, at once). The first call is admitted and answered 486 by the
// carrier; the second, right after it, is refused 503 by the node.
func refusedSetup(t *testing.T) (h *harness, read func() []string, car *siptest.Carrier, peer *udpEnd, clock *skewedClock, b *sipmsg.Request, refusal *sipmsg.Response) {
	t.Helper()
	car = siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 486} })
	ca := carrierCfg("a", car)
	// The send gate holds the peer's calls to 1 a second on the real
	// clock (its own sends): room for that hold within max_wait.
	ca.MaxWait = 5 * time.Second
	cfg := testConfig(ca)
	cfg.Peers[0].CPS = 1
	clock = &skewedClock{}
	h, readRecords, _, _ := recordsProxyOn(t, cfg, admission.NewLocalStore(clock.now))
	read = func() []string {
		var ids []string
		for _, r := range readRecords() {
			ids = append(ids, r.CallID+" "+r.Outcome)
		}
		return ids
	}
	peer = startUDPEnd(t, "127.0.0.2", nil)

	peer.send(h.udp, rawInviteFrom(peer, h.udp, "refused-a", "fa"))
	if r := finalOfRaw(peer, "refused-a", sipmsg.INVITE, 0); r == nil || r.StatusCode != 486 {
		t.Fatalf("call A: final %v, want the carrier's 486", r)
	}
	b = rawInviteFrom(peer, h.udp, "refused-b", "fb")
	peer.send(h.udp, b)
	refusal = finalOfRaw(peer, "refused-b", sipmsg.INVITE, 0)
	if refusal == nil || refusal.StatusCode != 503 {
		t.Fatalf("call B: final %v, want the node's 503 (peer cps 1)", refusal)
	}
	return h, read, car, peer, clock, b, refusal
}

// TestE2ERefusedCopyAnsweredAgain: a copy of a refused INVITE (same
// branch, sent-by, Call-ID, CSeq and source: a retransmission that
// crossed the refusal, or one after the caller's Timer A) that arrives
// once the rolling window has room again gets the same refusal again. It
// was decided a second time: admitted and forwarded to the carrier (a
// call nobody would ACK, on a slot the configuration never granted),
// counted as a second call and recorded twice.
func TestE2ERefusedCopyAnsweredAgain(t *testing.T) {
	h, read, car, peer, clock, b, refusal := refusedSetup(t)
	clock.pass(2 * time.Second) // the window has room for a call again
	peer.send(h.udp, b)         // byte for byte the INVITE refused
	again := finalOfRaw(peer, "refused-b", sipmsg.INVITE, 1)
	if again == nil {
		t.Fatal("the copy of B got no final answer")
	}
	if again.StatusCode != refusal.StatusCode || again.Reason != refusal.Reason {
		t.Fatalf("the copy of B: %d %s, want the refusal again: %d %s", again.StatusCode, again.Reason, refusal.StatusCode, refusal.Reason)
	}
	if got, want := msgpart.Tag(again.To().Params), msgpart.Tag(refusal.To().Params); got != want || got == "" {
		t.Errorf("the copy's answer has To tag %q, want the refusal's %q", got, want)
	}
	if n := car.Count("INVITE"); n != 1 {
		t.Errorf("INVITEs at the carrier = %d, want 1 (A only)", n)
	}
	if got := sipErrors(h, "refused_copy"); got != 1 {
		t.Errorf("sip_errors_total{refused_copy} = %v, want 1", got)
	}
	waitFor(t, func() bool { return callsTotal(h) >= 2 }, "the two decisions counted")
	time.Sleep(100 * time.Millisecond) // a third would come from the copy's handler
	if got := callsTotal(h); got != 2 {
		t.Errorf("calls_total = %v, want 2 (A forwarded, B rejected_cps)", got)
	}
	if got := calls(h, "dialer-1", metrics.OutcomeRejectedCPS); got != 1 {
		t.Errorf("calls_total{rejected_cps} = %d, want 1", got)
	}
	waitFor(t, func() bool { return len(read()) >= 2 }, "the records of A and B")
	time.Sleep(100 * time.Millisecond)
	if got := read(); len(got) != 2 || !strings.HasPrefix(got[0], "refused-a ") || got[1] != "refused-b "+metrics.OutcomeRejectedCPS {
		t.Errorf("records = %q, want one of A and one of B (rejected_cps)", got)
	}
}

// TestE2ERefusedCopyOtherTransaction: an INVITE that differs from a
// refused one in anything that makes it another transaction (Via branch,
// Via sent-by, Call-ID, CSeq, source) is a new attempt, decided as such:
// with room in the window again it is admitted.
func TestE2ERefusedCopyOtherTransaction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		id     string // the changed INVITE's Call-ID ("": B's)
		change func(t *testing.T, peer *udpEnd, proxy string, b *sipmsg.Request) (*udpEnd, *sipmsg.Request)
	}{
		{"branch", "", func(t *testing.T, peer *udpEnd, proxy string, b *sipmsg.Request) (*udpEnd, *sipmsg.Request) {
			c := b.Clone()
			c.Via().Params.Add("branch", "z9hG4bK.other-branch")
			return peer, c
		}},
		{"sent-by", "", func(t *testing.T, peer *udpEnd, proxy string, b *sipmsg.Request) (*udpEnd, *sipmsg.Request) {
			c := b.Clone()
			c.Via().Port++
			return peer, c
		}},
		{"cseq", "", func(t *testing.T, peer *udpEnd, proxy string, b *sipmsg.Request) (*udpEnd, *sipmsg.Request) {
			c := b.Clone()
			c.CSeq().SeqNo++
			return peer, c
		}},
		{"call-id", "refused-b2", func(t *testing.T, peer *udpEnd, proxy string, b *sipmsg.Request) (*udpEnd, *sipmsg.Request) {
			c := b.Clone()
			cid := sipmsg.CallIDHeader("refused-b2")
			c.ReplaceHeader(&cid)
			return peer, c
		}},
		{"source", "", func(t *testing.T, peer *udpEnd, proxy string, b *sipmsg.Request) (*udpEnd, *sipmsg.Request) {
			return startUDPEnd(t, "127.0.0.2", nil), b.Clone()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, car, peer, clock, b, _ := refusedSetup(t)
			clock.pass(2 * time.Second)
			from, c := tc.change(t, peer, h.udp, b)
			from.send(h.udp, c)
			id, skip := "refused-b", 0
			if from == peer {
				skip = 1
			}
			if tc.id != "" {
				id, skip = tc.id, 0
			}
			r := finalOfRaw(from, id, sipmsg.INVITE, skip)
			if r == nil || r.StatusCode != 486 {
				t.Fatalf("INVITE with another %s: final %v, want it admitted (the carrier's 486)", tc.name, r)
			}
			if n := car.Count("INVITE"); n != 2 {
				t.Errorf("INVITEs at the carrier = %d, want 2", n)
			}
			if got := sipErrors(h, "refused_copy"); got != 0 {
				t.Errorf("sip_errors_total{refused_copy} = %v, want 0", got)
			}
		})
	}
}

// toTagIn returns the To tag of a raw response ("" when none).
func toTagIn(t *testing.T, raw string) string {
	t.Helper()
	m, err := sipmsg.ParseMessage([]byte(raw))
	if err != nil {
		t.Fatalf("answer %q: %v", raw, err)
	}
	res, ok := m.(*sipmsg.Response)
	if !ok || res.To() == nil {
		t.Fatalf("answer %q is no response with a To", raw)
	}
	return msgpart.Tag(res.To().Params)
}

// TestE2EShedCopyAnsweredAgain: a copy of an INVITE shed with the
// stateless 503 (its party's share of the new-call lane full, answered
// from raw bytes) gets the same 503 again, same To tag, when it reaches
// the node with room to decide it: it was decided, and admitted, as a
// new call. A copy that finds the lane full again is answered the same
// way (parsed, within the budget).
func TestE2EShedCopyAnsweredAgain(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	peer, from := peerSocket(t)
	msg := strangerRequest("INVITE", h.udp, "", "")(from.String())
	if _, ok := scanInvite([]byte(msg)); !ok {
		t.Fatal("the raw path does not read the test's INVITE")
	}
	conn := h.p.listeners[0].udp
	shed := func() bool {
		return h.p.shedDatagram(&ingress.Datagram{Data: []byte(msg), From: from, Conn: conn, Known: true})
	}
	if !shed() {
		t.Fatal("INVITE not shed")
	}
	first, ok := readFrom(peer, 5*time.Second)
	if !ok || !strings.HasPrefix(first, "SIP/2.0 503 Overloaded\r\n") {
		t.Fatalf("shed INVITE: got %q, want 503 Overloaded", first)
	}
	tag := toTagIn(t, first)

	// The lane full again: answered again from the parsed copy.
	if !shed() {
		t.Fatal("the copy, in a full lane again, not answered")
	}
	if got, ok := readFrom(peer, 5*time.Second); !ok || !strings.HasPrefix(got, "SIP/2.0 503 Overloaded\r\n") || toTagIn(t, got) != tag {
		t.Fatalf("copy in a full lane: got %q, want the 503 again with To tag %q", got, tag)
	}

	// With room: the copy reaches the screen, which answers it again.
	ra := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(h.udp))
	if _, err := peer.WriteToUDP([]byte(msg), ra); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		s, ok := readFrom(peer, time.Second)
		if !ok {
			break
		}
		got = append(got, s)
		if len(got) > 5 {
			break
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "SIP/2.0 503 Overloaded\r\n") || toTagIn(t, got[0]) != tag {
		t.Fatalf("copy with room: got %q, want one answer, the 503 again with To tag %q", got, tag)
	}
	if n := car.Count("INVITE"); n != 0 {
		t.Errorf("INVITEs at the carrier = %d, want 0", n)
	}
	if got := callsTotal(h); got != 1 {
		t.Errorf("calls_total = %v, want 1 (the shed)", got)
	}
	if got := sipErrors(h, "refused_copy"); got != 2 {
		t.Errorf("sip_errors_total{refused_copy} = %v, want 2", got)
	}
}

// The raw path and the parsed one key an INVITE alike: a refusal the raw
// shedder remembers is found from the parsed copy, and the other way.
func TestRefusedKeysRawMatchParsed(t *testing.T) {
	tab := refusals.New(refusals.Max, refusals.TTL)
	p := &Proxy{refused: tab}
	from := netip.MustParseAddrPort("127.0.0.2:5062")
	for _, via := range [][2]string{
		{";rport", ";rport"},
		{";rport", ""},
		{"branch=z9hG4bK-INVITE", "branch=rfc2543-1"},      // no magic cookie: the Call-ID is in the key
		{"UDP 127.0.0.2:5062;", "UDP 127.0.0.2;"},          // no port: the transport's default
		{"UDP 127.0.0.2:5062;", "UDP 127.0.0.2:5062;x=y;"}, // another parameter
	} {
		msg := strings.Replace(strangerRequest("INVITE", "127.0.0.1:5060", "", "")(from.String()), via[0], via[1], 1)
		inv, ok := scanInvite([]byte(msg))
		if !ok {
			t.Fatalf("raw path does not read %q", msg)
		}
		m, err := sipmsg.ParseMessage([]byte(msg))
		if err != nil {
			t.Fatal(err)
		}
		req := m.(*sipmsg.Request)
		req.SetSource(from.String())
		req.SetTransport("UDP")
		tx, attempt, ok := p.refusedKeys(req)
		if !ok {
			t.Fatal("no keys for the parsed INVITE")
		}
		if raw := tab.TxHashString(inv.TxKey()); raw != tx {
			t.Errorf("Via%q: transaction hash raw %x, parsed %x", via, raw, tx)
		}
		if raw := tab.AttemptHash(inv.CallID(), inv.FromTag(), inv.CSeqNo(), from, "UDP"); raw != attempt {
			t.Errorf("Via%q: attempt hash raw %x, parsed %x", via, raw, attempt)
		}
	}
}

// TestRememberOwnRefusalAllocatesNothing: remembering one of the proxy's
// own refusals (a limit's, a shed's) costs no allocation once the table
// is at its bound: its reason and To tag are the proxy's own strings, held
// as they are; only a relayed refusal's are copied (they point into the
// carrier's message).
func TestRememberOwnRefusalAllocatesNothing(t *testing.T) {
	p, req := refusedFixture(t)
	res := shedResponse(req, shedTag+"x")
	for range refusals.Max / 8 { // the stripe's ring at its length: no growth left
		p.rememberRefusal(req, res, false)
	}
	if n := testing.AllocsPerRun(100, func() { p.rememberRefusal(req, res, false) }); n != 0 {
		t.Errorf("allocations per own refusal remembered: %v, want 0", n)
	}
}

// TestRememberRelayedRefusalKeepsAClippedCopy: a carrier's refusal with a
// reason phrase of kilobytes is remembered with refusedMaxText bytes of
// it, copied: not a copy of the whole phrase cut short afterwards (the
// cut would hold the whole copy, up to MaxMessageSize for each of
// refusals.Max refusals).
func TestRememberRelayedRefusalKeepsAClippedCopy(t *testing.T) {
	p, req := refusedFixture(t)
	const long = 8 << 10
	res := sipmsg.NewResponseFromRequest(req, sipmsg.StatusBusyHere, strings.Repeat("b", long), nil)
	const n = 64
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		req.CSeq().SeqNo = uint32(i + 1) // a new attempt each time
		p.rememberRefusal(req, res, true)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per >= long/2 {
		t.Errorf("bytes allocated per relayed refusal with a %d-byte reason: %d, want a clipped copy (%d bytes)", long, per, refusedMaxText)
	}
	tx, attempt, _ := p.refusedKeys(req)
	if r, ok := p.refused.Lookup(tx, attempt, time.Now()); !ok || len(r.Reason) != refusedMaxText {
		t.Errorf("remembered reason: %d bytes (found %v), want %d", len(r.Reason), ok, refusedMaxText)
	}
}

// BenchmarkRefusedRemember is what a refusal costs the table: the hashes
// of a parsed INVITE's keys and the write (the refusal path of every
// refused call and every parsed shed), with the table at its bound.
//
//	go test ./sip/ -run '^$' -bench 'Refused' -benchmem
func BenchmarkRefusedRemember(b *testing.B) {
	p, req := refusedFixture(b)
	res := shedResponse(req, shedTag+"x")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req.CSeq().SeqNo = uint32(i) // a new attempt each time
		p.rememberRefusal(req, res, false)
	}
}

// BenchmarkRefusedLookup is what every peer's initial INVITE now costs
// the screen when it is no copy (the refusal table looked up).
func BenchmarkRefusedLookup(b *testing.B) {
	p, req := refusedFixture(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if p.answerRefusedCopy(req, "") {
			b.Fatal("answered")
		}
	}
}

// refusedFixture is a proxy with only a refusal table at its bounds, and a
// peer's parsed INVITE over UDP from 127.0.0.2:5062.
func refusedFixture(tb testing.TB) (*Proxy, *sipmsg.Request) {
	tb.Helper()
	p := &Proxy{refused: refusals.New(refusals.Max, refusals.TTL)}
	msg := strangerRequest("INVITE", "127.0.0.1:5060", "", "")("127.0.0.2:5062")
	m, err := sipmsg.ParseMessage([]byte(msg))
	if err != nil {
		tb.Fatal(err)
	}
	req := m.(*sipmsg.Request)
	req.SetSource("127.0.0.2:5062")
	req.SetTransport("UDP")
	return p, req
}
