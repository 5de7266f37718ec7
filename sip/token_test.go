package sip

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/sip/internal/dialogtoken"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/opaque"

	"github.com/cpsguard/cpsguard/internal/testlog"
)

// tokenOf returns the dialog token in the proxy's Record-Route of res.
func tokenOf(t *testing.T, res *sipmsg.Response) string {
	t.Helper()
	for _, h := range res.GetHeaders("Record-Route") {
		if _, rest, ok := strings.Cut(h.Value(), ";"+tokenParam+"="); ok {
			tok, _, _ := strings.Cut(rest, ">")
			tok, _, _ = strings.Cut(tok, ";")
			return tok
		}
	}
	t.Fatalf("no %s= in the Record-Route of\n%s", tokenParam, res)
	return ""
}

func badTokens(h *harness) float64 {
	return testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("bad_dialog_token"))
}

// TestForgedReInviteIsRefused: a known peer's INVITE with a To tag, a
// Route naming the proxy and a carrier's Request-URI, but no valid dialog
// token for its Call-ID, gets 403 and never reaches the carrier: it would
// otherwise pass as a re-INVITE, past admission and pacing.
func TestForgedReInviteIsRefused(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	// A real call gives the peer a genuine token, of its own Call-ID.
	ok := answeredCall(t, caller, h.udp)
	real := tokenOf(t, ok)
	invites := car.Count("INVITE")

	cases := []struct{ name, params string }{
		{"no token", ""},
		{"empty token", ";" + tokenParam + "="},
		{"wrong token", ";" + tokenParam + "=AAAAAAAAAAAAAAAA"},
		{"not base64", ";" + tokenParam + "=!!!!!!!!!!!!!!!!"},
		{"too long", ";" + tokenParam + "=" + real + strings.Repeat("b", 64)}, // opaque's alphabet, over dialogtoken.MaxChars
		{"token of another Call-ID", ";" + tokenParam + "=" + real},
		{"old version-1 token", ";" + tokenParam + "=AAAAAAAAAAAAAAAA"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := caller.Final(ctxT(t, 5*time.Second), reInvite(caller, h.udp, car.Addr, tc.params))
			if res == nil || res.StatusCode != 403 {
				t.Fatalf("final = %v, want 403", res)
			}
			if n := badTokens(h); n != float64(i+1) {
				t.Errorf("sip_errors_total{bad_dialog_token} = %v, want %d", n, i+1)
			}
		})
	}
	// The token of a real call does not open its Call-ID to a Route
	// without it either (only the Route entries of the proxy count).
	forged := inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)
	forged.RemoveHeader("Route")
	forged.AppendHeader(sipmsg.NewHeader("Route", "<sip:"+h.udp+";lr>"))
	forged.AppendHeader(sipmsg.NewHeader("X-Token", real))
	if res := caller.Final(ctxT(t, 5*time.Second), forged); res == nil || res.StatusCode != 403 {
		t.Fatalf("re-INVITE of a real dialog without the token in Route: final = %v, want 403", res)
	}
	if n := car.Count("INVITE"); n != invites {
		t.Errorf("carrier INVITEs = %d, want %d (no forged re-INVITE may reach it)", n, invites)
	}
}

// TestReInviteWithRecordRouteIsRelayed: a UA that copies the Record-Route of
// its answered call into Route (RFC 3261 12.1) gets its re-INVITE relayed;
// every in-dialog request needs the token, a BYE too.
func TestReInviteWithRecordRouteIsRelayed(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	if tok := tokenOf(t, ok); len(tok) != 77 || !isOpaque(tok) {
		t.Errorf("token %q: want 77 characters of opaque.Alphabet (48 bytes for two IPv4 legs)", tok)
	}
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)); res == nil || res.StatusCode != 200 {
		t.Fatalf("re-INVITE final = %v, want 200", res)
	}
	if n := car.Count("INVITE"); n != 2 {
		t.Errorf("carrier INVITEs = %d, want 2 (the call and its re-INVITE)", n)
	}
	// The token never leaves the proxy's own Route entries: the carrier
	// sees the re-INVITE without them.
	if inv := car.Invites(); len(inv) == 2 && len(inv[1].GetHeaders("Route")) != 0 {
		t.Errorf("re-INVITE at the carrier still has Route %v", inv[1].GetHeaders("Route"))
	}
	// A BYE whose Route lost the token is not relayed.
	bye := inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)
	bye.RemoveHeader("Route")
	bye.AppendHeader(sipmsg.NewHeader("Route", "<sip:"+h.udp+";lr>"))
	if res := caller.Final(ctxT(t, 5*time.Second), bye); res == nil || res.StatusCode != 403 {
		t.Fatalf("BYE without token final = %v, want 403", res)
	}
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)); res == nil || res.StatusCode != 200 {
		t.Fatalf("BYE with the token final = %v, want 200", res)
	}
	if n := car.Count("BYE"); n != 1 {
		t.Errorf("carrier BYEs = %d, want 1", n)
	}
}

