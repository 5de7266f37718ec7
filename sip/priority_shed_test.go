package sip

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/sip/internal/ingress"
	"github.com/cpsguard/cpsguard/sip/internal/load"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// holdAdmitter holds the admissions of calls whose Call-ID starts with
// "held" until hold is closed; the others are decided at once.
type holdAdmitter struct {
	*fakeAdmitter
	hold    chan struct{}
	entered chan struct{}
}

func (a *holdAdmitter) Admit(ctx context.Context, member string, b []admission.Bucket) (admission.Decision, error) {
	if strings.HasPrefix(member, "held") {
		a.entered <- struct{}{}
		select {
		case <-a.hold:
		case <-ctx.Done():
			return admission.Decision{}, ctx.Err()
		}
	}
	return a.fakeAdmitter.Admit(ctx, member, b)
}

// priorityConfig is testConfig with emergency numbers, Resource-Priority
// namespaces, and dialer-1 allowed to claim them.
func priorityConfig(car *siptest.Carrier) *config.Config {
	cfg := testConfig(carrierCfg("a", car))
	cfg.Priority = config.Priority{Numbers: []string{"911"}, ResourcePriority: []string{"esnet"}}
	cfg.Peers[0].AllowResourcePriority = true
	return cfg
}

// inviteWithCallID is c's INVITE to user with Call-ID id.
func inviteWithCallID(c *siptest.Caller, proxy, user, id string, headers ...string) *sipmsg.Request {
	req := c.Invite(proxy, headers...)
	req.Recipient.User = user
	cid := sipmsg.CallIDHeader(id)
	req.AppendHeader(&cid)
	return req
}

// readFinal reads SIP responses from r until a final one, and returns its
// status line ("" when none came within d).
func readFinal(t *testing.T, read func() (string, bool)) string {
	t.Helper()
	for range 20 {
		msg, ok := read()
		if !ok {
			return ""
		}
		line, _, _ := strings.Cut(msg, "\r\n")
		if !strings.HasPrefix(line, "SIP/2.0 1") {
			return line
		}
	}
	return ""
}

// Item 1: while the inflight bound is taken (sip.max_inflight 1, one call
// held in admission), a normal INVITE is shed (503) but a priority one is
// decided and answered 200: over UDP from the raw path (a plain INVITE),
// over UDP through the parsed path (a quoted Via parameter the raw path
// does not read), and over TCP (the screen only); by an emergency number
// and by a Resource-Priority claim.
func TestPriorityNeverShedAtTheInflightBound(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	fa, pacer := newFakes()
	adm := &holdAdmitter{fakeAdmitter: fa, hold: make(chan struct{}), entered: make(chan struct{}, 4)}
	cfg := priorityConfig(car)
	cfg.SIP.MaxInflight = 1
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")

	held := make(chan *sipmsg.Response, 1)
	go func() {
		held <- caller.Final(ctxT(t, 20*time.Second), inviteWithCallID(caller, h.udp, "100", "held-1"))
	}()
	select {
	case <-adm.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the held call never reached the store")
	}
	defer func() {
		close(adm.hold)
		if r := <-held; r == nil || r.StatusCode != 200 {
			t.Errorf("the held call: got %v, want 200", r)
		}
	}()

	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 503 {
		t.Fatalf("a normal INVITE while the bound is taken: got %v, want 503 (shed)", res)
	}
	if n := h.p.rawSheds.Load(); n != 1 {
		t.Errorf("sheds from raw bytes: got %d, want 1", n)
	}
	for name, req := range map[string]*sipmsg.Request{
		"to 911":             inviteWithCallID(caller, h.udp, "911", "prio-number"),
		"Resource-Priority":  inviteWithCallID(caller, h.udp, "5550100", "prio-rp", "Resource-Priority: esnet.0"),
		"to 9-1-1 (visual)":  inviteWithCallID(caller, h.udp, "9-1-1", "prio-visual"),
		"to 911 with params": inviteWithCallID(caller, h.udp, "911;phone-context=+1", "prio-params"),
	} {
		if res := caller.Final(ctxT(t, 10*time.Second), req); res == nil || res.StatusCode != 200 {
			t.Errorf("a priority INVITE (%s) while the bound is taken: got %v, want 200", name, res)
		}
	}

	// The parsed path: a quoted Via parameter, which the raw path leaves.
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := strangerRequest("INVITE", h.udp, "", "")(conn.LocalAddr().String())
	msg = strings.Replace(msg, "sip:100@", "sip:911@", 1)
	msg = strings.Replace(msg, ";rport", ";rport;x=\"quoted\"", 1)
	if _, ok := scanInvite([]byte(msg)); ok {
		t.Fatal("the raw path reads the quoted INVITE: the test needs one it leaves")
	}
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	if _, err := conn.WriteToUDP([]byte(msg), ra); err != nil {
		t.Fatal(err)
	}
	if got := readFinal(t, func() (string, bool) { return readFrom(conn, 5*time.Second) }); got != "SIP/2.0 200 OK" {
		t.Errorf("a priority INVITE the raw path leaves, while the bound is taken: got %q, want 200 OK", got)
	}

	// TCP: the screen alone.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	tc, err := d.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tmsg := strangerRequest("INVITE", h.tcp, "", "tcp")(tc.LocalAddr().String())
	tmsg = strings.NewReplacer("SIP/2.0/UDP", "SIP/2.0/TCP", "sip:100@", "sip:911@", ";tag=tcp\r\n", "\r\n",
		"Route: <sip:"+h.tcp+";lr>\r\n", "").Replace(tmsg)
	if _, err := tc.Write([]byte(tmsg)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(tc)
	readTCP := func() (string, bool) {
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return "", false
			}
			b.WriteString(line)
			if line == "\r\n" {
				return b.String(), true
			}
		}
	}
	if got := readFinal(t, readTCP); got != "SIP/2.0 200 OK" {
		t.Errorf("a priority INVITE over TCP while the bound is taken: got %q, want 200 OK\n%s", got, tmsg)
	}

	if got := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedOverload)); got != 1 {
		t.Errorf("calls_total{rejected_overload}: got %v, want 1 (the normal INVITE only)", got)
	}
	if got := priorityCalls(h, "dialer-1", metrics.PriorityNumber); got != 5 {
		t.Errorf("priority_calls_total{kind=number}: got %d, want 5", got)
	}
	if got := priorityCalls(h, "dialer-1", metrics.PriorityResource); got != 1 {
		t.Errorf("priority_calls_total{kind=resource_priority}: got %d, want 1", got)
	}
}

