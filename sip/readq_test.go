package sip

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
)

// readQueueHarness is a proxy (for its configuration, screen and metrics)
// and a read queue over a socket of its own, fed by take directly: the
// reader's classification without the race of a live socket.
func readQueueHarness(t testing.TB, maxInflight int, wait ...time.Duration) (*harness, *readQueue) {
	t.Helper()
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.MaxInflight = maxInflight
	if len(wait) > 0 {
		cfg.SIP.InflightWait = wait[0]
	}
	for i := 2; i <= 6; i++ { // dialer-2 … dialer-6 on 127.0.0.3 … 127.0.0.7
		more := cfg.Peers[0]
		more.Name = fmt.Sprintf("dialer-%d", i)
		more.Sources = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}), 32)}
		cfg.Peers = append(cfg.Peers, more)
	}
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return h, newReadQueue(h.p, c)
}

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

// fillInvites has the queue take n distinct new INVITEs to proxy from
// from.
func fillInvites(q *readQueue, proxy string, from netip.AddrPort, n int) {
	for i := range n {
		q.take([]byte(strings.ReplaceAll(strangerRequest("INVITE", proxy, "", "")(from.String()), "INVITE;rport", fmt.Sprintf("fill%d;rport", i))), from)
	}
}

// readAll takes what the queue holds, in the order sipgo's loop gets it.
func readAll(t *testing.T, q *readQueue) []string {
	t.Helper()
	var got []string
	buf := make([]byte, 65535)
	for {
		q.mu.Lock()
		empty := q.fast.size == 0 && q.slow.size == 0 && q.strange.size == 0
		q.mu.Unlock()
		if empty {
			return got
		}
		n, from, err := q.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		if from == nil {
			t.Fatal("ReadFrom returned no source")
		}
		line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
		got = append(got, strings.Fields(line)[0]+" "+strings.Fields(line)[1])
	}
}

// TestReadQueueOrder: what the reader queues comes out responses and
// in-dialog requests first, then INVITEs, CANCELs and OPTIONS, each queue
// in the socket's order; the ACK of a shed answer is dropped on the way in.
func TestReadQueueOrder(t *testing.T) {
	h, q := readQueueHarness(t, 64)
	_, from := peerSocket(t)
	la := from.String()
	response := "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP " + h.udp + ";branch=z9hG4bK-x\r\n" +
		"From: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: r1\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n"
	shedAckMsg := strangerRequest("ACK", h.udp, "127.0.0.1:5999", shedTag+"abc")(la)
	in := []string{
		strangerRequest("INVITE", h.udp, "", "")(la),
		strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(la),
		strangerRequest("CANCEL", h.udp, "", "")(la),
		response,
		shedAckMsg,
		strangerRequest("INVITE", h.udp, "127.0.0.1:5999", "dlg")(la), // a re-INVITE waits with the INVITEs
		strangerRequest("OPTIONS", h.udp, "", "")(la),
	}
	for _, m := range in {
		q.take([]byte(m), from)
	}
	got := readAll(t, q)
	want := []string{"BYE sip:100@127.0.0.1:5999", "SIP/2.0 200",
		"INVITE sip:100@" + h.udp, "CANCEL sip:100@" + h.udp, "INVITE sip:100@127.0.0.1:5999", "OPTIONS sip:100@" + h.udp}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("read order:\n got %q\nwant %q", got, want)
	}
}

