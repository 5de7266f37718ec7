package sip

import (
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
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
	st, _ := h.set().State("a")
	if st.InService || st.ASR == nil || st.ASR.Until.IsZero() {
		t.Fatalf("after 3 unanswered calls (min_seizures 3, min_asr 50): %+v, ASR %+v; want out of service", st, st.ASR)
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
