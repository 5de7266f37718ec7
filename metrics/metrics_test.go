package metrics

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/limits"
)

// touchAll records one sample in every collector, so each vector has a
// series and appears in a scrape.
func touchAll(m *Metrics) {
	m.Admission.WithLabelValues(ScopePeer, "dialer-1", ResultAdmitted).Inc()
	m.Calls.WithLabelValues("dialer-1", OutcomeForwarded).Inc()
	m.PacingWait.WithLabelValues("carrier-a").Observe(0.2)
	m.Pacing.WithLabelValues("carrier-a", PacingPaced).Inc()
	m.Queued.WithLabelValues("carrier-a").Set(1)
	m.Reroutes.WithLabelValues("carrier-a", RerouteFull).Inc()
	m.LimitCPS.WithLabelValues(ScopeCarrier, "carrier-a").Set(10)
	m.LimitCalls.WithLabelValues(ScopeCarrier, "carrier-a").Set(5)
	m.ActiveCalls.WithLabelValues(ScopeCarrier, "carrier-a").Set(3)
	m.MaxWait.WithLabelValues("carrier-a").Set(2)
	m.StoreUp.Set(1)
	m.RedisConfigured.Set(1)
	m.StoreErrors.WithLabelValues("admit").Inc()
	m.StoreDuration.WithLabelValues("admit").Observe(0.001)
	m.ConfigReloads.WithLabelValues(ReloadSuccess).Inc()
	m.ConfigLastReloadOK.Set(1)
	m.SIPErrors.WithLabelValues("parse").Inc()
	m.Panics.WithLabelValues("sip.invite").Inc()
	m.SetBuildInfo("v1.2.3", "abc123", "go1.26")
	m.ConfigInfo.WithLabelValues("sha256:0123").Set(1)
	m.DuplicateNodeID.Set(0)
	m.CarrierResponses.WithLabelValues("carrier-a", "2xx").Inc()
	m.CarrierSetup.WithLabelValues("carrier-a").Observe(0.05)
	m.CarrierUp.WithLabelValues("carrier-a").Set(1)
	m.CarrierInService.WithLabelValues("carrier-a").Set(1)
	m.CarrierSeizures.WithLabelValues("carrier-a", SeizureAnswered).Inc()
	m.CarrierASR.WithLabelValues("carrier-a").Set(50)
	m.CarrierASRTrips.WithLabelValues("carrier-a").Inc()
	m.CarrierProbes.WithLabelValues("carrier-a", ProbeOK).Inc()
	m.EffectiveCPS.WithLabelValues("carrier-a").Set(10)
	m.Priority.WithLabelValues("dialer-1", PriorityNumber).Inc()
}

// fieldCollectors returns every exported collector field of m by name.
func fieldCollectors(t *testing.T, m *Metrics) map[string]prometheus.Collector {
	t.Helper()
	out := map[string]prometheus.Collector{}
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			t.Fatalf("field %s is not a prometheus.Collector", f.Name)
		}
		out[f.Name] = c
	}
	return out
}

// exportedNames returns the metric family names a scrape of reg shows.
func exportedNames(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	sort.Strings(names)
	return names
}

func TestEveryCollectorHasASampleAndLints(t *testing.T) {
	m := New(prometheus.NewRegistry())
	touchAll(m)
	for name, c := range fieldCollectors(t, m) {
		if n := testutil.CollectAndCount(c); n == 0 {
			t.Errorf("%s: got 0 series after touchAll, want >= 1 (add it to touchAll)", name)
		}
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Errorf("%s: lint: %v", name, err)
		}
		for _, p := range problems {
			t.Errorf("%s: lint: %s: %s", name, p.Metric, p.Text)
		}
	}
}

func TestDesignNamesAreExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	touchAll(New(reg))
	got := exportedNames(t, reg)
	// The names of DESIGN.md "HTTP and metrics".
	for _, want := range []string{
		"cpsguard_admission_total",
		"cpsguard_calls_total",
		"cpsguard_pacing_wait_seconds",
		"cpsguard_pacing_total",
		"cpsguard_pacing_queued",
		"cpsguard_limit_cps",
		"cpsguard_store_up",
		"cpsguard_store_errors_total",
		"cpsguard_store_duration_seconds",
		"cpsguard_config_reloads_total",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("metric %s: not exported; got %v", want, got)
		}
	}
}