// TestReadQueueSlowShare: with a peer's share of the INVITE queue taken,
// its next new INVITE gets the screen's 503 at once (rejected_overload)
// even though the inflight bound is free, a copy of an INVITE already
// waiting is neither answered nor queued again, and its CANCEL and
// re-INVITE are dropped and counted (they are retransmitted), never moved
// ahead of its INVITEs; another peer's INVITE still finds room, and a
// stranger's waits in the strangers' queue for the screen's 403.
func TestReadQueueSlowShare(t *testing.T) {
	h, q := readQueueHarness(t, 1) // a source's share: readQueueSlowMin
	if h.p.Inflight() != 0 {
		t.Fatal("inflight bound taken before the test")
	}
	peer, from := peerSocket(t)
	la := from.String()
	invite := func(i int) []byte {
		return []byte(strings.ReplaceAll(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", fmt.Sprintf("fill%d;rport", i)))
	}
	for i := range readQueueSlowMin {
		q.take(invite(i), from)
	}
	if q.slow.size != readQueueSlowMin {
		t.Fatalf("slow queue holds %d, want %d", q.slow.size, readQueueSlowMin)
	}
	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(la)), from)
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65535)
	n, _, err := peer.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("the INVITE that found its share taken got no answer: %v", err)
	}
	if line, _, _ := strings.Cut(string(buf[:n]), "\r\n"); line != "SIP/2.0 503 Overloaded" {
		t.Errorf("answer to an INVITE finding its share taken: got %q, want 503 Overloaded", line)
	}
	if got := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedOverload)); got != 1 {
		t.Errorf("calls_total{rejected_overload}: got %v, want 1", got)
	}

	q.take(invite(7), from) // a retransmission of a queued INVITE
	q.take([]byte(strangerRequest("CANCEL", h.udp, "", "")(la)), from)
	q.take([]byte(strangerRequest("INVITE", h.udp, "127.0.0.1:5999", "dlg")(la)), from)
	if q.fast.size != 0 || q.slow.size != readQueueSlowMin {
		t.Errorf("after a copy, a CANCEL and a re-INVITE: fast %d, slow %d; want 0 and %d", q.fast.size, q.slow.size, readQueueSlowMin)
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("read_queue_full")); got != 2 {
		t.Errorf("sip_errors_total{read_queue_full}: got %v, want 2 (the CANCEL and the re-INVITE)", got)
	}
	_ = peer.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _, err := peer.ReadFromUDP(buf); err == nil {
		t.Errorf("the reader answered a copy, a CANCEL or a re-INVITE: %q", buf[:n])
	}

	other := netip.MustParseAddrPort("127.0.0.3:5062") // dialer-2
	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(other.String())), other)
	stranger := netip.MustParseAddrPort("127.0.0.9:5060")
	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(stranger.String())), stranger)
	if q.slow.size != readQueueSlowMin+1 || q.strange.size != 1 {
		t.Errorf("another peer's and a stranger's INVITE: slow %d, strangers' %d; want %d and 1", q.slow.size, q.strange.size, readQueueSlowMin+1)
	}
}

