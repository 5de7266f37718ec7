package wire

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// seeds are messages of the shapes the proxy sends and receives, and the
// corners of sipgo's writer: IPv6 hosts (bracketed) and a host too long
// for sipgo to call IPv6, quoted and empty parameters, URI headers, a
// wildcard Contact, a tel URI, a body.
var seeds = []string{
	"INVITE sip:+15551234567@192.0.2.10:5060;user=phone SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.2:5060;branch=z9hG4bK-1;rport\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: \"Alice A\" <sip:alice@example.com>;tag=abc\r\n" +
		"To: <sip:+15551234567@example.com>\r\n" +
		"Call-ID: 1-2@127.0.0.2\r\n" +
		"CSeq: 1 INVITE\r\n" +
		"Contact: <sip:alice@127.0.0.2:5060;transport=udp>\r\n" +
		"Route: <sip:[2001:db8::1]:5060;lr;cg=AbC>\r\n" +
		"Record-Route: <sip:127.0.0.1;lr>\r\n" +
		"Content-Type: application/sdp\r\n" +
		"X-Custom: anything; at all\r\n" +
		"Content-Length: 10\r\n\r\nv=0\r\no=- 1",
	"SIP/2.0 200 OK\r\n" +
		"Via: SIP/2.0/TCP [2001:db8::2]:5070;branch=z9hG4bK-2;received=2001:db8::2\r\n" +
		"Via: SIP/2.0/UDP host.example.com;branch=z9hG4bK-3\r\n" +
		"From: <sip:a@b>;tag=1\r\n" +
		"To: <sip:c@d>;tag=2;x=\"a b\"\r\n" +
		"Call-ID: x\r\n" +
		"CSeq: 2147483647 BYE\r\n" +
		"Contact: *\r\n" +
		"Content-Length: 0\r\n\r\n",
	"ACK sip:user:pw@[::1]:5062;maddr=::1?subject=hi&x SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0001;branch=z9hG4bK-4\r\n" +
		"From: <tel:+1555>;tag=t\r\n" +
		"To: <sip:[fe80::1%25eth0]>\r\n" +
		"Call-ID: y\r\n" +
		"CSeq: 2 ACK\r\n" +
		"Max-Forwards: 0\r\n" +
		"Content-Length: 0\r\n\r\n",
	"BYE sip:[::ffff:192.0.2.1]:5060 SIP/2.0\r\n" +
		"v: SIP/2.0/UDP [::ffff:192.0.2.1]:5060;branch=z9hG4bK-5\r\n" +
		"f: <sip:a@b>;tag=1\r\nt: <sip:c@d>;tag=2\r\ni: z\r\nCSeq: 3 BYE\r\nl: 0\r\n\r\n",
}

// check compares Append with sipgo's own writer on m.
func check(t *testing.T, m sipmsg.Message) {
	t.Helper()
	got, ok := Append(nil, m)
	if !ok {
		t.Fatalf("Append left %T to sipgo", m)
	}
	if want := m.String(); string(got) != want {
		t.Fatalf("Append wrote\n%q\nsipgo writes\n%q", got, want)
	}
}

func parse(t testing.TB, s string) sipmsg.Message {
	t.Helper()
	m, err := sipmsg.NewParser().ParseSIP([]byte(s))
	if err != nil {
		t.Fatalf("parse: %v\n%q", err, s)
	}
	return m
}

func TestAppendMatchesSipgo(t *testing.T) {
	for _, s := range seeds {
		check(t, parse(t, s))
	}
}

