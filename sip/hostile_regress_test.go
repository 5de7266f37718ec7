package sip

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// Regression tests of the session-5 attack review of the stateless relay
// and raw shedding: each failed before its fix.

func parsedVia(t *testing.T, s string) *sipmsg.ViaHeader {
	t.Helper()
	msg, err := sipmsg.ParseMessage([]byte("SIP/2.0 200 OK\r\nVia: " + s + "\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	return msg.Via()
}

// End to end: a peer's BYE with a Via crafted to collide, and a response
// from the carrier's address under the genuine branch with the colliding
// Via: dropped as forged, nothing reaches the third host.
func TestStatelessViaCollisionNotRelayed(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, func() bool { return false })
	caller := peer.caller()
	victim := startUDPEnd(t, "127.0.0.9", nil)
	vport, pport := mustPort(t, victim.addr()), mustPort(t, peer.addr())
	bye := inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)
	bye.SetBody(nil)
	raw := bye.String()
	i := strings.Index(raw, "\r\n")
	raw = raw[:i+2] + "Via: SIP/2.0/UDP 127.0.0.2:" + strconv.Itoa(pport) + ";branch=ZEVIL\x00127.0.0.9\x00" + strconv.Itoa(vport) + "\x00\x01y\r\n" + raw[i+2:]
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	if _, err := peer.conn.WriteToUDP([]byte(raw), ra); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == 1 }, "the BYE at the carrier")
	fwd := car.requests(sipmsg.BYE)[0]
	branch, _ := fwd.Via().Params.Get("branch")
	res := sipmsg.NewResponseFromRequest(fwd, 200, "OK", nil)
	res.RemoveHeader("Via")
	s := res.String()
	j := strings.Index(s, "\r\n")
	s = s[:j+2] + "Via: SIP/2.0/UDP " + h.udp + ";branch=" + branch + "\r\n" +
		"Via: SIP/2.0/UDP\x00127.0.0.2\x00" + strconv.Itoa(pport) + "\x00\x01ZEVIL 127.0.0.9:" + strconv.Itoa(vport) + ";branch=y\r\n" + s[j+2:]
	if _, err := car.conn.WriteToUDP([]byte(s), ra); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return sipErrors(h, "forged_response") >= 1 }, "the response dropped as forged")
	if n := len(victim.responses()); n > 0 {
		t.Errorf("a response was relayed to the third host 127.0.0.9:%d: %s", vport, victim.responses()[0].StartLine())
	}
}

// A BYE that cannot be sent on (too large for a datagram once the proxy
// writes it again) leaves the call up at the carrier: it frees none of the
// call's max_calls places, so a peer cannot run more calls than it may by
// sending such BYEs. Both relays.
func TestUnsendableByeKeepsPlaces(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		t.Run("stateful="+strconv.FormatBool(stateful), func(t *testing.T) {
			statefulOnly.Store(stateful)
			defer statefulOnly.Store(false)
			car := siptest.StartCarrier(t, "127.0.0.1", nil)
			h, tr, store := startCallsProxy(t, car, 1, 0)
			peer := startUDPEnd(t, "127.0.0.2", nil)
			live := peerPlaces(t, store)
			ok := rawAnsweredCall(t, peer, h.udp, "unsendable")
			if live() != 1 {
				t.Fatalf("places after the call = %d, want 1", live())
			}
			peer.reset()
			bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.big-bye")
			raw := bye.String()
			i := strings.Index(raw, "\r\n\r\n")
			// Compact Content-Types grow by 12 bytes each when sipgo writes
			// them again ("c:" is "Content-Type: "), past what the proxy
			// allows a forward to grow (forwardGrowth), and one long header
			// fills the datagram (not thousands of short ones: the read
			// path drops a message of more than 200 header fields before
			// parsing it).
			short := strings.Repeat("c:a/b\r\n", 185)
			raw = raw[:i+2] + short + "Y: " + strings.Repeat("a", MaxMessageSize-len(raw)-len(short)-10) + "\r\n" + raw[i+2:]
			if len(raw) > MaxMessageSize {
				t.Fatalf("the BYE is %d bytes, over what the proxy parses: the test proves nothing", len(raw))
			}
			ra, _ := net.ResolveUDPAddr("udp", h.udp)
			if _, err := peer.conn.WriteToUDP([]byte(raw), ra); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return len(peer.responses()) == 1 }, "an answer to the BYE")
			if got := peer.responses()[0].StatusCode; got != 503 {
				t.Fatalf("answer to the unsendable BYE: %d, want 503", got)
			}
			if car.Count("BYE") != 0 {
				t.Fatal("the oversized BYE reached the carrier: the test proves nothing")
			}
			if live() != 1 || tr.Live() != 1 {
				t.Errorf("after a BYE that never left: %d places, %d tracked; want the call's 1 and 1", live(), tr.Live())
			}
		})
	}
}