func TestWaitBucketsResolveMillisecondsToMaxWait(t *testing.T) {
	if !slices.Contains(WaitBuckets, 0.001) {
		t.Errorf("WaitBuckets %v: want a 1 ms bucket", WaitBuckets)
	}
	if last := WaitBuckets[len(WaitBuckets)-1]; last != config.LongestWaitBucket.Seconds() || last < 60 {
		t.Errorf("WaitBuckets top %v s: want config.LongestWaitBucket (%s, what check warns about), at least 60 s", last, config.LongestWaitBucket)
	}
	if !sort.Float64sAreSorted(WaitBuckets) {
		t.Errorf("WaitBuckets %v: not sorted", WaitBuckets)
	}
}

func TestNewRegistryHasRuntimeCollectors(t *testing.T) {
	reg := NewRegistry()
	New(reg)
	names := exportedNames(t, reg)
	for _, want := range []string{"go_goroutines", "process_start_time_seconds"} {
		if !slices.Contains(names, want) {
			t.Errorf("NewRegistry: %s missing; got %v", want, names)
		}
	}
}

func cfgWith(peers, customers, carriers []string) *config.Config {
	c := &config.Config{}
	for i, n := range peers {
		c.Peers = append(c.Peers, config.Peer{Name: n, CPS: float64(10 + i)})
	}
	for i, n := range customers {
		c.Customers = append(c.Customers, config.Customer{Name: n, CPS: float64(20 + i)})
	}
	for i, n := range carriers {
		c.Carriers = append(c.Carriers, config.Carrier{Name: n, CPS: float64(30 + i), MaxWait: time.Duration(i+1) * time.Second})
	}
	return c
}

// series lists the label sets of c as sorted "k=v,k=v" strings.
func series(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var out []string
	for m := range ch {
		var parts []string
		pb := metricPB(t, m)
		for _, lp := range pb.GetLabel() {
			parts = append(parts, lp.GetName()+"="+lp.GetValue())
		}
		out = append(out, strings.Join(parts, ","))
	}
	sort.Strings(out)
	return out
}

