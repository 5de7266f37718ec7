package sip

import (
	"log/slog"
	"net/netip"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/statelessbranch"
)

// statelessBranchFixture is a proxy with a fixed dialog secret and a BYE
// whose branch it would compute, for the stateless branch tests.
func statelessBranchFixture(t *testing.T) (*Proxy, *config.Config, *sipmsg.Request) {
	t.Helper()
	cfg := testConfig()
	cfg.SIP.DialogSecret = "stateless-branch-test-secret"
	keys, err := newDialogKeys(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m, err := sipmsg.ParseMessage([]byte("BYE sip:c@10.0.0.5 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK.up1;rport=4000;received=10.0.0.2\r\n" +
		"From: <sip:a@10.0.0.1>;tag=f1\r\nTo: <sip:b@10.0.0.5>;tag=t1\r\n" +
		"Call-ID: a84b4c76e66710@pc33\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &Proxy{keys: keys}, cfg, m.(*sipmsg.Request)
}

// TestStatelessBranchUnchanged: the stateless branch of a fixed request
// under a fixed secret holds the bytes the node computed before its MAC
// input moved onto the stack (printed by the code at 563c2e8, then in
// base64url), now in opaque.Encoding, and the proxy writes it in
// base64url under sip.dialog_token_text base64url. The same vectors hold
// the codec alone (package statelessbranch, TestBranchUnchanged).
func TestStatelessBranchUnchanged(t *testing.T) {
	p, cfg, req := statelessBranchFixture(t)
	key := callKey{1, 2, 3, 4, 5, 6, 7, 8}
	for _, tc := range []struct {
		name  string
		next  netip.Addr
		flags byte
		was   string // base64url, as 563c2e8 printed it
		want  string
	}{
		{"ipv4", netip.MustParseAddr("10.0.0.9"), 0, "AAECAwQFBgcIs87BspeHSRQznUyh", "000j40s40n30g25mtw0w55x794b377bdn4"},
		{"ipv4 mapped, from carrier", netip.MustParseAddr("::ffff:10.0.0.9"), statelessbranch.FromCarrier, "AQECAwQFBgcIhDqLxofdfE9LpxPF", "040j40s40n30g2447b5xf1zyhk7nr9smsn"},
		{"ipv6", netip.MustParseAddr("2001:db8::1:2"), 0, "AAECAwQFBgcIk5McGGqp9Vb9FNvY", "000j40s40n30g24mldg1jvp9zpchv56ww0"},
		{"invalid", netip.Addr{}, 0, "AAECAwQFBgcIJhe4lCeoVBw2s4h9", "000j40s40n30g2162zx989y8bjg3fdx8hn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p.statelessBranch(cfg, req.Via(), req, tc.next, tc.flags, key)
			if got != statelessbranch.Prefix+tc.want {
				t.Errorf("got %q, want %q", got, statelessbranch.Prefix+tc.want)
			}
			b64 := *cfg
			b64.SIP.DialogTokenText = "base64url"
			if got := p.statelessBranch(&b64, req.Via(), req, tc.next, tc.flags, key); got != statelessbranch.Prefix+tc.was {
				t.Errorf("base64url: got %q, want %q", got, statelessbranch.Prefix+tc.was)
			}
		})
	}
}

// TestStatelessBranchAllocations: a stateless branch costs one allocation,
// its string (the MAC input, the MAC and the encoding stay on the stack).
func TestStatelessBranchAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector")
	}
	p, cfg, req := statelessBranchFixture(t)
	next := netip.MustParseAddr("10.0.0.9")
	via := req.Via()
	p.statelessBranch(cfg, via, req, next, 0, callKey{}) // warm the MAC pool
	if n := testing.AllocsPerRun(100, func() { p.statelessBranch(cfg, via, req, next, 0, callKey{}) }); n != 1 {
		t.Errorf("got %v allocations per stateless branch, want 1", n)
	}
}