// refuseReInvites has car answer every re-INVITE (an INVITE with a To
// tag) code, and everything else as before.
func refuseReInvites(car *udpEnd, code int, reason string) {
	car.mu.Lock()
	defer car.mu.Unlock()
	prev := car.answer
	car.answer = func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsInvite() && req.To().Params.Has("tag") {
			return sipmsg.NewResponseFromRequest(req, code, reason, nil)
		}
		return prev(req)
	}
}

// The hop-by-hop ACK of a re-INVITE's non-2xx, arriving after the 2 s
// tombstone of a refused INVITE would have gone, still reaches sipgo's
// server transaction (which absorbs it), not the carrier.
func TestLateAckOfFailedReinviteNotRelayed(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	caller := peer.caller()
	refuseReInvites(car, 488, "Not Acceptable Here")
	acks0 := len(car.requests(sipmsg.ACK))
	re := withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE), peer.addr(), "z9hG4bK.reinv-1")
	peer.send(h.udp, re)
	waitFor(t, func() bool {
		for _, r := range peer.responses() {
			if r.StatusCode == 488 {
				return true
			}
		}
		return false
	}, "the 488")
	// The node's own hop-by-hop ACK of the carrier's 488 (its client
	// transaction's, RFC 3261 17.1.1.3) may reach the carrier after the
	// 488 reached the caller: it is not the caller's ACK.
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) > acks0 }, "the node's ACK of the carrier's 488")
	acks := len(car.requests(sipmsg.ACK))
	time.Sleep(invites.TombstoneTTL + sweepEvery + 500*time.Millisecond) // past the sweep that would drop a 2 s tombstone
	ack := withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.ACK), peer.addr(), "z9hG4bK.reinv-1")
	ack.CSeq().SeqNo = re.CSeq().SeqNo
	peer.send(h.udp, ack)
	// A marker after it: once the carrier has the marker's INFO, the ACK
	// (sent first on the same path) would have been relayed too.
	peer.send(h.udp, withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.INFO), peer.addr(), "z9hG4bK.marker"))
	waitFor(t, func() bool { return len(car.requests(sipmsg.INFO)) >= 1 }, "the marker INFO at the carrier")
	if n := len(car.requests(sipmsg.ACK)); n > acks {
		t.Errorf("the ACK of the re-INVITE's 488 was relayed to the carrier (%d ACKs there, %d before)", n, acks)
	}
}