// TestReadQueueFullShedsWhatTheRawPathLeaves: with a peer's share of the
// INVITE queue taken, its new INVITEs of forms the raw-byte shed does not
// read (a quoted Via parameter, an overload-control request) still get the
// screen's 503 at once, parsed in the reader, with the overload-control
// values when asked, sent to the packet's source; its re-INVITE and a copy
// of an INVITE being handled are still only dropped and counted.
func TestReadQueueFullShedsWhatTheRawPathLeaves(t *testing.T) {
	h, q := readQueueHarness(t, 1)
	peer, from := peerSocket(t)
	la := from.String()
	fillInvites(q, h.udp, from, readQueueSlowMin)
	buf := make([]byte, 65535)
	answer := func() string {
		t.Helper()
		_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := peer.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		return string(buf[:n])
	}
	for i, via := range []string{
		";rport;x=\"quoted value\"",
		";rport;oc",
		";oc;oc-algo=\"loss\"",
	} {
		msg := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", fmt.Sprintf("parsed%d%s", i, via), 1)
		if _, ok := scanInvite([]byte(msg)); ok {
			t.Fatalf("the raw path reads %q: the test needs a form it leaves", via)
		}
		q.take([]byte(msg), from)
		got := answer()
		if line, _, _ := strings.Cut(got, "\r\n"); line != "SIP/2.0 503 Overloaded" {
			t.Fatalf("INVITE with Via%s finding its share taken: got %q, want 503 Overloaded", via, line)
		}
		if asks := strings.Contains(via, "oc"); asks != strings.Contains(got, ";oc=") || asks != strings.Contains(got, ";oc-seq=") {
			t.Errorf("INVITE with Via%s (asks %v): answer's oc values %q", via, asks, got)
		}
		if !strings.Contains(got, "To: <sip:100@"+h.udp+">;tag="+shedTag) {
			t.Errorf("answer's To tag is not a shed tag: %q", got)
		}
	}
	if got := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedOverload)); got != 3 {
		t.Errorf("calls_total{rejected_overload}: got %v, want 3", got)
	}

	reinvite := strings.Replace(strangerRequest("INVITE", h.udp, "127.0.0.1:5999", "dlg")(la), ";rport", ";rport;oc", 1)
	q.take([]byte(reinvite), from)
	// A copy of an INVITE the screen is handling (in the invite table).
	live := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", "live;rport;oc", 1)
	m, err := sipmsg.ParseMessage([]byte(live))
	if err != nil {
		t.Fatal(err)
	}
	m.(*sipmsg.Request).SetSource(la)
	if h.p.invites.register(m.(*sipmsg.Request), nil, &h.p.inflight) != regNew {
		t.Fatal("could not register the live INVITE")
	}
	q.take([]byte(live), from)
	_ = peer.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _, err := peer.ReadFromUDP(buf); err == nil {
		t.Errorf("the reader answered a re-INVITE or a copy of a live INVITE: %q", buf[:n])
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("read_queue_full")); got != 2 {
		t.Errorf("sip_errors_total{read_queue_full}: got %v, want 2 (the re-INVITE and the copy)", got)
	}

	// With this window's parsing budget spent, such an INVITE is dropped
	// (and counted) as before, unparsed.
	q.parsed = parseBudget{start: time.Now(), bytes: parsedBytes}
	q.take([]byte(strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", "spent;rport;oc", 1)), from)
	// Nor is one too large to parse cheaply, whatever the budget.
	q.parsed = parseBudget{}
	big := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", "big;rport;oc", 1)
	big = strings.Replace(big, "Content-Length: 0", "X-Pad: "+strings.Repeat("a", parsedMaxSize)+"\r\nContent-Length: 0", 1)
	q.take([]byte(big), from)
	// Nor one with parameters enough to make sipgo's parse quadratic.
	params := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", "params;rport;oc"+strings.Repeat(";p", parsedMaxParams), 1)
	q.take([]byte(params), from)
	uriHeaders := strings.Replace(strangerRequest("INVITE", h.udp, "", "")(la), "INVITE;rport", "uri;rport;oc", 1)
	uriHeaders = strings.Replace(uriHeaders, "Contact: <sip:x@"+la+">", "Contact: <sip:x@"+la+"?a=1"+strings.Repeat("&a", parsedMaxParams)+">", 1)
	q.take([]byte(uriHeaders), from)
	_ = peer.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _, err := peer.ReadFromUDP(buf); err == nil {
		t.Errorf("the reader parsed and answered beyond its budget or size: %q", buf[:min(n, 200)])
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("read_queue_full")); got != 6 {
		t.Errorf("sip_errors_total{read_queue_full}: got %v, want 6", got)
	}
	// The bound was free all along: these sheds were one peer's flood,
	// not the node's overload, and ask no one to back off.
	if got := h.p.oc.shed.Load(); got != 0 {
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

// TestReadQueueSpellings: an INVITE spelt in a way sipgo accepts but the
// reader does not recognise waits in the slow queue with the others, never
// in the fast one.
func TestReadQueueSpellings(t *testing.T) {
	h, q := readQueueHarness(t, 64)
	_, from := peerSocket(t)
	inv := strangerRequest("INVITE", h.udp, "", "")(from.String())
	for _, m := range []string{"invite" + inv[len("INVITE"):], "\t" + inv, "\x00" + inv, "Invite" + inv[len("INVITE"):], "CANCEL" + inv[len("INVITE"):]} {
		q.take([]byte(m), from)
	}
	if q.fast.size != 0 || q.slow.size != 5 {
		t.Errorf("odd spellings: fast %d, slow %d; want 0 and 5", q.fast.size, q.slow.size)
	}
}

// TestReadQueueStrangers: a stranger's datagrams wait behind every peer's
// and carrier's, INVITE or not, and what a full strangers' queue cannot
// hold is dropped and counted.
func TestReadQueueStrangers(t *testing.T) {
	h, q := readQueueHarness(t, 64)
	_, from := peerSocket(t)
	stranger := netip.MustParseAddrPort("127.0.0.9:5060")
	q.take([]byte(strangerRequest("BYE", h.udp, "127.0.0.1:5998", "s")(stranger.String())), stranger)
	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(from.String())), from)
	q.take([]byte(strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String())), from)
	got := readAll(t, q)
	want := []string{"BYE sip:100@127.0.0.1:5999", "INVITE sip:100@" + h.udp, "BYE sip:100@127.0.0.1:5998"}
	if strings.Join(got, "|") != strings.Join(want, "|") || q.strange.size != 0 {
		t.Fatalf("read order: got %q, want %q", got, want)
	}
	inv := []byte(strangerRequest("INVITE", h.udp, "", "")(stranger.String()))
	for range readQueueStrange + 2 {
		q.take(inv, stranger)
	}
	if q.strange.size != readQueueStrange || q.slow.size != 0 || q.fast.size != 0 {
		t.Errorf("queues after a stranger's flood: fast %d, slow %d, strangers' %d; want only the strangers' full", q.fast.size, q.slow.size, q.strange.size)
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("read_queue_full")); got != 2 {
		t.Errorf("sip_errors_total{read_queue_full}: got %v, want 2", got)
	}
}

