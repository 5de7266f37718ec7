package sip

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// rawBye reads conn until a BYE of Call-ID cid arrives (nil after 5 s)
// and returns its bytes: what the far end gets, before any parser of ours
// reads it.
func rawBye(t *testing.T, conn *net.UDPConn, cid string) []byte {
	t.Helper()
	buf := make([]byte, 65535)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_ = conn.SetReadDeadline(deadline)
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			return nil
		}
		if strings.HasPrefix(string(buf[:n]), "BYE ") && headerLine(buf[:n], "Call-ID") == "Call-ID: "+cid {
			return append([]byte(nil), buf[:n]...)
		}
	}
	return nil
}

// headerLine returns msg's first line starting with name+": ".
func headerLine(msg []byte, name string) string {
	for _, l := range strings.Split(string(msg), "\r\n") {
		if strings.HasPrefix(l, name+": ") {
			return l
		}
	}
	return ""
}

// TestOwnByeSentForHostileIdentities: the node's own BYEs (an operator's
// end, a call ended before its answer) reach both legs with the From and
// To the call's INVITE and 2xx set up, whatever those said, as long as
// sipgo parsed them once. Kept as text and parsed again, a From whose
// display name ends in a backslash (sipgo reads `a\ <sip:...>` but
// writes `"a\" <sip:...>`, which it cannot read back) left the call with
// no BYE at all; a tag followed by a space came back quoted once more (the
// far end's 481, the call left up); and a Contact whose quoted URI
// parameters sipgo writes out longer than it read came back hundreds of
// times longer, a BYE too large to send (and a parse that, at a few
// hundred bytes of such parameters, takes the node's memory).
func TestOwnByeSentForHostileIdentities(t *testing.T) {
	adm, pacer := newFakes()
	car, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer car.Close()
	peer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.LocalAddr().String(), CPS: 100}), adm, pacer)
	carAddr := netip.MustParseAddrPort(car.LocalAddr().String())
	peerAddr := netip.MustParseAddrPort(peer.LocalAddr().String())

	cases := []struct {
		name, from, to, contact string
	}{
		{"display name ending in a backslash", `a\ <sip:caller@127.0.0.2>;tag=ftag-1`, `<sip:100@127.0.0.1>;tag=callee-1`, `<sip:callee@` + carAddr.String() + `>`},
		{"tag followed by a space", `<sip:caller@127.0.0.2>;tag=ftag-2`, `<sip:100@127.0.0.1>;tag=callee-2 ;x=1`, `<sip:callee@` + carAddr.String() + `>`},
		{"quoted URI parameters", `<sip:caller@127.0.0.2>;tag=ftag-3`, `<sip:100@127.0.0.1>;tag=callee-3`, `<sip:callee@` + carAddr.String() + strings.Repeat(`;p="x y"`, 20) + `>`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cid := "hostile-" + string(rune('a'+i))
			inv := parseRaw(t, "INVITE sip:100@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP "+peerAddr.String()+";branch=z9hG4bK-"+cid+"\r\nFrom: "+tc.from+"\r\nTo: <sip:100@127.0.0.1>\r\nCall-ID: "+cid+"\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@"+peerAddr.String()+">\r\nContent-Length: 0\r\n\r\n").(*sipmsg.Request)
			ok := parseRaw(t, "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP "+peerAddr.String()+";branch=z9hG4bK-"+cid+"\r\nFrom: "+tc.from+"\r\nTo: "+tc.to+"\r\nCall-ID: "+cid+"\r\nCSeq: 1 INVITE\r\nContact: "+tc.contact+"\r\nContent-Length: 0\r\n\r\n").(*sipmsg.Response)
			d := dialogState{peer: leg{Addr: peerAddr, Proto: legUDP}, carrier: leg{Addr: carAddr, Proto: legUDP}, callID: cid, callerSeq: 1}
			d.keepIdentities(inv, ok)
			// What the node sent before it kept text: the parsed headers,
			// written out once.
			callerFrom, calleeTo := inv.From().Value(), ok.To().Value()

			h.p.byeLeg(d, false, byeReasonOperator)
			got := rawBye(t, car, cid)
			if got == nil {
				t.Fatal("no BYE at the carrier")
			}
			if l, want := headerLine(got, "From"), "From: "+callerFrom; l != want {
				t.Errorf("carrier's BYE: %q, want %q", l, want)
			}
			if l, want := headerLine(got, "To"), "To: "+calleeTo; l != want {
				t.Errorf("carrier's BYE: %q, want %q", l, want)
			}
			if first := strings.SplitN(string(got), "\r\n", 2)[0]; !strings.HasPrefix(first, "BYE sip:callee@"+carAddr.String()) {
				t.Errorf("carrier's BYE Request-URI: %.200q, want the 2xx's Contact", first)
			}

			h.p.byeLeg(d, true, byeReasonOperator)
			got = rawBye(t, peer, cid)
			if got == nil {
				t.Fatal("no BYE at the caller")
			}
			if l, want := headerLine(got, "From"), "From: "+calleeTo; l != want {
				t.Errorf("caller's BYE: %q, want %q", l, want)
			}
			if l, want := headerLine(got, "To"), "To: "+callerFrom; l != want {
				t.Errorf("caller's BYE: %q, want %q", l, want)
			}
		})
	}
}