// TestAppendMatchesSipgoOnBuiltMessages: what the proxy builds rather than
// parses: headers of every type sipgo has, set by hand, an empty scheme,
// hierarchical slashes, a port of 0.
func TestAppendMatchesSipgoOnBuiltMessages(t *testing.T) {
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Host: "2001:db8::9", Port: 5080, HierarhicalSlashes: true,
		UriParams: sipmsg.HeaderParams{{K: "lr"}, {K: "x", V: "a\tb"}}})
	via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP", Host: "::1", Params: sipmsg.HeaderParams{{K: "branch", V: "z9hG4bK-9"}}}
	req.AppendHeader(via)
	req.AppendHeader(&sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sips", User: "a", Host: "b"}, Params: sipmsg.HeaderParams{{K: "tag", V: "1"}}})
	req.AppendHeader(&sipmsg.ToHeader{DisplayName: "B", Address: sipmsg.Uri{Host: "c", Port: 0}})
	cid := sipmsg.CallIDHeader("cid")
	req.AppendHeader(&cid)
	req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 7, MethodName: sipmsg.INVITE})
	mf := sipmsg.MaxForwardsHeader(69)
	req.AppendHeader(&mf)
	exp := sipmsg.ExpiresHeader(30)
	req.AppendHeader(&exp)
	ct := sipmsg.ContentTypeHeader("application/sdp")
	req.AppendHeader(&ct)
	req.AppendHeader(&sipmsg.RecordRouteHeader{Address: sipmsg.Uri{Host: "127.0.0.1", UriParams: sipmsg.HeaderParams{{K: "lr"}}}})
	req.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Wildcard: true}})
	req.AppendHeader(sipmsg.NewHeader("Reason", "SIP;cause=503;text=\"x\""))
	req.SetBody([]byte("v=0\r\n"))
	check(t, req)
	res := sipmsg.NewResponseFromRequest(req, 183, "Session Progress", nil)
	check(t, res)
	res.SetBody(nil)
	check(t, res)
}

func TestAppendLeavesCompactHeadersToSipgo(t *testing.T) {
	m := parse(t, seeds[0]).(*sipmsg.Request)
	m.CompactHeaders = true
	if b, ok := Append([]byte("x"), m); ok || string(b) != "x" {
		t.Fatalf("Append(compact) = %q, %v; want it left to sipgo", b, ok)
	}
}

func TestAppendAllocatesNothing(t *testing.T) {
	m := parse(t, seeds[0])
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf, _ = Append(buf[:0], m) }); n != 0 {
		t.Fatalf("Append allocated %v times per message", n)
	}
}

// TestIsIPv6AsSipgo: the hosts sipgo brackets (sipgo's uriIP, through a
// Via's sent-by).
func TestIsIPv6AsSipgo(t *testing.T) {
	for _, h := range []string{"::1", "2001:db8::1", "::ffff:1.2.3.4", "::1.2.3.4", "fe80::1%eth0", "[::1]",
		"1.2.3.4", "example.com", "", ":", "0000:0000:0000:0000:0000:0000:0000:0001",
		"0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0001", strings.Repeat("0", 40) + "::1"} {
		v := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP", Host: h}
		if got, want := string(appendValue(nil, v)), v.Value(); got != want {
			t.Errorf("host %q: wrote %q, sipgo %q", h, got, want)
		}
	}
}

// FuzzAppend: on whatever sipgo's parser reads, Append writes what sipgo
// writes. Seeds: the ones above and the sip package's raw-message corpora.
func FuzzAppend(f *testing.F) {
	addSeeds(f, seeds)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := sipmsg.NewParser().ParseSIP(data)
		if err != nil {
			return
		}
		got, ok := Append(nil, m)
		if !ok {
			return
		}
		if want := m.String(); string(got) != want {
			t.Fatalf("Append wrote\n%q\nsipgo writes\n%q", got, want)
		}
	})
}

// addSeeds adds each of the messages to f's corpus, and the entries of
// the sip package's raw-message corpora.
func addSeeds(f *testing.F, messages ...[]string) {
	for _, ms := range messages {
		for _, s := range ms {
			f.Add([]byte(s))
		}
	}
	for _, dir := range []string{"../../testdata/fuzz/FuzzRawShed", "../ingress/testdata/fuzz/FuzzScanBoundsWhatSipgoParses"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, name := range files {
			if b, ok := corpusBytes(name); ok {
				f.Add(b)
			}
		}
	}
}

