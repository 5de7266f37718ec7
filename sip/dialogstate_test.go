package sip

import (
	"strings"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"
)

// The identities an answered call keeps as text are what the INVITE and
// its 2xx said: display names with quotes and escapes, IPv6 hosts, ports,
// URI and header parameters, the tags; the URIs parse back. The node's
// own BYE is built from them, so what does not survive would be a BYE the
// far end refuses (481) and a call left up.
func TestDialogIdentitiesRoundTrip(t *testing.T) {
	parse := func(raw string) sipmsg.Message {
		t.Helper()
		m, err := sipmsg.ParseMessage([]byte(strings.ReplaceAll(raw, "\n", "\r\n")))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	inv := parse(`INVITE sip:+15551234@carrier.example:5080;user=phone SIP/2.0
Via: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK-1
From: "Alice \"A\" Smith" <sip:alice@[2001:db8::1]:5070;transport=tcp>;tag=abc-1;x=1
To: <sip:+15551234@carrier.example>
Call-ID: id-1@192.0.2.10
CSeq: 7 INVITE
Contact: <sip:alice@[2001:db8::1]:5070;transport=tcp;ob>
Max-Forwards: 70
Content-Length: 0

`).(*sipmsg.Request)
	ok := parse(`SIP/2.0 200 OK
Via: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK-1
From: "Alice \"A\" Smith" <sip:alice@[2001:db8::1]:5070;transport=tcp>;tag=abc-1;x=1
To: Bob <sip:+15551234@carrier.example>;tag=callee-9
Call-ID: id-1@192.0.2.10
CSeq: 7 INVITE
Contact: <sip:b2bua@198.51.100.7:5062;transport=udp>
Content-Length: 0

`).(*sipmsg.Response)
	var d dialogState
	d.keepIdentities(inv, ok)
	if d.calleeTag != "callee-9" {
		t.Errorf("callee's tag %q, want callee-9", d.calleeTag)
	}
	// From and To are kept as sipgo writes them, and go out so.
	if got, want := d.callerFrom, inv.From().Value(); got != want {
		t.Errorf("From kept %q, want %q", got, want)
	}
	if !strings.Contains(d.callerFrom, "tag=abc-1") || !strings.Contains(d.callerFrom, `"Alice \"A\" Smith"`) {
		t.Errorf("From kept %q: the caller's tag or display name lost", d.callerFrom)
	}
	if got, want := d.calleeTo, ok.To().Value(); got != want {
		t.Errorf("To kept %q, want %q", got, want)
	}
	callerURI, calleeURI, err := d.targets()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := callerURI.String(), inv.Contact().Address.String(); got != want {
		t.Errorf("caller's URI %q, want its Contact %q", got, want)
	}
	if got, want := calleeURI.String(), ok.Contact().Address.String(); got != want {
		t.Errorf("callee's URI %q, want the 2xx's Contact %q", got, want)
	}

	// Without a Contact in the 2xx, the callee's URI is the Request-URI.
	ok.RemoveHeader("Contact")
	var d2 dialogState
	d2.keepIdentities(inv, ok)
	if _, calleeURI, err := d2.targets(); err != nil || calleeURI.String() != inv.Recipient.String() {
		t.Errorf("callee's URI without a Contact: %q, %v; want the Request-URI %q", calleeURI.String(), err, inv.Recipient.String())
	}
	// Nothing kept (no answer): no BYE.
	if _, _, err := (&dialogState{}).targets(); err == nil {
		t.Error("an empty dialog state has targets")
	}
}