// TestReadQueueFastShares: one party holds at most its share of the fast
// queue (what it cannot hold is dropped and counted) and the others still
// find room; while INVITEs wait, sipgo's loop takes one after every
// readQueueFastRun in-dialog datagrams.
func TestReadQueueFastShares(t *testing.T) {
	h, q := readQueueHarness(t, 64)
	_, from := peerSocket(t)
	bye := []byte(strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String()))
	for range readQueueFastShare + 3 {
		q.take(bye, from)
	}
	if q.fast.size != readQueueFastShare {
		t.Errorf("fast queue holds %d, want one party's share %d", q.fast.size, readQueueFastShare)
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("read_queue_full")); got != 3 {
		t.Errorf("sip_errors_total{read_queue_full}: got %v, want 3", got)
	}
	other := netip.MustParseAddrPort("127.0.0.3:5062") // dialer-2
	q.take([]byte(strangerRequest("BYE", h.udp, "127.0.0.1:5998", "dlg")(other.String())), other)
	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(other.String())), other)
	if q.fast.size != readQueueFastShare+1 || q.slow.size != 1 {
		t.Fatalf("another party's BYE and INVITE: fast %d, slow %d; want %d and 1", q.fast.size, q.slow.size, readQueueFastShare+1)
	}
	buf := make([]byte, 65535)
	for i := range readQueueFastRun + 1 {
		n, _, err := q.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		invite := strings.HasPrefix(string(buf[:n]), "INVITE ")
		if invite != (i == readQueueFastRun) {
			t.Fatalf("read %d: INVITE %v, want the INVITE after %d in-dialog datagrams", i, invite, readQueueFastRun)
		}
	}
}

// TestReadQueueDedupePerSource: the same bytes from another source are
// another datagram, not a copy of the first: nobody can make a peer's
// INVITE vanish by sending its bytes first.
func TestReadQueueDedupePerSource(t *testing.T) {
	h, q := readQueueHarness(t, 64)
	_, from := peerSocket(t)
	inv := []byte(strangerRequest("INVITE", h.udp, "", "")(from.String()))
	other := netip.MustParseAddrPort("127.0.0.3:5062") // dialer-2, predicting dialer-1's bytes
	q.take(inv, other)
	q.take(inv, from)
	q.take(inv, from) // a real copy
	if q.slow.size != 2 {
		t.Fatalf("slow queue holds %d, want dialer-2's datagram and dialer-1's", q.slow.size)
	}
	buf := make([]byte, 65535)
	var srcs []string
	for range 2 {
		_, src, err := q.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src.String())
	}
	if srcs[0] != other.String() || srcs[1] != from.String() {
		t.Errorf("sources read: %v, want %v then %v", srcs, other, from)
	}
}

