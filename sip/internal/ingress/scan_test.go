package ingress

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"
)

const invite = "INVITE sip:911@127.0.0.1 SIP/2.0\r\n" +
	"Via: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK-1;rport\r\n" +
	"From: <sip:a@127.0.0.2>;tag=f1\r\n" +
	"To: <sip:911@127.0.0.1>\r\n" +
	"Call-ID: abc@127.0.0.2\r\n" +
	"CSeq: 1 INVITE\r\n" +
	"Max-Forwards: 70\r\n" +
	"Content-Length: 0\r\n\r\n"

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		kind    Kind
		callID  string
		headers int
		params  int
		maxElem int
		err     error
	}{
		{name: "invite", data: invite, kind: KindInvite, callID: "abc@127.0.0.2", headers: 7, params: 3, maxElem: 2},
		{name: "response", data: "SIP/2.0 200 OK\r\ni:  x1 \r\nVia: SIP/2.0/UDP h;branch=b\r\n\r\n", kind: KindResponse, callID: "x1", headers: 2, params: 1, maxElem: 1},
		{name: "bye", data: "BYE sip:a SIP/2.0\r\ncall-id: q\r\n\r\n", kind: KindInDialog, callID: "q", headers: 1},
		{name: "subscribe", data: "SUBSCRIBE sip:a SIP/2.0\r\n\r\n", kind: KindInDialog},
		{name: "info", data: "INFO sip:a SIP/2.0\r\n\r\n", kind: KindInDialog},
		{name: "options waits with calls", data: "OPTIONS sip:a SIP/2.0\r\n\r\n", kind: KindOther},
		{name: "lower case invite is other", data: "invite sip:a SIP/2.0\r\n\r\n", kind: KindOther},
		{name: "cancel", data: "CANCEL sip:a SIP/2.0\r\n\r\n", kind: KindOther},
		// sipgo ends a line at CRLF only: a bare LF is a byte of the line
		// (here of the start line, which sipgo does not parse).
		{name: "LF only is one line", data: "BYE sip:a SIP/2.0\nCall-ID: lf\nVia: x;a;b\n\nbody;;;;", kind: KindInDialog, params: 6, maxElem: 6},
		{name: "start line parameters count", data: "INVITE sip:a;x;y?h=1&j=2 SIP/2.0\r\nVia: a;b\r\n\r\n", kind: KindInvite, headers: 1, params: 4, maxElem: 3},
		{name: "start line over the bound",
			data: "INVITE sip:a" + strings.Repeat(";p", 33) + " SIP/2.0\r\nCall-ID: x\r\n\r\n", kind: KindInvite, err: ErrParams},
		// A bare LF before a line without a colon: sipgo reads one Via.
		{name: "bare LF does not start a field",
			data: "BYE sip:a SIP/2.0\r\nVia: a;b\n" + strings.Repeat(";p", 40) + "\r\n\r\n", kind: KindInDialog, err: ErrParams},
		// A bare LF and a CRLF: not the end of the header section to sipgo.
		{name: "bare LF before CRLF is not the end of the headers",
			data: "BYE sip:a SIP/2.0\r\nX: y\n\r\nVia: a" + strings.Repeat(";p", 40) + "\r\n\r\n", kind: KindInDialog, err: ErrParams},
		{name: "bare LF empty line is not the end of the headers",
			data: "BYE sip:a SIP/2.0\r\nX: y\n\nVia: a" + strings.Repeat(";p", 40) + "\r\n\r\n", kind: KindInDialog, err: ErrParams},
		{name: "body not scanned", data: "BYE sip:a SIP/2.0\r\nCall-ID: b\r\n\r\n" + strings.Repeat(";", 1000), kind: KindInDialog, callID: "b", headers: 1},
		{name: "first Call-ID wins", data: "BYE sip:a SIP/2.0\r\nCall-ID: one\r\nI: two\r\n\r\n", kind: KindInDialog, callID: "one", headers: 2},
		{name: "no Call-ID", data: "BYE sip:a SIP/2.0\r\nFrom: a\r\n\r\n", kind: KindInDialog, headers: 1},
		{name: "folded line is one field and one element",
			data: "BYE sip:a SIP/2.0\r\nFrom: <sip:a>;x\r\n ;y;z\r\n\r\n", kind: KindInDialog, headers: 1, params: 3, maxElem: 3},
		{name: "list elements counted apart",
			data: "BYE sip:a SIP/2.0\r\nVia: a;1;2;3, b;1;2, c;1\r\n\r\n", kind: KindInDialog, headers: 3, params: 6, maxElem: 3},
		{name: "commas inside angle brackets do not split",
			data: "BYE sip:a SIP/2.0\r\nRoute: <sip:a;x,y;z>;lr\r\n\r\n", kind: KindInDialog, headers: 2, params: 3, maxElem: 3},
		{name: "commas of a non-list header do not split",
			data: "BYE sip:a SIP/2.0\r\nFrom: <sip:a>;a;b,;c;d\r\n\r\n", kind: KindInDialog, headers: 1, params: 4, maxElem: 4},
		{name: "quoted separators count",
			data: "BYE sip:a SIP/2.0\r\nVia: a;oc-algo=\"x;y,z\";b\r\n\r\n", kind: KindInDialog, headers: 2, params: 3, maxElem: 3},
		// sipgo's To and Contact parameter parsers know no escapes.
		{name: "escaped separators in quotes count",
			data: "BYE sip:a SIP/2.0\r\nTo: <sip:a>;x=\"" + strings.Repeat("\\;", 33) + "\"\r\n\r\n", kind: KindInDialog, err: ErrParams},
		{name: "escaped quote stays quoted",
			data: "BYE sip:a SIP/2.0\r\nVia: a;x=\"\\\", b\\\\\";c\r\n\r\n", kind: KindInDialog, headers: 2, params: 2, maxElem: 2},
		{name: "URI headers count",
			data: "BYE sip:a SIP/2.0\r\nContact: <sip:a?x=1&y=2&z=3>\r\n\r\n", kind: KindInDialog, headers: 1, params: 2, maxElem: 2},
		{name: "element over the bound",
			data: "BYE sip:a SIP/2.0\r\nVia: a" + strings.Repeat(";p", 33) + "\r\n\r\n", kind: KindInDialog, err: ErrParams},
		{name: "element at the bound",
			data: "BYE sip:a SIP/2.0\r\nVia: a" + strings.Repeat(";p", 32) + "\r\n\r\n", kind: KindInDialog, headers: 1, params: 32, maxElem: 32},
		{name: "message over the bound",
			data: "BYE sip:a SIP/2.0\r\n" + strings.Repeat("Via: a"+strings.Repeat(";p", 30)+"\r\n", 9), kind: KindInDialog, err: ErrParams},
		{name: "non-list header over the bound through commas",
			data: "BYE sip:a SIP/2.0\r\nFrom: <sip:a>" + strings.Repeat(";p,", 33) + "\r\n\r\n", kind: KindInDialog, err: ErrParams},
		{name: "too many headers",
			data: "BYE sip:a SIP/2.0\r\n" + strings.Repeat("X:a\r\n", 201) + "\r\n", kind: KindInDialog, err: ErrHeaders},
		// sipgo makes a header of each element of these (quoted or
		// bracketed commas count too: an upper bound).
		{name: "list elements over the header bound",
			data: "BYE sip:a SIP/2.0\r\nRoute: " + strings.Repeat("<sip:a>,", 200) + "<sip:a>\r\n\r\n", kind: KindInDialog, err: ErrHeaders},
		{name: "list elements at the header bound",
			data: "BYE sip:a SIP/2.0\r\nm: " + strings.Repeat("<sip:a>,", 199) + "<sip:a>\r\n\r\n", kind: KindInDialog, headers: 200},
		{name: "Refer-To elements count",
			data: "BYE sip:a SIP/2.0\r\nRefer-To: " + strings.Repeat("\"a,\",", 200) + "\r\n\r\n", kind: KindInDialog, err: ErrHeaders},
		{name: "commas of other headers do not count",
			data: "BYE sip:a SIP/2.0\r\nFrom: <sip:a>" + strings.Repeat(",", 300) + "\r\n\r\n", kind: KindInDialog, headers: 1},
		{name: "headers at the bound",
			data: "BYE sip:a SIP/2.0\r\n" + strings.Repeat("X:a\r\n", 200) + "\r\n", kind: KindInDialog, headers: 200},
		{name: "empty", data: "", kind: KindOther},
		{name: "start line only", data: "INVITE sip:a SIP/2.0", kind: KindInvite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Scan([]byte(tc.data), DefaultBounds)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error: got %v, want %v", err, tc.err)
			}
			if info.Kind != tc.kind {
				t.Errorf("kind: got %d, want %d", info.Kind, tc.kind)
			}
			if err != nil {
				return
			}
			if string(info.CallID) != tc.callID || (tc.callID == "") != (info.CallID == nil) {
				t.Errorf("Call-ID: got %q (nil %v), want %q", info.CallID, info.CallID == nil, tc.callID)
			}
			if info.Headers != tc.headers || info.Params != tc.params || info.MaxElement != tc.maxElem {
				t.Errorf("headers, params, max element: got %d %d %d, want %d %d %d",
					info.Headers, info.Params, info.MaxElement, tc.headers, tc.params, tc.maxElem)
			}
		})
	}
}

