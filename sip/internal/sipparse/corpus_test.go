package sipparse

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// crlf joins lines with CRLF, as they go on the wire.
func crlf(lines ...string) string { return strings.Join(lines, "\r\n") }

const sdp = "v=0\r\no=user1 53655765 2353687637 IN IP4 127.0.0.2\r\ns=-\r\nc=IN IP4 127.0.0.2\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"

// callMessages are the five datagrams the node reads in a SIPp call
// (testdata/sipp/uac.xml against uas.xml through the node): the caller's
// INVITE with SDP, the carrier's 200 with SDP, the caller's ACK and BYE
// on the Record-Route set, and the carrier's 200 to the BYE.
var callMessages = []struct{ name, msg string }{
	{"INVITE", crlf(
		"INVITE sip:100@127.0.0.1:5060 SIP/2.0",
		"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-123456-1-0",
		"From: sipp <sip:sipp@127.0.0.2:5061>;tag=123456SIPpTag001",
		"To: <sip:100@127.0.0.1:5060>",
		"Call-ID: 1-123456@127.0.0.2",
		"CSeq: 1 INVITE",
		"Contact: <sip:sipp@127.0.0.2:5061;transport=UDP>",
		"Max-Forwards: 70",
		"Subject: cpsguard",
		"Content-Type: application/sdp",
		"Content-Length: "+strconv.Itoa(len(sdp)),
		"", sdp)},
	{"200-INVITE", crlf(
		"SIP/2.0 200 OK",
		"Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-cg-0a1b2c3d4e5f;received=127.0.0.1;rport=5060",
		"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-123456-1-0;received=127.0.0.2;rport=5061",
		"Record-Route: <sip:127.0.0.1:5060;transport=udp;lr;cg=AAAAAAAAAAAAAAAAAAAAAA>",
		"From: sipp <sip:sipp@127.0.0.2:5061>;tag=123456SIPpTag001",
		"To: <sip:100@127.0.0.1:5060>;tag=654321SIPpTag011",
		"Call-ID: 1-123456@127.0.0.2",
		"CSeq: 1 INVITE",
		"Contact: <sip:127.0.0.3:5070;transport=UDP>",
		"Content-Type: application/sdp",
		"Content-Length: "+strconv.Itoa(len(sdp)),
		"", sdp)},
	{"ACK", crlf(
		"ACK sip:127.0.0.3:5070;transport=UDP SIP/2.0",
		"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-123456-1-5",
		"Route: <sip:127.0.0.1:5060;transport=udp;lr;cg=AAAAAAAAAAAAAAAAAAAAAA>",
		"From: sipp <sip:sipp@127.0.0.2:5061>;tag=123456SIPpTag001",
		"To: <sip:100@127.0.0.1:5060>;tag=654321SIPpTag011",
		"Call-ID: 1-123456@127.0.0.2",
		"CSeq: 1 ACK",
		"Contact: <sip:sipp@127.0.0.2:5061;transport=UDP>",
		"Max-Forwards: 70",
		"Content-Length: 0",
		"", "")},
	{"BYE", crlf(
		"BYE sip:127.0.0.3:5070;transport=UDP SIP/2.0",
		"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-123456-1-7",
		"Route: <sip:127.0.0.1:5060;transport=udp;lr;cg=AAAAAAAAAAAAAAAAAAAAAA>",
		"From: sipp <sip:sipp@127.0.0.2:5061>;tag=123456SIPpTag001",
		"To: <sip:100@127.0.0.1:5060>;tag=654321SIPpTag011",
		"Call-ID: 1-123456@127.0.0.2",
		"CSeq: 2 BYE",
		"Contact: <sip:sipp@127.0.0.2:5061;transport=UDP>",
		"Max-Forwards: 70",
		"Content-Length: 0",
		"", "")},
	{"200-BYE", crlf(
		"SIP/2.0 200 OK",
		"Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-cg-9f8e7d6c5b4a;received=127.0.0.1;rport=5060",
		"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-123456-1-7;received=127.0.0.2;rport=5061",
		"From: sipp <sip:sipp@127.0.0.2:5061>;tag=123456SIPpTag001",
		"To: <sip:100@127.0.0.1:5060>;tag=654321SIPpTag011",
		"Call-ID: 1-123456@127.0.0.2",
		"CSeq: 2 BYE",
		"Contact: <sip:127.0.0.3:5070;transport=UDP>",
		"Content-Length: 0",
		"", "")},
}

