package sip

import (
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/policy"
)

// startCallsProxy starts a proxy whose max_calls places are in a Tracker
// on an in-process store, returned for inspection.
func startCallsProxy(t *testing.T, car *siptest.Carrier, peerMax, carMax int) (*harness, *callplaces.Tracker, *callplaces.LocalStore) {
	t.Helper()
	adm, pacer := newFakes()
	c := carrierCfg("a", car)
	c.MaxCalls = carMax
	cfg := testConfig(c)
	cfg.Peers[0].MaxCalls = peerMax
	cfg.SIP.RejectCalls.Code, cfg.SIP.RejectCalls.Reason = 503, "Call Limit Exceeded"
	store := callplaces.NewLocalStore(nil)
	tr := callplaces.NewTracker(store, callplaces.TrackerOptions{TTL: time.Minute})
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Calls: tr})
	return h, tr, store
}

// peerPlaces counts the live calls in dialer-1's max_calls place of store.
func peerPlaces(t *testing.T, store callplaces.Store) func() int {
	key := policy.CallsKey("t", policy.ScopePeer, "dialer-1")
	return func() int {
		n, _ := store.Count(t.Context(), []string{key})
		return n[0]
	}
}

func TestMaxCallsPeer(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h, tr, store := startCallsProxy(t, car, 2, 0)
	caller := siptest.StartCaller(t, "127.0.0.2")
	live := peerPlaces(t, store)

	ok1 := answeredCall(t, caller, h.udp)
	answeredCall(t, caller, h.udp)
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 503 || res.Reason != "Call Limit Exceeded" {
		t.Fatalf("third call: got %v, want 503 Call Limit Exceeded", res)
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedCalls)) == 1
	}, "rejected_calls counted once")

	// A stranger holding the dialog token: 403, and nothing freed.
	stranger := siptest.StartCaller(t, "127.0.0.9")
	if res := stranger.Final(ctxT(t, 5*time.Second), inDialogOf(t, stranger, h.udp, ok1, sipmsg.BYE)); res == nil || res.StatusCode != 403 {
		t.Fatalf("stranger's BYE: got %v, want 403", res)
	}
	if got := live(); got != 2 {
		t.Fatalf("live calls after a forged BYE: got %d, want 2", got)
	}

	// The peer's BYE naming a made-up callee tag passes the token check
	// (the token covers the Call-ID and the caller's tag) and is relayed,
	// but a real carrier answers it 481 and the call goes on: it frees
	// nothing (review finding: it freed the places of a live call).
	bogus := inDialogOf(t, caller, h.udp, ok1, sipmsg.BYE)
	madeUp := sipmsg.NewParams()
	madeUp.Add("tag", "made-up")
	bogus.ReplaceHeader(&sipmsg.ToHeader{Address: *ok1.To().Address.Clone(), Params: madeUp})
	caller.Final(ctxT(t, 5*time.Second), bogus)
	if got := live(); got != 2 {
		t.Fatalf("live calls after a BYE with a made-up To tag: got %d, want 2", got)
	}

	// The peer's own BYE ends the call: one place is free again, once. A
	// second BYE of the ended dialog is refused (481) and frees nothing.
	for i, want := range []int{200, 481} {
		if res := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok1, sipmsg.BYE)); res == nil || res.StatusCode != want {
			t.Fatalf("peer's BYE %d: got %v, want %d", i, res, want)
		}
	}
	// The places are freed on the BYE's 200 (off the read loop,
	// stateless.go), so the 200 may reach the caller first.
	waitFor(t, func() bool { return live() == 1 }, "one live call after two BYEs of one call")
	time.Sleep(50 * time.Millisecond)
	if got := live(); got != 1 {
		t.Fatalf("live calls after two BYEs of one call: got %d, want 1", got)
	}
	answeredCall(t, caller, h.udp)
	if got := tr.Live(); got != 2 {
		t.Fatalf("tracked calls: got %d, want 2", got)
	}
}

func TestMaxCallsCarrierAndFailedCalls(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer {
		if busy.Load() {
			return siptest.Answer{Code: 486}
		}
		return siptest.Answer{Code: 200}
	})
	h, tr, store := startCallsProxy(t, car, 1, 1)
	caller := siptest.StartCaller(t, "127.0.0.2")
	keys := []string{policy.CallsKey("t", policy.ScopePeer, "dialer-1"), policy.CallsKey("t", policy.ScopeCarrier, "a")}

	// A call that fails (486) frees its places at its final answer.
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 486 {
		t.Fatalf("busy call: got %v, want 486", res)
	}
	// The places are freed when the INVITE handler returns, just after
	// the answer left.
	waitFor(t, func() bool {
		n, _ := store.Count(t.Context(), keys)
		return tr.Live() == 0 && n[0] == 0 && n[1] == 0
	}, "a failed call's places freed")
	busy.Store(false)
	answeredCall(t, caller, h.udp)
	if n, _ := store.Count(t.Context(), keys); n[0] != 1 || n[1] != 1 {
		t.Fatalf("after an answered call: places %v, want [1 1]", n)
	}
}

