package udpout

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// listen opens a UDP socket on 127.0.0.1 (closed at the test's end).
func listen(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// read returns the next datagram on c (failing after 2 s).
func read(t *testing.T, c *net.UDPConn) []byte {
	t.Helper()
	buf := make([]byte, 65535)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _, err := c.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no datagram: %v", err)
	}
	return buf[:n]
}

// quiet fails if c receives anything within 200 ms.
func quiet(t *testing.T, c *net.UDPConn) {
	t.Helper()
	buf := make([]byte, 65535)
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _, err := c.ReadFromUDP(buf); err == nil {
		t.Fatalf("unexpected datagram: %q", buf[:n])
	}
}

const invite = "INVITE sip:b@127.0.0.9 SIP/2.0\r\n" +
	"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-caller;rport\r\n" +
	"From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>\r\nCall-ID: udpout\r\nCSeq: 1 INVITE\r\n" +
	"Contact: <sip:a@127.0.0.2:5070>\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"

func parse(t *testing.T, raw string) sipmsg.Message {
	t.Helper()
	m, err := sipmsg.ParseMessage([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func wire(m sipmsg.Message) []byte {
	var b bytes.Buffer
	m.StringWrite(&b)
	return b.Bytes()
}

// TestResponseGoesToItsDestination: a response written through the pool's
// connection arrives, as sipgo serializes it, at the address its
// Destination names, from the listener.
func TestResponseGoesToItsDestination(t *testing.T) {
	ln, peer := listen(t), listen(t)
	c := New(ln)
	req := parse(t, invite).(*sipmsg.Request)
	res := sipmsg.NewResponseFromRequest(req, 486, "Busy Here", nil)
	res.SetDestination(peer.LocalAddr().String())
	if err := c.WriteMsg(res); err != nil {
		t.Fatal(err)
	}
	if got := read(t, peer); !bytes.Equal(got, wire(res)) {
		t.Fatalf("got %q, want %q", got, wire(res))
	}
}

// TestSendKeepsWhatItSent: Send returns the very bytes that left, a copy
// the next send does not overwrite.
func TestSendKeepsWhatItSent(t *testing.T) {
	ln, peer := listen(t), listen(t)
	c := New(ln)
	to := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	first := parse(t, invite)
	kept, err := c.Send(first, to, true)
	if err != nil {
		t.Fatal(err)
	}
	got := read(t, peer)
	if !bytes.Equal(kept, got) || !bytes.Equal(got, wire(first)) {
		t.Fatalf("kept %q, sent %q", kept, got)
	}
	second := parse(t, strings.Replace(invite, "Call-ID: udpout", "Call-ID: another-one-longer", 1))
	if _, err := c.Send(second, to, false); err != nil {
		t.Fatal(err)
	}
	read(t, peer)
	if !bytes.Equal(kept, wire(first)) {
		t.Fatalf("kept bytes changed by the next send: %q", kept)
	}
	if k, err := c.Send(second, to, false); err != nil || k != nil {
		t.Fatalf("Send without keep returned %q, %v", k, err)
	}
	read(t, peer)
}

// TestMappedDestinationOnIPv4Listener: an IPv4 address written as IPv6
// (::ffff:a.b.c.d, as a dual-stack party's source reads) reaches the
// party from an IPv4 listener.
func TestMappedDestinationOnIPv4Listener(t *testing.T) {
	ln, peer := listen(t), listen(t)
	c := New(ln)
	ap := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	mapped := netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
	if !mapped.Addr().Is4In6() {
		t.Fatalf("%v is not mapped", mapped)
	}
	if _, err := c.Send(parse(t, invite), mapped, false); err != nil {
		t.Fatal(err)
	}
	read(t, peer)
}

// TestOversizedNotSent: past sipgo's UDP bound the message is refused
// with sipgo's error, and nothing leaves.
func TestOversizedNotSent(t *testing.T) {
	ln, peer := listen(t), listen(t)
	c := New(ln)
	big := strings.Replace(invite, "Content-Length: 0\r\n",
		"Subject: "+strings.Repeat("x", sipmsg.UDPMTUSize)+"\r\nContent-Length: 0\r\n", 1)
	m := parse(t, big)
	to := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	if _, err := c.Send(m, to, true); !errors.Is(err, sipmsg.ErrUDPMTUCongestion) {
		t.Fatalf("Send: %v, want ErrUDPMTUCongestion", err)
	}
	res := sipmsg.NewResponseFromRequest(m.(*sipmsg.Request), 200, "OK", nil)
	res.AppendHeader(sipmsg.NewHeader("Subject", strings.Repeat("x", sipmsg.UDPMTUSize)))
	res.SetDestination(to.String())
	if err := c.WriteMsg(res); !errors.Is(err, sipmsg.ErrUDPMTUCongestion) {
		t.Fatalf("WriteMsg: %v, want ErrUDPMTUCongestion", err)
	}
	quiet(t, peer)
}

// TestDestination: what Destination reads, and what it leaves to sipgo.
func TestDestination(t *testing.T) {
	req := parse(t, invite).(*sipmsg.Request)
	for _, tc := range []struct {
		dest string
		want string
		ok   bool
	}{
		{"127.0.0.5:5080", "127.0.0.5:5080", true},
		{"[::1]:5062", "[::1]:5062", true},
		{"127.0.0.5:0", "127.0.0.5:5060", true},
		{"carrier.example:5060", "", false},
		{"127.0.0.5", "", false},
	} {
		req.SetDestination(tc.dest)
		got, ok := Destination(req)
		if ok != tc.ok || (ok && got.String() != tc.want) {
			t.Errorf("Destination(%q) = %v, %v; want %s, %v", tc.dest, got, ok, tc.want, tc.ok)
		}
	}
}