// TestDialogIdentitiesBounded: what an answered call keeps for the node's
// own BYE is bounded by what its INVITE and 2xx carried, whatever sipgo
// makes of them when it writes them out. A 2xx To of quoted URI parameters
// (a carrier echoes the To of the INVITE it got) is written out hundreds
// of times longer than it came: kept as that text, a call up held
// hundreds of KB for its whole life (parsed clones share the message's
// bytes). The callee's tag is kept all the same.
func TestDialogIdentitiesBounded(t *testing.T) {
	to := `<sip:100@127.0.0.1` + strings.Repeat(`;p="x y"`, 20) + `>`
	// The To as the node forwarded it (sipgo's writing of it), echoed.
	var u sipmsg.Uri
	if err := sipmsg.ParseUri(to[1:len(to)-1], &u); err != nil {
		t.Fatal(err)
	}
	echoed := "<" + u.String() + ">;tag=callee-b"
	invRaw := "INVITE sip:100@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK-b\r\nFrom: <sip:caller@127.0.0.2>;tag=ftag-b\r\nTo: " + to + "\r\nCall-ID: bounded\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@127.0.0.2:5060>\r\nContent-Length: 0\r\n\r\n"
	okRaw := "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK-b\r\nFrom: <sip:caller@127.0.0.2>;tag=ftag-b\r\nTo: " + echoed + "\r\nCall-ID: bounded\r\nCSeq: 1 INVITE\r\nContact: " + echoed + "\r\nContent-Length: 0\r\n\r\n"
	inv := parseRaw(t, invRaw).(*sipmsg.Request)
	ok := parseRaw(t, okRaw).(*sipmsg.Response)
	if n := len(ok.To().Value()); n < 10*len(okRaw) {
		t.Fatalf("sipgo writes the echoed To in %d bytes (the 2xx has %d): the test needs one it writes out longer", n, len(okRaw))
	}
	var d dialogState
	d.keepIdentities(inv, ok)
	kept := len(d.callerFrom) + len(d.calleeTo) + len(d.calleeTag) + len(d.callerURI) + len(d.calleeURI)
	if limit := len(invRaw) + len(okRaw); kept > limit {
		t.Errorf("kept %d bytes of identities, more than the INVITE and 2xx together (%d)", kept, limit)
	}
	if d.calleeTag != "callee-b" || !strings.Contains(d.calleeTo, "tag=callee-b") {
		t.Errorf("callee's tag %q, To %.80q; want callee-b in both", d.calleeTag, d.calleeTo)
	}
}

func parseRaw(t *testing.T, raw string) sipmsg.Message {
	t.Helper()
	m, err := sipmsg.ParseMessage([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