func TestSyncLimits(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.SyncLimits(cfgWith([]string{"p1", "p2"}, []string{"c1", "c2"}, []string{"k1", "k2"}))

	if got := testutil.ToFloat64(m.LimitCPS.WithLabelValues(ScopePeer, "p2")); got != 11 {
		t.Errorf("limit of peer p2: got %v, want 11", got)
	}
	if got := testutil.ToFloat64(m.MaxWait.WithLabelValues("k2")); got != 2 {
		t.Errorf("max wait of carrier k2: got %v, want 2", got)
	}
	// Traffic for every name, plus the unknown peer.
	for _, p := range []string{"p1", "p2", PeerUnknown} {
		m.Calls.WithLabelValues(p, OutcomeForwarded).Inc()
	}
	m.Admission.WithLabelValues(ScopePeer, "p2", ResultAdmitted).Inc()
	m.Admission.WithLabelValues(ScopeCustomer, "c2", ResultRejected).Inc()
	m.Admission.WithLabelValues(ScopeCustomer, "c1", ResultRejected).Inc()
	for _, k := range []string{"k1", "k2"} {
		m.PacingWait.WithLabelValues(k).Observe(0.1)
		m.Pacing.WithLabelValues(k, PacingPaced).Inc()
		m.Queued.WithLabelValues(k).Set(1)
		m.Reroutes.WithLabelValues(k, RerouteFull).Inc()
	}

	// Reload: p2, c2, k2 removed; p3 added; p1 limit changed.
	next := cfgWith([]string{"p1", "p3"}, []string{"c1"}, []string{"k1"})
	next.Peers[0].CPS = 99
	m.SyncLimits(next)

	tests := []struct {
		name string
		c    prometheus.Collector
		want []string
	}{
		{"limit_cps", m.LimitCPS, []string{
			"name=c1,scope=customer", "name=k1,scope=carrier", "name=p1,scope=peer", "name=p3,scope=peer"}},
		// Only the names still configured (and the unknown peer) remain,
		// each with every known label value (created at 0).
		{"admission_total", m.Admission, []string{
			"name=c1,result=admitted,scope=customer", "name=c1,result=rejected,scope=customer", "name=c1,result=shadow_rejected,scope=customer",
			"name=p1,result=admitted,scope=peer", "name=p1,result=rejected,scope=peer", "name=p1,result=shadow_rejected,scope=peer",
			"name=p3,result=admitted,scope=peer", "name=p3,result=rejected,scope=peer", "name=p3,result=shadow_rejected,scope=peer"}},
		{"calls_total", m.Calls, []string{
			"outcome=canceled,peer=p1", "outcome=canceled,peer=p3",
			"outcome=forwarded,peer=p1", "outcome=forwarded,peer=p3", "outcome=forwarded,peer=unknown",
			"outcome=rejected_calls,peer=p1", "outcome=rejected_calls,peer=p3",
			"outcome=rejected_cps,peer=p1", "outcome=rejected_cps,peer=p3",
			"outcome=rejected_destination,peer=p1", "outcome=rejected_destination,peer=p3",
			"outcome=rejected_down,peer=p1", "outcome=rejected_down,peer=p3",
			"outcome=rejected_drain,peer=p1", "outcome=rejected_drain,peer=p3",
			"outcome=rejected_forbidden,peer=p1", "outcome=rejected_forbidden,peer=p3", "outcome=rejected_forbidden,peer=unknown",
			"outcome=rejected_overload,peer=p1", "outcome=rejected_overload,peer=p3",
			"outcome=rejected_queue,peer=p1", "outcome=rejected_queue,peer=p3",
			"outcome=rejected_repeat,peer=p1", "outcome=rejected_repeat,peer=p3",
			"outcome=rejected_store,peer=p1", "outcome=rejected_store,peer=p3"}},
		{"priority_calls_total", m.Priority, []string{
			"kind=number,peer=p1", "kind=number,peer=p3",
			"kind=refused_claim,peer=p1", "kind=refused_claim,peer=p3",
			"kind=resource_priority,peer=p1", "kind=resource_priority,peer=p3"}},
		{"pacing_wait_seconds", m.PacingWait, []string{"carrier=k1"}},
		{"pacing_total", m.Pacing, []string{"carrier=k1,result=full", "carrier=k1,result=late", "carrier=k1,result=paced", "carrier=k1,result=paused"}},
		{"pacing_queued", m.Queued, []string{"carrier=k1"}},
		{"reroutes_total", m.Reroutes, []string{"carrier=k1,reason=asr", "carrier=k1,reason=calls_full", "carrier=k1,reason=down", "carrier=k1,reason=failed", "carrier=k1,reason=full", "carrier=k1,reason=out_of_service", "carrier=k1,reason=paused"}},
		{"pacing_max_wait_seconds", m.MaxWait, []string{"carrier=k1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := series(t, tt.c); !slices.Equal(got, tt.want) {
				t.Errorf("series after reload: got %v, want %v", got, tt.want)
			}
		})
	}
	if got := testutil.ToFloat64(m.LimitCPS.WithLabelValues(ScopePeer, "p1")); got != 99 {
		t.Errorf("limit of peer p1 after reload: got %v, want 99", got)
	}
	if got := testutil.ToFloat64(m.RedisConfigured); got != 0 {
		t.Errorf("redis configured without store.redis: got %v, want 0", got)
	}
	next.Store.Redis = &config.Redis{Addrs: []string{"127.0.0.1:6379"}}
	m.SyncLimits(next)
	if got := testutil.ToFloat64(m.RedisConfigured); got != 1 {
		t.Errorf("redis configured with store.redis: got %v, want 1", got)
	}
	m.SyncLimits(nil) // must not panic
}

