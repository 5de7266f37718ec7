package sip

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// TestE2EDeadCarrierDownWithinOneSetupTimeout (issue 24, item 4): a
// carrier that dies under traffic is marked down within one setup timeout
// of its third setup timeout in a row, because the probes that confirm
// the calls' failures go out together, not one after another (in series
// they took three probe timeouts: 3 s). Calls at 5 cps; the dead carrier
// drops everything, as a host whose SIP stack died.
func TestE2EDeadCarrierDownWithinOneSetupTimeout(t *testing.T) {
	dying := siptest.StartCarrier(t, "127.0.0.1", nil)
	live := siptest.StartCarrier(t, "127.0.0.1", nil)
	const probeTimeout = time.Second
	a := carrierCfg("a", dying)
	a.Probe = &config.Probe{Interval: time.Minute, Timeout: probeTimeout, DownAfter: 3, UpAfter: 1}
	cfg := testConfig(a, carrierCfg("b", live))
	setup := cfg.Carriers[0].Setup()
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	waitFor(t, func() bool { return dying.Count("OPTIONS") >= 1 }, "the first probe answered")
	dying.Silence()
	silenced := time.Now()

	caller := siptest.StartCaller(t, "127.0.0.2")
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		if st, _ := h.set().State("a"); !st.Up {
			break
		}
		wg.Go(func() {
			if res := caller.Final(ctxT(t, 10*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
				t.Errorf("call %d: final %v, want 200 (from the live carrier)", i, res)
			}
		})
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()

	st, _ := h.set().State("a")
	if st.Up {
		t.Fatalf("the dead carrier is still up after 40 calls: %+v", st)
	}
	invites := dying.Arrivals()
	if len(invites) < 3 {
		t.Fatalf("the dead carrier got %d INVITEs, want at least 3 (three setup timeouts)", len(invites))
	}
	third := invites[2].Add(setup)
	if late := st.Since.Sub(third); late > setup {
		t.Errorf("marked down %v after its third setup timeout, want within one setup timeout (%v); reason %q", late, setup, st.Reason)
	}
	var confirming []time.Time
	for _, at := range dying.OptionsArrivals() {
		if at.After(silenced) {
			confirming = append(confirming, at)
		}
	}
	if len(confirming) < 3 {
		t.Fatalf("confirming OPTIONS at the dead carrier: %d, want 3 (down_after)", len(confirming))
	}
	if spread := confirming[2].Sub(confirming[0]); spread >= probeTimeout {
		t.Errorf("the 3 confirming probes went out %v apart, want together (in series each waits its %v timeout)", spread, probeTimeout)
	}
	// Down: the calls that follow never wait for it.
	before := len(dying.Arrivals())
	for i := range 3 {
		if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
			t.Fatalf("call %d after the carrier went down: final %v, want 200", i, res)
		}
	}
	if got := len(dying.Arrivals()); got != before {
		t.Errorf("the down carrier got %d more INVITEs, want none", got-before)
	}
}

// TestE2ECarrierBelowMinASR (issue 24, item 4): a carrier that answers no
// call (486 to each) goes below its min_asr after min_seizures calls and
// is out of service on the node for one asr_window: the calls that follow
// go to the next carrier (reroute reason asr); after the window it takes
// calls again, judged afresh.
func TestE2ECarrierBelowMinASR(t *testing.T) {
	busy := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 486} })
	live := siptest.StartCarrier(t, "127.0.0.1", nil)
	a := carrierCfg("a", busy)
	a.MinASR, a.MinSeizures, a.ASRWindow = 50, 3, 2*time.Second
	cfg := testConfig(a, carrierCfg("b", live))
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	call := func() int {
		res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
		if res == nil {
			t.Fatal("no final answer")
		}
		return res.StatusCode
	}
	for i := range 3 {
		if got := call(); got != 486 {
			t.Fatalf("call %d: final %d, want the carrier's 486", i, got)
		}
	}
	// The third seizure is counted once its answer is relayed: the
	// caller may see the 486 first.
	outOfService := func() bool {
		st, _ := h.set().State("a")
		return !st.InService && st.ASR != nil && !st.ASR.Until.IsZero()
	}
	for deadline := time.Now().Add(5 * time.Second); !outOfService(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			st, _ := h.set().State("a")
			t.Fatalf("after 3 unanswered calls (min_seizures 3, min_asr 50): %+v, ASR %+v; want out of service", st, st.ASR)
		}
	}
	for i := range 3 {
		if got := call(); got != 200 {
			t.Fatalf("call %d below min_asr: final %d, want 200 from the next carrier", i, got)
		}
	}
	if busy.Count("INVITE") != 3 || live.Count("INVITE") != 3 {
		t.Errorf("INVITEs: a %d, b %d; want 3, 3", busy.Count("INVITE"), live.Count("INVITE"))
	}
	if r := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("a", metrics.RerouteASR)); r != 3 {
		t.Errorf("reroutes_total{a,asr} = %v, want 3", r)
	}
	if v := testutil.ToFloat64(h.m.CarrierSeizures.WithLabelValues("a", metrics.SeizureUnanswered)); v != 3 {
		t.Errorf("carrier_seizures_total{a,unanswered} = %v, want 3", v)
	}
	waitFor(t, func() bool { st, _ := h.set().State("a"); return st.InService }, "back in service after one asr_window")
	if got := call(); got != 486 || busy.Count("INVITE") != 4 {
		t.Errorf("after the window: final %d, INVITEs at a %d; want 486 from a, 4", got, busy.Count("INVITE"))
	}
}

