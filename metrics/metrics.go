package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/cpsguard/cpsguard/limits"
)

// Namespace prefixes every metric name.
const Namespace = "cpsguard"

// Scope label values: the one vocabulary of scope names is limits'
// (overrides, the limit in force); these name the same constants.
const (
	ScopePeer        = limits.ScopePeer
	ScopeCustomer    = limits.ScopeCustomer
	ScopeCarrier     = limits.ScopeCarrier
	ScopeDestination = limits.ScopeDestination
	ScopeRepeatDial  = limits.ScopeRepeatDial
)

// Label values of small enums.
const (
	ResultAdmitted       = "admitted"
	ResultRejected       = "rejected"
	ResultShadowRejected = "shadow_rejected"

	OutcomeForwarded         = "forwarded"
	OutcomeRejectedCPS       = "rejected_cps"
	OutcomeRejectedQueue     = "rejected_queue"
	OutcomeRejectedForbidden = "rejected_forbidden"
	OutcomeRejectedStore     = "rejected_store"
	OutcomeCanceled          = "canceled"
	// OutcomeRejectedDown: every carrier of the call's route was down.
	OutcomeRejectedDown = "rejected_down"
	// OutcomeRejectedCalls: a max_calls place (peer, customer, or every
	// carrier of the route) was full.
	OutcomeRejectedCalls = "rejected_calls"
	// OutcomeRejectedOverload: the node was deciding sip.max_inflight new
	// calls already; the INVITE got 503 at once, statelessly.
	OutcomeRejectedOverload = "rejected_overload"
	// OutcomeRejectedDrain: the node was draining (SIGTERM, cpsguard drain):
	// a new INVITE got 503, or a call still waiting for its pacing slot
	// when sip.drain_grace ended did.
	OutcomeRejectedDrain = "rejected_drain"
	// OutcomeRejectedDestination: a destination's limit (cps, burst,
	// windows or max_calls) refused the call.
	OutcomeRejectedDestination = "rejected_destination"
	// OutcomeRejectedRepeat: repeat_dial refused the call (too many calls
	// to its number).
	OutcomeRejectedRepeat = "rejected_repeat"

	// Kinds of cpsguard_priority_calls_total: a call to an emergency
	// number (priority.numbers), one whose peer may claim priority with
	// a Resource-Priority header of a configured namespace, and such a
	// claim from a peer that may not (the call got normal treatment).
	PriorityNumber       = "number"
	PriorityResource     = "resource_priority"
	PriorityRefusedClaim = "refused_claim"

	// Classes of cpsguard_carrier_responses_total besides "1xx" … "6xx".
	ClassTimeout = "timeout"

	PacingPaced = "paced"
	PacingFull  = "full"
	// PacingLate: a slot given back because the node woke for it more
	// than pacing.MaxLate late (a starved scheduler); the call took the
	// next slot.
	PacingLate = "late"
	// PacingPaused: no slot, or a slot given back just before the send,
	// because the carrier is paused (its Retry-After); the call went to
	// the next carrier at once.
	PacingPaused = "paused"

	RerouteFull   = "full"
	RerouteFailed = "failed"
	// RerouteDown: the carrier was skipped because it is down.
	RerouteDown = "down"
	// RerouteCallsFull: the carrier was skipped because its max_calls
	// place was full.
	RerouteCallsFull = "calls_full"
	// ReroutePaused: the carrier was skipped because it is paused (its
	// Retry-After, pool-wide).
	ReroutePaused = "paused"
	// RerouteOutOfService: the carrier was skipped because an operator
	// took it out of service (pool-wide).
	RerouteOutOfService = "out_of_service"
	// RerouteASR: the carrier was skipped because its answer-seizure
	// ratio on this node is below its min_asr.
	RerouteASR = "asr"

	ProbeOK     = "ok"
	ProbeFailed = "failed"

	// Results of cpsguard_carrier_seizures_total: the carrier answered the
	// call (2xx), or gave it another final outcome.
	SeizureAnswered   = "answered"
	SeizureUnanswered = "unanswered"

	// Sinks of the call records (records.*).
	SinkFile   = "file"
	SinkStdout = "stdout"
	SinkSyslog = "syslog"

	ReloadSuccess = "success"
	ReloadFailure = "failure"

	// PeerUnknown is the peer label of calls from a source that matches no
	// configured peer. SyncLimits never deletes its series.
	PeerUnknown = "unknown"
)