func TestObserveReload(t *testing.T) {
	m := New(prometheus.NewRegistry())
	if got := testutil.ToFloat64(m.ConfigLastReloadOK); got != 1 {
		t.Errorf("last reload ok at start: got %v, want 1", got)
	}
	m.ObserveReload(ReloadFailure)
	if got := testutil.ToFloat64(m.ConfigLastReloadOK); got != 0 {
		t.Errorf("last reload ok after failure: got %v, want 0", got)
	}
	m.ObserveReload(ReloadSuccess)
	if got := testutil.ToFloat64(m.ConfigLastReloadOK); got != 1 {
		t.Errorf("last reload ok after success: got %v, want 1", got)
	}
	m.ObserveReload("bogus")
	for result, want := range map[string]float64{ReloadSuccess: 1, ReloadFailure: 2} {
		if got := testutil.ToFloat64(m.ConfigReloads.WithLabelValues(result)); got != want {
			t.Errorf("reloads{result=%q}: got %v, want %v", result, got, want)
		}
	}
}

func metricPB(t *testing.T, m prometheus.Metric) *dto.Metric {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatalf("write metric: %v", err)
	}
	return &pb
}

// The reload results of config.Manager.OnReload are the label values.
func TestReloadResultsMatchConfig(t *testing.T) {
	if config.ReloadSuccess != ReloadSuccess || config.ReloadFailure != ReloadFailure {
		t.Errorf("config reload results %q/%q, metrics %q/%q: want equal",
			config.ReloadSuccess, config.ReloadFailure, ReloadSuccess, ReloadFailure)
	}
}

func TestObserveStore(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.ObserveStore("admit", 2*time.Millisecond, nil)
	m.ObserveStore("admit", 60*time.Millisecond, errors.New("i/o timeout"))
	if got := testutil.CollectAndCount(m.StoreDuration); got != 1 {
		t.Errorf("duration series: got %d, want 1", got)
	}
	if got := testutil.ToFloat64(m.StoreErrors.WithLabelValues("admit")); got != 1 {
		t.Errorf("errors{admit}: got %v, want 1", got)
	}
}

// cpsguard_config_info has one series, labelled with the hash of the
// configuration in use: the node's own settings do not change it, a
// pool-wide one does.
func TestConfigInfo(t *testing.T) {
	m := New(prometheus.NewRegistry())
	a := cfgWith([]string{"p1"}, nil, []string{"k1"})
	a.NodeID, a.HTTP.Listen = "edge-1", "10.0.0.1:9090"
	m.SyncLimits(a)
	want := []string{"config_hash=" + a.Hash()}
	if got := series(t, m.ConfigInfo); !slices.Equal(got, want) {
		t.Fatalf("config_info: got %v, want %v", got, want)
	}
	if got := testutil.ToFloat64(m.ConfigInfo.WithLabelValues(a.Hash())); got != 1 {
		t.Errorf("config_info value: got %v, want 1", got)
	}

	b := cfgWith([]string{"p1"}, nil, []string{"k1"})
	b.NodeID, b.HTTP.Listen = "edge-2", "10.0.0.2:9090"
	m.SyncLimits(b)
	if got := series(t, m.ConfigInfo); !slices.Equal(got, want) {
		t.Errorf("config_info of a node with another node_id and listen address: got %v, want %v", got, want)
	}

	c := cfgWith([]string{"p1"}, nil, []string{"k1"})
	c.Carriers[0].CPS = 1
	m.SyncLimits(c)
	if got, want := series(t, m.ConfigInfo), []string{"config_hash=" + c.Hash()}; !slices.Equal(got, want) || c.Hash() == a.Hash() {
		t.Errorf("config_info after a cps change: got %v, want %v (and not %s)", got, want, a.Hash())
	}
}