// A priority INVITE is not held back in its lane while the bound is
// taken, and one that finds its share of the new-call lane full is
// handled (decided, its 100 Trying from the screen) instead of answered
// 503; a normal one is still shed.
func TestPriorityInTheShedLane(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := priorityConfig(car)
	cfg.SIP.InflightWait = 100 * time.Millisecond
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	peer, from := peerSocket(t)
	la := from.String()
	conn := h.p.listeners[0].udp
	invite := func(user, id string, extra string) []byte {
		msg := strangerRequest("INVITE", h.udp, "", "")(la)
		msg = strings.Replace(msg, "sip:100@", "sip:"+user+"@", 1)
		msg = strings.Replace(msg, "stranger-INVITE", id, 1)
		msg = strings.Replace(msg, "branch=z9hG4bK-INVITE", "branch=z9hG4bK-"+id, 1)
		return []byte(strings.Replace(msg, "Content-Length: 0", extra+"Content-Length: 0", 1))
	}
	dg := func(data []byte) *ingress.Datagram {
		return &ingress.Datagram{Data: data, From: from, Conn: conn, Known: true, At: time.Now()}
	}

	limit := load.Limit(cfg)
	for range limit {
		h.p.inflight.Take() // the bound is taken
	}
	prio := invite("911", "lane-prio", "")
	claim := invite("100", "lane-claim", "Resource-Priority:\r\n esnet.2\r\n")
	normal := invite("100", "lane-normal", "")
	if w := h.p.holdInvite(dg(normal), time.Now()); w <= 0 {
		t.Errorf("a normal INVITE at the bound: held %v, want > 0", w)
	}
	for name, data := range map[string][]byte{"to 911": prio, "folded Resource-Priority": claim} {
		if w := h.p.holdInvite(dg(data), time.Now()); w > 0 {
			t.Errorf("a priority INVITE (%s) at the bound: held %v, want 0", name, w)
		}
	}

	if !h.p.shedDatagram(dg(normal)) {
		t.Fatal("a normal INVITE in the shed lane was not answered")
	}
	if got, _ := readFrom(peer, 5*time.Second); !strings.HasPrefix(got, "SIP/2.0 503 Overloaded") {
		t.Fatalf("a normal INVITE in the shed lane: got %q, want 503 Overloaded", got[:min(len(got), 40)])
	}
	for name, data := range map[string][]byte{"to 911": prio, "folded Resource-Priority": claim} {
		if !h.p.shedDatagram(dg(data)) {
			t.Fatalf("a priority INVITE (%s) in the shed lane was dropped", name)
		}
		got, _ := readFrom(peer, 5*time.Second)
		if !strings.HasPrefix(got, "SIP/2.0 100 Trying") {
			t.Errorf("a priority INVITE (%s) in the shed lane: got %q, want the screen's 100 Trying", name, got[:min(len(got), 40)])
		}
		if got := readFinal(t, func() (string, bool) { return readFrom(peer, 5*time.Second) }); got != "SIP/2.0 200 OK" {
			t.Errorf("a priority INVITE (%s) in the shed lane: final %q, want 200 OK", name, got)
		}
	}
	for range limit {
		h.p.inflight.Release()
	}
	if got := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedOverload)); got != 1 {
		t.Errorf("calls_total{rejected_overload}: got %v, want 1", got)
	}
}