// The raw path never sheds what the parsed path would not (header names
// fold ASCII only, as sipgo's do).
func TestRawShedNamesFoldASCIIOnly(t *testing.T) {
	base := "INVITE sip:x@h SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=t\r\nTo: <sip:x@h>\r\nCall-ID: c1\r\n"
	for name, msg := range map[string]string{
		"long s in CSeq":         base + "C\u017feq: 1 INVITE\r\n\r\n",
		"long s in Max-Forwards": base + "CSeq: 1 INVITE\r\nMax-Forward\u017f: 70\r\n\r\n",
		"kelvin in a name":       base + "CSeq: 1 INVITE\r\nX-\u212aey: 1\r\n\r\n",
	} {
		_, raw := scanInvite([]byte(msg))
		_, _, parsed := parsedShed([]byte(msg), "192.0.2.7:5062", "cgshed.t")
		if raw && !parsed {
			t.Errorf("%s: the raw path sheds, the parsed path would not", name)
		}
	}
}

// firstLengthFrames splits a SIP stream as a lenient parser does: lines
// end at LF (a CR before it dropped), the header section at the first
// empty line, and a message's body is the first Content-Length's bytes
// (Kamailio reads the first of a header that may appear once). It
// returns the start lines of the messages it finds.
func firstLengthFrames(stream []byte) []string {
	var starts []string
	for len(stream) > 0 {
		n, first, off, seen := 0, true, 0, false
		for {
			j := bytes.IndexByte(stream[off:], '\n')
			if j < 0 {
				return starts
			}
			line := strings.TrimSuffix(string(stream[off:off+j]), "\r")
			off += j + 1
			if first {
				starts = append(starts, line)
				first = false
				continue
			}
			if line == "" {
				break
			}
			name, v, ok := strings.Cut(line, ":")
			if name = strings.ToLower(strings.TrimSpace(name)); ok && !seen && (name == "content-length" || name == "l") {
				n, _ = strconv.Atoi(strings.TrimSpace(v))
				seen = true
			}
		}
		stream = stream[min(len(stream), off+n):]
	}
	return starts
}

// tcpRecorder listens for the node's TCP connections on 127.0.0.1 and
// keeps every byte the node writes (closed at the end of the test).
func tcpRecorder(t *testing.T) (addr string, written func() []byte) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	var stream []byte
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 8192)
				for {
					n, err := c.Read(buf)
					mu.Lock()
					stream = append(stream, buf[:n]...)
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String(), func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return append([]byte(nil), stream...)
	}
}

// smuggledInvite is an INVITE a peer hides in the message it sends, to
// reach the carrier as a message of its own.
func smuggledInvite(carrier string) string {
	return "INVITE sip:200@" + carrier + ";transport=tcp SIP/2.0\r\n" +
		"Via: SIP/2.0/TCP 127.0.0.1:5060;branch=z9hG4bK.smuggled\r\nMax-Forwards: 70\r\n" +
		"From: <sip:x@127.0.0.1>;tag=smuggled\r\nTo: <sip:200@127.0.0.1>\r\nCall-ID: smuggled\r\n" +
		"CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
}

// smuggleCheck sends raw from the peer to the node, waits for the node's
// final answer to Call-ID id, and fails unless it is 400 and the carrier
// tcpCarrierProxy is a proxy whose one carrier is a tcpRecorder (its
// address, and what it read).
func tcpCarrierProxy(t *testing.T) (h *harness, car string, written func() []byte) {
	t.Helper()
	car, written = tcpRecorder(t)
	adm, pacer := newFakes()
	h = startProxy(t, testConfig(config.Carrier{Name: "tcp", URI: "sip:" + car + ";transport=tcp", CPS: 100, MaxWait: time.Second}), adm, pacer)
	return h, car, written
}