// Every series of a configured name and a known label value exists at 0
// right after the configuration is loaded, before any call: rate() and
// increase() then see the first event of each.
func TestKnownSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	cfg := cfgWith([]string{"p1", "p2"}, []string{"c1"}, []string{"k1", "k2", "k3"})
	m.SyncLimits(cfg)
	const peers, customers, carriers = 2, 1, 3
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want int
	}{
		// The unknown peer's forbidden calls exist too.
		{"cpsguard_calls_total", m.Calls, peers*len(Outcomes) + 1},
		{"cpsguard_admission_total", m.Admission, (peers + customers) * len(AdmissionResults)},
		{"cpsguard_pacing_total", m.Pacing, carriers * len(PacingResults)},
		{"cpsguard_pacing_wait_seconds", m.PacingWait, carriers},
		{"cpsguard_pacing_queued", m.Queued, carriers},
		{"cpsguard_reroutes_total", m.Reroutes, carriers * len(RerouteReasons)},
		{"cpsguard_carrier_responses_total", m.CarrierResponses, carriers * len(ResponseClasses)},
		{"cpsguard_carrier_setup_seconds", m.CarrierSetup, carriers},
		{"cpsguard_config_reloads_total", m.ConfigReloads, len(ReloadResults)},
	} {
		if got := testutil.CollectAndCount(tc.c); got != tc.want {
			t.Errorf("%s: got %d series, want %d", tc.name, got, tc.want)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			for _, pb := range mf.GetMetric() {
				if v := pb.GetCounter().GetValue(); v != 0 {
					t.Errorf("%s %v: got %v before any call, want 0", mf.GetName(), pb.GetLabel(), v)
				}
			}
		case dto.MetricType_HISTOGRAM:
			for _, pb := range mf.GetMetric() {
				if n := pb.GetHistogram().GetSampleCount(); n != 0 {
					t.Errorf("%s %v: got %d samples before any call, want 0", mf.GetName(), pb.GetLabel(), n)
				}
			}
		}
	}
	// A series that already counted keeps its value through a reload.
	m.Calls.WithLabelValues("p1", OutcomeRejectedCPS).Add(3)
	m.SyncLimits(cfg)
	if got := testutil.ToFloat64(m.Calls.WithLabelValues("p1", OutcomeRejectedCPS)); got != 3 {
		t.Errorf("calls_total{p1,rejected_cps} after a reload: got %v, want 3", got)
	}
}

// Every Outcome*, Result*, Pacing* and Reroute* constant is in its list, so
// its series start at 0 too: a constant added without its list entry fails
// here.
func TestEnumListsAreComplete(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "metrics.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	lists := map[string][]string{
		"Outcome": Outcomes, "Result": AdmissionResults, "Pacing": PacingResults,
		"Reroute": RerouteReasons, "Reload": ReloadResults, "Sink": RecordSinks,
	}
	found := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				for prefix, list := range lists {
					if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						continue
					}
					found++
					if v, _ := strconv.Unquote(lit.Value); !slices.Contains(list, v) {
						t.Errorf("const %s = %s is not in the list of %s* values %v: its series would not start at 0", name.Name, lit.Value, prefix, list)
					}
				}
			}
		}
	}
	if found < 10 {
		t.Errorf("found %d enum constants in metrics.go; the parser missed them", found)
	}
}

func TestSyncLimitsOverrideWins(t *testing.T) {
	m := New(prometheus.NewRegistry())
	cfg := cfgWith([]string{"p1", "p2"}, []string{"c1"}, []string{"k1"})
	live := liveOverrides{"peer/p2": {CPS: 3}, "carrier/k1": {CPS: 0.5}}
	m.SetLimitOverrides(live)
	m.SyncLimits(cfg)
	for _, tc := range []struct {
		scope, name string
		want        float64
	}{{ScopePeer, "p2", 3}, {ScopeCarrier, "k1", 0.5}, {ScopePeer, "p1", cfg.Peers[0].CPS}} {
		if got := testutil.ToFloat64(m.LimitCPS.WithLabelValues(tc.scope, tc.name)); got != tc.want {
			t.Errorf("limit of %s %s with overrides: got %v, want %v", tc.scope, tc.name, got, tc.want)
		}
	}
	// The override ends: the configured value is back.
	delete(live, "peer/p2")
	m.SyncLimits(cfg)
	if got := testutil.ToFloat64(m.LimitCPS.WithLabelValues(ScopePeer, "p2")); got != cfg.Peers[1].CPS {
		t.Errorf("limit of peer p2 after its override ended: got %v, want the configured %v", got, cfg.Peers[1].CPS)
	}
}