func TestMaxCallsFullCarrierIsSkipped(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h, tr, _ := startCallsProxy(t, car, 0, 1)
	caller := siptest.StartCaller(t, "127.0.0.2")
	answeredCall(t, caller, h.udp)
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 503 || res.Reason != "Call Limit Exceeded" {
		t.Fatalf("second call to a full carrier: got %v, want 503 Call Limit Exceeded", res)
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(h.m.Reroutes.WithLabelValues("a", metrics.RerouteCallsFull)) == 1
	}, "one calls_full reroute")
	waitFor(t, func() bool { return tr.Live() == 1 }, "one tracked call (the refused call holds nothing)")
}

// calleeBye is the carrier's BYE of the call answered by ok: From and To
// swapped (the callee's tag is its From tag).
func calleeBye(t *testing.T, c *siptest.Caller, proxy string, ok *sipmsg.Response) *sipmsg.Request {
	t.Helper()
	bye := inDialogOf(t, c, proxy, ok, sipmsg.BYE)
	from, to := bye.From(), bye.To()
	f := &sipmsg.FromHeader{DisplayName: to.DisplayName, Address: *to.Address.Clone(), Params: to.Params.Clone()}
	tt := &sipmsg.ToHeader{DisplayName: from.DisplayName, Address: *from.Address.Clone(), Params: from.Params.Clone()}
	bye.RemoveHeader("From")
	bye.RemoveHeader("To")
	bye.AppendHeader(f)
	bye.AppendHeader(tt)
	return bye
}

func TestMaxCallsCarrierByeEndsTheCall(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h, tr, store := startCallsProxy(t, car, 1, 0)
	caller := siptest.StartCaller(t, "127.0.0.2")
	live := peerPlaces(t, store)
	ok := answeredCall(t, caller, h.udp)

	// The callee's BYE from a stranger's address, and from the carrier's
	// IP on another port: 403, nothing freed.
	other := siptest.StartCaller(t, "127.0.0.1")
	if res := other.Final(ctxT(t, 5*time.Second), calleeBye(t, other, h.udp, ok)); res == nil || res.StatusCode != 403 {
		t.Fatalf("callee BYE from the carrier's IP, another port: got %v, want 403", res)
	}
	stranger := siptest.StartCaller(t, "127.0.0.9")
	if res := stranger.Final(ctxT(t, 5*time.Second), calleeBye(t, stranger, h.udp, ok)); res == nil || res.StatusCode != 403 {
		t.Fatalf("callee BYE from a stranger: got %v, want 403", res)
	}
	if tr.Live() != 1 {
		t.Fatalf("tracked calls after a forged BYE: got %d, want 1", tr.Live())
	}
	// From the carrier's address: relayed to the caller, and the place is
	// free for the next call.
	carSide := car.Caller(t)
	if res := carSide.Final(ctxT(t, 5*time.Second), calleeBye(t, carSide, h.udp, ok)); res == nil || res.StatusCode != 200 {
		t.Fatalf("callee BYE: got %v, want 200", res)
	}
	waitFor(t, func() bool { return tr.Live() == 0 }, "no tracked call after the callee's BYE")
	// The Tracker forgets the call, then frees its places in the store:
	// the next call needs the place itself free.
	waitFor(t, func() bool { return live() == 0 }, "the peer's place free after the callee's BYE")
	answeredCall(t, caller, h.udp)
}