// The known values of each enum label, whose series SyncLimits creates at 0
// for every configured name: a counter that appears on its first event is
// invisible to rate() and increase() for that event, so an alert on it
// would miss the first refusal of a peer (client_golang's advice: initialise
// every label set you know of). Add a new outcome or result here as well as
// to the constants above (TestEnumListsAreComplete checks).
var (
	// Outcomes are the outcome labels of cpsguard_calls_total.
	Outcomes = []string{OutcomeForwarded, OutcomeRejectedCPS, OutcomeRejectedQueue,
		OutcomeRejectedForbidden, OutcomeRejectedStore, OutcomeRejectedDown, OutcomeRejectedOverload, OutcomeRejectedCalls,
		OutcomeRejectedDrain, OutcomeRejectedDestination, OutcomeRejectedRepeat, OutcomeCanceled}
	// PriorityKinds are the kind labels of cpsguard_priority_calls_total.
	PriorityKinds = []string{PriorityNumber, PriorityResource, PriorityRefusedClaim}
	// AdmissionResults are the result labels of cpsguard_admission_total.
	AdmissionResults = []string{ResultAdmitted, ResultRejected, ResultShadowRejected}
	// PacingResults are the result labels of cpsguard_pacing_total.
	PacingResults = []string{PacingPaced, PacingFull, PacingLate, PacingPaused}
	// RerouteReasons are the reason labels of cpsguard_reroutes_total.
	RerouteReasons = []string{RerouteFull, RerouteFailed, RerouteDown, RerouteCallsFull, ReroutePaused, RerouteOutOfService, RerouteASR}
	// SeizureResults are the result labels of
	// cpsguard_carrier_seizures_total.
	SeizureResults = []string{SeizureAnswered, SeizureUnanswered}
	// RecordSinks are the sink labels of cpsguard_records_written_total
	// and cpsguard_records_dropped_total.
	RecordSinks = []string{SinkFile, SinkStdout, SinkSyslog}
	// ReloadResults are the result labels of cpsguard_config_reloads_total.
	ReloadResults = []string{ReloadSuccess, ReloadFailure}

	// SIPErrorReasons are the reason labels of cpsguard_sip_errors_total,
	// every one the sip package counts (TestKnownLabelValuesMatchTheCode
	// reads them from its source). New starts each at 0.
	SIPErrorReasons = []string{
		"parse", "oversized", "malformed", "transaction", "params", "headers",
		"source", "unknown_source", "no_route", "bad_dialog_token", "wrong_leg", "reinvite_limit",
		"cancel_source", "duplicate", "accept", "tcp_limit", "tcp_read", "read_queue_full",
		"forged_response", "stateless_response", "stream", "no_via", "tls_name",
		"dialog_ended", "dialog_rate", "too_many_hops", "merged_request", "tls_handshake_rate", "refused_copy",
		"write_blocked", "record_route",
	}

	// PanicPlaces are the where labels of cpsguard_panics_total: every
	// place that recovers a panic (TestKnownLabelValuesMatchTheCode reads
	// them from the source). New starts each at 0, so an alert on
	// increase() sees a node's first panic.
	PanicPlaces = []string{
		"sip.invite", "sip.ack", "sip.cancel", "sip.other", "sip.screen",
		"sip.read_filter", "sip.ingress.take", "sip.ingress.handle",
		"sip.invite_retransmission", "sip.indialog_retransmission",
		"sip.abandon", "sip.bye_ends", "sip.bye_timeout", "sip.events",
		"sip.dialog_sync", "sip.family_gaps", "sip.sweep", "sip.stray_response",
		"carriers.probe", "carriers.prober", "carriers.confirm", "carriers.probe_done",
		"carriers.back_pressure", "carriers.evidence", "carriers.refresh", "carriers.resolver",
		"carriers.least_wait",
		"store.redis", "store.redis.dial", "store.heartbeat", "store.probe",
		"lua.pipeline", "limits.refresh",
	}

	// StoreScripts are the script labels of cpsguard_store_errors_total:
	// the Lua scripts' names (lua.Script*; TestKnownLabelValuesMatchTheCode
	// checks). New starts each at 0 errors.
	StoreScripts = []string{
		"admit", "admit_pace", "counts", "refund", "pace", "release", "queue", "pause", "evidence", "rate", "respace",
		"heartbeat", "calls_occupy", "calls_free", "calls_refresh", "calls_count", "overrides",
		"dialogs_ended", "live", "service", "rebook",
	}
)