// DESIGN.md round 3 names the drain's refusals rejected_drain; its series
// exist from start like every outcome's.
func TestRejectedDrainOutcome(t *testing.T) {
	if OutcomeRejectedDrain != "rejected_drain" {
		t.Errorf("OutcomeRejectedDrain = %q, want rejected_drain (DESIGN.md, round 3)", OutcomeRejectedDrain)
	}
	m := New(prometheus.NewRegistry())
	m.SyncLimits(cfgWith([]string{"p1"}, nil, nil))
	if n := testutil.CollectAndCount(m.Calls, "cpsguard_calls_total"); n != len(Outcomes)+1 {
		t.Errorf("calls_total: %d series, want %d", n, len(Outcomes)+1)
	}
	if !slices.Contains(Outcomes, OutcomeRejectedDrain) {
		t.Errorf("Outcomes %v: no rejected_drain", Outcomes)
	}
}

// Every counter and gauge has its known series from the start, before any
// event (TestKnownSeriesStartAtZero counts the configured names'): a
// family that appears only with its first event shows "No data" on the
// dashboard until then, and rate() and increase() miss that first event.
// The one exception in a live node is cpsguard_store_duration_seconds: a histogram with
// no store call has no latency to show, and 14 scripts × 13 buckets of
// zeros would cost more than they tell.
func TestEveryCounterAndGaugeHasSeriesFromStart(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.SyncLimits(cfgWith([]string{"p1"}, []string{"c1"}, []string{"k1"}))
	for name, c := range fieldCollectors(t, m) {
		switch name {
		case "StoreDuration":
			continue
		case "BuildInfo", "CarrierUp", "EffectiveCPS", "CarrierInService", "CarrierASR":
			// Set at start by their owners, with values only they know: the
			// build (SetBuildInfo), each carrier's health, service, ASR and
			// paced rate (package carriers). cmd/cpsguard's TestFirstScrapeHasEveryFamily sees
			// them in a live node's first scrape.
			continue
		}
		if n := testutil.CollectAndCount(c); n == 0 {
			t.Errorf("%s: no series after New and SyncLimits: it reads No data until its first event", name)
		}
	}
	for _, tc := range []struct {
		c    prometheus.Collector
		name string
		want int
	}{
		{m.SIPErrors, "cpsguard_sip_errors_total", len(SIPErrorReasons)},
		{m.Panics, "cpsguard_panics_total", len(PanicPlaces)},
		{m.StoreErrors, "cpsguard_store_errors_total", len(StoreScripts)},
	} {
		if got := testutil.CollectAndCount(tc.c, tc.name); got != tc.want {
			t.Errorf("%s: %d series at start, want %d (one per known label value)", tc.name, got, tc.want)
		}
	}
}

// The HELP of a metric with an enum label names every value of it, so
// `curl /metrics` explains what it shows and no value is left out of the
// text when one is added.
func TestHelpNamesEveryKnownValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	touchAll(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	help := map[string]string{}
	for _, mf := range mfs {
		help[mf.GetName()] = mf.GetHelp()
	}
	for name, values := range map[string][]string{
		"cpsguard_calls_total":             Outcomes,
		"cpsguard_admission_total":         AdmissionResults,
		"cpsguard_pacing_total":            PacingResults,
		"cpsguard_reroutes_total":          RerouteReasons,
		"cpsguard_config_reloads_total":    ReloadResults,
		"cpsguard_sip_errors_total":        SIPErrorReasons,
		"cpsguard_carrier_probes_total":    {ProbeOK, ProbeFailed},
		"cpsguard_carrier_responses_total": {"1xx", "6xx", ClassTimeout},
	} {
		h, ok := help[name]
		if !ok {
			t.Errorf("%s: not gathered", name)
			continue
		}
		for _, v := range values {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(v) + `\b`).MatchString(h) {
				t.Errorf("%s: HELP %q does not name %q", name, h, v)
			}
		}
	}
}

type liveOverrides map[string]limits.Override

func (l liveOverrides) Lookup(scope, name string) (limits.Override, bool) {
	o, ok := l[limits.Field(scope, name)]
	return o, ok
}