// over TCP read a single INVITE (none, when the call never reached it).
func smuggleCheck(t *testing.T, h *harness, peer *udpEnd, written func() []byte, id, raw string) {
	t.Helper()
	if _, err := sipmsg.ParseMessage([]byte(raw)); err != nil {
		t.Fatalf("sipgo does not parse the test's INVITE: %v\n%q", err, raw)
	}
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	if _, err := peer.conn.WriteToUDP([]byte(raw), ra); err != nil {
		t.Fatal(err)
	}
	// The node answers 400 at once; before the fixes the INVITE went to
	// the carrier (which never answers here) and the caller got the
	// node's failure after the carrier's setup timeout.
	r := finalOfRaw(peer, id, sipmsg.INVITE, 0)
	invites := 0
	starts := firstLengthFrames(written())
	for _, s := range starts {
		if strings.HasPrefix(s, "INVITE ") {
			invites++
		}
	}
	if invites > 1 {
		t.Fatalf("messages at the TCP carrier, framed leniently: %q; want one INVITE at most", starts)
	}
	if r == nil || r.StatusCode != 400 {
		t.Fatalf("the peer's INVITE: %v, want 400", r)
	}
}

// TestDuplicateContentLengthNotRelayed: a peer's INVITE with two
// Content-Length headers (0, then its body's length) whose body is a
// second INVITE is refused 400 and never reaches the carrier. sipgo reads
// the last of a header that may appear once (Content-Length, To, From,
// Call-ID, CSeq, Max-Forwards) and writes them all back: a carrier over
// TCP that reads the first Content-Length took the body for a message of
// its own, an INVITE from the node's connection that no admission,
// pacing slot or max_calls place granted.
func TestDuplicateContentLengthNotRelayed(t *testing.T) {
	h, car, written := tcpCarrierProxy(t)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	smuggled := smuggledInvite(car)
	inv := rawInviteFrom(peer, h.udp, "two-lengths", "ftag-two-lengths")
	inv.RemoveHeader("Content-Length")
	raw := strings.TrimSuffix(inv.String(), "\r\n\r\n") + "\r\nContent-Length: 0\r\nContent-Length: " + strconv.Itoa(len(smuggled)) + "\r\n\r\n" + smuggled
	smuggleCheck(t, h, peer, written, "two-lengths", raw)
}

// TestDuplicateToNotRelayed: a re-INVITE of an answered call that carries
// a To without a tag first and the dialog's To (with the callee's tag)
// last is refused 400 and not relayed: the node (sipgo, the last To) took
// it for a request of the dialog, its token opened, and the carrier, had
// it read the first To, got an INVITE without a To tag: a new call.
func TestDuplicateToNotRelayed(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	re := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.INVITE)
	re = withVia(re, peer.addr(), "z9hG4bK.two-tos")
	raw := re.String()
	firstTo := "To: " + (&sipmsg.ToHeader{Address: ok.To().Address}).Value() + "\r\n"
	raw = strings.Replace(raw, "To: ", firstTo+"To: ", 1)
	m, err := sipmsg.ParseMessage([]byte(raw))
	if err != nil || msgpart.Tag(m.To().Params) == "" {
		t.Fatalf("sipgo must read the test's re-INVITE with the To tag (err %v):\n%s", err, raw)
	}
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	if _, err := peer.conn.WriteToUDP([]byte(raw), ra); err != nil {
		t.Fatal(err)
	}
	r := finalOfRaw(peer, msgpart.CallID(ok), sipmsg.INVITE, 0)
	if r == nil || r.StatusCode != 400 {
		t.Fatalf("re-INVITE with two To headers: %v, want 400", r)
	}
	if n := len(car.requests(sipmsg.INVITE)); n != 0 {
		t.Fatalf("INVITEs at the carrier after the call's = %d, want 0", n)
	}
}

// TestBareLineFeedNotRelayed: a peer's INVITE with a bare LF in a header
// value (sipgo ends lines at CRLF only, so "X-A: a<LF>Content-Length:
// 0<LF><LF>INVITE ..." is one header to it) is refused and never reaches
// the carrier. The node relayed the value as it came; a carrier over TCP
// whose parser ends lines at LF (RFC 3261 7.5 asks parsers to be lenient;
// Kamailio is) read a header section ended at the empty line and the rest
// as a message of its own: an INVITE no admission granted. Over UDP the
// same trick adds a header of the peer's choice before the node's view of
// it (a To without a tag before the dialog's: a new call).
func TestBareLineFeedNotRelayed(t *testing.T) {
	h, car, written := tcpCarrierProxy(t)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	hidden := strings.ReplaceAll(strings.TrimSuffix(smuggledInvite(car), "\r\n\r\n"), "\r\n", "\n")
	inv := rawInviteFrom(peer, h.udp, "bare-lf", "ftag-bare-lf")
	inv.AppendHeader(sipmsg.NewHeader("X-A", "a\nContent-Length: 0\n\n"+hidden))
	smuggleCheck(t, h, peer, written, "bare-lf", inv.String())
}