// Metrics holds the collectors.
type Metrics struct {
	// Admission counts admission decisions per bucket:
	// cpsguard_admission_total{scope,name,result}.
	Admission *prometheus.CounterVec
	// Calls counts initial INVITEs by how they ended at the proxy:
	// cpsguard_calls_total{peer,outcome}.
	Calls *prometheus.CounterVec
	// PacingWait is the granted wait for a carrier slot (queue delay):
	// cpsguard_pacing_wait_seconds{carrier}.
	PacingWait *prometheus.HistogramVec
	// Pacing counts reservations: cpsguard_pacing_total{carrier,result}.
	Pacing *prometheus.CounterVec
	// Queued is the number of calls waiting for a slot now:
	// cpsguard_pacing_queued{carrier}.
	Queued *prometheus.GaugeVec
	// Reroutes counts calls moved to the next carrier of their route:
	// cpsguard_reroutes_total{carrier,reason}.
	Reroutes *prometheus.CounterVec
	// LimitCPS exports the configured limits: cpsguard_limit_cps{scope,name}.
	// SyncLimits keeps it in step with the configuration.
	LimitCPS *prometheus.GaugeVec
	// ActiveCalls is the pool's calls set up and not yet ended per
	// max_calls place: cpsguard_active_calls{scope,name}. The status
	// refresher sets it from the store.
	ActiveCalls *prometheus.GaugeVec
	// LimitCalls exports the configured max_calls (0 = none):
	// cpsguard_limit_calls{scope,name}. SyncLimits sets it.
	LimitCalls *prometheus.GaugeVec
	// MaxWait exports each carrier's configured max_wait, so alerts and
	// dashboards can compare the queue delay with it:
	// cpsguard_pacing_max_wait_seconds{carrier}. SyncLimits sets it.
	MaxWait *prometheus.GaugeVec
	// StoreUp is 1 while Redis is in use, 0 in fallback (and on a node with
	// no Redis configured; see RedisConfigured).
	StoreUp prometheus.Gauge
	// RedisConfigured is 1 when store.redis is configured, 0 for the
	// in-process store, so alerts can tell a fallback from a single node:
	// cpsguard_store_redis_configured. SyncLimits sets it.
	RedisConfigured prometheus.Gauge
	// StoreErrors counts failed store calls: cpsguard_store_errors_total{script}.
	StoreErrors *prometheus.CounterVec
	// StoreDuration times store calls: cpsguard_store_duration_seconds{script}.
	StoreDuration *prometheus.HistogramVec
	// ConfigReloads counts reloads: cpsguard_config_reloads_total{result}.
	ConfigReloads *prometheus.CounterVec
	// ConfigLastReloadOK is 1 when the last reload succeeded (or none has
	// happened since start), 0 while a bad file is being ignored:
	// cpsguard_config_last_reload_successful.
	ConfigLastReloadOK prometheus.Gauge
	// SIPErrors counts messages the proxy could not use:
	// cpsguard_sip_errors_total{reason}.
	SIPErrors *prometheus.CounterVec
	// CarrierResponses counts carriers' answers to forwarded INVITEs by
	// class (1xx … 6xx, or timeout when a carrier did not ring within its
	// setup_timeout): cpsguard_carrier_responses_total{carrier,class}.
	CarrierResponses *prometheus.CounterVec
	// CarrierSetup is the time from a forwarded INVITE to the carrier's
	// first provisional answer above 100 or its final one:
	// cpsguard_carrier_setup_seconds{carrier}.
	CarrierSetup *prometheus.HistogramVec
	// CarrierUp is 1 while this node sends calls to a carrier, 0 while it
	// believes the carrier down (probes or calls failed):
	// cpsguard_carrier_up{carrier}.
	CarrierUp *prometheus.GaugeVec
	// CarrierInService is 0 while a carrier is out of service (taken out
	// by hand, pool-wide, or below its min_asr on this node), else 1:
	// cpsguard_carrier_in_service{carrier}.
	CarrierInService *prometheus.GaugeVec
	// CarrierSeizures counts the calls this node sent a carrier by their
	// final outcome there (answered, unanswered):
	// cpsguard_carrier_seizures_total{carrier,result}.
	CarrierSeizures *prometheus.CounterVec
	// CarrierASR is a carrier's answer-seizure ratio over its asr_window on
	// this node, in percent, as of its last seizure:
	// cpsguard_carrier_asr_percent{carrier}.
	CarrierASR *prometheus.GaugeVec
	// CarrierASRTrips counts the times a carrier went below its min_asr on
	// this node (out of service for one window):
	// cpsguard_carrier_asr_trips_total{carrier}.
	CarrierASRTrips *prometheus.CounterVec
	// CarrierProbes counts this node's SIP OPTIONS probes of a carrier by
	// result (ok, failed): cpsguard_carrier_probes_total{carrier,result}.
	CarrierProbes *prometheus.CounterVec
	// EffectiveCPS is the rate a carrier is paced at now: its cps, or less
	// while an adaptive carrier pushes back:
	// cpsguard_carrier_effective_cps{carrier}.
	EffectiveCPS *prometheus.GaugeVec
	// BuildInfo is 1, labelled with what the node runs:
	// cpsguard_build_info{version,revision,goversion}. SetBuildInfo sets it.
	BuildInfo *prometheus.GaugeVec
	// DuplicateNodeID is 1 while another process beats in Redis under this
	// node's node_id: cpsguard_duplicate_node_id.
	DuplicateNodeID prometheus.Gauge
	// ConfigInfo is 1, labelled with the hash of what the pool must agree
	// on (config.Config.Hash, per-node settings left out):
	// cpsguard_config_info{config_hash}. Nodes of one pool that show
	// different hashes enforce different policies. SyncLimits sets it.
	ConfigInfo *prometheus.GaugeVec
	// Priority counts calls no limit refuses, and refused claims to be
	// one: cpsguard_priority_calls_total{peer,kind}.
	Priority *prometheus.CounterVec
	// Panics counts panics recovered in handlers and goroutines, where
	// names the place (e.g. "sip.invite", "store.heartbeat"):
	// cpsguard_panics_total{where}.
	Panics *prometheus.CounterVec
	// RecordsWritten counts call records a sink wrote:
	// cpsguard_records_written_total{sink}.
	RecordsWritten *prometheus.CounterVec
	// RecordsDropped counts call records a sink lost: its queue was full
	// (the call path never waits for a sink) or the write failed:
	// cpsguard_records_dropped_total{sink}.
	RecordsDropped *prometheus.CounterVec

	// syncMu serialises SyncLimits.
	syncMu sync.Mutex
	// overrides are SetLimitOverrides' (nil: none); guarded by syncMu.
	overrides limits.Lookup
}