// TestReInviteAcrossSecretReload: a reload that changes sip.dialog_secret
// keeps accepting the tokens of calls set up under the previous secret;
// after a second change the oldest secret's tokens are refused.
func TestReInviteAcrossSecretReload(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h, reload := startProxyWithSecret(t, carrierCfg("a", car), "first-secret-0123456789")
	caller := siptest.StartCaller(t, "127.0.0.2")
	reinvite := func(ok *sipmsg.Response) int {
		res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE))
		if res == nil {
			t.Fatal("re-INVITE: no final response")
		}
		return res.StatusCode
	}

	first := answeredCall(t, caller, h.udp)
	reload("second-secret-0123456789")
	if code := reinvite(first); code != 200 {
		t.Fatalf("re-INVITE of a call set up before the reload: %d, want 200", code)
	}
	second := answeredCall(t, caller, h.udp)
	if tokenOf(t, second) == tokenOf(t, first) {
		t.Fatal("a new call's token is not minted under the new secret")
	}
	if code := reinvite(second); code != 200 {
		t.Fatalf("re-INVITE of a call set up after the reload: %d, want 200", code)
	}
	reload("third-secret-0123456789")
	if code := reinvite(second); code != 200 {
		t.Errorf("re-INVITE under the previous secret: %d, want 200", code)
	}
	if code := reinvite(first); code != 403 {
		t.Errorf("re-INVITE under the secret before the previous one: %d, want 403", code)
	}
}

// TestRecordRouteOffRefusesReInvites: without record_route in-dialog
// requests do not traverse the proxy; an INVITE that claims to is forged.
func TestRecordRouteOffRefusesReInvites(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.RecordRoute = false
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	if ok := answeredCall(t, caller, h.udp); len(ok.GetHeaders("Record-Route")) != 0 {
		t.Fatalf("record_route false: 200 has Record-Route %v", ok.GetHeaders("Record-Route"))
	}
	if res := caller.Final(ctxT(t, 5*time.Second), reInvite(caller, h.udp, car.Addr, "")); res == nil || res.StatusCode != 403 {
		t.Fatalf("re-INVITE final = %v, want 403", res)
	}
	if n := car.Count("INVITE"); n != 1 {
		t.Errorf("carrier INVITEs = %d, want 1", n)
	}
}

