package sip

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// parseReq parses a raw request as received from src over UDP.
func parseReq(t *testing.T, raw, src string) *sipmsg.Request {
	t.Helper()
	msg, err := sipmsg.ParseMessage([]byte(strings.ReplaceAll(raw, "\n", "\r\n") + "v=0\n"))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	req, ok := msg.(*sipmsg.Request)
	if !ok {
		t.Fatalf("not a request: %T", msg)
	}
	req.SetSource(src)
	req.SetTransport("UDP")
	return req
}

// withoutTopVia drops the top Via line (its branch is random) so two
// forwarded copies can be compared.
func withoutTopVia(s string) string {
	lines := strings.Split(s, "\r\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "Via:") {
			return strings.Join(append(lines[:i:i], lines[i+1:]...), "\r\n")
		}
	}
	return s
}

func viaParams(hs []sipmsg.Header, i int) sipmsg.HeaderParams {
	return hs[i].(*sipmsg.ViaHeader).Params
}

// TestForwardingLeavesTheReceivedRequestUnchanged: the forwarded request
// shares header objects with the received one (msgpart.ForwardCopy), which sipgo's
// server transaction keeps for its responses and for matching; forwarding
// must not change it by a byte, and two forwards of it must not disturb
// each other.
func TestForwardingLeavesTheReceivedRequestUnchanged(t *testing.T) {
	car := config.Carrier{Name: "c1", URI: "sip:127.0.0.9:5080", CPS: 100, MaxWait: time.Second}
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(car), adm, pacer)

	t.Run("INVITE", func(t *testing.T) {
		raw := "INVITE sip:+15551234@" + h.udp + ";transport=udp;user=phone;maddr=192.0.2.66?X-Evil=1 SIP/2.0\n" +
			"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-top;rport\n" +
			"Via: SIP/2.0/UDP 10.0.0.9:5060;branch=z9hG4bK-older\n" +
			"Route: <sip:" + h.udp + ";lr>\n" +
			"Route: <sip:192.0.2.66;lr>\n" +
			"Max-Forwards: 70\n" +
			"Record-Route: <sip:10.0.0.9;lr>\n" +
			"From: <sip:a@127.0.0.2>;tag=f1\n" +
			"To: <sip:+15551234@127.0.0.1>\n" +
			"Call-ID: copy-test\n" +
			"CSeq: 1 INVITE\n" +
			"Contact: <sip:a@127.0.0.2:5070>\n" +
			"X-Customer: acme\n" +
			"x-CUSTOMER: acme\n" +
			"Content-Type: application/sdp\n" +
			"Content-Length: 4\n\n"
		req := parseReq(t, raw, "127.0.0.2:5070")
		before := req.String()

		tgt := target{host: "127.0.0.9", port: 5080, transport: "TCP"}
		out := h.p.outboundInvite(h.p.cfg(), req, tgt, "tok")
		first := out.String()
		second := h.p.outboundInvite(h.p.cfg(), req, tgt, "tok").String()
		if after := req.String(); after != before {
			t.Fatalf("received INVITE changed by forwarding:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if withoutTopVia(first) != withoutTopVia(second) {
			t.Fatalf("two forwards differ:\n%s\n---\n%s", first, second)
		}

		if out.Recipient.Host != "127.0.0.9" || out.Recipient.Port != 5080 {
			t.Errorf("Request-URI %s", out.Recipient.String())
		}
		if v, _ := out.Recipient.UriParams.Get("transport"); v != "tcp" || !out.Recipient.UriParams.Has("user") {
			t.Errorf("Request-URI params %s", out.Recipient.String())
		}
		if out.Recipient.UriParams.Has("maddr") || out.Recipient.Headers.Length() != 0 {
			t.Errorf("Request-URI %s: maddr and URI headers must go", out.Recipient.String())
		}
		if hs := out.GetHeaders("X-Customer"); len(hs) != 0 {
			t.Errorf("customer header forwarded (header names are case-insensitive): %s", hs)
		}
		// Every Via stays a plain Via header: the proxy's on top, then the
		// received ones (a carrier copying the lines named "Via" must
		// return them all); the ACK of a non-2xx answer keeps one (ack.go).
		vias := out.GetHeaders("Via")
		if len(vias) != 3 || vias[0].(*sipmsg.ViaHeader).Transport != "TCP" {
			t.Fatalf("Vias %v: want the proxy's (TCP) and the two received", vias)
		}
		if out.Via() != vias[0] {
			t.Errorf("Via() = %v, want the proxy's own, on top (%v)", out.Via(), vias[0])
		}
		if out.GetHeader("v") != nil {
			t.Errorf("a compact Via header in\n%s", first)
		}
		reparsed, err := sipmsg.ParseMessage([]byte(first))
		if err != nil {
			t.Fatal(err)
		}
		all := reparsed.(*sipmsg.Request).GetHeaders("Via")
		if len(all) != 3 || strings.Count(first, "\r\nVia: ") != 3 {
			t.Fatalf("a SIP parser sees %d Vias in the forwarded INVITE, want 3 Via lines:\n%s", len(all), first)
		}
		if r, _ := viaParams(all, 1).Get("received"); r != "127.0.0.2" {
			t.Errorf("previous hop's Via %s: want received=127.0.0.2", all[1].Value())
		}
		if p, _ := viaParams(all, 1).Get("rport"); p != "5070" {
			t.Errorf("previous hop's Via %s: want rport=5070", all[1].Value())
		}
		if out.Route() != nil || len(out.GetHeaders("Route")) != 0 {
			t.Errorf("Route not stripped: %v", out.GetHeaders("Route"))
		}
		if rr := out.GetHeaders("Record-Route"); len(rr) != 3 {
			t.Errorf("Record-Route %v: want the proxy twice (UDP in, TCP out) and the original", rr)
		}
		// Order: the proxy's Via, the received Vias, then its
		// Record-Routes (outgoing leg's transport first, RFC 5658), then
		// the other received headers.
		hs := out.Headers()
		if hs[0].Name() != "Via" || hs[1].Name() != "Via" || hs[2].Name() != "Via" || hs[3].Name() != "Record-Route" || hs[4].Name() != "Record-Route" ||
			!strings.Contains(hs[3].Value(), "transport=tcp") || !strings.Contains(hs[4].Value(), "transport=udp") ||
			!strings.Contains(hs[1].Value(), "z9hG4bK-top") || !strings.Contains(hs[2].Value(), "z9hG4bK-older") {
			t.Errorf("top headers %s / %s / %s / %s / %s", hs[0], hs[1], hs[2], hs[3], hs[4])
		}
		if mf := out.MaxForwards(); mf == nil || mf.Val() != 69 {
			t.Errorf("Max-Forwards %v", mf)
		}
		if string(out.Body()) != "v=0\n" || !strings.HasSuffix(first, "\r\n\r\nv=0\n") {
			t.Errorf("body %q", out.Body())
		}
	})

	t.Run("BYE", func(t *testing.T) {
		legs := dialogLegs{Peer: leg{Addr: netip.MustParseAddrPort("127.0.0.2:5070")},
			Carrier: leg{Addr: netip.MustParseAddrPort("127.0.0.9:5080")}}
		tok := mustMint(t, h.p.keys, h.p.cfg(), legs, "copy-test", "f1")
		raw := "BYE sip:b@198.51.100.1:5999 SIP/2.0\n" +
			"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-bye;rport\n" +
			"Route: <sip:" + h.udp + ";lr;transport=udp;cg=" + tok + ">\n" +
			"Route: <sip:127.0.0.9:5080;lr;downstream>\n" +
			"Max-Forwards: 10\n" +
			"From: <sip:a@127.0.0.2>;tag=f1\n" +
			"To: <sip:+15551234@127.0.0.1>;tag=t1\n" +
			"Call-ID: copy-test\n" +
			"CSeq: 2 BYE\n" +
			"Content-Length: 4\n\n"
		req := parseReq(t, raw, "127.0.0.2:5070")
		before := req.String()
		hop, code := h.p.prepareInDialog(req, true)
		if code != 0 {
			t.Fatalf("prepareInDialog: %d", code)
		}
		out := hop.out
		fwd := out.String()
		if after := req.String(); after != before {
			t.Fatalf("received BYE changed by forwarding:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		// The carrier leg, whatever the Request-URI says.
		if out.Destination() != "127.0.0.9:5080" || out.Transport() != "UDP" || hop.dir != fromPeer {
			t.Errorf("next hop %s over %s (direction %d)", out.Destination(), out.Transport(), hop.dir)
		}
		// A downstream proxy's Route entry (a multi-proxy route set) stays.
		if r := out.GetHeaders("Route"); len(r) != 1 || !strings.Contains(r[0].Value(), "downstream") {
			t.Errorf("Route after the proxy's own: %v, want the downstream proxy's kept", r)
		}
		if len(out.GetHeaders("Via")) != 2 {
			t.Errorf("forwarded BYE:\n%s", fwd)
		}
		if mf := out.MaxForwards(); mf == nil || mf.Val() != 9 {
			t.Errorf("Max-Forwards %v", mf)
		}
	})
}

// TestInDialogAnswerGoesToViaPort: a UA that sends an in-dialog request
// from one UDP port and names another in its Via (no rport) gets the
// relayed answer on the Via's port (RFC 3261 18.2.2), not on the packet's
// source port.
func TestInDialogAnswerGoesToViaPort(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	// The call and the BYE leave from one socket (the dialog's peer leg).
	peer := startUDPEnd(t, "127.0.0.2", nil)
	ok := rawAnsweredCall(t, peer, h.udp, "via-port")
	peer.reset()
	via, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { via.Close() })
	bye := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE)
	bye.PrependHeader(sipmsg.NewHeader("Via", "SIP/2.0/UDP "+via.LocalAddr().String()+";branch=z9hG4bK-via-port"))
	cl := sipmsg.ContentLengthHeader(0)
	bye.AppendHeader(&cl)
	peer.send(h.udp, bye)
	buf := make([]byte, 65535)
	_ = via.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := via.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("nothing on the Via's port: %v", err)
	}
	if line, _, _ := strings.Cut(string(buf[:n]), "\r\n"); line != "SIP/2.0 200 OK" {
		t.Errorf("answer on the Via's port = %q, want SIP/2.0 200 OK", line)
	}
	time.Sleep(200 * time.Millisecond)
	if rs := peer.responses(); len(rs) > 0 {
		t.Errorf("the source port got %q; answers belong on the Via's port", rs[0].StartLine())
	}
}
