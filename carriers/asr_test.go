package carriers

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
)

// TestASRHealth (issue 24, item 4): a carrier whose answer-seizure ratio
// over asr_window falls below min_asr, once it had min_seizures calls, is
// out of service on this node for one window, then judged afresh; calls
// cancelled by their caller and back-pressure are no seizures.
func TestASRHealth(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	pass := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	cfg := &config.Config{Carriers: []config.Carrier{
		{Name: "a", URI: "sip:127.0.0.1:5070", CPS: 10, MaxWait: time.Second, Probe: &config.Probe{}, MinASR: 40, MinSeizures: 5, ASRWindow: time.Minute},
		{Name: "off", URI: "sip:127.0.0.1:5071", CPS: 10, MaxWait: time.Second, Probe: &config.Probe{}},
	}, Routes: map[string]config.Route{"default": config.OrderedRoute("a")}}
	m := metrics.New(prometheus.NewRegistry())
	s, err := New(Options{Config: func() *config.Config { return cfg }, Pacer: pacing.NewPacer(pacing.NewLocalSlots(nil)),
		Metrics: m, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a, off := &cfg.Carriers[0], &cfg.Carriers[1]
	report := func(car *config.Carrier, r Result) { s.Report(cfg, car, Outcome{Result: r, Peer: "p"}) }

	// 4 seizures, none answered: below min_seizures, not judged. The
	// caller's cancels and back-pressure count for nothing.
	for _, r := range []Result{Unanswered, Failed, TimedOut, Unanswered, Undecided, Overloaded, Reached} {
		report(a, r)
	}
	if got := s.Usable(cfg, a); got != "" {
		t.Fatalf("after 4 seizures (min_seizures 5): usable %q, want in service", got)
	}
	st, _ := s.State("a")
	if st.ASR == nil || st.ASR.Seizures != 4 || st.ASR.Answered != 0 {
		t.Fatalf("ASR after 4 seizures: %+v", st.ASR)
	}
	// Seizures leave the window: 2 answered of the last 5 (40 %) is not
	// below min_asr 40.
	pass(61 * time.Second)
	for _, r := range []Result{Answered, Answered, Unanswered, Unanswered, Unanswered} {
		report(a, r)
	}
	if st, _ := s.State("a"); s.Usable(cfg, a) != "" || st.ASR.Seizures != 5 || st.ASR.Percent != 40 {
		t.Fatalf("2 answered of 5 in the window: usable %q, ASR %+v; want in service at 40%%", s.Usable(cfg, a), st.ASR)
	}
	// One more unanswered: 2 of 6, 33 %: out of service for one window.
	report(a, Unanswered)
	if got := s.Usable(cfg, a); got != SkipASR {
		t.Fatalf("2 answered of 6: usable %q, want asr", got)
	}
	if !s.RouteDown(cfg, "default") {
		t.Error("a route whose only carrier is below min_asr is not down")
	}
	st, _ = s.State("a")
	if st.InService || st.ASR.Until.IsZero() || st.ASR.Reason != "asr 33.3% of 6 calls in 1m0s below min_asr 40%" {
		t.Errorf("state below min_asr: in service %v, ASR %+v", st.InService, st.ASR)
	}
	if v := testutil.ToFloat64(m.CarrierInService.WithLabelValues("a")); v != 0 {
		t.Errorf("carrier_in_service = %v, want 0", v)
	}
	if v := testutil.ToFloat64(m.CarrierASRTrips.WithLabelValues("a")); v != 1 {
		t.Errorf("carrier_asr_trips_total = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.CarrierSeizures.WithLabelValues("a", metrics.SeizureUnanswered)); v != 8 {
		t.Errorf("carrier_seizures_total{unanswered} = %v, want 8", v)
	}
	// A carrier without min_asr is never taken out by it.
	for range 50 {
		report(off, Unanswered)
	}
	if got := s.Usable(cfg, off); got != "" {
		t.Errorf("a carrier without min_asr: usable %q after 50 unanswered calls", got)
	}
	// One window later: in service, judged afresh.
	pass(59 * time.Second)
	if got := s.Usable(cfg, a); got != SkipASR {
		t.Errorf("before the window ended: usable %q, want asr", got)
	}
	pass(time.Second)
	s.expireASR(cfg)
	if got := s.Usable(cfg, a); got != "" {
		t.Fatalf("after one window: usable %q, want in service", got)
	}
	if v := testutil.ToFloat64(m.CarrierInService.WithLabelValues("a")); v != 1 {
		t.Errorf("carrier_in_service after the window = %v, want 1", v)
	}
	for range 4 {
		report(a, Unanswered)
	}
	if got := s.Usable(cfg, a); got != "" {
		t.Errorf("judged afresh: 4 seizures (below min_seizures) took it out again: usable %q", got)
	}
	report(a, Unanswered)
	if got := s.Usable(cfg, a); got != SkipASR {
		t.Errorf("judged afresh: 5 unanswered: usable %q, want asr", got)
	}
}
