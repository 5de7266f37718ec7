package sip

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// parsedShed is what the screen's path makes of data from src while the
// inflight bound is taken and no entry has its key: sipgo parses it, the
// screen finds it well formed, an INVITE without a To tag, and sheds it
// with shedResponse. ok is false when that path would not shed it.
func parsedShed(data []byte, src, tag string) (res *sipmsg.Response, key invites.Key, ok bool) {
	parser := sipmsg.NewParser()
	parser.MaxMessageLength = MaxMessageSize
	m, err := parser.ParseSIP(data)
	if err != nil {
		return nil, "", false
	}
	req, isReq := m.(*sipmsg.Request)
	if !isReq {
		return nil, "", false
	}
	req.SetTransport("UDP")
	req.SetSource(src)
	if !wellFormed(req) || !req.IsInvite() || msgpart.HasToTag(req) || msgpart.Tag(req.From().Params) == "" {
		return nil, "", false // not an initial INVITE, or answered 400
	}
	for _, h := range req.GetHeaders("Route") {
		if r, ok := h.(*sipmsg.RouteHeader); ok && r.Address.UriParams != nil && r.Address.UriParams.Has(tokenParam) {
			return nil, "", false // may be the proxy's dialog token: in a dialog
		}
	}
	return shedResponse(req, tag), invites.KeyOf(req), true
}

// headerLines are a message's start line and headers as sipgo parses and
// prints them, one "Name: value" each.
func headerLines(t testing.TB, m sipmsg.Message) []string {
	t.Helper()
	raw := m.String()
	parsed, err := sipmsg.ParseMessage([]byte(raw))
	if err != nil {
		t.Fatalf("sipgo does not parse the answer %q: %v", raw, err)
	}
	start, _, _ := strings.Cut(parsed.String(), "\r\n")
	out := []string{start}
	res, ok := parsed.(*sipmsg.Response)
	if !ok {
		t.Fatalf("the answer %q is not a response", raw)
	}
	for _, h := range res.Headers() {
		out = append(out, h.Name()+": "+h.Value())
	}
	return out
}