// TestE2EWeightedRouteSplit (issue 24, item 3): a weighted route sends
// each carrier its share of the calls: 70/30 over 400 calls, within a
// binomial 6-sigma bound (sigma = sqrt(n p (1-p)) = 9.2 calls), which a
// fair split leaves less than once in 10^8 runs.
func TestE2EWeightedRouteSplit(t *testing.T) {
	ca, cb := siptest.StartCarrier(t, "127.0.0.1", nil), siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", ca), carrierCfg("b", cb))
	cfg.Routes["default"] = config.Route{Policy: config.RouteWeighted, Carriers: []config.RouteCarrier{{Name: "a", Weight: 70}, {Name: "b", Weight: 30}}}
	cfg.Peers[0].CPS, cfg.Customers[0].CPS = 0, 0
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	const n, p = 400, 0.7
	for i := range n {
		if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
			t.Fatalf("call %d: final %v, want 200", i, res)
		}
	}
	got := ca.Count("INVITE")
	sigma := math.Sqrt(n * p * (1 - p))
	if lo, hi := n*p-6*sigma, n*p+6*sigma; float64(got) < lo || float64(got) > hi || got+cb.Count("INVITE") != n {
		t.Errorf("weights 70/30 over %d calls: a got %d, b %d; want a within [%.0f, %.0f] (6 sigma) and %d in all", n, got, cb.Count("INVITE"), lo, hi, n)
	}
	t.Logf("weights 70/30 over %d calls: a %d (%.1f%%), b %d", n, got, 100*float64(got)/n, cb.Count("INVITE"))
}

// TestE2ELeastWaitRoute (issue 24, item 3): a least_wait route sends a
// call to the carrier whose next free slot is soonest: while the first
// carrier's slots are taken for the next second, the idle second carrier
// gets the call at once; an ordered route (the control) waits for the
// first carrier's slot.
func TestE2ELeastWaitRoute(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   string // the carrier that gets the call
	}{{config.RouteOrdered, "busy"}, {config.RouteLeastWait, "idle"}} {
		t.Run(tc.policy, func(t *testing.T) {
			busy, idle := siptest.StartCarrier(t, "127.0.0.1", nil), siptest.StartCarrier(t, "127.0.0.1", nil)
			a, b := carrierCfg("busy", busy), carrierCfg("idle", idle)
			a.CPS, a.MaxWait = 2, 5*time.Second
			cfg := testConfig(a, b)
			cfg.Routes["default"] = config.Route{Policy: tc.policy, Carriers: []config.RouteCarrier{{Name: "busy"}, {Name: "idle"}}}
			slots := pacing.NewLocalSlots(nil)
			h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: &fakeAdmitter{refuse: -1}, Pacer: pacing.NewPacer(slots)})
			// Two calls of another node hold the busy carrier's next
			// second of slots (2 cps).
			key := policy.Key(cfg.Store.KeyPrefix, policy.ScopeCarrier, "busy")
			for _, m := range []string{"other-1", "other-2"} {
				if sl, err := slots.Reserve(context.Background(), key, m, pacing.Share{}, pacing.Interval(2), time.Minute); err != nil || !sl.OK {
					t.Fatalf("reserve: %+v, %v", sl, err)
				}
			}
			caller := siptest.StartCaller(t, "127.0.0.2")
			if res := caller.Final(ctxT(t, 10*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
				t.Fatalf("final %v, want 200", res)
			}
			got := map[string]int{"busy": busy.Count("INVITE"), "idle": idle.Count("INVITE")}
			if got[tc.want] != 1 || got["busy"]+got["idle"] != 1 {
				t.Errorf("route %s: INVITEs %v, want the call at %s", tc.policy, got, tc.want)
			}
		})
	}
}