// corpusBytes reads a one-value []byte entry of a Go fuzz corpus file.
func corpusBytes(name string) ([]byte, bool) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, false
	}
	lines := strings.SplitN(string(b), "\n", 3)
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
		return nil, false
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	return []byte(s), err == nil
}

// listen is a UDP socket on loopback that the test reads.
func listen(t *testing.T, network, addr string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Skipf("no %s socket on %s: %v", network, addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func readOne(t *testing.T, c *net.UDPConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65536)
	n, _, err := c.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(buf[:n])
}

// TestWriteUDP: the bytes that arrive are sipgo's, at the destination
// (IPv4, an IPv4-mapped destination from an IPv4 socket, IPv6), and the
// errors are sipgo's.
func TestWriteUDP(t *testing.T) {
	from := listen(t, "udp4", "127.0.0.1:0")
	to := listen(t, "udp4", "127.0.0.1:0")
	c := &sipmsg.UDPConnection{PacketConn: from, PacketAddr: from.LocalAddr().String(), Listener: true}
	m := parse(t, seeds[0])
	toAddr := to.LocalAddr().(*net.UDPAddr).AddrPort()
	for _, dest := range []string{toAddr.String(), netip.AddrPortFrom(netip.AddrFrom16(toAddr.Addr().As16()), toAddr.Port()).String()} {
		m.SetDestination(dest)
		if err := WriteUDP(c, m); err != nil {
			t.Fatalf("WriteUDP to %s: %v", dest, err)
		}
		if got := readOne(t, to); got != m.String() {
			t.Fatalf("to %s arrived\n%q\nwant\n%q", dest, got, m.String())
		}
	}

	old := sipmsg.UDPMTUSize
	sipmsg.UDPMTUSize = 300
	defer func() { sipmsg.UDPMTUSize = old }()
	if err := WriteUDP(c, m); !errors.Is(err, sipmsg.ErrUDPMTUCongestion) {
		t.Fatalf("over the MTU: %v, want sipgo's ErrUDPMTUCongestion", err)
	}
	sipmsg.UDPMTUSize = old

	from6 := listen(t, "udp6", "[::1]:0")
	to6 := listen(t, "udp6", "[::1]:0")
	c6 := &sipmsg.UDPConnection{PacketConn: from6, PacketAddr: from6.LocalAddr().String(), Listener: true}
	m.SetDestination(to6.LocalAddr().String())
	if err := WriteUDP(c6, m); err != nil {
		t.Fatalf("WriteUDP over IPv6: %v", err)
	}
	if got := readOne(t, to6); got != m.String() {
		t.Fatalf("over IPv6 arrived %q", got)
	}
}

// TestWriteUDPLeavesNamesToSipgo: a destination that is not an IP literal
// with a port goes through sipgo's WriteMsg, which does with it what it
// did before (sipgo sends to the unspecified address: loopback).
func TestWriteUDPLeavesNamesToSipgo(t *testing.T) {
	from := listen(t, "udp4", "127.0.0.1:0")
	c := &sipmsg.UDPConnection{PacketConn: from, PacketAddr: from.LocalAddr().String(), Listener: true}
	m := parse(t, seeds[0])
	m.SetDestination("carrier.invalid:5060")
	err := WriteUDP(c, m)
	want := c.WriteMsg(m)
	if (err == nil) != (want == nil) || err != nil && err.Error() != want.Error() {
		t.Fatalf("WriteUDP to a name: %v; sipgo's WriteMsg: %v", err, want)
	}
}

func BenchmarkAppend(b *testing.B) {
	m := parse(b, seeds[0])
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = Append(buf[:0], m)
	}
}

// BenchmarkSipgoStringWrite is what Append replaces, for comparison.
func BenchmarkSipgoStringWrite(b *testing.B) {
	m := parse(b, seeds[0])
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		m.StringWrite(&buf)
	}
}
