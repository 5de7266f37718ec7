package sip

import (
	"encoding/base64"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// TestOlderNodesInPoolGetBase64Text: while Options.OpaqueTokens says a node
// of an older release is in the pool, the proxy mints version-3 tokens and
// stateless branches in base64url (what such a node reads); once it says
// every node reads opaque text, new calls get opaque tokens and branches,
// and a call set up before keeps working.
func TestOlderNodesInPoolGetBase64Text(t *testing.T) {
	var opaqueOK atomic.Bool
	car := startAnsweringEnd(t, func() bool { return true })
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, OpaqueTokens: opaqueOK.Load})
	peer := startUDPEnd(t, "127.0.0.2", nil)
	caller := peer.caller()

	// bye ends the call answered ok and returns the branch the carrier's
	// BYE carried after the stateless prefix.
	bye := func(name string, ok *sipmsg.Response) string {
		t.Helper()
		peer.reset()
		car.reset()
		peer.send(h.udp, withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.bye-"+name))
		waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the 200 of "+name+"'s BYE at the caller")
		if res := peer.responses()[0]; res.StatusCode != 200 {
			t.Fatalf("%s: BYE answered %s, want 200", name, res.StartLine())
		}
		fwd := car.requests(sipmsg.BYE)
		if len(fwd) != 1 {
			t.Fatalf("%s: %d BYEs at the carrier, want 1", name, len(fwd))
		}
		branch, _ := fwd[0].Via().Params.Get("branch")
		rest, found := strings.CutPrefix(branch, statelessBranchPrefix)
		if !found {
			t.Fatalf("%s: BYE branch %q, want the stateless prefix", name, branch)
		}
		return rest
	}
	call := func(id string) *sipmsg.Response {
		t.Helper()
		car.reset()
		ok := rawAnsweredCall(t, peer, h.udp, id)
		waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 }, id+"'s ACK at the carrier")
		return ok
	}
	isBase64V3 := func(tok string) bool {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		return err == nil && len(tok) == 64 && raw[0] == 3
	}

	a1, a2 := call("older-a1"), call("older-a2")
	for _, ok := range []*sipmsg.Response{a1, a2} {
		if tok := tokenOf(t, ok); !isBase64V3(tok) {
			t.Errorf("token %q with an older node in the pool: want version 3 in base64url (64 characters)", tok)
		}
	}
	if b := bye("a1", a1); len(b) != statelessBranchChars64 || isOpaque(b) {
		t.Errorf("stateless branch %q with an older node in the pool: want %d characters of base64url", b, statelessBranchChars64)
	}

	opaqueOK.Store(true) // the older node left
	b1 := call("older-b1")
	if tok := tokenOf(t, b1); len(tok) != 77 || !isOpaque(tok) {
		t.Errorf("token %q once every node reads opaque text: want 77 characters of it", tok)
	}
	for name, ok := range map[string]*sipmsg.Response{"a2": a2, "b1": b1} { // a2 holds a base64url token
		if b := bye(name, ok); len(b) != statelessBranchChars || !isOpaque(b) {
			t.Errorf("%s: stateless branch %q, want %d characters of opaque text", name, b, statelessBranchChars)
		}
	}
}

// sip.dialog_token_text: base64url writes base64url tokens and branches
// whatever the pool, and a reload back to auto writes opaque text again.
func TestDialogTokenTextBase64URL(t *testing.T) {
	car := startAnsweringEnd(t, func() bool { return true })
	adm, pacer := newFakes()
	var cur atomic.Pointer[config.Config]
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
	cfg.SIP.DialogTokenText = "base64url"
	cur.Store(cfg)
	h := startProxyOpts(t, Options{Config: cur.Load, Admission: adm, Pacer: pacer}) // a pool of new nodes only
	peer := startUDPEnd(t, "127.0.0.2", nil)
	caller := peer.caller()
	call := func(id string) *sipmsg.Response {
		t.Helper()
		car.reset()
		ok := rawAnsweredCall(t, peer, h.udp, id)
		waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 }, id+"'s ACK at the carrier")
		return ok
	}
	// byeBranch ends the call and returns its stateless branch at the
	// carrier, after the prefix.
	byeBranch := func(id string, ok *sipmsg.Response) string {
		t.Helper()
		peer.reset()
		car.reset()
		peer.send(h.udp, withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.bye-"+id))
		waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the 200 of "+id+"'s BYE")
		fwd := car.requests(sipmsg.BYE)
		if len(fwd) != 1 {
			t.Fatalf("%s: %d BYEs at the carrier, want 1", id, len(fwd))
		}
		branch, _ := fwd[0].Via().Params.Get("branch")
		rest, found := strings.CutPrefix(branch, statelessBranchPrefix)
		if !found {
			t.Fatalf("%s: BYE branch %q, want the stateless prefix", id, branch)
		}
		return rest
	}
	ok := call("text-1")
	if tok := tokenOf(t, ok); len(tok) != 64 || isOpaque(tok) || !strings.HasPrefix(tok, "A") { // version 3 in base64url
		t.Errorf("token %q under dialog_token_text base64url: want version 3 in base64url (64 characters)", tok)
	}
	if b := byeBranch("text-1", ok); len(b) != statelessBranchChars64 || isOpaque(b) {
		t.Errorf("stateless branch %q under dialog_token_text base64url: want %d characters of base64url", b, statelessBranchChars64)
	}
	auto := *cfg
	auto.SIP.DialogTokenText = "auto"
	cur.Store(&auto)
	ok = call("text-2")
	if tok := tokenOf(t, ok); len(tok) != 77 || !isOpaque(tok) {
		t.Errorf("token %q after a reload to auto: want 77 characters of opaque text", tok)
	}
	if b := byeBranch("text-2", ok); len(b) != statelessBranchChars || !isOpaque(b) {
		t.Errorf("stateless branch %q after a reload to auto: want %d characters of opaque text", b, statelessBranchChars)
	}
}
