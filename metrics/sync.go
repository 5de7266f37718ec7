package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/limits"
)

// NewRegistry returns a registry with the Go runtime and process collectors
// already registered (go_*, process_*). Build the cpsguard collectors on it
// with New and serve it with httpapi.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// SyncLimits makes the metrics follow cfg: it creates, at 0, every series of
// a configured name and a known label value (calls_total for every peer and
// outcome, admission_total for every peer, customer and destination (and
// repeat_dial when on) and result, priority_calls_total for every peer and
// kind, the
// carriers' pacing, queue, reroute, response and setup series); it sets cpsguard_limit_cps for
// every peer, customer and carrier (the limit in force, limits.InForce:
// a live override's cps, see SetLimitOverrides, else the configured one), cpsguard_pacing_max_wait_seconds for
// every carrier, cpsguard_store_redis_configured and cpsguard_config_info,
// and deletes every series whose peer, customer or carrier is
// no longer configured, in all collectors labelled by those names. Call it
// once at start-up and after every successful reload.
//
// Series of the peer PeerUnknown, and series with an empty name, are kept.
// A call still in flight for a removed name may recreate its series after
// SyncLimits ran; the next SyncLimits deletes it again.
//
// SyncLimits is safe for concurrent use; a nil cfg does nothing.
func (m *Metrics) SyncLimits(cfg *config.Config) {
	if cfg == nil {
		return
	}
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	limit := func(scope, name string, cps float64) float64 {
		cps, _ = limits.InForce(m.overrides, scope, name, cps, 0)
		return cps
	}

	peers := make(map[string]bool, len(cfg.Peers))
	customers := make(map[string]bool, len(cfg.Customers))
	carriers := make(map[string]bool, len(cfg.Carriers))
	for _, p := range cfg.Peers {
		peers[p.Name] = true
	}
	for _, c := range cfg.Customers {
		customers[c.Name] = true
	}
	for _, c := range cfg.Carriers {
		carriers[c.Name] = true
	}
	destinations := make(map[string]bool, len(cfg.Destinations))
	for _, d := range cfg.Destinations {
		destinations[d.Prefix] = true
	}
	byScope := map[string]map[string]bool{
		ScopePeer:        peers,
		ScopeCustomer:    customers,
		ScopeCarrier:     carriers,
		ScopeDestination: destinations,
	}
	inScope := func(l map[string]string) bool {
		names, ok := byScope[l["scope"]]
		return !ok || l["name"] == "" || names[l["name"]]
	}
	carrierKept := func(l map[string]string) bool {
		return l["carrier"] == "" || carriers[l["carrier"]]
	}

	prune(m.LimitCPS, inScope)
	prune(m.LimitCalls, inScope)
	prune(m.ActiveCalls, inScope)
	prune(m.Admission, inScope)
	peerKept := func(l map[string]string) bool {
		p := l["peer"]
		return p == "" || p == PeerUnknown || peers[p]
	}
	prune(m.Calls, peerKept)
	prune(m.Priority, peerKept)
	prune(m.PacingWait, carrierKept)
	prune(m.Pacing, carrierKept)
	prune(m.Queued, carrierKept)
	prune(m.Reroutes, carrierKept)
	prune(m.MaxWait, carrierKept)
	prune(m.CarrierResponses, carrierKept)
	prune(m.CarrierSetup, carrierKept)
	prune(m.CarrierUp, carrierKept)
	prune(m.CarrierInService, carrierKept)
	prune(m.CarrierSeizures, carrierKept)
	prune(m.CarrierASR, carrierKept)
	prune(m.CarrierASRTrips, carrierKept)
	prune(m.CarrierProbes, carrierKept)
	prune(m.EffectiveCPS, carrierKept)

	// One series, the hash of the configuration now in use: set the new one
	// before deleting the old, so no scrape finds none.
	hash := cfg.Hash()
	m.ConfigInfo.WithLabelValues(hash).Set(1)
	prune(m.ConfigInfo, func(l map[string]string) bool { return l["config_hash"] == hash })

	if cfg.Store.Redis != nil {
		m.RedisConfigured.Set(1)
	} else {
		m.RedisConfigured.Set(0)
	}
	// Every known label set of a configured name starts at 0 (WithLabelValues
	// creates a series without touching one that exists), so rate() and
	// increase() alerts see its first event.
	for _, p := range cfg.Peers {
		m.LimitCPS.WithLabelValues(ScopePeer, p.Name).Set(limit(ScopePeer, p.Name, p.CPS))
		m.LimitCalls.WithLabelValues(ScopePeer, p.Name).Set(float64(p.MaxCalls))
		m.ActiveCalls.WithLabelValues(ScopePeer, p.Name)
		for _, r := range AdmissionResults {
			m.Admission.WithLabelValues(ScopePeer, p.Name, r)
		}
		for _, o := range Outcomes {
			m.Calls.WithLabelValues(p.Name, o)
		}
		for _, k := range PriorityKinds {
			m.Priority.WithLabelValues(p.Name, k)
		}
	}
	for _, c := range cfg.Customers {
		m.LimitCPS.WithLabelValues(ScopeCustomer, c.Name).Set(limit(ScopeCustomer, c.Name, c.CPS))
		m.LimitCalls.WithLabelValues(ScopeCustomer, c.Name).Set(float64(c.MaxCalls))
		m.ActiveCalls.WithLabelValues(ScopeCustomer, c.Name)
		for _, r := range AdmissionResults {
			m.Admission.WithLabelValues(ScopeCustomer, c.Name, r)
		}
	}
	for _, d := range cfg.Destinations {
		m.LimitCPS.WithLabelValues(ScopeDestination, d.Prefix).Set(d.CPS)
		m.LimitCalls.WithLabelValues(ScopeDestination, d.Prefix).Set(float64(d.MaxCalls))
		for _, r := range AdmissionResults {
			m.Admission.WithLabelValues(ScopeDestination, d.Prefix, r)
		}
	}
	if cfg.RepeatDial.Calls > 0 {
		for _, r := range AdmissionResults {
			m.Admission.WithLabelValues(ScopeRepeatDial, "", r)
		}
	}
	for _, c := range cfg.Carriers {
		m.LimitCPS.WithLabelValues(ScopeCarrier, c.Name).Set(limit(ScopeCarrier, c.Name, c.CPS))
		m.LimitCalls.WithLabelValues(ScopeCarrier, c.Name).Set(float64(c.MaxCalls))
		m.ActiveCalls.WithLabelValues(ScopeCarrier, c.Name)
		m.MaxWait.WithLabelValues(c.Name).Set(c.MaxWait.Seconds())
		for _, class := range ResponseClasses {
			m.CarrierResponses.WithLabelValues(c.Name, class)
		}
		m.CarrierSetup.WithLabelValues(c.Name)
		for _, r := range PacingResults {
			m.Pacing.WithLabelValues(c.Name, r)
		}
		m.PacingWait.WithLabelValues(c.Name)
		m.Queued.WithLabelValues(c.Name)
		for _, r := range RerouteReasons {
			m.Reroutes.WithLabelValues(c.Name, r)
		}
		m.CarrierProbes.WithLabelValues(c.Name, ProbeOK)
		m.CarrierProbes.WithLabelValues(c.Name, ProbeFailed)
		for _, r := range SeizureResults {
			m.CarrierSeizures.WithLabelValues(c.Name, r)
		}
		m.CarrierASRTrips.WithLabelValues(c.Name)
	}
}

