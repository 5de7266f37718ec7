package sip

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/internal/siptest"
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

// Two Vias that send a response to different places never give one MAC
// input, whatever separators their fields hold.
func TestStatelessInputSeparatesFields(t *testing.T) {
	next := netip.MustParseAddr("127.0.0.1")
	orig := parsedVia(t, "SIP/2.0/UDP 127.0.0.2:40000;branch=ZEVIL\x00127.0.0.9\x0053\x00\x01y")
	alt := parsedVia(t, "SIP/2.0/UDP\x00127.0.0.2\x0040000\x00\x01ZEVIL 127.0.0.9:53;branch=y")
	cs := &sipmsg.CSeqHeader{SeqNo: 2, MethodName: "BYE"}
	d1, _ := statelessDest(orig)
	d2, _ := statelessDest(alt)
	if d1 == d2 {
		t.Fatalf("the two Vias go to one place (%v): the test proves nothing", d1)
	}
	if bytes.Equal(statelessInput(orig, cs, next), statelessInput(alt, cs, next)) {
		t.Errorf("Vias to %v and %v give one MAC input", d1, d2)
	}
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

// A BYE that cannot be sent on (too large for a datagram once the proxy's
// Via is added) leaves the call up at the carrier: it frees none of the
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
			// Short headers grow by a blank each when sipgo writes them
			// again ("X: a"), and one long one fills the datagram (not
			// thousands of short ones: the read path drops a message of more
			// than 200 header fields before parsing it).
			short := strings.Repeat("X:a\r\n", 180)
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

// The hop-by-hop ACK of a re-INVITE's non-2xx, arriving after the 2 s
// tombstone of a refused INVITE would have gone, still reaches sipgo's
// server transaction (which absorbs it), not the carrier.
func TestLateAckOfFailedReinviteNotRelayed(t *testing.T) {
	h, peer, car, ok := statelessSetup(t, nil)
	caller := peer.caller()
	car.mu.Lock()
	prev := car.answer
	car.answer = func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsInvite() && req.To().Params.Has("tag") {
			return sipmsg.NewResponseFromRequest(req, 488, "Not Acceptable Here", nil)
		}
		return prev(req)
	}
	car.mu.Unlock()
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
	time.Sleep(tombstoneTTL + sweepEvery + 500*time.Millisecond) // past the sweep that would drop a 2 s tombstone
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
