package wire

import (
	"reflect"
	"strings"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"
)

const testMax = 65535

// sameParse fails t unless Parser reads data as sipgo's parser does: the
// same message (field by field, through every pointer) and the same error.
func sameParse(t testing.TB, data []byte) {
	t.Helper()
	sameParseLimit(t, testMax, data)
}

// sameParseLimit is sameParse with both parsers' length limit max.
func sameParseLimit(t testing.TB, max int, data []byte) {
	t.Helper()
	sp := sipmsg.NewParser()
	sp.MaxMessageLength = max
	want, wantErr := sp.ParseSIP(data)
	got, gotErr := NewParser(max).ParseSIP(data)
	if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
		t.Fatalf("max %d, %q: error %v, sipgo's %v", max, data, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("max %d, %q: parsed\n%#v\nsipgo parses\n%#v", max, data, got, want)
	}
}

// callMessages are what the node reads on a call from SIPp and from
// itself: an INVITE with SDP, a 100, a 200 with SDP and SIPp's Vias (one
// header, the values after commas), an ACK, a BYE along two Route entries
// in one header (SIPp behind another proxy), its 200 with four Vias.
var callMessages = []string{
	"INVITE sip:service@127.0.0.1:5060 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-4012-1-0\r\n" +
		"From: sipp <sip:sipp@127.0.0.1:5061>;tag=4012SIPpTag001\r\n" +
		"To: service <sip:service@127.0.0.1:5060>\r\n" +
		"Call-ID: 1-4012@127.0.0.1\r\n" +
		"CSeq: 1 INVITE\r\n" +
		"Contact: sip:sipp@127.0.0.1:5061\r\n" +
		"Max-Forwards: 70\r\n" +
		"Subject: Performance Test\r\n" +
		"Content-Type: application/sdp\r\n" +
		"Content-Length:   129\r\n\r\n" +
		"v=0\r\no=user1 53655765 2353687637 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n",
	"SIP/2.0 100 Trying\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-4012-1-0;received=127.0.0.1;rport=5061\r\n" +
		"From: sipp <sip:sipp@127.0.0.1:5061>;tag=4012SIPpTag001\r\n" +
		"To: service <sip:service@127.0.0.1:5060>\r\n" +
		"Call-ID: 1-4012@127.0.0.1\r\n" +
		"CSeq: 1 INVITE\r\n" +
		"Content-Length: 0\r\n\r\n",
	"SIP/2.0 200 OK\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK.cg1;rport=5060;received=127.0.0.1, SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-4012-1-0\r\n" +
		"Record-Route: <sip:127.0.0.1:5060;lr;cg=AbC_-9>\r\n" +
		"From: sipp <sip:sipp@127.0.0.1:5061>;tag=4012SIPpTag001\r\n" +
		"To: service <sip:service@127.0.0.1:5060>;tag=4013SIPpTag011\r\n" +
		"Call-ID: 1-4012@127.0.0.1\r\n" +
		"CSeq: 1 INVITE\r\n" +
		"Contact: <sip:127.0.0.1:5070;transport=UDP>\r\n" +
		"Content-Type: application/sdp\r\n" +
		"Content-Length: 4\r\n\r\nv=0\r",
	"ACK sip:127.0.0.1:5070;transport=UDP SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-4012-1-5\r\n" +
		"Route: <sip:127.0.0.1:5060;lr;cg=AbC_-9>\r\n" +
		"From: sipp <sip:sipp@127.0.0.1:5061>;tag=4012SIPpTag001\r\n" +
		"To: service <sip:service@127.0.0.1:5060>;tag=4013SIPpTag011\r\n" +
		"Call-ID: 1-4012@127.0.0.1\r\n" +
		"CSeq: 1 ACK\r\n" +
		"Contact: sip:sipp@127.0.0.1:5061\r\n" +
		"Max-Forwards: 70\r\n" +
		"Subject: Performance Test\r\n" +
		"Content-Length: 0\r\n\r\n",
	"BYE sip:127.0.0.1:5070;transport=UDP SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-4012-1-7\r\n" +
		"Route: <sip:127.0.0.1:5080;lr;ftag=4012SIPpTag001>, <sip:127.0.0.1:5060;lr;cg=AbC_-9>\r\n" +
		"From: sipp <sip:sipp@127.0.0.1:5061>;tag=4012SIPpTag001\r\n" +
		"To: service <sip:service@127.0.0.1:5060>;tag=4013SIPpTag011\r\n" +
		"Call-ID: 1-4012@127.0.0.1\r\n" +
		"CSeq: 2 BYE\r\n" +
		"Contact: sip:sipp@127.0.0.1:5061\r\n" +
		"Max-Forwards: 70\r\n" +
		"Content-Length: 0\r\n\r\n",
	"SIP/2.0 200 OK\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK.cg2;rport=5060\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-4012-1-7;received=127.0.0.1;rport=5061\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5062;branch=z9hG4bK-third, SIP/2.0/TCP host.example:5063;branch=z9hG4bK-fourth;x=\"a b\"\r\n" +
		"From: sipp <sip:sipp@127.0.0.1:5061>;tag=4012SIPpTag001\r\n" +
		"To: service <sip:service@127.0.0.1:5060>;tag=4013SIPpTag011\r\n" +
		"Call-ID: 1-4012@127.0.0.1\r\n" +
		"CSeq: 2 BYE\r\n" +
		"Content-Length: 0\r\n\r\n",
}