// SetLimitOverrides makes SyncLimits set cpsguard_limit_cps of a name to
// the limit in force with the live overrides of l (limits.InForce) instead
// of the configured value. Call SyncLimits again whenever the overrides
// change (set, removed, expired): the override wins while it lives, the
// configured value is back when it ends. Nil turns it off.
func (m *Metrics) SetLimitOverrides(l limits.Lookup) {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	m.overrides = l
}

// ObserveReload counts one configuration reload (SIGHUP, file change or API)
// by its result, ReloadSuccess or ReloadFailure (any other value counts as a
// failure), and sets cpsguard_config_last_reload_successful. Its signature
// fits config.Manager.OnReload: mgr.OnReload(m.ObserveReload).
func (m *Metrics) ObserveReload(result string) {
	if result != ReloadSuccess {
		m.ConfigReloads.WithLabelValues(ReloadFailure).Inc()
		m.ConfigLastReloadOK.Set(0)
		return
	}
	m.ConfigReloads.WithLabelValues(ReloadSuccess).Inc()
	m.ConfigLastReloadOK.Set(1)
}

// ObserveStore records one store script run: its duration in
// cpsguard_store_duration_seconds{script} and, when err is not nil, one
// cpsguard_store_errors_total{script}. Its signature fits the Observe hook of
// admission.RedisOptions and pacing.RedisOptions: Observe: m.ObserveStore.
func (m *Metrics) ObserveStore(script string, d time.Duration, err error) {
	m.StoreDuration.WithLabelValues(script).Observe(d.Seconds())
	if err != nil {
		m.StoreErrors.WithLabelValues(script).Inc()
	}
}

// vec is what every *prometheus.XxxVec offers.
type vec interface {
	prometheus.Collector
	Delete(prometheus.Labels) bool
}

// prune deletes every series of v whose labels keep rejects.
func prune(v vec, keep func(labels map[string]string) bool) {
	ch := make(chan prometheus.Metric)
	go func() {
		v.Collect(ch)
		close(ch)
	}()
	var drop []prometheus.Labels
	for metric := range ch {
		var pb dto.Metric
		if err := metric.Write(&pb); err != nil {
			continue
		}
		labels := make(prometheus.Labels, len(pb.GetLabel()))
		for _, lp := range pb.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		if !keep(labels) {
			drop = append(drop, labels)
		}
	}
	for _, l := range drop {
		v.Delete(l)
	}
}

// SetBuildInfo sets cpsguard_build_info for the running build (one series).
func (m *Metrics) SetBuildInfo(version, revision, goversion string) {
	m.BuildInfo.Reset()
	m.BuildInfo.WithLabelValues(version, revision, goversion).Set(1)
}

// ResponseClasses are the class labels of cpsguard_carrier_responses_total.
var ResponseClasses = []string{"1xx", "2xx", "3xx", "4xx", "5xx", "6xx", ClassTimeout}

// ResponseClass returns the class label of a SIP status code ("" outside
// 100-699).
func ResponseClass(code int) string {
	if code < 100 || code > 699 {
		return ""
	}
	return ResponseClasses[code/100-1]
}