// TestReadQueueReserve: however many parties flood, the last quarter of
// the slow queue is kept for parties that hold little of it, so a quiet
// peer's INVITE is queued, not shed.
func TestReadQueueReserve(t *testing.T) {
	h, q := readQueueHarness(t, 100000) // shares of 1024
	for p := range 4 {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(3 + p)}), 5062)
		for i := range readQueueSlowMax / 4 {
			q.take([]byte(strings.ReplaceAll(strangerRequest("INVITE", h.udp, "", "")(src.String()), "INVITE;rport", fmt.Sprintf("p%df%d;rport", p, i))), src)
		}
	}
	if want := readQueueSlowMax - readQueueSlowReserve + readQueueSlowMin; q.slow.size != want {
		t.Fatalf("four parties' flood: slow queue holds %d, want %d (three full shares, the fourth stopped at the reserve)", q.slow.size, want)
	}
	quiet := netip.MustParseAddrPort("127.0.0.7:5062") // dialer-6
	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(quiet.String())), quiet)
	if got := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-6", metrics.OutcomeRejectedOverload)); got != 0 || q.slow.by[party{peer: "dialer-6"}] != 1 {
		t.Errorf("a quiet peer's INVITE after the flood: rejected_overload %v, queued %d; want it queued", got, q.slow.by[party{peer: "dialer-6"}])
	}
}

// TestReadQueueCarrierInPeerPrefix: a carrier whose address lies inside a
// peer's prefix is its own party, not the peer's.
func TestReadQueueCarrierInPeerPrefix(t *testing.T) {
	h, _ := readQueueHarness(t, 64)
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.Peers[0].Sources = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	who, known := h.p.partyOf(cfg, netip.MustParseAddr("127.0.0.1"))
	if !known || who != (party{ip: netip.MustParseAddr("127.0.0.1")}) {
		t.Errorf("carrier inside a peer's /8: party %+v (known %v), want the carrier's address", who, known)
	}
	if who, _ := h.p.partyOf(cfg, netip.MustParseAddr("127.0.0.2")); who != (party{peer: "dialer-1"}) {
		t.Errorf("a peer address in the same /8: party %+v, want dialer-1", who)
	}
}

// TestReadQueueShareCapped: however large the inflight bound, one party
// holds at most a quarter of the slow queue, so another peer's INVITE is
// not shed for it.
func TestReadQueueShareCapped(t *testing.T) {
	h, q := readQueueHarness(t, 100000)
	_, from := peerSocket(t)
	fillInvites(q, h.udp, from, readQueueSlowMax)
	if q.slow.size != readQueueSlowMax/4 {
		t.Fatalf("one party holds %d of the slow queue, want %d", q.slow.size, readQueueSlowMax/4)
	}
	other := netip.MustParseAddrPort("127.0.0.3:5062")
	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(other.String())), other)
	if q.slow.size != readQueueSlowMax/4+1 || testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-2", metrics.OutcomeRejectedOverload)) != 0 {
		t.Errorf("another peer's INVITE: slow %d, its rejected_overload %v; want it queued", q.slow.size, testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-2", metrics.OutcomeRejectedOverload)))
	}
}