// TestMaxCallsCarrierFreedWhenTheCallMovesOn: carrier a (max_calls 1)
// fails the call (503, no answer within its setup_timeout) or has no
// pacing slot in time, and the call is answered by carrier b. While that
// call goes on, a holds nothing for it: its place is free, and the next
// call, which a now takes, gets it (before the fix of a missing release,
// a looked full while carrying nothing).
func TestMaxCallsCarrierFreedWhenTheCallMovesOn(t *testing.T) {
	for _, mode := range []string{"503", "timeout", "pacing full"} {
		t.Run(mode, func(t *testing.T) {
			var bad atomic.Bool
			bad.Store(true)
			stop := make(chan struct{})
			a := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer {
				if !bad.Load() {
					return siptest.Answer{Code: 200}
				}
				if mode == "timeout" {
					// Silent (not even 100 Trying) past the setup_timeout.
					select {
					case <-stop:
					case <-time.After(3 * time.Second):
					}
				}
				return siptest.Answer{Code: 503}
			})
			t.Cleanup(func() { close(stop) }) // before a stops
			b := siptest.StartCarrier(t, "127.0.0.1", nil)
			adm, pacer := newFakes()
			ca := carrierCfg("a", a)
			ca.MaxCalls, ca.SetupTimeout = 1, 300*time.Millisecond
			cfg := testConfig(ca, carrierCfg("b", b))
			aSlots := policy.Of(cfg).Carrier(&cfg.Carriers[0]).Key
			if mode == "pacing full" {
				pacer.full[aSlots] = true
			}
			store := callplaces.NewLocalStore(nil)
			tr := callplaces.NewTracker(store, callplaces.TrackerOptions{TTL: time.Minute})
			h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Calls: tr})
			caller := siptest.StartCaller(t, "127.0.0.2")
			aKey := policy.CallsKey("t", policy.ScopeCarrier, "a")
			aPlaces := func() int {
				n, err := store.Count(t.Context(), []string{aKey})
				if err != nil {
					t.Fatalf("Count: %v", err)
				}
				return n[0]
			}

			answeredCall(t, caller, h.udp) // by b, and still up
			if n := b.Count("INVITE"); n != 1 {
				t.Fatalf("carrier b INVITEs = %d, want 1 (the call moved on from a)", n)
			}
			triedA := a.Count("INVITE")
			waitFor(t, func() bool { return aPlaces() == 0 }, "carrier a's place free while the call is up at b")

			bad.Store(false)
			pacer.mu.Lock()
			delete(pacer.full, aSlots)
			pacer.mu.Unlock()
			answeredCall(t, caller, h.udp)
			if got := a.Count("INVITE"); got != triedA+1 {
				t.Fatalf("carrier a INVITEs = %d after the second call, want %d (a had a free place)", got, triedA+1)
			}
			if got := aPlaces(); got != 1 {
				t.Fatalf("carrier a's places = %d, want 1 (the second call)", got)
			}
			if n := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("a", metrics.RerouteCallsFull)); n != 0 {
				t.Fatalf("reroutes{a,calls_full} = %v, want 0", n)
			}
		})
	}
}

// TestMaxCallsRefusalCarriesRetryAfter: a call refused by max_calls (the
// peer's place, or every carrier of the route full) gets
// sip.reject_calls: its code, reason and Retry-After (seconds, rounded up;
// none when the setting is 0).
func TestMaxCallsRefusalCarriesRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name            string
		peerMax, carMax int
		retryAfter      time.Duration
		want            string // Retry-After value, "" = no header
	}{
		{"peer full", 1, 0, 1500 * time.Millisecond, "2"},
		{"carrier full", 0, 1, 30 * time.Second, "30"},
		{"peer full, no retry_after", 1, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			car := siptest.StartCarrier(t, "127.0.0.1", nil)
			adm, pacer := newFakes()
			c := carrierCfg("a", car)
			c.MaxCalls = tc.carMax
			cfg := testConfig(c)
			cfg.Peers[0].MaxCalls = tc.peerMax
			cfg.SIP.RejectCalls = config.Reject{Code: 480, Reason: "Too Many Calls", RetryAfter: tc.retryAfter}
			tr := callplaces.NewTracker(callplaces.NewLocalStore(nil), callplaces.TrackerOptions{TTL: time.Minute})
			h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Calls: tr})
			caller := siptest.StartCaller(t, "127.0.0.2")
			answeredCall(t, caller, h.udp)
			res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
			if res == nil || res.StatusCode != 480 || res.Reason != "Too Many Calls" {
				t.Fatalf("second call: got %v, want 480 Too Many Calls", res)
			}
			ra := res.GetHeader("Retry-After")
			switch {
			case tc.want == "" && ra != nil:
				t.Errorf("Retry-After = %q, want none", ra.Value())
			case tc.want != "" && (ra == nil || ra.Value() != tc.want):
				t.Errorf("Retry-After = %v, want %s", ra, tc.want)
			}
			if n := car.Count("INVITE"); n != 1 {
				t.Errorf("carrier INVITEs = %d, want 1 (the refused call never reached it)", n)
			}
		})
	}
}