// priorityRaw reads what the parsed path reads, from raw bytes.
func TestPriorityRaw(t *testing.T) {
	cfg := &config.Config{
		Store:    config.Store{KeyPrefix: "t"},
		Priority: config.Priority{Numbers: []string{"911", "+44999"}, ResourcePriority: []string{"esnet"}},
	}
	allowed := &config.Peer{Name: "a", AllowResourcePriority: true}
	notAllowed := &config.Peer{Name: "b"}
	inv := func(ruri, headers string) []byte {
		return []byte("INVITE " + ruri + " SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:x@h>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\n" + headers + "Content-Length: 0\r\n\r\n")
	}
	for _, tc := range []struct {
		name string
		data []byte
		peer *config.Peer
		want bool
	}{
		{"911", inv("sip:911@10.0.0.9", ""), notAllowed, true},
		{"911 with visual separators", inv("sip:9-1-1@10.0.0.9", ""), notAllowed, true},
		{"911 with user parameters", inv("sip:911;phone-context=+1@10.0.0.9;user=phone", ""), notAllowed, true},
		{"911 with a password", inv("sip:911:pw@10.0.0.9", ""), notAllowed, true},
		{"sips", inv("sips:911@10.0.0.9", ""), notAllowed, true},
		{"tel", inv("tel:911", ""), notAllowed, true},
		{"+911… is India", inv("sip:+911123456789@10.0.0.9", ""), notAllowed, false},
		{"+44999", inv("sip:+44999@10.0.0.9", ""), notAllowed, true},
		{"host only", inv("sip:911", ""), notAllowed, false},
		{"other number", inv("sip:100@10.0.0.9", ""), allowed, false},
		{"Resource-Priority", inv("sip:100@10.0.0.9", "Resource-Priority: esnet.1\r\n"), allowed, true},
		{"Resource-Priority, lower case, second value", inv("sip:100@10.0.0.9", "resource-priority : dsn.flash, ESNET.0\r\n"), allowed, true},
		{"Resource-Priority folded", inv("sip:100@10.0.0.9", "Resource-Priority: dsn.flash,\r\n\tesnet.0\r\n"), allowed, true},
		{"Resource-Priority of a peer not allowed", inv("sip:100@10.0.0.9", "Resource-Priority: esnet.1\r\n"), notAllowed, false},
		{"Resource-Priority of another namespace", inv("sip:100@10.0.0.9", "Resource-Priority: dsn.flash\r\n"), allowed, false},
		{"in a body only", []byte(string(inv("sip:100@10.0.0.9", "")) + "Resource-Priority: esnet.1\r\n"), allowed, false},
		{"not an INVITE", []byte("OPTIONS sip:911@h SIP/2.0\r\n\r\n"), allowed, false},
	} {
		if got := priorityRaw(cfg, tc.peer, tc.data); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		// The parsed path agrees.
		m, err := sipmsg.ParseMessage(tc.data)
		if err != nil {
			continue
		}
		if req, ok := m.(*sipmsg.Request); ok && req.IsInvite() {
			if got := isPriority(cfg, tc.peer, req); got != tc.want {
				t.Errorf("%s: parsed path says %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// The raw look runs before the ingress's scan (holdInvite asks it under
// the worker's lock, with the inflight bound taken): a Request-URI over
// the scan's bounds is not parsed (sipgo parses its parameters in
// quadratic time: thousands of them took ~10 ms under that lock, while
// the readers waited for it) and is no priority call (the scan drops the
// datagram after).
func TestPriorityRawBoundsTheURI(t *testing.T) {
	cfg := &config.Config{
		Store:    config.Store{KeyPrefix: "t"},
		Priority: config.Priority{Numbers: []string{"911"}},
	}
	peer := &config.Peer{Name: "a"}
	inv := func(params string) []byte {
		return []byte("INVITE sip:911@10.0.0.9" + params + " SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:x@h>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n")
	}
	within := strings.Repeat(";p", ingress.DefaultBounds.ElementParams)
	if !priorityRaw(cfg, peer, inv(within)) {
		t.Error("a call to 911 with a Request-URI at the bounds is not a priority call")
	}
	var over strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&over, ";%x", i)
	}
	if priorityRaw(cfg, peer, inv(over.String())) {
		t.Error("a Request-URI with 3000 parameters was parsed and read as a priority call")
	}
	if _, err := ingress.Scan(inv(over.String()), ingress.DefaultBounds); err == nil {
		t.Error("the scan lets the Request-URI with 3000 parameters through")
	}
}

// BenchmarkPriorityRaw is what the raw path's look for a priority call
// costs a plain INVITE that is not one, with emergency numbers and
// Resource-Priority namespaces configured (its peer allowed to claim).
func BenchmarkPriorityRaw(b *testing.B) {
	cfg := &config.Config{
		Store:    config.Store{KeyPrefix: "t"},
		Priority: config.Priority{Numbers: []string{"911", "112", "999"}, ResourcePriority: []string{"esnet", "ets", "wps"}},
	}
	peer := &config.Peer{Name: "p", AllowResourcePriority: true}
	data := []byte(rawShedSeeds[0].msg)
	b.ReportAllocs()
	for b.Loop() {
		if priorityRaw(cfg, peer, data) {
			b.Fatal("a plain INVITE read as a priority call")
		}
	}
}

// A priority call's record says so (priority: true), another's does not;
// a call refused by a destination's limit is recorded with its outcome
// and reason.
func TestRecordsOfPriorityAndDestinationCalls(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 486} })
	cfg := priorityConfig(car)
	cfg.Destinations = []config.Destination{{Prefix: "1900", CPS: 1}}
	h, read, _, _ := recordsProxy(t, cfg)
	caller := siptest.StartCaller(t, "127.0.0.2")
	prio := inviteWithCallID(caller, h.udp, "911", "rec-prio")
	plain := inviteWithCallID(caller, h.udp, "100", "rec-plain")
	for _, inv := range []*sipmsg.Request{prio, plain} {
		if res := caller.Final(ctxT(t, 5*time.Second), inv); res == nil || res.StatusCode != 486 {
			t.Fatalf("%s: got %v, want the carrier's 486", msgpart.CallID(inv), res)
		}
	}
	if r := recordOf(t, read, "rec-prio"); !r.Priority {
		t.Errorf("the priority call's record: priority false, want true: %+v", r)
	}
	if r := recordOf(t, read, "rec-plain"); r.Priority {
		t.Errorf("a normal call's record: priority true, want false")
	}
	h.adm.mu.Lock()
	h.adm.refuse = 2 // peer, customer, then the destination's bucket
	h.adm.mu.Unlock()
	dest := inviteWithCallID(caller, h.udp, "19005550100", "rec-dest")
	if res := caller.Final(ctxT(t, 5*time.Second), dest); res == nil || res.StatusCode != 503 {
		t.Fatalf("a call refused by its destination: got %v, want 503", res)
	}
	if r := recordOf(t, read, "rec-dest"); r.Outcome != metrics.OutcomeRejectedDestination || r.Reason != reasonDestinationCPS ||
		!strings.HasPrefix(r.Detail, "destination 1900: ") {
		t.Errorf("a call refused by its destination: record %+v", r)
	}
}