// edgeMessages are the constructs a parser is most likely to get wrong.
var edgeMessages = []string{
	crlf("SIP/2.0 100 Trying",
		"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-123456-1-0;received=127.0.0.2",
		"From: sipp <sip:sipp@127.0.0.2:5061>;tag=123456SIPpTag001",
		"To: <sip:100@127.0.0.1:5060>",
		"Call-ID: 1-123456@127.0.0.2",
		"CSeq: 1 INVITE",
		"Content-Length: 0", "", ""),
	crlf("SIP/2.0 180 Ringing",
		"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-123456-1-0;received=127.0.0.2",
		"Record-Route: <sip:127.0.0.1:5060;transport=udp;lr>, <sip:10.0.0.1;lr>",
		"Record-Route: <sip:[2001:db8::1]:5060;lr>",
		"From: sipp <sip:sipp@127.0.0.2:5061>;tag=123456SIPpTag001",
		"To: <sip:100@127.0.0.1:5060>;tag=654321SIPpTag011",
		"Call-ID: 1-123456@127.0.0.2",
		"CSeq: 1 INVITE",
		"Contact: <sip:127.0.0.3:5070;transport=UDP>;expires=60, \"Bob, Jr\" <sip:bob@[2001:db8::2]:5080>;q=0.5",
		"Content-Length: 0", "", ""),
	// Compact forms, mixed case names, odd whitespace.
	crlf("invite sip:bob@example.com SIP/2.0",
		"v: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1 , SIP/2.0/TCP [2001:db8::9]:5062;branch=z9hG4bK2;received=10.0.0.9",
		"f:   \"Alice \\\"A\\\" Smith\"   <sip:alice@example.com>;tag=x1",
		"t:<sip:bob@example.com>",
		"i:abc@def",
		"CSEQ:   7    INVITE",
		"m: *",
		"l: 0",
		"c: application/sdp",
		"MAX-FORWARDS: 10",
		"X-Empty:",
		"X-Spaces:    ",
		"  Leading-Space  :  value  ",
		"", ""),
	// Quoted Via parameters, IPv6 hosts, comma-separated Route.
	crlf("BYE sip:[2001:db8::1]:5070;transport=udp SIP/2.0",
		"Via: SIP/2.0/UDP [2001:db8::2]:5061;branch=z9hG4bK-3;oc-algo=\"loss,rate\";oc=20",
		"Via: SIP/2.0/UDP [2001:db8::3];branch=z9hG4bK-4",
		"Via: SIP/2.0/UDP [2001:db8::4]:abc;branch=z9hG4bK-5",
		"Route: <sip:[2001:db8::1]:5060;lr>, <sip:127.0.0.1;lr;transport=tcp>",
		"From: <sip:a@[2001:db8::2]>;tag=1",
		"To: <sip:b@[2001:db8::1]>;tag=2",
		"Call-ID: c",
		"CSeq: 2 BYE",
		"Refer-To: <sip:c@x>",
		"Referred-By: \"C\" <sip:c@x>;tag=9",
		"Content-Length: 0", "", ""),
	// Line folding.
	crlf("OPTIONS sip:a@b SIP/2.0",
		"Via: SIP/2.0/UDP 1.2.3.4;branch=z9hG4bK-f",
		"Subject: one",
		"   two\t",
		"\tthree",
		"To:",
		" <sip:a@b>",
		"From: <sip:c@d>;tag=1",
		"Call-ID: x",
		"CSeq: 1 OPTIONS",
		"", ""),
	// No Content-Length: the body is the rest.
	crlf("MESSAGE sip:a@b SIP/2.0", "Via: SIP/2.0/UDP 1.2.3.4;branch=z9hG4bK-m", "Call-ID: m", "", "hello"),
	// Content-Length longer and shorter than the body.
	crlf("MESSAGE sip:a@b SIP/2.0", "Call-ID: m", "Content-Length: 50", "", "hello"),
	crlf("MESSAGE sip:a@b SIP/2.0", "Call-ID: m", "Content-Length: 2", "", "hello"),
	crlf("MESSAGE sip:a@b SIP/2.0", "Call-ID: m", "Content-Length: 99999", "", "hello"),
	crlf("MESSAGE sip:a@b SIP/2.0", "Call-ID: m", "Content-Length: x", "", "hello"),
	crlf("MESSAGE sip:a@b SIP/2.0", "Content-Length: 5", "Content-Length: 3", "", "hello"),
	// Missing CRLFs, bare CR and LF.
	"INVITE sip:a@b SIP/2.0\r\nCall-ID: x\r\n",
	"INVITE sip:a@b SIP/2.0\r\nCall-ID: x",
	"INVITE sip:a@b SIP/2.0\r\nCall-ID: x\r",
	"INVITE sip:a@b SIP/2.0\r\nCall-ID: x\rfoo\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\nCall-ID: x\n\n",
	"INVITE sip:a@b SIP/2.0\r\nCall-ID: x\nVia: SIP/2.0/UDP h\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nSubject: a\r\n \r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nSubject: a\r\n b\r",
	"\r\nINVITE sip:a@b SIP/2.0\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\n",
	"INVITE sip:a@b SIP/2.0",
	"",
	"\r\n",
	"\r\n\r\n",
	"SIP/2.0 200\r\n\r\n",
	"SIP/2.0 99999 Big\r\n\r\n",
	"SIP/2.0 abc OK\r\n\r\n",
	"INVITE * SIP/2.0\r\n\r\n",
	"INVITE sip:a@b SIP/2.0 extra\r\n\r\n",
	"INVITE tel:+123 SIP/2.0\r\n\r\n",
	"INVITE sip:a@b;x=1;y?h=1&j=2 SIP/2.0\r\n\r\n",
	"INVITE sip:a@[::1 SIP/2.0\r\n\r\n",
	"INVITE sip:a@b:99x SIP/2.0\r\n\r\n",
	"INVITE sips://a:pw@b:5061;lr SIP/2.0\r\n\r\n",
	// Header errors.
	"INVITE sip:a@b SIP/2.0\r\nNoColon\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nCall-ID:   \r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nCSeq: 1\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nCSeq: 99999999999 INVITE\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nCSeq: 2147483648 INVITE\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nCSeq: x INVITE\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nMax-Forwards: -1\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nContent-Type:\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nFrom: *\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nTo: <*>\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nTo:\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nFrom: \"unterminated <sip:a@b>\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nFrom: \"x\" \r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nContact: <sip:a@b\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nContact: <sip:a@b>, , <sip:c@d>\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nContact: sip:a@b;expires=3,sip:c@d\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nRoute: <sip:a@b>,\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nRoute: sip:é\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nRoute: \r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP [::1\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h:1,SIP/2.0/UDP i;branch=2,\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;,x\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;rport;rport;branch=\"a;b\"\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nvia: SIP/2.0/UDP h;a=1;a=2;;\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\nX-Unicode\u00a0: \u00a0v\u00a0\r\n\r\n",
	"INVITE sip:a@b SIP/2.0\r\n\u0085Call-ID\u0085: x\r\n\r\n",
}

