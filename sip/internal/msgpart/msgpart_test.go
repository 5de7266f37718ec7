package msgpart

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/wire"
)

// maxMessageSize is the sip package's MaxMessageSize: the parser the node
// reads datagrams with.
const maxMessageSize = 16 * 1024

// TestDetachedFromSharesNothing: what an answered call keeps of its
// INVITE after the INVITE (ackedCall's From and Request-URI) shares no
// byte with the parsed message, whose parser put all its text in one
// string: a kept part would keep the whole message's text.
func TestDetachedFromSharesNothing(t *testing.T) {
	raw := "INVITE sip:+1555@192.0.2.1:5060;user=phone?X=y SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK-1\r\n" +
		"From: \"Alice\" <sip:alice:pw@example.com;transport=udp>;tag=abc;x\r\n" +
		"To: <sip:+1555@example.com>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
	m, err := wire.NewParser(maxMessageSize).ParseSIP([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	req := m.(*sipmsg.Request)
	from, ruri := DetachedFrom(req.From()), DetachedURI(req.Recipient)
	if from.String() != req.From().String() || ruri.String() != req.Recipient.String() {
		t.Fatalf("copies %q %q differ from %q %q", from, ruri.String(), req.From(), req.Recipient.String())
	}
	var shared []string
	check := func(what, got, orig string) {
		if got != "" && unsafe.StringData(got) == unsafe.StringData(orig) {
			shared = append(shared, what)
		}
	}
	checkURI := func(what string, got, orig sipmsg.Uri) {
		check(what+" scheme", got.Scheme, orig.Scheme)
		check(what+" user", got.User, orig.User)
		check(what+" password", got.Password, orig.Password)
		check(what+" host", got.Host, orig.Host)
		for i := range orig.UriParams {
			check(what+" parameter", got.UriParams[i].K, orig.UriParams[i].K)
			check(what+" parameter value", got.UriParams[i].V, orig.UriParams[i].V)
		}
		for i := range orig.Headers {
			check(what+" header", got.Headers[i].K, orig.Headers[i].K)
		}
	}
	check("display name", from.DisplayName, req.From().DisplayName)
	checkURI("From", from.Address, req.From().Address)
	for i := range req.From().Params {
		check("From parameter", from.Params[i].K, req.From().Params[i].K)
		check("From parameter value", from.Params[i].V, req.From().Params[i].V)
	}
	checkURI("Request-URI", ruri, req.Recipient)
	if len(shared) > 0 {
		t.Fatalf("the copies share the INVITE's text: %v", shared)
	}
	if DetachedFrom(nil) != nil || DetachedParams(nil) != nil {
		t.Fatal("nil not copied as nil")
	}
}

// TestDetachedTelURISharesNothing: a tel: URI keeps its text in a field
// sipgo does not export; the copy still shares none of the INVITE's (h73).
// It is parsed again from its written form: what the node writes of it
// (scheme and text) is kept, not a host or port set on it, which sipgo
// neither writes nor routes by for such a URI (h74).
func TestDetachedTelURISharesNothing(t *testing.T) {
	raw := "INVITE tel:+15551234567;phone-context=example.com SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK-1\r\nFrom: <tel:+15550000000>;tag=abc\r\n" +
		"To: <tel:+15551234567>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
	m, err := wire.NewParser(maxMessageSize).ParseSIP([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	req := m.(*sipmsg.Request)
	ru, f := DetachedURI(req.Recipient), DetachedFrom(req.From())
	if !reflect.DeepEqual(ru, req.Recipient) || !reflect.DeepEqual(f.Address, req.From().Address) {
		t.Fatalf("copies %#v %#v differ from %#v %#v", ru, f.Address, req.Recipient, req.From().Address)
	}
	if unsafe.StringData(ru.Raw()) == unsafe.StringData(req.Recipient.Raw()) {
		t.Errorf("the copied Request-URI %q shares the INVITE's text", ru.Raw())
	}
	if unsafe.StringData(f.Address.Raw()) == unsafe.StringData(req.From().Address.Raw()) {
		t.Errorf("the copied From URI %q shares the INVITE's text", f.Address.Raw())
	}
}

// TestRelayedResponseDropsOnlyTheTopVia: RelayResponse changes the
// response it is given (no copy): the proxy's Via goes, the rest stays.
func TestRelayedResponseDropsOnlyTheTopVia(t *testing.T) {
	raw := "SIP/2.0 200 OK\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-proxy\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-top;rport=5070;received=127.0.0.2\r\n" +
		"From: <sip:a@127.0.0.2>;tag=f1\r\n" +
		"To: <sip:b@127.0.0.9>;tag=t1\r\n" +
		"Call-ID: relay-test\r\n" +
		"CSeq: 2 BYE\r\n" +
		"Content-Length: 0\r\n\r\n"
	msg, err := sipmsg.ParseMessage([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	res := msg.(*sipmsg.Response)
	want := strings.Replace(raw, "Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-proxy\r\n", "", 1)
	r := RelayResponse(res, "127.0.0.2:5070", "UDP")
	if got := r.String(); got != want {
		t.Fatalf("relayed:\n%s\nwant:\n%s", got, want)
	}
	if r.Destination() != "127.0.0.2:5070" || r.Transport() != "UDP" {
		t.Errorf("addressed to %s over %s", r.Destination(), r.Transport())
	}
	if v := r.Via(); v == nil || v.Host != "127.0.0.2" {
		t.Errorf("top Via now %v", v)
	}
}

// TestTopViasInPlace: TopVias finds the top two Vias (a compact "v:" one
// too) without allocating.
func TestTopViasInPlace(t *testing.T) {
	m, err := sipmsg.ParseMessage([]byte("INVITE sip:100@127.0.0.1 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-top;rport\r\n" +
		"Max-Forwards: 70\r\n" +
		"v: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-second\r\n" +
		"From: <sip:a@x>;tag=1\r\nTo: <sip:100@127.0.0.1>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	req := m.(*sipmsg.Request)
	first, second := TopVias(req)
	if first == nil || second == nil || first.Host != "127.0.0.2" || second.Host != "10.0.0.1" {
		t.Fatalf("got %v and %v, want the Vias of 127.0.0.2 and 10.0.0.1", first, second)
	}
	if raceEnabled {
		return
	}
	if n := testing.AllocsPerRun(100, func() { TopVias(req) }); n != 0 {
		t.Errorf("got %v allocations, want 0", n)
	}
}
