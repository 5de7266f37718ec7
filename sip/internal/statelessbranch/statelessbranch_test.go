package statelessbranch

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/dialogtoken"
)

// fixture is a BYE and the key its branches are sealed under in the
// vectors below (the sip package's statelessBranchFixture).
func fixture(t testing.TB) (*dialogtoken.Key, *sipmsg.Request) {
	t.Helper()
	m, err := sipmsg.ParseMessage([]byte("BYE sip:c@10.0.0.5 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK.up1;rport=4000;received=10.0.0.2\r\n" +
		"From: <sip:a@10.0.0.1>;tag=f1\r\nTo: <sip:b@10.0.0.5>;tag=t1\r\n" +
		"Call-ID: a84b4c76e66710@pc33\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	return dialogtoken.NewKey([]byte("stateless-branch-test-secret")), m.(*sipmsg.Request)
}

func parsedVia(t *testing.T, s string) *sipmsg.ViaHeader {
	t.Helper()
	msg, err := sipmsg.ParseMessage([]byte("SIP/2.0 200 OK\r\nVia: " + s + "\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	return msg.Via()
}

// TestBranchUnchanged: the branch of a fixed request under a fixed key
// holds the bytes the node computed before its MAC input moved onto the
// stack (printed by the code at 563c2e8, in base64url), in both texts;
// both texts decode to them (nodes of a pool, old and new, verify each
// other's branches), and they verify over the same input only.
func TestBranchUnchanged(t *testing.T) {
	k, req := fixture(t)
	key := [KeyBytes]byte{1, 2, 3, 4, 5, 6, 7, 8}
	for _, tc := range []struct {
		name  string
		next  netip.Addr
		flags byte
		was   string // base64url, as 563c2e8 printed it
		want  string
	}{
		{"ipv4", netip.MustParseAddr("10.0.0.9"), 0, "AAECAwQFBgcIs87BspeHSRQznUyh", "000j40s40n30g25mtw0w55x794b377bdn4"},
		{"ipv4 mapped, from carrier", netip.MustParseAddr("::ffff:10.0.0.9"), FromCarrier, "AQECAwQFBgcIhDqLxofdfE9LpxPF", "040j40s40n30g2447b5xf1zyhk7nr9smsn"},
		{"ipv6", netip.MustParseAddr("2001:db8::1:2"), 0, "AAECAwQFBgcIk5McGGqp9Vb9FNvY", "000j40s40n30g24mldg1jvp9zpchv56ww0"},
		{"invalid", netip.Addr{}, 0, "AAECAwQFBgcIJhe4lCeoVBw2s4h9", "000j40s40n30g2162zx989y8bjg3fdx8hn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input(nil, req.Via(), req.CSeq(), tc.next)
			b := Branch{Flags: tc.flags, Key: key}
			b.Seal(k, in, req.CallID().Value())
			if got := b.Text(dialogtoken.Opaque); got != Prefix+tc.want {
				t.Errorf("got %q, want %q", got, Prefix+tc.want)
			}
			if got := b.Text(dialogtoken.Base64URL); got != Prefix+tc.was {
				t.Errorf("base64url: got %q, want %q", got, Prefix+tc.was)
			}
			old, ok1 := Decode(tc.was)
			now, ok2 := Decode(tc.want)
			if !ok1 || !ok2 || old != b || now != b {
				t.Errorf("the base64url branch decodes to %+v (%v), the opaque one to %+v (%v): want %+v", old, ok1, now, ok2, b)
			}
			if !now.Verify(k, in, req.CallID().Value()) {
				t.Errorf("the branch does not verify over its own input")
			}
			if now.Verify(dialogtoken.NewKey([]byte("another secret")), in, req.CallID().Value()) {
				t.Errorf("the branch verifies under another key")
			}
			if now.Verify(k, in, "another call") {
				t.Errorf("the branch verifies with another Call-ID")
			}
			other := Input(nil, req.Via(), &sipmsg.CSeqHeader{SeqNo: 3, MethodName: "BYE"}, tc.next)
			if now.Verify(k, other, req.CallID().Value()) {
				t.Errorf("the branch verifies over another CSeq")
			}
			now.Flags ^= FromCarrier
			if now.Verify(k, in, req.CallID().Value()) {
				t.Errorf("the branch verifies with its direction changed")
			}
		})
	}
}

// TestDecodeRefuses: anything but one of the two texts of a branch with
// known flags does not decode.
func TestDecodeRefuses(t *testing.T) {
	for _, bad := range []string{"", "!!", "000j40s40n30g25mtw0w55x794b377bdn5", // a spare bit set
		"000j40s40n30g25mtw0w55x794b377bdnA", "AAECAwQFBgcIs87BspeHSRQznUy!", "000j40s40n30g25mtw0w55x794b377bdn",
		"AAECAwQFBgcIs87BspeHSRQznU\r\n"} {
		if b, ok := Decode(bad); ok {
			t.Errorf("Decode(%q) = %+v", bad, b)
		}
	}
	for _, flags := range []byte{2, 0x80, 0xff} {
		b := Branch{Flags: flags}
		for _, text := range []dialogtoken.Text{dialogtoken.Opaque, dialogtoken.Base64URL} {
			if got, ok := Decode(strings.TrimPrefix(b.Text(text), Prefix)); ok {
				t.Errorf("flags %#x decode: %+v", flags, got)
			}
		}
	}
}

// TestInputSeparatesFields: two Vias that send a response to different
// places never give one MAC input, whatever separators their fields hold.
func TestInputSeparatesFields(t *testing.T) {
	next := netip.MustParseAddr("127.0.0.1")
	orig := parsedVia(t, "SIP/2.0/UDP 127.0.0.2:40000;branch=ZEVIL\x00127.0.0.9\x0053\x00\x01y")
	alt := parsedVia(t, "SIP/2.0/UDP\x00127.0.0.2\x0040000\x00\x01ZEVIL 127.0.0.9:53;branch=y")
	cs := &sipmsg.CSeqHeader{SeqNo: 2, MethodName: "BYE"}
	d1, _ := Dest(orig)
	d2, _ := Dest(alt)
	if d1 == d2 {
		t.Fatalf("the two Vias go to one place (%v): the test proves nothing", d1)
	}
	if bytes.Equal(Input(nil, orig, cs, next), Input(nil, alt, cs, next)) {
		t.Errorf("Vias to %v and %v give one MAC input", d1, d2)
	}
}

// TestDest: where a response goes from the Via the proxy forwarded
// (received, rport, defaults), and what it refuses.
func TestDest(t *testing.T) {
	for _, c := range []struct{ via, want string }{
		{"SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK1", "10.0.0.1:5070"},
		{"SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK1", "10.0.0.1:5060"},
		{"SIP/2.0/UDP host.example:5070;branch=z9hG4bK1;received=10.0.0.2", "10.0.0.2:5070"},
		{"SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK1;rport=4000;received=10.0.0.2", "10.0.0.2:4000"},
		{"SIP/2.0/UDP [2001:db8::1]:5070;branch=z9hG4bK1", "[2001:db8::1]:5070"},
		{"SIP/2.0/UDP host.example:5070;branch=z9hG4bK1", ""},
		{"SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK1;rport=x", ""},
	} {
		got, ok := Dest(parsedVia(t, c.via))
		if (c.want == "") != !ok || (ok && got.String() != c.want) {
			t.Errorf("%s: got %v %v, want %q", c.via, got, ok, c.want)
		}
	}
}

// TestSetReceived: received names the packet's source IP unless the
// sent-by host is that IP and the sender wrote no received; rport is
// filled only when asked for. Dest then sends the response there.
func TestSetReceived(t *testing.T) {
	src := netip.MustParseAddrPort("192.0.2.7:4000")
	for _, c := range []struct{ via, want, dest string }{
		{"SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK1", "SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK1", "192.0.2.7:5060"},
		{"SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK1;rport", "SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK1;rport=4000", "192.0.2.7:4000"},
		{"SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1;rport", "SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1;rport=4000;received=192.0.2.7", "192.0.2.7:4000"},
		{"SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK1;received=10.9.9.9", "SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK1;received=192.0.2.7", "192.0.2.7:5060"},
		{"SIP/2.0/UDP host.example;branch=z9hG4bK1", "SIP/2.0/UDP host.example;branch=z9hG4bK1;received=192.0.2.7", "192.0.2.7:5060"},
	} {
		v := parsedVia(t, c.via)
		SetReceived(v, src)
		if got := v.Value(); got != c.want {
			t.Errorf("%s: got %q, want %q", c.via, got, c.want)
		}
		if d, ok := Dest(v); !ok || d.String() != c.dest {
			t.Errorf("%s: goes to %v %v, want %s", c.via, d, ok, c.dest)
		}
	}
}

// TestOnTop: only a response whose top Via branch has the prefix is a
// stateless relay's.
func TestOnTop(t *testing.T) {
	for _, c := range []struct {
		vias string
		want bool
	}{
		{"Via: SIP/2.0/UDP 10.0.0.1;branch=" + Prefix + "000j\r\nVia: SIP/2.0/UDP 10.0.0.2;branch=z9hG4bK.2\r\n", true},
		{"Via: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK.1\r\nVia: SIP/2.0/UDP 10.0.0.2;branch=" + Prefix + "000j\r\n", false},
		{"Via: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK.1\r\n", false},
		{"", false},
	} {
		m, err := sipmsg.ParseMessage([]byte("SIP/2.0 200 OK\r\n" + c.vias + "CSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := OnTop(m.(*sipmsg.Response)); got != c.want {
			t.Errorf("%q: got %v, want %v", c.vias, got, c.want)
		}
	}
}

// TestAllocations: a branch costs one allocation, its string (the MAC
// input, the MAC and the encoding stay on the stack); a check costs none.
func TestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector")
	}
	k, req := fixture(t)
	next := netip.MustParseAddr("10.0.0.9")
	via, id := req.Via(), req.CallID().Value()
	branch := func() string {
		var in [InputBytes]byte
		b := Branch{}
		b.Seal(k, Input(in[:0], via, req.CSeq(), next), id)
		return b.Text(dialogtoken.Opaque)
	}
	text := strings.TrimPrefix(branch(), Prefix) // warms the MAC pool
	if n := testing.AllocsPerRun(100, func() { branch() }); n != 1 {
		t.Errorf("got %v allocations per branch, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		b, _ := Decode(text)
		var in [InputBytes]byte
		b.Verify(k, Input(in[:0], via, req.CSeq(), next), id)
	}); n != 0 {
		t.Errorf("got %v allocations per check, want 0", n)
	}
}

// FuzzDecode: Decode never panics, and what it takes is the one text of
// its bytes (opaque's or base64url, by length) with known flags.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"000j40s40n30g25mtw0w55x794b377bdn4", "AQECAwQFBgcIhDqLxofdfE9LpxPF", "", "!!",
		"000j40s40n30g25mtw0w55x794b377bdn5", "AAECAwQFBgcIs87BspeHSRQznU\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, ok := Decode(s)
		if !ok {
			return
		}
		if b.Flags&^FromCarrier != 0 {
			t.Fatalf("Decode(%q) took flags %#x", s, b.Flags)
		}
		text := dialogtoken.Opaque
		if len(s) == Chars64 {
			text = dialogtoken.Base64URL
		}
		if got := b.Text(text); got != Prefix+s {
			t.Fatalf("Decode(%q) = %+v, whose text is %q", s, b, got)
		}
	})
}

// TestSealAndVerifyLeaveTheInputAlone: Seal and Verify never write into
// the caller's buffer, not even past the input's length, so one input may
// be checked against several branches at once (the package says it is
// safe for concurrent use). They used to append the flags and the key to
// it (h79).
func TestSealAndVerifyLeaveTheInputAlone(t *testing.T) {
	k, req := fixture(t)
	buf := make([]byte, 0, 512)
	in := Input(buf, req.Via(), req.CSeq(), netip.MustParseAddr("10.0.0.9"))
	spare := in[len(in):cap(in)]
	for i := range spare {
		spare[i] = 0xee
	}
	b := Branch{Flags: FromCarrier, Key: [KeyBytes]byte{1, 2, 3, 4, 5, 6, 7, 8}}
	b.Seal(k, in, "id")
	if !b.Verify(k, in, "id") {
		t.Fatal("a sealed branch does not verify")
	}
	for i, c := range spare {
		if c != 0xee {
			t.Fatalf("byte %d past the input was written (%#x)", i, c)
		}
	}
}