// TestBareLineFeedOverTCPClosed: the same INVITE from a peer over TCP
// closes its connection (counted stream) and nothing reaches the carrier.
func TestBareLineFeedOverTCPClosed(t *testing.T) {
	h, car, written := tcpCarrierProxy(t)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	host, port, _ := net.SplitHostPort(h.tcp)
	p, _ := strconv.Atoi(port)
	inv := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: host, Port: p})
	lhost, lport, _ := net.SplitHostPort(c.LocalAddr().String())
	lp, _ := strconv.Atoi(lport)
	via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "TCP", Host: lhost, Port: lp, Params: sipmsg.NewParams()}
	via.Params.Add("branch", "z9hG4bK.tcp-bare-lf")
	inv.AppendHeader(via)
	mf := sipmsg.MaxForwardsHeader(70)
	inv.AppendHeader(&mf)
	from := &sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: lhost}, Params: sipmsg.NewParams()}
	from.Params.Add("tag", "ftag-tcp-bare-lf")
	inv.AppendHeader(from)
	inv.AppendHeader(&sipmsg.ToHeader{Address: sipmsg.Uri{Scheme: "sip", User: "100", Host: host}, Params: sipmsg.NewParams()})
	cid := sipmsg.CallIDHeader("tcp-bare-lf")
	inv.AppendHeader(&cid)
	inv.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.INVITE})
	hidden := strings.ReplaceAll(strings.TrimSuffix(smuggledInvite(car), "\r\n\r\n"), "\r\n", "\n")
	inv.AppendHeader(sipmsg.NewHeader("X-A", "a\nContent-Length: 0\n\n"+hidden))
	inv.SetBody(nil)
	if _, err := c.Write([]byte(inv.String())); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	var got []byte
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	if len(got) > 0 {
		t.Errorf("the node answered over the connection: %q", got)
	}
	if n := sipErrors(h, "stream"); n != 1 {
		t.Errorf("sip_errors_total{stream} = %v, want 1", n)
	}
	if starts := firstLengthFrames(written()); len(starts) != 0 {
		t.Fatalf("messages at the TCP carrier, framed leniently: %q; want none", starts)
	}
}

// TestQuotedToParamNotRelayed: a re-INVITE of an answered call whose To
// is <...>;x="a;tag=raw-callee" is refused 400 and not relayed. sipgo's
// parameter parser does not honour quotes: it read a tag (raw-callee")
// and took the request for one of the dialog, and the carrier, reading
// the quoted string as RFC 3261 does, got an INVITE without a To tag: a
// new call. The same misreading of a From tag would let a BYE the carrier
// answers 481 (not its dialog) end the node's call while the carrier's
// goes on.
func TestQuotedToParamNotRelayed(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	for i, to := range []string{`;x="a;tag=raw-callee"`, `;x="a;tag=raw-callee;y"`} {
		re := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.INVITE)
		re.CSeq().SeqNo = uint32(10 + i)
		re = withVia(re, peer.addr(), "z9hG4bK.quoted-to-"+strconv.Itoa(i))
		raw := strings.Replace(re.String(), ";tag=raw-callee", to, 1)
		m, err := sipmsg.ParseMessage([]byte(raw))
		if err != nil || !msgpart.HasToTag(m.(*sipmsg.Request)) {
			t.Fatalf("sipgo must read a To tag in the test's re-INVITE (err %v):\n%s", err, raw)
		}
		ra, _ := net.ResolveUDPAddr("udp", h.udp)
		if _, err := peer.conn.WriteToUDP([]byte(raw), ra); err != nil {
			t.Fatal(err)
		}
		r := finalOfRaw(peer, msgpart.CallID(ok), sipmsg.INVITE, i)
		if r == nil || r.StatusCode != 400 {
			t.Fatalf("re-INVITE with To %q: %v, want 400", to, r)
		}
	}
	if n := len(car.requests(sipmsg.INVITE)); n != 0 {
		t.Fatalf("INVITEs at the carrier after the call's = %d, want 0", n)
	}
}