// mustMint mints a token under d's key or fails tb: a token of a call the
// test makes up, as another node of the pool (same key, another process's
// nonces) would mint it. Minted with d's own nonces, it would name a call
// d's proxy never held, which the proxy refuses (ownTokenGone).
func mustMint(tb testing.TB, d *dialogKeys, cfg *config.Config, legs dialogLegs, callID, ftag string) string {
	tb.Helper()
	ns, err := dialogtoken.NewNonces()
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := d.keys(cfg).cur.MintNonce(legs, callID, ftag, d.clock(), ns.Next())
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// TestDialogTokensSharedSecret: nodes with the same secret mint and accept
// each other's tokens; a token is bound to its Call-ID, its caller's From
// tag and its legs; without a secret each process has its own key.
func TestDialogTokensSharedSecret(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	shared := &config.Config{SIP: config.SIP{DialogSecret: "pool-secret-0123456789"}}
	none := &config.Config{}
	newKeys := func(cfg *config.Config) *dialogKeys {
		k, err := newDialogKeys(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	legs := dialogLegs{Peer: leg{Addr: netip.MustParseAddrPort("127.0.0.2:5061")},
		Carrier: leg{Addr: netip.MustParseAddrPort("[2001:db8::5]:5070"), Proto: legTCP}}
	a, b := newKeys(shared), newKeys(shared)
	tok := mustMint(t, a, shared, legs, "call-1@host", "ftag")
	got, dir, st := b.verify(shared, tok, "call-1@host", "ftag", "ttag")
	if st != tokenOK || got != legs || dir != fromPeer {
		t.Errorf("node b: verify = %+v, %d, %v; want the legs, fromPeer", got, dir, st)
	}
	if _, dir, st := b.verify(shared, tok, "call-1@host", "ttag", "ftag"); st != tokenOK || dir != fromCarrier {
		t.Errorf("the callee's request (tags swapped): %d, %v; want fromCarrier", dir, st)
	}
	for _, tc := range []struct{ name, id, from, to string }{
		{"another Call-ID", "call-2@host", "ftag", "ttag"},
		{"empty Call-ID", "", "ftag", "ttag"},
		{"another From tag", "call-1@host", "other", "ttag"},
	} {
		if _, _, st := b.verify(shared, tok, tc.id, tc.from, tc.to); st == tokenOK {
			t.Errorf("%s: token accepted", tc.name)
		}
	}
	// Any byte changed (header, nonce, sealed legs, tag) breaks it.
	raw, _ := opaque.DecodeString(tok)
	for i := range raw {
		bad := append([]byte(nil), raw...)
		bad[i] ^= 1
		if _, _, st := b.verify(shared, opaque.EncodeToString(bad), "call-1@host", "ftag", "ttag"); st == tokenOK {
			t.Errorf("a token with byte %d changed is accepted", i)
		}
	}
	r1, r2 := newKeys(none), newKeys(none)
	if _, _, st := r2.verify(none, mustMint(t, r1, none, legs, "c", "f"), "c", "f", ""); st == tokenOK {
		t.Error("random keys of two processes accept each other's tokens")
	}
	if _, _, st := r1.verify(none, mustMint(t, r1, none, legs, "c", "f"), "c", "f", ""); st != tokenOK {
		t.Error("a process refuses its own token")
	}
}

// v2Token is a dialog token as releases before the sealed ones minted it:
// version 2, flags, the legs in clear, then 12 bytes of HMAC-SHA256 under
// the secret over them, 0, the Call-ID, 0 and the From tag.
func v2Token(secret string, legs dialogLegs, callID, ftag string) string {
	p := []byte{2, 0}
	p = dialogtoken.AppendLeg(p, legs.Peer)
	p = dialogtoken.AppendLeg(p, legs.Carrier)
	var sum [sha256.Size]byte
	dialogtoken.NewKey([]byte(secret)).Sum(&sum, p, callID, ftag)
	return base64.RawURLEncoding.EncodeToString(append(p, sum[:12]...))
}

// TestTokenIsSealed: a dialog token tells its reader nothing of the legs
// (the carrier address that took the call was readable base64: routes are
// confidential, and a spoofed BYE needs that address), it is short enough
// for a Record-Route, and a token in clear, even one signed with the
// secret as older releases signed them, is refused. Nodes that share the
// secret still accept each other's (TestDialogTokensSharedSecret).
func TestTokenIsSealed(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.DialogSecret = "sealed-secret-0123456789"
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	tok := tokenOf(t, ok)
	raw, decoded := opaque.DecodeString(tok)
	if !decoded {
		t.Fatalf("token %q is not opaque's text", tok)
	}
	carAddr := netip.MustParseAddrPort(car.Addr)
	ip := carAddr.Addr().As4()
	port := []byte{byte(carAddr.Port() >> 8), byte(carAddr.Port())}
	if bytes.Contains(raw, append(ip[:], port...)) || bytes.Contains(raw, port) && bytes.Contains(raw, ip[:]) {
		t.Errorf("token %q holds the carrier's address %s in clear", tok, car.Addr)
	}
	peer := netip.MustParseAddrPort(caller.Addr)
	pip := peer.Addr().As4()
	if bytes.Contains(raw, pip[:]) {
		t.Errorf("token %q holds the peer's address %s in clear", tok, caller.Addr)
	}
	if len(tok) > 96 {
		t.Errorf("token of %d characters, want at most 96 for two IPv4 legs", len(tok))
	}
	// The same legs in clear, signed with the secret the old way: refused.
	legs := dialogLegs{Peer: leg{Addr: peer}, Carrier: leg{Addr: carAddr}}
	old := v2Token(cfg.SIP.DialogSecret, legs, msgpart.CallID(ok), msgpart.Tag(ok.From().Params))
	bye := inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)
	bye.RemoveHeader("Route")
	bye.AppendHeader(sipmsg.NewHeader("Route", "<sip:"+h.udp+";lr;"+tokenParam+"="+old+">"))
	if res := caller.Final(ctxT(t, 5*time.Second), bye); res == nil || res.StatusCode != 403 {
		t.Fatalf("BYE with an unsealed token: final %v, want 403", res)
	}
	if n := car.Count("BYE"); n != 0 {
		t.Fatalf("carrier BYEs = %d, want 0", n)
	}
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)); res == nil || res.StatusCode != 200 {
		t.Fatalf("BYE with the sealed token: final %v, want 200", res)
	}
}

