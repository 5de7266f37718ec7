package sip

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/metrics"
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
		{"too long", ";" + tokenParam + "=" + real + "AAAA"},
		{"token of another Call-ID", ";" + tokenParam + "=" + real},
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
// its answered call into Route (RFC 3261 12.1) gets its re-INVITE relayed,
// and a BYE needs no token at all.
func TestReInviteWithRecordRouteIsRelayed(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	if tok := tokenOf(t, ok); len(tok) != 16 {
		t.Errorf("token %q: want 16 base64url characters (12 bytes)", tok)
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
	// A BYE whose Route lost the token (a UA, or a node, that knows nothing
	// of it) still ends the call.
	bye := inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)
	bye.RemoveHeader("Route")
	bye.AppendHeader(sipmsg.NewHeader("Route", "<sip:"+h.udp+";lr>"))
	if res := caller.Final(ctxT(t, 5*time.Second), bye); res == nil || res.StatusCode != 200 {
		t.Fatalf("BYE without token final = %v, want 200", res)
	}
	if n := car.Count("BYE"); n != 1 {
		t.Errorf("carrier BYEs = %d, want 1", n)
	}
	if n := badTokens(h); n != 0 {
		t.Errorf("sip_errors_total{bad_dialog_token} = %v, want 0", n)
	}
}

// TestReInviteAcrossSecretReload: a reload that changes sip.dialog_secret
// keeps accepting the tokens of calls set up under the previous secret;
// after a second change the oldest secret's tokens are refused.
func TestReInviteAcrossSecretReload(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	withSecret := func(s string) *config.Config {
		c := testConfig(carrierCfg("a", car))
		c.SIP.DialogSecret = s
		return c
	}
	var mu sync.Mutex
	cur := withSecret("first-secret-0123456789")
	reload := func(s string) { mu.Lock(); cur = withSecret(s); mu.Unlock() }
	h := startProxyWith(t, func() *config.Config { mu.Lock(); defer mu.Unlock(); return cur }, adm, pacer)
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

// TestDialogTokensSharedSecret: nodes with the same secret mint and accept
// each other's tokens; without a secret each process has its own key.
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
	a, b := newKeys(shared), newKeys(shared)
	tok := a.mint(shared, "call-1@host")
	if !b.valid(shared, "call-1@host", tok) {
		t.Error("a token of node a is refused by node b with the same secret")
	}
	if b.valid(shared, "call-2@host", tok) {
		t.Error("a token is accepted for another Call-ID")
	}
	if b.valid(shared, "", tok) {
		t.Error("a token is accepted for an empty Call-ID")
	}
	r1, r2 := newKeys(none), newKeys(none)
	if r2.valid(none, "call-1@host", r1.mint(none, "call-1@host")) {
		t.Error("random keys of two processes accept each other's tokens")
	}
	if !r1.valid(none, "call-1@host", r1.mint(none, "call-1@host")) {
		t.Error("a process refuses its own token")
	}
}

// TestNoSecretWarnsOnce: an empty sip.dialog_secret is logged once, at
// start, as a warning.
func TestNoSecretWarnsOnce(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, secret := range []string{"", "set-secret-0123456789"} {
		buf.Reset()
		cfg := testConfig()
		cfg.SIP.DialogSecret = secret
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
		if want := map[bool]int{true: 1, false: 0}[secret == ""]; n != want {
			t.Errorf("secret %q: %d warnings, want %d:\n%s", secret, n, want, buf.String())
		}
	}
}

// syncBuffer is a strings.Builder safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// TestReInviteToCarrierIsPaced: a re-INVITE bound for a carrier takes a
// pacing slot like a new call (the carrier counts every INVITE against its
// cps), and a carrier with no room answers nothing: the re-INVITE gets 503
// and never reaches it. A BYE takes no slot.
func TestReInviteToCarrierIsPaced(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	cfg := testConfig(carrierCfg("a", car))
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	before, _ := pacer.counts()
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)); res == nil || res.StatusCode != 200 {
		t.Fatalf("re-INVITE final = %v, want 200", res)
	}
	if after, _ := pacer.counts(); after != before+1 {
		t.Errorf("slots reserved = %d after the re-INVITE, want %d (one more)", after, before+1)
	}

	pacer.mu.Lock()
	pacer.full = map[string]bool{lua.Key(cfg.Store.KeyPrefix, metrics.ScopeCarrier, "a"): true}
	pacer.mu.Unlock()
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)); res == nil || res.StatusCode != 503 {
		t.Fatalf("re-INVITE to a full carrier: final = %v, want 503", res)
	}
	if n := car.Count("INVITE"); n != 2 {
		t.Errorf("carrier INVITEs = %d, want 2 (the call and the first re-INVITE)", n)
	}
	if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.BYE)); res == nil || res.StatusCode != 200 {
		t.Fatalf("BYE to a full carrier: final = %v, want 200 (no slot needed)", res)
	}
}