// corners are shapes Parser must leave to sipgo or read as sipgo does.
var corners = []string{
	"",
	"\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n \tfolded=1\r\nCall-ID: x\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=1\rX\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=1, SIP/2.0/UDP g;branch=2\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nRoute: <sip:a;lr>, <sip:b;lr>\r\nContact: <sip:a>, <sip:b>\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nNo colon here\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\n: empty name\r\n  X-Spaced  :  v  \r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nA-Very-Long-Header-Name-Indeed: 1\r\nMAX-FORWARDS: 7\r\nmax-forwards: x\r\n\r\n",
	"INVITE * SIP/2.0\r\nCall-ID: x\r\n\r\n",
	"invite sip:a@b SIP/2.0\r\nCall-ID: x\r\n\r\n",
	"INVITE sip:a@b SIP/2.0 \r\nCall-ID: x\r\n\r\n",
	"INVITE sip:a@b sip/2.0\r\nCall-ID: x\r\n\r\n",
	"SIP/2.0 99999 Big\r\nCall-ID: x\r\n\r\n",
	"SIP/2.0 200\r\nCall-ID: x\r\n\r\n",
	"SIP/2.0 200 \r\nCall-ID: x\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\n",
	"\r\nINVITE sip:a@b SIP/2.0\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nContent-Length: 10\r\n\r\nshort",
	"INVITE sip:a@b SIP/2.0\r\nContent-Length: 2\r\nl: 3\r\n\r\nabcdef",
	"INVITE sip:a@b SIP/2.0\r\nContent-Length: 3\r\n\r\nabcdef",
	"INVITE sip:a@b SIP/2.0\r\nContent-Length: x\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nCall-ID: x\r\n\r\nno length, a body",
	"INVITE sip:a@b SIP/2.0\r\nv: SIP/2.0/UDP h\r\nf: <sip:a@b>;tag=1\r\nt: <sip:c@d>\r\ni: x\r\nm: *\r\nl: 0\r\nc: text/plain\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nFrom: \"A, B\" <sip:a@b>;tag=1\r\nTo: *\r\nCSeq: 99999999999 INVITE\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nCSeq: 1INVITE\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP [::1]:5060;branch=z9hG4bK1;rport\r\nVia: SIP/2.0/UDP [::1\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h:1;branch=1, SIP/2.0/UDP [::1]:2;branch=2, SIP/2.0/UDP g;branch=3\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;x=\"a,b\"\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h:5060, SIP/2.0/UDP g;branch=1\r\nVia: ,SIP/2.0/UDP h;,branch=1,\r\nVia: SIP/2.0/UDP h;branch=1,\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nContact: \"a,b\" <sip:a@b>;q=1, <sip:c@d;x=1,2>\r\nRecord-Route: <sip:a;lr>,<sip:b;lr>, <sip:c>\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nRefer-To: <sip:x@y>\r\nReferred-By: <sip:z@w>;p=1\r\nX-\u00e9: \u2028v\u2028\r\n\r\n",
	"SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nRecord-Route: <sip:1.2.3.4;lr>\r\nRecord-Route: <sip:5.6.7.8;lr>\r\nl: 0\r\n\r\n",
}