// TestReadQueueBytes: a datagram over MaxMessageSize is dropped before it
// is queued (counted oversized), and the queues together hold at most
// readQueueBytes.
func TestReadQueueBytes(t *testing.T) {
	h, q := readQueueHarness(t, 64)
	_, from := peerSocket(t)
	bye := strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String())
	pad := func(n int) []byte { return []byte(bye + strings.Repeat("x", n-len(bye))) }
	q.take(pad(MaxMessageSize+1), from)
	if q.fast.size != 0 || testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("oversized")) != 1 {
		t.Fatalf("a datagram over MaxMessageSize: queued %d, oversized %v; want 0 and 1", q.fast.size, testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("oversized")))
	}
	big := pad(MaxMessageSize)
	fit := readQueueBytes / len(big)
	other := netip.MustParseAddrPort("127.0.0.3:5062") // two parties, so no share binds first
	for i := range fit + 5 {
		if i%2 == 0 {
			q.take(big, from)
		} else {
			q.take(big, other)
		}
	}
	if q.fast.size != fit || q.bytes > readQueueBytes {
		t.Errorf("queued %d datagrams of %d bytes (%d bytes), want %d within %d", q.fast.size, len(big), q.bytes, fit, readQueueBytes)
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("read_queue_full")); got != 5 {
		t.Errorf("sip_errors_total{read_queue_full}: got %v, want 5", got)
	}
	buf := make([]byte, 65535)
	for range fit {
		if _, _, err := q.ReadFrom(buf); err != nil {
			t.Fatal(err)
		}
	}
	if q.bytes != 0 {
		t.Errorf("bytes held after every datagram was read: %d", q.bytes)
	}
}