// The bounds are off when zero.
func TestScanUnbounded(t *testing.T) {
	data := "BYE sip:a SIP/2.0\r\n" + strings.Repeat("Via: a"+strings.Repeat(";p", 100)+"\r\n", 300) + "\r\n"
	info, err := Scan([]byte(data), Bounds{})
	if err != nil || info.Params != 30000 || info.Headers != 300 || info.MaxElement != 100 {
		t.Fatalf("got %+v, %v", info, err)
	}
}

func FuzzScan(f *testing.F) {
	f.Add([]byte(invite))
	f.Add([]byte("SIP/2.0 180 Ringing\r\nVia: a;b, c;d\r\nCall-ID: x\r\n\r\n"))
	f.Add([]byte("BYE x\n i: \"a\\\"\" ;<>,\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b := Bounds{ElementParams: 8, MessageParams: 16, Headers: 10}
		info, err := Scan(data, b)
		if info.MaxElement > info.Params {
			t.Fatalf("max element %d > params %d", info.MaxElement, info.Params)
		}
		if err == nil && (info.MaxElement > b.ElementParams || info.Params > b.MessageParams || info.Headers > b.Headers) {
			t.Fatalf("passed over the bounds: %+v", info)
		}
		if info.CallID != nil {
			off := offsetIn(data, info.CallID)
			if off < 0 || off+len(info.CallID) > len(data) || !bytes.Equal(data[off:off+len(info.CallID)], info.CallID) {
				t.Fatalf("Call-ID %q is not a part of the data", info.CallID)
			}
		}
		if want := kindOf(data); info.Kind != want {
			t.Fatalf("kind %d, want %d", info.Kind, want)
		}
		// The reader's Classify finds the same kind and Call-ID as the
		// full scan (the shard of a datagram must not depend on which).
		full, _ := Scan(data, Bounds{})
		c := Classify(data)
		if c.Kind != full.Kind || !bytes.Equal(c.CallID, full.CallID) || (c.CallID == nil) != (full.CallID == nil) {
			t.Fatalf("Classify %q/%d, Scan %q/%d", c.CallID, c.Kind, full.CallID, full.Kind)
		}
	})
}

