package connlimit

import (
	"net"
	"net/netip"
	"testing"
)

// SourceKey counts an IPv6 source by its /64 (one host holds a whole
// /64), an IPv4 one by its address, a mapped one as IPv4.
func TestSourceKeyIPv6Per64(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"},
		{"2001:db8:1:2:abcd::9", "2001:db8:1:2::"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
	} {
		if ka, kb := SourceKey(netip.MustParseAddr(tc.a)), SourceKey(netip.MustParseAddr(tc.b)); ka != kb {
			t.Errorf("SourceKey(%s) = %s, SourceKey(%s) = %s: want one source", tc.a, ka, tc.b, kb)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:3::1"},
		{"192.0.2.1", "192.0.2.2"},
	} {
		if SourceKey(netip.MustParseAddr(tc.a)) == SourceKey(netip.MustParseAddr(tc.b)) {
			t.Errorf("%s and %s: one source, want two", tc.a, tc.b)
		}
	}
}

// OnClose gives the place back once, however often the connection is
// closed.
func TestOnCloseReleasesOnce(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	n := 0
	c := OnClose(a, func() { n++ })
	_ = c.Close()
	_ = c.Close()
	if n != 1 {
		t.Fatalf("released %d times, want 1", n)
	}
}