// fileCorpus is every file under the repository's testdata (raw SIP,
// torture tests, SIPp scenarios), sipgo's own testdata, and the go fuzz
// corpora under sip/testdata.
func fileCorpus(tb testing.TB) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	roots := []string{filepath.Join("..", "..", "..", "testdata"), filepath.Join("..", "..", "testdata")}
	if dir := sipgoDir(); dir != "" {
		roots = append(roots, filepath.Join(dir, "testdata"))
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			info, err := d.Info()
			if err != nil || info.Size() > 1<<20 {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			if vals, ok := fuzzCorpusFile(b); ok {
				for i, v := range vals {
					out[p+"#"+strconv.Itoa(i)] = v
				}
				return nil
			}
			out[p] = b
			return nil
		})
	}
	return out
}

// fuzzCorpusFile decodes a "go test fuzz v1" file's []byte and string
// values.
func fuzzCorpusFile(b []byte) ([][]byte, bool) {
	lines := strings.Split(string(b), "\n")
	if len(lines) == 0 || lines[0] != "go test fuzz v1" {
		return nil, false
	}
	var out [][]byte
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		for _, pre := range []string{"[]byte(", "string("} {
			if strings.HasPrefix(l, pre) && strings.HasSuffix(l, ")") {
				if s, err := strconv.Unquote(l[len(pre) : len(l)-1]); err == nil {
					out = append(out, []byte(s))
				}
			}
		}
	}
	return out, true
}

// sipgoDir is sipgo's sip package folder in the module cache, or "".
func sipgoDir() string {
	gomod := os.Getenv("GOMODCACHE")
	if gomod == "" {
		if gp := os.Getenv("GOPATH"); gp != "" {
			gomod = filepath.Join(gp, "pkg", "mod")
		} else if home, err := os.UserHomeDir(); err == nil {
			gomod = filepath.Join(home, "go", "pkg", "mod")
		}
	}
	dir := filepath.Join(gomod, "github.com", "emiago", "sipgo@v1.7.2", "sip")
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	return dir
}

// proxySeeds are sip/fuzz_test.go's seeds (FuzzRequestHandling).
var proxySeeds = []string{
	"BYE sip:carrier@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-1;rport\r\n" +
		"Route: <sip:127.0.0.1:5060;transport=udp;lr>\r\nRoute: <sip:127.0.0.1:5060;transport=tcp;lr>\r\n" +
		"From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\nCall-ID: c\r\nCSeq: 2 BYE\r\nMax-Forwards: 0\r\nX-Customer: acme\r\nContent-Length: 0\r\n\r\n",
	"INVITE sip:carrier@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-2\r\n" +
		"Route: <sip:127.0.0.1:5060;transport=udp;lr;cg=AAAAAAAAAAAAAAAA>\r\n" +
		"From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\nCall-ID: c\r\nCSeq: 3 INVITE\r\nContent-Length: 0\r\n\r\n",
	"sip:127.0.0.1:5071;transport=tcp",
}
