package sip

import (
	"net/netip"
	"strings"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/invites"
)

func parseInvite(t *testing.T, raw string) *sipmsg.Request {
	t.Helper()
	m, err := sipmsg.ParseMessage([]byte(strings.ReplaceAll(raw, "\n", "\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	return m.(*sipmsg.Request)
}

const twoViaInvite = "INVITE sip:100@127.0.0.1 SIP/2.0\n" +
	"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-top;rport\n" +
	"Max-Forwards: 70\n" +
	"v: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-second\n" +
	"From: <sip:a@x>;tag=1\nTo: <sip:100@127.0.0.1>\nCall-ID: c1\nCSeq: 1 INVITE\nContent-Length: 0\n\n"

// TestInviteKeyBytes: the key of an INVITE's transaction is branch, a zero
// byte, host, ':' and port (the transport's default when the Via names
// none), and for an RFC 2543 branch a zero byte and the Call-ID (the
// layout the CANCEL lookup and sipgo's key follow); it costs one
// allocation, the key (two before: the port's text and the join).
func TestInviteKeyBytes(t *testing.T) {
	for _, tc := range []struct{ via, callID, want string }{
		{"127.0.0.2:5070;branch=z9hG4bK-1", "one", "z9hG4bK-1\x00127.0.0.2:5070"},
		{"127.0.0.2;branch=z9hG4bK-1", "one", "z9hG4bK-1\x00127.0.0.2:5060"},
		{"127.0.0.2:5070;branch=legacy", "two", "legacy\x00127.0.0.2:5070\x00two"},
		{"127.0.0.2:5070;branch=z9hG4bK", "three", "z9hG4bK\x00127.0.0.2:5070\x00three"},
	} {
		req := parseInvite(t, "INVITE sip:100@127.0.0.1 SIP/2.0\nVia: SIP/2.0/UDP "+tc.via+
			"\nFrom: <sip:a@x>;tag=1\nTo: <sip:100@127.0.0.1>\nCall-ID: "+tc.callID+"\nCSeq: 1 INVITE\nContent-Length: 0\n\n")
		if got := invites.KeyOf(req); string(got) != tc.want {
			t.Errorf("Via %s: got %q, want %q", tc.via, got, tc.want)
		}
	}
	if raceEnabled {
		return
	}
	req := parseInvite(t, twoViaInvite)
	if n := testing.AllocsPerRun(100, func() { _ = invites.KeyOf(req) }); n != 1 {
		t.Errorf("got %v allocations per key, want 1", n)
	}
}

// TestPrependViaWithRecordRoute: the proxy's Via goes on top, the
// received Vias follow in order, then the Record-Route, then the rest;
// gathering the received Vias allocates no list of its own.
func TestPrependViaWithRecordRoute(t *testing.T) {
	p := &Proxy{}
	lr := sipmsg.NewParams()
	lr.Add("lr", "")
	rr := &sipmsg.RecordRouteHeader{Address: sipmsg.Uri{Scheme: "sip", Host: "192.0.2.1", UriParams: lr}}
	req := parseInvite(t, twoViaInvite)
	prependVia(p, req, "UDP", netip.MustParseAddr("127.0.0.1"), []sipmsg.Header{rr})
	var names []string
	for _, h := range req.Headers() {
		names = append(names, h.Name())
	}
	if got, want := strings.Join(names, ","), "Via,Via,Via,Record-Route,Max-Forwards,From,To,Call-ID,CSeq,Content-Length"; got != want {
		t.Errorf("headers %s, want %s", got, want)
	}
	if req.Via() != req.Headers()[0] {
		t.Error("req.Via() is not the top Via")
	}
	if v := req.Headers()[1].(*sipmsg.ViaHeader); v.Host != "127.0.0.2" {
		t.Errorf("second Via %q, want the received top one", v.Value())
	}
	if raceEnabled {
		return
	}
	base := testing.AllocsPerRun(50, func() {
		r := parseInvite(t, twoViaInvite)
		prependVia(p, r, "UDP", netip.MustParseAddr("127.0.0.1"), []sipmsg.Header{rr})
	})
	parse := testing.AllocsPerRun(50, func() { parseInvite(t, twoViaInvite) })
	// The Via, its parameters, its branch, the received top Via's
	// parameters grown by rport and received, and the new header list (7
	// before, with GetHeaders' list of the received Vias).
	if n := base - parse; n > 6 {
		t.Errorf("got %v allocations per prepend, want at most 6", n)
	}
}

// TestKeepIdentitiesAllocations: an answered call's identities (the
// caller's From and URI, the callee's To, tag and URI) are written into
// one buffer and kept as parts of one string. sipgo's String and Value
// build each piece in a builder of their own: 42 allocations for this
// call's values before, on every answered call. What is left (14) is the
// buffer, the string and what sipgo's URI writer allocates inside (a
// port's digits, a parameter list's text).
func TestKeepIdentitiesAllocations(t *testing.T) {
	inv := parseInvite(t, "INVITE sip:100@127.0.0.1:5060 SIP/2.0\n"+
		"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-a\n"+
		"From: \"Caller\" <sip:caller@127.0.0.2:5070;user=phone>;tag=ftag-1\n"+
		"To: <sip:100@127.0.0.1>\nCall-ID: keep-1\nCSeq: 1 INVITE\n"+
		"Contact: <sip:caller@127.0.0.2:5070;transport=udp>\nContent-Length: 0\n\n")
	m, err := sipmsg.ParseMessage([]byte(strings.ReplaceAll("SIP/2.0 200 OK\n"+
		"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-a\n"+
		"From: \"Caller\" <sip:caller@127.0.0.2:5070;user=phone>;tag=ftag-1\n"+
		"To: <sip:100@127.0.0.1>;tag=callee-1\nCall-ID: keep-1\nCSeq: 1 INVITE\n"+
		"Contact: <sip:callee@127.0.0.3:5080;transport=udp>\nContent-Length: 0\n\n", "\n", "\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	ok := m.(*sipmsg.Response)
	var d dialogState
	d.keepIdentities(inv, ok)
	for _, c := range []struct{ name, got, want string }{
		{"caller's From", d.callerFrom, inv.From().Value()},
		{"caller's URI", d.callerURI, inv.Contact().Address.String()},
		{"callee's To", d.calleeTo, ok.To().Value()},
		{"callee's tag", d.calleeTag, "callee-1"},
		{"callee's URI", d.calleeURI, ok.Contact().Address.String()},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	if raceEnabled {
		return
	}
	if n := testing.AllocsPerRun(100, func() {
		var d dialogState
		d.keepIdentities(inv, ok)
	}); n > 14 {
		t.Errorf("got %v allocations to keep a dialog's identities, want at most 14", n)
	}
}