// plainParams refuses only what parsers read differently (a quote, a
// backslash, brackets, a comma, a blank inside): a tag outside RFC 3261's
// token, as an '@' in it, is read alike everywhere and passes, as it did
// before quoted values were refused (e2e's callers send tag=f-<call-id>,
// Call-IDs with '@' among them).
func TestPlainParamsRefusesOnlyWhatReadsOtherwise(t *testing.T) {
	for params, want := range map[string]bool{
		";tag=f-large@e2e":   true,
		";tag=abc;x=sip:a@b": true,
		" ;tag=abc ; x = y ": true,
		";tag=a/b=c":         true,
		`;x="a;tag=b"`:       false,
		`;tag=a\b`:           false,
		";tag=a<b":           false,
		";tag=a,b":           false,
		";tag=a b":           false,
		";tag=abc;x=\x01":    false,
	} {
		m, err := sipmsg.ParseMessage([]byte("INVITE sip:1@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK1\r\n" +
			"From: <sip:a@127.0.0.2>" + params + "\r\nTo: <sip:1@127.0.0.1>\r\nCall-ID: p\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"))
		if err != nil {
			if want {
				t.Errorf("From%s: sipgo refuses it: %v", params, err)
			}
			continue
		}
		if got := plainParams(m.(*sipmsg.Request).From().Params); got != want {
			t.Errorf("plainParams(From%s) = %v, want %v", params, got, want)
		}
	}
}

// An INVITE of MaxMessageSize, the largest the proxy reads, is forwarded:
// it was admitted, took its pacing slots and failed at every carrier,
// because the proxy's Via and Record-Route took it past the UDP send
// limit (h67; 503 No Carrier Available). What the proxy adds stays well
// inside forwardGrowth.
func TestLargestInviteIsForwarded(t *testing.T) {
	car := startAnsweringEnd(t, nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	raw := rawInviteFrom(peer, h.udp, "largest", "ftag-largest").String()
	i := strings.Index(raw, "\r\n\r\n")
	raw = raw[:i+2] + "X-Pad: " + strings.Repeat("p", MaxMessageSize-len(raw)-9) + "\r\n" + raw[i+2:]
	if len(raw) != MaxMessageSize {
		t.Fatalf("the INVITE is %d bytes, want %d", len(raw), MaxMessageSize)
	}
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	if _, err := peer.conn.WriteToUDP([]byte(raw), ra); err != nil {
		t.Fatal(err)
	}
	if r := finalOfRaw(peer, "largest", sipmsg.INVITE, 0); r == nil || r.StatusCode != 200 {
		t.Fatalf("the largest INVITE: final %v, want the carrier's 200", r)
	}
	invs := car.requests(sipmsg.INVITE)
	if len(invs) != 1 {
		t.Fatalf("INVITEs at the carrier: %d, want 1", len(invs))
	}
	if grown := len(invs[0].String()) - MaxMessageSize; grown <= 0 || 2*grown > forwardGrowth {
		t.Errorf("the forward grew by %d bytes; forwardGrowth (%d) must hold twice that (two Record-Route entries)", grown, forwardGrowth)
	}
}
