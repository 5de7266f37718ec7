package sipbench

import (
	"strings"
	"testing"
)

func TestParseAndRespond(t *testing.T) {
	raw := "INVITE sip:bench@127.0.0.1:5060 SIP/2.0\r\n" +
		"v: SIP/2.0/UDP 127.0.0.1:5062;branch=z9hG4bKproxy\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bKcaller;rport\r\n" +
		"Record-Route: <sip:127.0.0.1:5062;lr>\r\n" +
		"f: <sip:caller@127.0.0.1>;tag=abc\r\n" +
		"t: <sip:bench@127.0.0.1>\r\n" +
		"i: call-1@bench\r\n" +
		"CSeq: 1 INVITE\r\n" +
		"Contact: <sip:caller@127.0.0.1:5061>\r\n" +
		"Content-Length: 0\r\n\r\n"
	m, ok := parse([]byte(raw))
	if !ok || !m.request || m.method != "INVITE" {
		t.Fatalf("parse: ok %v request %v method %q", ok, m.request, m.method)
	}
	if got := m.get("call-id"); got != "call-1@bench" {
		t.Errorf("call-id = %q, want call-1@bench", got)
	}
	if got := len(m.all("via")); got != 2 {
		t.Errorf("vias = %d, want 2", got)
	}
	res := string(response(&m, 200, "OK", "sink1", "Record-Route: "+m.get("record-route")))
	for _, want := range []string{
		"SIP/2.0 200 OK\r\n",
		"Via: SIP/2.0/UDP 127.0.0.1:5062;branch=z9hG4bKproxy\r\nVia: SIP/2.0/UDP 127.0.0.1:5061",
		"To: <sip:bench@127.0.0.1>;tag=sink1\r\n",
		"Record-Route: <sip:127.0.0.1:5062;lr>\r\n",
		"CSeq: 1 INVITE\r\n",
	} {
		if !strings.Contains(res, want) {
			t.Errorf("response lacks %q:\n%s", want, res)
		}
	}
	r, ok := parse([]byte(res))
	if !ok || r.request || r.code != 200 || r.cseqMethod() != "INVITE" {
		t.Errorf("parse response: ok %v code %d method %q", ok, r.code, r.cseqMethod())
	}
}

func TestURIHelpers(t *testing.T) {
	tests := []struct{ in, uri, hp string }{
		{"<sip:127.0.0.1:5062;lr>", "sip:127.0.0.1:5062;lr", "127.0.0.1:5062"},
		{"<sip:carrier@127.0.0.1>", "sip:carrier@127.0.0.1", "127.0.0.1:5060"},
		{"sip:x@[::1]:5070;transport=udp", "sip:x@[::1]:5070", "[::1]:5070"},
	}
	for _, tc := range tests {
		if got := uriOf(tc.in); got != tc.uri {
			t.Errorf("uriOf(%q) = %q, want %q", tc.in, got, tc.uri)
		}
		if got := hostPort(tc.uri); got != tc.hp {
			t.Errorf("hostPort(%q) = %q, want %q", tc.uri, got, tc.hp)
		}
	}
	if got := splitList(`<sip:a;lr>, "x,y" <sip:b>`); len(got) != 2 {
		t.Errorf("splitList = %q, want 2 entries", got)
	}
}
