package sip

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
)

// admit builds the token bucket and the extra windows of a peer and a
// customer, in one admission call, and counts a refusal by any of a scope's
// buckets once, for that scope.
func TestAdmitBuildsLimitBuckets(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.Peers[0].CPS, cfg.Peers[0].Burst = 10, 30
	cfg.Peers[0].Windows = []config.Window{{Calls: 600, Per: time.Minute}}
	cfg.Customers[0].Windows = []config.Window{{Calls: 100, Per: 10 * time.Second}}
	want := []admission.Bucket{
		admission.TokenBucket("t:{peer:dialer-1}", 10, 30),
		admission.WindowBucket("t:{peer:dialer-1}", 600, time.Minute),
		{Key: "t:{customer:acme}", Limit: 20, Window: time.Second + admission.WindowGuard},
		admission.WindowBucket("t:{customer:acme}", 100, 10*time.Second),
	}
	for _, tc := range []struct {
		name   string
		refuse int
		code   int
		// admission_total per scope and result
		peer, cust string
	}{
		{"admitted", -1, 200, metrics.ResultAdmitted, metrics.ResultAdmitted},
		{"refused by the customer's window", 3, 503, "", metrics.ResultRejected},
		{"refused by the peer's token bucket", 0, 503, metrics.ResultRejected, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			adm, pacer := newFakes()
			adm.refuse = tc.refuse
			h := startProxy(t, cfg, adm, pacer)
			caller := siptest.StartCaller(t, "127.0.0.2")
			res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
			if res == nil || res.StatusCode != tc.code {
				t.Fatalf("final = %v, want %d", res, tc.code)
			}
			adm.mu.Lock()
			got := fmt.Sprint(adm.buckets)
			adm.mu.Unlock()
			if got != fmt.Sprint([][]admission.Bucket{want}) {
				t.Fatalf("admission buckets = %s, want one call with %+v", got, want)
			}
			// The admission metrics are counted as the handler returns.
			waitFor(t, func() bool {
				return testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeForwarded))+
					testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedCPS)) == 1
			}, "one call counted")
			for _, c := range []struct{ scope, name, result string }{
				{"peer", "dialer-1", tc.peer}, {"customer", "acme", tc.cust},
			} {
				for _, r := range []string{metrics.ResultAdmitted, metrics.ResultRejected} {
					wantN := 0.0
					if r == c.result {
						wantN = 1
					}
					if n := testutil.ToFloat64(h.m.Admission.WithLabelValues(c.scope, c.name, r)); n != wantN {
						t.Errorf("admission_total{%s,%s,%s} = %v, want %v", c.scope, c.name, r, n, wantN)
					}
				}
			}
		})
	}
}

// With the in-process store: a peer at cps 1, burst 3 gets three calls
// through at once (the send gate does not space a burst), the fourth is
// refused.
func TestBurstThroughProxy(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.Peers[0].CPS, cfg.Peers[0].Burst = 1, 3
	cfg.Customers[0].CPS = 100
	// No stopwatch: the admission store's clock is stopped, so the four
	// calls arrive at one instant (a bucket spacing them at 1/cps would
	// admit one, and no refill lets the fourth in however slowly a loaded
	// machine runs them); a send gate spacing them at 1/cps would make the
	// third wait 2 s, past the carrier's max_wait of 1 s, and refuse it.
	frozen := time.Now()
	_, pacer := newFakes()
	h := startProxy(t, cfg, admission.NewLocalStore(func() time.Time { return frozen }), pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	for i := range 4 {
		res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
		want := 200
		if i == 3 {
			want = 503
		}
		if res == nil || res.StatusCode != want {
			t.Fatalf("call %d: final = %v, want %d", i, res, want)
		}
	}
	if n := car.Count("INVITE"); n != 3 {
		t.Fatalf("carrier INVITEs = %d, want 3", n)
	}
}

// A peer at 2.5 CPS, through the proxy on the in-process store with its
// clock stopped (one instant, one window): two calls are forwarded, the
// third is refused (a fraction rounds down; 2.5 CPS is never 3 a second).
func TestFractionalCPSThroughProxy(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.Peers[0].CPS = 2.5
	frozen := time.Now()
	_, pacer := newFakes()
	h := startProxy(t, cfg, admission.NewLocalStore(func() time.Time { return frozen }), pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	for i, want := range []int{200, 200, 503} {
		res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
		if res == nil || res.StatusCode != want {
			t.Fatalf("call %d in one window at 2.5 CPS: final = %v, want %d", i+1, res, want)
		}
	}
	if n := car.Count("INVITE"); n != 2 {
		t.Fatalf("carrier INVITEs = %d, want 2", n)
	}
}