// FuzzPriorityRaw: whatever the bytes, the raw look never panics, and it
// never misses a priority call (as the parsed path takes them) among the
// INVITEs the raw path would shed (scanInvite's); it may take more, which
// go on to the parser. (An INVITE scanInvite does not read goes on to the
// parser anyway, where the screen and shedParsed look again; the raw look
// only spares it a hold of at most sip.inflight_wait.) A datagram over
// the ingress's bounds is dropped before anything parses it.
func FuzzPriorityRaw(f *testing.F) {
	cfg := &config.Config{
		Store:    config.Store{KeyPrefix: "t"},
		Priority: config.Priority{Numbers: []string{"911", "+44999"}, ResourcePriority: []string{"esnet"}},
	}
	peer := &config.Peer{Name: "p", AllowResourcePriority: true}
	for _, s := range rawShedSeeds {
		f.Add([]byte(s.msg))
	}
	f.Add([]byte("INVITE sip:911@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:x@h>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nResource-Priority: esnet.1\r\n\r\n"))
	f.Add([]byte("INVITE tel:+44-999;phone-context=x SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:x@h>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nresource-priority:\r\n esnet.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := priorityRaw(cfg, peer, data)
		if _, ok := scanInvite(data); !ok {
			return
		}
		if _, err := ingress.Scan(data, ingress.DefaultBounds); err != nil {
			return // dropped before any parse
		}
		m, err := sipmsg.ParseMessage(data)
		if err != nil {
			return
		}
		req, ok := m.(*sipmsg.Request)
		if !ok || !req.IsInvite() {
			return
		}
		if isPriority(cfg, peer, req) && !raw {
			t.Fatalf("the parsed path takes %q for a priority call, the raw look does not", data)
		}
	})
}