// checkRawShed holds scanInvite and appendShed to the screen's path for
// one datagram: when the raw path would answer, the parsed path answers
// the same, with the same invite table key.
func checkRawShed(t testing.TB, data []byte) {
	const src, tag = "192.0.2.7:5062", "cgshed.test"
	inv, ok := scanInvite(data)
	if !ok {
		return
	}
	out, ok := inv.AppendShed(nil, src, tag)
	if !ok {
		return
	}
	want, key, shed := parsedShed(data, src, tag)
	if !shed {
		t.Fatalf("the raw path answers a message the screen would not shed:\n%q", data)
	}
	if got := invites.Key(inv.TxKey()); got != key {
		t.Fatalf("invite key: raw %q, parsed %q\n%q", got, key, data)
	}
	if d := want.Destination(); d != src {
		t.Fatalf("the screen's answer goes to %q, the raw one to the source %q", d, src)
	}
	got, err := sipmsg.ParseMessage(out)
	if err != nil {
		t.Fatalf("sipgo does not parse the raw answer %q: %v\nrequest %q", out, err, data)
	}
	g, w := headerLines(t, got), headerLines(t, want)
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Fatalf("answers differ for %q:\nraw:\n%s\nparsed:\n%s", data, strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// rawShedSeeds are INVITEs of the forms the raw path answers, and near
// misses it must leave to the parser.
var rawShedSeeds = []struct {
	name string
	msg  string
	shed bool // the raw path answers it
}{
	{"sipp", "INVITE sip:bench@127.0.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:46749;branch=z9hG4bK-8209-423-0\r\nFrom: sipp <sip:sipp@127.0.0.1:46749>;tag=8209SIPpTag00423\r\nTo: <sip:bench@127.0.0.1:5060>\r\nCall-ID: 423-8209@127.0.0.1\r\nCSeq: 1 INVITE\r\nContact: <sip:sipp@127.0.0.1:46749;transport=UDP>\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n", true},
	{"compact forms, rport, two Vias, quoted name, body", "INVITE sip:+15550100@10.0.0.1 SIP/2.0\r\nv: SIP/2.0/UDP 10.0.0.9:5070;rport;branch=z9hG4bKabc\r\nv: SIP/2.0/UDP 10.0.0.8;branch=z9hG4bKdef;received=10.0.0.8\r\nf: \"Alice Smith\" <sip:alice@example.com>;tag=1\r\nt: <sip:+15550100@10.0.0.1;user=phone>\r\ni: abc@10.0.0.9\r\nCSeq: 7 INVITE\r\nm: <sip:alice@10.0.0.9:5070>\r\nc: application/sdp\r\nl: 4\r\n\r\nv=0\n", true},
	{"branch without the magic cookie, no port", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP host.example;branch=old1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nX-Customer: acme\r\n\r\n", true},
	{"in dialog", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>;tag=u\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", false},
	{"no From tag", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", false},
	{"Route with a dialog token", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nRoute: <sip:10.0.0.1;lr;cg=AgAB>\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", false},
	{"Route without a token", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nRoute: <sip:10.0.0.1;lr>\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", true},
	{"empty From tag", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", false},
	{"CSeq method mismatch", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 BYE\r\n\r\n", false},
	{"folded line", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\n ;x=y\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", false},
	{"bad Contact", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContact: <bad\r\n\r\n", false},
	{"bad Content-Length", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: x\r\n\r\n", false},
	{"two To headers", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nTo: <sip:y@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", false},
	{"two Max-Forwards", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nMax-Forwards: 70\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nMax-Forwards: 1\r\n\r\n", false},
	{"Via port out of range", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h:99999;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", false},
	{"rport with received already", "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP h;rport;received=1.2.3.4;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\r\n", false},
}

// TestRawShedMatchesScreen: for well-formed INVITEs the read filter's
// answer is the screen's (same headers as sipgo parses them, same key in
// the invite table); near misses are left to the parser.
func TestRawShedMatchesScreen(t *testing.T) {
	for _, tc := range rawShedSeeds {
		t.Run(tc.name, func(t *testing.T) {
			checkRawShed(t, []byte(tc.msg))
			if _, got := scanInvite([]byte(tc.msg)); got != tc.shed {
				t.Errorf("raw path answers: got %v, want %v", got, tc.shed)
			}
		})
	}
	// The rport of the top Via is filled in as sipgo does.
	inv, _ := scanInvite([]byte(rawShedSeeds[1].msg))
	out, _ := inv.AppendShed(nil, "10.0.0.9:40000", "cgshed.x")
	if !bytes.Contains(out, []byte("Via: SIP/2.0/UDP 10.0.0.9:5070;rport=40000;branch=z9hG4bKabc;received=10.0.0.9\r\n")) {
		t.Errorf("top Via of the raw answer:\n%s", out)
	}
}

// FuzzRawShed: the raw path never panics, and never answers a message the
// screen would not shed, nor differently.
func FuzzRawShed(f *testing.F) {
	for _, tc := range rawShedSeeds {
		f.Add([]byte(tc.msg))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRawShed(t, data)
	})
}

// TestReadFilterShedsFromRawBytes: with the bound taken, a peer's new
// INVITE is answered 503 by the read filter (counted rejected_overload, a
// shed To tag), a stranger's is not (403 from the screen, as before), and
// a retransmission of the INVITE being decided still reaches the screen
// (its 100 Trying, not a 503).
func TestReadFilterShedsFromRawBytes(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	fa, pacer := newFakes()
	adm := &slowAdmitter{fakeAdmitter: fa, entered: make(chan struct{}, 4)}
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.MaxInflight = 1
	h := startProxy(t, cfg, adm, pacer)

	hold := make(chan struct{})
	defer close(hold)
	adm.mu.Lock()
	adm.hold = hold
	adm.mu.Unlock()
	// The held call, from a raw socket so that it can be retransmitted.
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	held := strangerRequest("INVITE", h.udp, "", "")(conn.LocalAddr().String())
	read := func() string {
		buf := make([]byte, 65535)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			return ""
		}
		line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
		return line
	}
	if _, err := conn.WriteToUDP([]byte(held), ra); err != nil {
		t.Fatal(err)
	}
	select {
	case <-adm.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first new call never reached the store")
	}
	if got := read(); got != "SIP/2.0 100 Trying" {
		t.Fatalf("the held INVITE: got %q, want its 100 Trying", got)
	}

	caller := siptest.StartCaller(t, "127.0.0.2")
	res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 503 {
		t.Fatalf("a new INVITE while the bound is taken: got %v, want 503", res)
	}
	if to := res.To(); to == nil || !strings.HasPrefix(msgpart.Tag(to.Params), shedTag) {
		t.Errorf("raw overload answer's To tag: got %v, want one starting %q", to, shedTag)
	}
	if n := h.p.rawSheds.Load(); n != 1 {
		t.Errorf("calls shed from raw bytes: got %d, want 1", n)
	}
	if got := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedOverload)); got != 1 {
		t.Errorf("calls_total{rejected_overload}: got %v, want 1", got)
	}

	// A retransmission of the held INVITE is not shed: the screen answers
	// 100 Trying again.
	if _, err := conn.WriteToUDP([]byte(held), ra); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "SIP/2.0 100 Trying" {
		t.Fatalf("a retransmission of the INVITE being decided: got %q, want 100 Trying", got)
	}

	// A stranger gets the screen's 403, not a 503.
	got := rawUDP(t, "127.0.0.9", h.udp, strangerRequest("INVITE", h.udp, "", ""), 300*time.Millisecond, true)
	if len(got) != 1 || got[0] != "SIP/2.0 403 Forbidden" {
		t.Errorf("a stranger's INVITE while the bound is taken: got %q, want one 403", got)
	}
	if n := h.p.rawSheds.Load(); n != 1 {
		t.Errorf("calls shed from raw bytes after the retransmission and the stranger: got %d, want 1", n)
	}
}

// BenchmarkShedParsed is what a shed INVITE costs the read loop on the
// parsed path: sipgo's parse, and the screen's 503 built and printed. The
// Shed benchmarks run serially: they measure one message's cost in sipgo's
// single UDP read loop, which is what falls behind under overload.
func BenchmarkShedParsed(b *testing.B) {
	benchShedParsed(b, []byte(rawShedSeeds[0].msg))
}

// BenchmarkShedParsedRecordRoute is the same with 4 KB of Record-Route
// list, the costliest form per byte found for shedParsed's budget
// (rawshed.go: parsedBytes).
func BenchmarkShedParsedRecordRoute(b *testing.B) {
	var rr strings.Builder
	rr.WriteString("Record-Route: <sip:192.0.2.1;lr>")
	for rr.Len() < parsedMaxSize-500 {
		rr.WriteString(",<sip:192.0.2.1;lr>")
	}
	msg := strings.Replace(rawShedSeeds[0].msg, "Max-Forwards: 70\r\n", "Max-Forwards: 70\r\n"+rr.String()+"\r\n", 1)
	benchShedParsed(b, []byte(msg))
}

func benchShedParsed(b *testing.B, data []byte) {
	parser := sipmsg.NewParser()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := parser.ParseSIP(data)
		if err != nil {
			b.Fatal(err)
		}
		req := m.(*sipmsg.Request)
		req.SetSource("127.0.0.1:46749")
		if !wellFormed(req) {
			b.Fatal("not well formed")
		}
		_ = invites.KeyOf(req)
		_ = shedResponse(req, "cgshed.x").String()
	}
}

// BenchmarkShedRaw is the same INVITE shed by the read filter.
func BenchmarkShedRaw(b *testing.B) {
	data := []byte(rawShedSeeds[0].msg)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		inv, ok := scanInvite(data)
		if !ok {
			b.Fatal("not scanned")
		}
		_ = inv.TxKey()
		buf, _ = inv.AppendShed(buf[:0], "127.0.0.1:46749", "cgshed.x")
	}
}

// checkShedAckRaw: an ACK the read filter drops as one of a shed answer
// is one the screen drops too (shedAck), or one sipgo would not parse, or
// one the screen finds malformed (an ACK never gets an answer).
func checkShedAckRaw(t testing.TB, data []byte) {
	if !shedAckRaw(data) {
		return
	}
	m, err := sipmsg.NewParser().ParseSIP(data)
	if err != nil {
		return
	}
	req, ok := m.(*sipmsg.Request)
	if !ok || !req.IsAck() {
		t.Fatalf("dropped as the ACK of a shed answer, but sipgo reads another message:\n%q", data)
	}
	if wellFormed(req) && !shedAck(req) {
		t.Fatalf("dropped as the ACK of a shed answer, but the screen would pass it:\n%q", data)
	}
}

var shedAckSeeds = []struct {
	name string
	msg  string
	drop bool // the raw path drops it
}{
	{"ack of a shed 503", "ACK sip:bench@127.0.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:46749;branch=z9hG4bK-1\r\nFrom: sipp <sip:sipp@127.0.0.1:46749>;tag=1\r\nTo: <sip:bench@127.0.0.1:5060>;tag=cgshed.abc\r\nCall-ID: 1\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n", true},
	{"shed prefix in From and Call-ID only", "ACK sip:bench@127.0.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:46749;branch=z9hG4bK-1\r\nFrom: <sip:a@h>;tag=cgshed.1\r\nt: <sip:bench@127.0.0.1:5060>;tag=carrier1\r\nCall-ID: cgshed.1\r\nCSeq: 1 ACK\r\n\r\n", false},
	{"two To tags", "ACK sip:b@h SIP/2.0\r\nt: \"x\" <sip:b@h>;tag=cgshed.1;tag=2\r\n\r\n", false},
}

// TestShedAckRawMatchesScreen: the ACK of a shed answer is dropped from
// raw bytes; an ACK of another answer is not.
func TestShedAckRawMatchesScreen(t *testing.T) {
	for _, tc := range shedAckSeeds {
		t.Run(tc.name, func(t *testing.T) {
			checkShedAckRaw(t, []byte(tc.msg))
			if got := shedAckRaw([]byte(tc.msg)); got != tc.drop {
				t.Errorf("dropped: got %v, want %v", got, tc.drop)
			}
		})
	}
}

// FuzzShedAckRaw: the raw ACK check never panics and never drops an ACK
// the screen would pass.
func FuzzShedAckRaw(f *testing.F) {
	for _, tc := range shedAckSeeds {
		f.Add([]byte(tc.msg))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkShedAckRaw(t, data) })
}

// BenchmarkShedAckParsed is what the ACK of a shed answer costs the read
// loop when sipgo parses it for the screen to drop.
func BenchmarkShedAckParsed(b *testing.B) {
	data := []byte(shedAckSeeds[0].msg)
	parser := sipmsg.NewParser()
	b.ReportAllocs()
	for b.Loop() {
		m, err := parser.ParseSIP(data)
		if err != nil {
			b.Fatal(err)
		}
		if !shedAck(m.(*sipmsg.Request)) {
			b.Fatal("not a shed ACK")
		}
	}
}

// BenchmarkShedAckRaw is the same ACK dropped by the read filter.
func BenchmarkShedAckRaw(b *testing.B) {
	data := []byte(shedAckSeeds[0].msg)
	b.ReportAllocs()
	for b.Loop() {
		if !shedAckRaw(data) {
			b.Fatal("not a shed ACK")
		}
	}
}