// TestReadQueueClose: the reader drains a live socket, and once the socket
// is closed sipgo's loop gets net.ErrClosed (its signal to stop).
func TestReadQueueClose(t *testing.T) {
	h, q := readQueueHarness(t, 64)
	done := make(chan struct{})
	go func() { defer close(done); q.run() }()
	peer, from := peerSocket(t)
	msg := strangerRequest("OPTIONS", h.udp, "", "")(from.String())
	if _, err := peer.WriteToUDP([]byte(msg), q.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, src, err := q.ReadFrom(buf)
	if err != nil || string(buf[:n]) != msg || src.String() != from.String() {
		t.Fatalf("ReadFrom: got %q from %v (%v), want the datagram from %v", buf[:n], src, err, from)
	}
	q.UDPConn.Close()
	<-done
	if _, _, err := q.ReadFrom(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadFrom after close: got %v, want net.ErrClosed", err)
	}
}

// TestReadQueueHoldsInvitesForAUnit: while the inflight bound is taken an
// INVITE waits in the slow queue (the fast queue still flows, and a CANCEL
// at the head is not held), until a unit is given back, or until it has
// waited sip.inflight_wait and goes on to be shed; with inflight_wait 0 it
// is not held at all.
func TestReadQueueHoldsInvitesForAUnit(t *testing.T) {
	h, q := readQueueHarness(t, 1, time.Hour)
	_, from := peerSocket(t)
	la := from.String()
	h.p.inflight.Add(1) // the bound is taken

	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(la)), from)
	q.take([]byte(strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(la)), from)
	buf := make([]byte, 65535)
	if n, _, err := q.ReadFrom(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "BYE ") {
		t.Fatalf("first read while the bound is taken: got %q (%v), want the BYE", buf[:n], err)
	}
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 65535)
		n, _, _ := q.ReadFrom(b)
		got <- string(b[:n])
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case m := <-got:
		t.Fatalf("read an INVITE while the bound is taken and its wait is not over: %q", m)
	default:
	}
	h.p.inflight.release()
	select {
	case m := <-got:
		if !strings.HasPrefix(m, "INVITE ") {
			t.Fatalf("read after a unit was given back: got %q, want the INVITE", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a unit given back did not wake the reader of the queue")
	}

	// Taken again: a CANCEL at the head goes on; an INVITE that has waited
	// its time goes on too (the read filter or the screen sheds it).
	h.p.inflight.Add(1)
	q.take([]byte(strangerRequest("CANCEL", h.udp, "", "")(la)), from)
	if n, _, err := q.ReadFrom(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "CANCEL ") {
		t.Fatalf("a CANCEL at the head while the bound is taken: got %q (%v)", buf[:n], err)
	}
	q.take([]byte(strangerRequest("INVITE", h.udp, "", "")(la)), from)
	q.mu.Lock()
	q.slow.peek().at = time.Now().Add(-2 * time.Hour)
	q.mu.Unlock()
	if n, _, err := q.ReadFrom(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "INVITE ") {
		t.Fatalf("an INVITE past its wait: got %q (%v)", buf[:n], err)
	}
	h.p.inflight.release()

	h0, q0 := readQueueHarness(t, 1) // inflight_wait 0
	h0.p.inflight.Add(1)
	defer h0.p.inflight.release()
	q0.take([]byte(strangerRequest("INVITE", h0.udp, "", "")(la)), from)
	if n, _, err := q0.ReadFrom(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "INVITE ") {
		t.Fatalf("an INVITE with inflight_wait 0: got %q (%v)", buf[:n], err)
	}
}

// BenchmarkReadQueue is what the read queue adds per datagram: the
// reader's classification and copy (take) and the hand-over to sipgo's
// loop (ReadFrom), for an in-dialog BYE from a peer and a new INVITE.
func BenchmarkReadQueue(b *testing.B) {
	h, q := readQueueHarness(b, 64)
	_, from := peerSocket(b)
	for _, m := range []struct{ name, msg string }{
		{"bye", strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String())},
		{"invite", strangerRequest("INVITE", h.udp, "", "")(from.String())},
	} {
		b.Run(m.name, func(b *testing.B) {
			data := []byte(m.msg)
			buf := make([]byte, 65535)
			b.ReportAllocs()
			for b.Loop() {
				q.take(data, from)
				if _, _, err := q.ReadFrom(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestReadQueueBehind (issue 22, item C10): the node counts as behind
// (carrier timeouts are then not held against carriers) only when its own
// read queue delays answers: a fast datagram handed to sipgo more than
// behindLag after it was read, or the fast lane full for every party. One
// party overrunning its own share, or answers read in time, are not.
func TestReadQueueBehind(t *testing.T) {
	buf := make([]byte, 65535)
	t.Run("answers read in time", func(t *testing.T) {
		h, q := readQueueHarness(t, 64)
		_, from := peerSocket(t)
		q.take([]byte(strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String())), from)
		if _, _, err := q.ReadFrom(buf); err != nil {
			t.Fatal(err)
		}
		if h.p.nodeBehind() {
			t.Error("behind after a BYE read at once")
		}
	})
	t.Run("an answer waited", func(t *testing.T) {
		h, q := readQueueHarness(t, 64)
		_, from := peerSocket(t)
		q.take([]byte(strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String())), from)
		q.mu.Lock()
		q.fast.peek().at = time.Now().Add(-2 * behindLag)
		q.mu.Unlock()
		if _, _, err := q.ReadFrom(buf); err != nil {
			t.Fatal(err)
		}
		if !h.p.nodeBehind() {
			t.Error("not behind after a BYE waited twice behindLag in the queue")
		}
	})
	t.Run("one party over its share", func(t *testing.T) {
		h, q := readQueueHarness(t, 64)
		_, from := peerSocket(t)
		bye := []byte(strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String()))
		for range readQueueFastShare + 3 {
			q.take(bye, from)
		}
		if h.p.nodeBehind() {
			t.Error("behind because one party filled its own share of the fast lane")
		}
	})
	t.Run("the fast lane full for everyone", func(t *testing.T) {
		h, q := readQueueHarness(t, 64)
		for i := 2; i <= 6 && !h.p.nodeBehind(); i++ { // dialer-1 … dialer-5
			from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i)}), 5060)
			bye := []byte(strangerRequest("BYE", h.udp, "127.0.0.1:5999", "dlg")(from.String()))
			for range readQueueFastShare + 1 {
				q.take(bye, from)
			}
		}
		if !h.p.nodeBehind() {
			t.Errorf("not behind with the fast lane full (%d of %d)", q.fast.size, readQueueFast)
		}
	})
}
