package sip

import (
	"encoding/base64"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/statelessbranch"
)

// textRig is a proxy with a UDP caller and an answering carrier, for the
// tests of the text tokens and stateless branches are written in.
type textRig struct {
	t         *testing.T
	h         *harness
	peer, car *udpEnd
	// cfg is the proxy's configuration (a test stores another to reload).
	cfg atomic.Pointer[config.Config]
}

// newTextRig starts a proxy with sip.dialog_token_text text and
// Options.OpaqueTokens opaque towards a carrier that answers every BYE.
func newTextRig(t *testing.T, text string, opaque func() bool) *textRig {
	t.Helper()
	r := &textRig{t: t, car: startAnsweringEnd(t, func() bool { return true })}
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + r.car.addr(), CPS: 100, MaxWait: time.Second})
	cfg.SIP.DialogTokenText = text
	r.cfg.Store(cfg)
	adm, pacer := newFakes()
	r.h = startProxyOpts(t, Options{Config: r.cfg.Load, Admission: adm, Pacer: pacer, OpaqueTokens: opaque})
	r.peer = startUDPEnd(t, "127.0.0.2", nil)
	return r
}

// call sets up call id, answered and ACKed at the carrier.
func (r *textRig) call(id string) *sipmsg.Response {
	r.t.Helper()
	r.car.reset()
	ok := rawAnsweredCall(r.t, r.peer, r.h.udp, id)
	waitFor(r.t, func() bool { return len(r.car.requests(sipmsg.ACK)) == 1 }, id+"'s ACK at the carrier")
	return ok
}

// bye ends the call answered ok and returns the caller's answer to its BYE
// and the branch the carrier's BYE carried after the stateless prefix.
func (r *textRig) bye(name string, ok *sipmsg.Response) (*sipmsg.Response, string) {
	r.t.Helper()
	r.peer.reset()
	r.car.reset()
	r.peer.send(r.h.udp, withVia(inDialogOf(r.t, r.peer.caller(), r.h.udp, ok, sipmsg.BYE), r.peer.addr(), "z9hG4bK.bye-"+name))
	waitFor(r.t, func() bool { return len(r.peer.responses()) == 1 }, "the 200 of "+name+"'s BYE at the caller")
	fwd := r.car.requests(sipmsg.BYE)
	if len(fwd) != 1 {
		r.t.Fatalf("%s: %d BYEs at the carrier, want 1", name, len(fwd))
	}
	branch, _ := fwd[0].Via().Params.Get("branch")
	rest, found := strings.CutPrefix(branch, statelessbranch.Prefix)
	if !found {
		r.t.Fatalf("%s: BYE branch %q, want the stateless prefix", name, branch)
	}
	return r.peer.responses()[0], rest
}

// TestOlderNodesInPoolGetBase64Text: while Options.OpaqueTokens says a node
// of an older release is in the pool, the proxy mints version-3 tokens and
// stateless branches in base64url (what such a node reads); once it says
// every node reads opaque text, new calls get opaque tokens and branches,
// and a call set up before keeps working.
func TestOlderNodesInPoolGetBase64Text(t *testing.T) {
	var opaqueOK atomic.Bool
	r := newTextRig(t, "auto", opaqueOK.Load)
	bye := func(name string, ok *sipmsg.Response) string {
		t.Helper()
		res, branch := r.bye(name, ok)
		if res.StatusCode != 200 {
			t.Fatalf("%s: BYE answered %s, want 200", name, res.StartLine())
		}
		return branch
	}
	isBase64V3 := func(tok string) bool {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		return err == nil && len(tok) == 64 && raw[0] == 3
	}

	a1, a2 := r.call("older-a1"), r.call("older-a2")
	for _, ok := range []*sipmsg.Response{a1, a2} {
		if tok := tokenOf(t, ok); !isBase64V3(tok) {
			t.Errorf("token %q with an older node in the pool: want version 3 in base64url (64 characters)", tok)
		}
	}
	if b := bye("a1", a1); len(b) != statelessbranch.Chars64 || isOpaque(b) {
		t.Errorf("stateless branch %q with an older node in the pool: want %d characters of base64url", b, statelessbranch.Chars64)
	}

	opaqueOK.Store(true) // the older node left
	b1 := r.call("older-b1")
	if tok := tokenOf(t, b1); len(tok) != 77 || !isOpaque(tok) {
		t.Errorf("token %q once every node reads opaque text: want 77 characters of it", tok)
	}
	for name, ok := range map[string]*sipmsg.Response{"a2": a2, "b1": b1} { // a2 holds a base64url token
		if b := bye(name, ok); len(b) != statelessbranch.Chars || !isOpaque(b) {
			t.Errorf("%s: stateless branch %q, want %d characters of opaque text", name, b, statelessbranch.Chars)
		}
	}
}

// sip.dialog_token_text: base64url writes base64url tokens and branches
// whatever the pool, and a reload back to auto writes opaque text again.
func TestDialogTokenTextBase64URL(t *testing.T) {
	r := newTextRig(t, "base64url", nil) // a pool of new nodes only
	cfg := r.cfg.Load()
	ok := r.call("text-1")
	if tok := tokenOf(t, ok); len(tok) != 64 || isOpaque(tok) || !strings.HasPrefix(tok, "A") { // version 3 in base64url
		t.Errorf("token %q under dialog_token_text base64url: want version 3 in base64url (64 characters)", tok)
	}
	if _, b := r.bye("text-1", ok); len(b) != statelessbranch.Chars64 || isOpaque(b) {
		t.Errorf("stateless branch %q under dialog_token_text base64url: want %d characters of base64url", b, statelessbranch.Chars64)
	}
	auto := *cfg
	auto.SIP.DialogTokenText = "auto"
	r.cfg.Store(&auto)
	ok = r.call("text-2")
	if tok := tokenOf(t, ok); len(tok) != 77 || !isOpaque(tok) {
		t.Errorf("token %q after a reload to auto: want 77 characters of opaque text", tok)
	}
	if _, b := r.bye("text-2", ok); len(b) != statelessbranch.Chars || !isOpaque(b) {
		t.Errorf("stateless branch %q after a reload to auto: want %d characters of opaque text", b, statelessbranch.Chars)
	}
}