// FuzzDecodeToken: opening a token never panics and accepts nothing it did
// not mint (a random string never opens); the plaintext parser accepts
// only what dialogtoken.Plaintext makes.
func FuzzDecodeToken(f *testing.F) {
	cfg := &config.Config{SIP: config.SIP{DialogSecret: "fuzz-secret-0123456789"}}
	d, err := newDialogKeys(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	legs := dialogLegs{Peer: leg{Addr: netip.MustParseAddrPort("127.0.0.2:5061")},
		Carrier: leg{Addr: netip.MustParseAddrPort("127.0.0.1:5070")}}
	f.Add(mustMint(f, d, cfg, legs, "c", "f"), []byte{0, 4, 127, 0, 0, 2, 0x13, 0xc5, 4, 127, 0, 0, 1, 0x13, 0xce})
	f.Add("AAAAAAAAAAAAAAAA", []byte{3, 16})
	f.Add(v2Token("k", legs, "c", "f"), dialogtoken.Plaintext(legs))
	f.Fuzz(func(t *testing.T, tok string, plain []byte) {
		if got, _, st := d.verify(cfg, tok, "c", "f", "g"); st == tokenOK {
			// Only tokens of these legs were ever minted under this
			// secret (the seed, by each fuzzing process).
			if got != legs {
				t.Fatalf("token %q opens to %+v, and it was never minted", tok, got)
			}
		}
		if l, ok := dialogtoken.ParsePlaintext(plain); ok && string(dialogtoken.Plaintext(l)) != string(plain) {
			t.Fatalf("plaintext %x: legs %+v re-encode to %x", plain, l, dialogtoken.Plaintext(l))
		}
	})
}

// TestNoSecretWarnsOnce: an empty sip.dialog_secret is logged once, at
// start, as a warning; with store.redis the configuration's warnings say
// it for the pool (config.Warnings), and the proxy does not again.
func TestNoSecretWarnsOnce(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, tc := range []struct {
		secret string
		redis  bool
		want   int
	}{{"", false, 1}, {"set-secret-0123456789", false, 0}, {"", true, 0}} {
		buf.Reset()
		cfg := testConfig()
		cfg.SIP.DialogSecret = tc.secret
		if tc.redis {
			cfg.Store.Redis = &config.Redis{Addrs: []string{"127.0.0.1:1"}}
		}
		adm, pacer := newFakes()
		p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer,
			Metrics: metrics.New(prometheus.NewRegistry()), Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Serve(ctx) }()
		<-p.Ready()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		n := strings.Count(buf.String(), "sip.dialog_secret is not set")
		if n != tc.want {
			t.Errorf("secret %q, redis %v: %d warnings, want %d:\n%s", tc.secret, tc.redis, n, tc.want, buf.String())
		}
	}
}

// syncBuffer is a buffer safe for the logger's goroutines.
type syncBuffer = testlog.Buffer

// TestReInviteLimitedPerDialogNotPaced: a re-INVITE takes no pacing slot
// (hold and resume must not wait behind new calls), but one dialog gets at
// most reinviteLimit of them a minute (503 beyond, never at the carrier);
// a BYE is not limited.
func TestReInviteLimitedPerDialogNotPaced(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	_, pacer := newFakes()
	cfg := testConfig(carrierCfg("a", car))
	h := startProxy(t, cfg, admission.NewLocalStore(nil), pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	before, _ := pacer.counts()
	for i := 0; i < reinviteLimit; i++ {
		if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)); res == nil || res.StatusCode != 200 {
			t.Fatalf("re-INVITE %d final = %v, want 200", i+1, res)
		}
	}
	if after, _ := pacer.counts(); after != before {
		t.Errorf("slots reserved = %d after the re-INVITEs, want %d (none)", after, before)
	}
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)); res == nil || res.StatusCode != 503 {
		t.Fatalf("re-INVITE %d within a minute: final = %v, want 503", reinviteLimit+1, res)
	}
	if n := car.Count("INVITE"); n != 1+reinviteLimit {
		t.Errorf("carrier INVITEs = %d, want %d (the call and the allowed re-INVITEs)", n, 1+reinviteLimit)
	}
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)); res == nil || res.StatusCode != 200 {
		t.Fatalf("BYE: final = %v, want 200", res)
	}
}