// WaitBuckets resolve queue delay from 1 ms up to 60 s
// (config.LongestWaitBucket). They are fixed rather than derived from the
// configured max_wait values: a histogram cannot change its buckets after
// registration, so buckets picked at start would miss a max_wait raised by
// a reload, and nodes of a pool started with different files would export
// different bucket sets, which sum by (le) across nodes cannot combine. 60 s
// is past any wait a caller sits through in silence after 100 Trying; a
// longer max_wait is valid, and `cpsguard check` warns about it. The three
// buckets above 10 s cost 3 series per carrier.
var WaitBuckets = []float64{0, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2, 3, 5, 10, 20, 30, 60}

// New builds and registers every collector on reg. It panics when a collector
// of the same name is already registered on reg (a wiring bug found at
// start-up). Go runtime and process collectors are not included: use
// NewRegistry, or register them on reg yourself.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Admission: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "admission_total",
			Help: "Admission decisions per peer or customer bucket, by result: " + strings.Join(AdmissionResults, ", ") + " (over the limit, admitted because shadow: true).",
		}, []string{"scope", "name", "result"}),
		Calls: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "calls_total",
			Help: "Initial INVITEs by how they ended at the proxy: " + strings.Join(Outcomes, ", ") + ".",
		}, []string{"peer", "outcome"}),
		PacingWait: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "pacing_wait_seconds",
			Help:    "Granted wait for a carrier send slot (queue delay).",
			Buckets: WaitBuckets,
		}, []string{"carrier"}),
		Pacing: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "pacing_total",
			Help: "Slot reservations per carrier: paced (slot granted), full (wait over max_wait), late (slot given back: the node woke for it too late) or paused (carrier paused by its Retry-After).",
		}, []string{"carrier", "result"}),
		Queued: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "pacing_queued",
			Help: "Calls on this node waiting for a carrier send slot.",
		}, []string{"carrier"}),
		Reroutes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "reroutes_total",
			Help: "Calls that passed over a carrier (to the next of their route, or to a refusal past the last), by reason: " + strings.Join(RerouteReasons, ", ") + ".",
		}, []string{"carrier", "reason"}),
		LimitCPS: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "limit_cps",
			Help: "Calls-per-second limit in force: the configured one, or a live override's while it lasts.",
		}, []string{"scope", "name"}),
		ActiveCalls: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "active_calls",
			Help: "Calls set up and not yet ended, pool-wide, per peer, customer and carrier with max_calls.",
		}, []string{"scope", "name"}),
		LimitCalls: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "limit_calls",
			Help: "Configured concurrent-call limit (max_calls; 0 = none).",
		}, []string{"scope", "name"}),
		MaxWait: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "pacing_max_wait_seconds",
			Help: "Configured longest wait for a carrier send slot (max_wait).",
		}, []string{"carrier"}),
		StoreUp: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "store_up",
			Help: "1 when the shared Redis store is in use, 0 when running on the fallback (and when no Redis is configured).",
		}),
		RedisConfigured: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "store_redis_configured",
			Help: "1 when a Redis store is configured, 0 when the node runs on the in-process store only.",
		}),
		StoreErrors: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "store_errors_total",
			Help: "Store calls that failed (error or store.redis.timeout), by script.",
		}, []string{"script"}),
		StoreDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "store_duration_seconds",
			Help:    "Duration of store calls (the Redis round trip of a script), by script.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"script"}),
		ConfigReloads: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "config_reloads_total",
			Help: "Configuration reloads (SIGHUP, file change, API) by result: " + strings.Join(ReloadResults, ", ") + ".",
		}, []string{"result"}),
		ConfigLastReloadOK: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "config_last_reload_successful",
			Help: "1 when the last configuration reload succeeded, 0 when it failed and the previous configuration is still in use.",
		}),
		SIPErrors: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "sip_errors_total",
			Help: "SIP messages the proxy could not use, by reason: " + strings.Join(SIPErrorReasons, ", ") + ".",
		}, []string{"reason"}),
		CarrierResponses: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "carrier_responses_total",
			Help: "Carriers' answers to forwarded INVITEs by class (1xx-6xx, timeout).",
		}, []string{"carrier", "class"}),
		CarrierSetup: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "carrier_setup_seconds",
			Help:    "Forwarded INVITE to the carrier's first provisional answer above 100, or its final one.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 3, 5, 10},
		}, []string{"carrier"}),
		CarrierUp: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "carrier_up",
			Help: "1 while this node sends calls to the carrier, 0 while it believes it down (probes or calls failed).",
		}, []string{"carrier"}),
		CarrierInService: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "carrier_in_service",
			Help: "0 while the carrier is out of service (taken out by hand, pool-wide, or below its min_asr on this node), else 1.",
		}, []string{"carrier"}),
		CarrierSeizures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "carrier_seizures_total",
			Help: "Calls this node sent the carrier, by their final outcome there: answered (2xx) or unanswered (another final answer, a failure or a setup timeout).",
		}, []string{"carrier", "result"}),
		CarrierASR: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "carrier_asr_percent",
			Help: "The carrier's answer-seizure ratio over its asr_window on this node, in percent, as of its last seizure (100 before its first).",
		}, []string{"carrier"}),
		CarrierASRTrips: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "carrier_asr_trips_total",
			Help: "Times the carrier went below its min_asr on this node and was taken out of service for one asr_window.",
		}, []string{"carrier"}),
		CarrierProbes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "carrier_probes_total",
			Help: "SIP OPTIONS probes of a carrier by this node: ok (any answer but 5xx or 408) or failed.",
		}, []string{"carrier", "result"}),
		EffectiveCPS: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "carrier_effective_cps",
			Help: "The rate the carrier is paced at now: its cps, or less while an adaptive carrier pushes back.",
		}, []string{"carrier"}),
		BuildInfo: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "build_info",
			Help: "Always 1; the labels say which build the node runs.",
		}, []string{"version", "revision", "goversion"}),
		DuplicateNodeID: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "duplicate_node_id",
			Help: "1 while another process beats in Redis under this node's node_id, else 0.",
		}),
		ConfigInfo: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "config_info",
			Help: "Always 1; config_hash identifies the settings the pool must agree on (per-node ones left out).",
		}, []string{"config_hash"}),
		Priority: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "priority_calls_total",
			Help: "Initial INVITEs with priority (kind number: an emergency number; resource_priority: an allowed Resource-Priority claim), never refused by limits or shedding, and Resource-Priority claims of peers not allowed to make them (refused_claim).",
		}, []string{"peer", "kind"}),
		Panics: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "panics_total",
			Help: "Panics recovered in handlers and goroutines (the process went on), by place (where).",
		}, []string{"where"}),
		RecordsWritten: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "records_written_total",
			Help: "Call records written, by sink (file, stdout, syslog).",
		}, []string{"sink"}),
		RecordsDropped: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "records_dropped_total",
			Help: "Call records lost, by sink: its queue was full or the write failed.",
		}, []string{"sink"}),
	}
	// The configuration in use at start-up was loaded successfully, or the
	// process would not be running.
	m.ConfigLastReloadOK.Set(1)
	// Series that do not depend on the configuration start at 0 here; the
	// configured names' ones in SyncLimits.
	for _, r := range ReloadResults {
		m.ConfigReloads.WithLabelValues(r)
	}
	for _, r := range SIPErrorReasons {
		m.SIPErrors.WithLabelValues(r)
	}
	for _, w := range PanicPlaces {
		m.Panics.WithLabelValues(w)
	}
	for _, sc := range StoreScripts {
		m.StoreErrors.WithLabelValues(sc)
	}
	m.Calls.WithLabelValues(PeerUnknown, OutcomeRejectedForbidden)
	for _, s := range RecordSinks {
		m.RecordsWritten.WithLabelValues(s)
		m.RecordsDropped.WithLabelValues(s)
	}
	return m
}