func TestParseMatchesSipgo(t *testing.T) {
	for _, ms := range [][]string{callMessages, corners, seeds} {
		for _, s := range ms {
			sameParse(t, []byte(s))
		}
	}
}

func TestParseTakesTheCallsMessagesItself(t *testing.T) {
	p := NewParser(testMax)
	for _, s := range callMessages {
		if p.parse([]byte(s)) == nil {
			t.Errorf("left to sipgo:\n%s", s)
		}
	}
}

func TestParseRefusesWhatSipgoRefuses(t *testing.T) {
	long := "INVITE sip:a@b SIP/2.0\r\nX: " + strings.Repeat("a", 100) + "\r\n\r\n"
	data := []byte(long)
	_, want := sipmsg.NewParser().ParseSIP(data)
	p := NewParser(len(data) - 1)
	if _, err := p.ParseSIP(data); err == nil || err.Error() != sipmsg.ErrMessageTooLarge.Error() || want != nil {
		t.Fatalf("over the limit: %v (sipgo without limit: %v)", err, want)
	}
}

func TestParseAllocatesLessThanSipgo(t *testing.T) {
	p, sp := NewParser(testMax), sipmsg.NewParser()
	for _, s := range callMessages {
		data := []byte(s)
		ours := testing.AllocsPerRun(50, func() { _, _ = p.ParseSIP(data) })
		theirs := testing.AllocsPerRun(50, func() { _, _ = sp.ParseSIP(data) })
		if ours >= theirs {
			t.Errorf("%d allocations, sipgo %d:\n%s", int(ours), int(theirs), s)
		}
	}
}

// FuzzParse: whatever the bytes, Parser returns what sipgo's parser
// returns (sameParse). Seeds: the call's messages, the corners, the
// writer's seeds and the sip package's raw-message corpora.
func FuzzParse(f *testing.F) {
	addSeeds(f, callMessages, corners, seeds)
	f.Fuzz(func(t *testing.T, data []byte) {
		sameParse(t, data)
	})
}

func BenchmarkParse(b *testing.B) {
	p := NewParser(testMax)
	data := callBytes()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		for _, d := range data {
			_, _ = p.ParseSIP(d)
		}
	}
}

func BenchmarkSipgoParse(b *testing.B) {
	p := sipmsg.NewParser()
	data := callBytes()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		for _, d := range data {
			_, _ = p.ParseSIP(d)
		}
	}
}

func callBytes() [][]byte {
	var out [][]byte
	for _, s := range callMessages {
		out = append(out, []byte(s))
	}
	return out
}

// TestParsedHeadersShareNoRoom: the headers Parser puts in one allocation
// keep their parameters apart: a parameter added to one (a received, an
// rport) or a header changed leaves the others as sipgo's parser left
// them.
func TestParsedHeadersShareNoRoom(t *testing.T) {
	for _, s := range callMessages {
		data := []byte(s)
		got, err := NewParser(testMax).ParseSIP(data)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := sipmsg.NewParser().ParseSIP(data)
		for _, m := range []sipmsg.Message{got, want} {
			for _, h := range m.(interface{ Headers() []sipmsg.Header }).Headers() {
				switch h := h.(type) {
				case *sipmsg.ViaHeader:
					h.Params.Add("received", "192.0.2.1")
				case *sipmsg.FromHeader:
					h.Params.Add("x", "1")
					h.Address.UriParams.Add("u", "2")
				case *sipmsg.ToHeader:
					h.Params.Add("tag", "changed")
				case *sipmsg.ContactHeader:
					h.Params.Add("expires", "60")
				case *sipmsg.CSeqHeader:
					h.SeqNo++
				}
			}
		}
		if got.String() != want.String() {
			t.Fatalf("after the same changes:\n%s\nsipgo's message:\n%s", got, want)
		}
	}
}