// TestSessionTimerRefreshesPass: a call refreshed by re-INVITE at a session
// timer's cadence (RFC 4028: every 90 s at the shortest Min-SE, here with
// a hold and a resume in between) is never refused over a quarter of an
// hour, while a burst beyond the per-dialog limit is. The store's clock is
// advanced by hand, so the test takes no quarter of an hour.
func TestSessionTimerRefreshesPass(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	_, pacer := newFakes()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	h := startProxy(t, testConfig(carrierCfg("a", car)), admission.NewLocalStore(clock), pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	reinvite := func() int {
		if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)); res != nil {
			return res.StatusCode
		}
		return 0
	}
	for i := 0; i < 10; i++ {
		advance(90 * time.Second)
		if got := reinvite(); got != 200 {
			t.Fatalf("refresh %d (after %v): final %d, want 200", i+1, time.Duration(i+1)*90*time.Second, got)
		}
		if i == 4 { // hold and resume between two refreshes
			for j := 0; j < 2; j++ {
				advance(5 * time.Second)
				if got := reinvite(); got != 200 {
					t.Fatalf("hold/resume %d: final %d, want 200", j+1, got)
				}
			}
		}
	}
	// A burst in one instant: the first few pass, then 503.
	codes := map[int]int{}
	for i := 0; i < reinviteLimit+2; i++ {
		codes[reinvite()]++
	}
	if codes[503] == 0 || codes[200] > reinviteLimit {
		t.Errorf("burst of %d re-INVITEs: %v, want at most %d answered 200 and the rest 503", reinviteLimit+2, codes, reinviteLimit)
	}
}

// TestDialogTokenTransports: every pair of leg transports (UDP, TCP, TLS)
// survives a token's round trip, and a token claiming TCP and TLS for one
// leg is refused.
func TestDialogTokenTransports(t *testing.T) {
	cfg := &config.Config{SIP: config.SIP{DialogSecret: "pool-secret-0123456789"}}
	k, err := newDialogKeys(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range []legTransport{legUDP, legTCP, legTLS} {
		for _, ct := range []legTransport{legUDP, legTCP, legTLS} {
			legs := dialogLegs{Peer: leg{Addr: netip.MustParseAddrPort("127.0.0.2:5061"), Proto: pt},
				Carrier: leg{Addr: netip.MustParseAddrPort("[2001:db8::5]:5061"), Proto: ct}}
			token, err := k.mint(cfg, legs, "c", "f")
			if err != nil {
				t.Fatal(err)
			}
			got, _, status := k.verify(cfg, token, "c", "f", "")
			if status != tokenOK || got != legs {
				t.Errorf("legs %s/%s: verify = %+v, %v; want them back", legs.Peer.Name(), legs.Carrier.Name(), got, status)
			}
		}
	}
	// Flags: peer TCP and TLS, carrier TCP and TLS, an unknown bit.
	for _, flags := range []byte{1 | 4, 2 | 8, 1 << 4} {
		p := dialogtoken.Plaintext(dialogLegs{Peer: leg{Addr: netip.MustParseAddrPort("127.0.0.2:5061")}, Carrier: leg{Addr: netip.MustParseAddrPort("127.0.0.1:5070")}})
		p[0] = flags
		if _, ok := dialogtoken.ParsePlaintext(p); ok {
			t.Errorf("flags %08b parsed, want refused", flags)
		}
	}
}

// isOpaque reports whether s is a text of package opaque.
func isOpaque(s string) bool {
	_, ok := opaque.DecodeString(s)
	return ok
}

// startProxyWithSecret starts a proxy with one carrier under
// sip.dialog_secret secret; reload replaces the secret in the snapshot it
// serves, as a reload of the file does.
func startProxyWithSecret(t *testing.T, car config.Carrier, secret string) (h *harness, reload func(secret string)) {
	t.Helper()
	adm, pacer := newFakes()
	withSecret := func(s string) *config.Config {
		c := testConfig(car)
		c.SIP.DialogSecret = s
		return c
	}
	var mu sync.Mutex
	cur := withSecret(secret)
	reload = func(s string) { mu.Lock(); cur = withSecret(s); mu.Unlock() }
	h = startProxyWith(t, func() *config.Config { mu.Lock(); defer mu.Unlock(); return cur }, adm, pacer)
	return h, reload
}