func BenchmarkClassify(b *testing.B) {
	data := []byte(invite + "v=0\r\no=- 1 1 IN IP4 127.0.0.2\r\n")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if Classify(data).CallID == nil {
			b.Fatal("no Call-ID")
		}
	}
}

func BenchmarkScan(b *testing.B) {
	data := []byte(invite + "v=0\r\no=- 1 1 IN IP4 127.0.0.2\r\n")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Scan(data, DefaultBounds); err != nil {
			b.Fatal(err)
		}
	}
}

// parsedParams counts the parameters sipgo parsed in a message (each came
// after a separator of the raw bytes), and what it keeps unparsed counts as
// the separators of its value.
func parsedParams(m sipmsg.Message) int {
	uri := func(u *sipmsg.Uri) int { return len(u.UriParams) + len(u.Headers) }
	total := 0
	var hs []sipmsg.Header
	switch m := m.(type) {
	case *sipmsg.Request:
		total = uri(&m.Recipient)
		hs = m.Headers()
	case *sipmsg.Response:
		hs = m.Headers()
	}
	for _, h := range hs {
		switch h := h.(type) {
		case *sipmsg.ViaHeader:
			total += len(h.Params)
		case *sipmsg.ToHeader:
			total += len(h.Params) + uri(&h.Address)
		case *sipmsg.FromHeader:
			total += len(h.Params) + uri(&h.Address)
		case *sipmsg.ContactHeader:
			total += len(h.Params) + uri(&h.Address)
		case *sipmsg.RouteHeader:
			total += uri(&h.Address)
		case *sipmsg.RecordRouteHeader:
			total += uri(&h.Address)
		case *sipmsg.ReferToHeader:
			total += uri(&h.Address)
		case *sipmsg.ReferredByHeader:
			total += len(h.Params) + uri(&h.Address)
		case *sipmsg.CSeqHeader, *sipmsg.CallIDHeader, *sipmsg.MaxForwardsHeader, *sipmsg.ContentLengthHeader,
			*sipmsg.ContentTypeHeader, *sipmsg.ExpiresHeader:
		default:
			total += countSeparators(h.Value())
		}
	}
	return total
}

// Whatever a datagram holds, sipgo never parses more parameters in it
// than Scan counted separators (plus one per header field and one for the
// start line: sipgo takes what follows a '>' for a parameter without a
// separator): nothing sipgo parses escapes the bounds.
func FuzzScanBoundsWhatSipgoParses(f *testing.F) {
	f.Add([]byte(invite))
	f.Add([]byte("INVITE sip:a;x;y SIP/2.0\r\nVia: a;b\nc;d;e\r\nX: y\n\r\nTo: <sip:a>;t=\"\\;\\;\"\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := Scan(data, Bounds{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := sipmsg.NewParser().ParseSIP(data)
		if err != nil {
			return
		}
		if n := parsedParams(m); n > info.Params+info.Headers+1 {
			t.Fatalf("sipgo parsed %d parameters, Scan counted %d separators in %d fields: %q", n, info.Params, info.Headers, data)
		}
	})
}
