package httpapi

import (
	"fmt"
	"strings"
	"time"
)

// Paths served by New.
const (
	PathMetrics = "/metrics"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathStatus  = "/api/v1/status"
	PathReload  = "/api/v1/reload"
	// PathLimits lists the live limit overrides (GET); PUT and DELETE on
	// PathLimits/{peer|customer|carrier}/{name} set and end one.
	PathLimits = "/api/v1/limits"
	// PathCarriers is the root of per-carrier operations: DELETE on
	// PathCarriers/{name}/pause ends the carrier's Retry-After pause; PUT
	// on PathCarriers/{name}/service takes the carrier out of service for
	// the pool, DELETE puts it back.
	PathCarriers = "/api/v1/carriers"
)

// ErrReadOnly is the message of the 403 every write endpoint answers while
// http.token is empty: without a token the API is read-only.
const ErrReadOnly = "the API is read-only: set http.token in the configuration to allow writes (reload, drain, limits, carriers, ending calls)"

// Status is the JSON answer of GET /api/v1/status.
type Status struct {
	// NodeID is the answering node's node_id.
	NodeID string `json:"node_id"`
	// StoreMode is "redis" (the shared store decides), "fallback" (Redis
	// failed; store.on_error decides) or "local" (no Redis configured).
	StoreMode string `json:"store_mode"`
	// DuplicateNodeID is true while another process beats in Redis under
	// this node's node_id: two nodes share one identity, so per-node figures
	// and logs mix them up. The fallback counts them as two nodes.
	DuplicateNodeID bool `json:"duplicate_node_id"`
	// ConfigHash identifies the configuration in use: "sha256:" and the hex
	// digest of the settings the pool must agree on (config.Config.Hash:
	// per-node settings such as node_id and listen addresses left out,
	// secrets redacted). Nodes with the same hash enforce the same policy.
	ConfigHash string `json:"config_hash"`
	// LoadedAt is when the configuration in use was loaded.
	LoadedAt time.Time `json:"loaded_at"`
	// Time is the node's clock when the status was built.
	Time time.Time `json:"time"`
	// Peers, Customers and Carriers list every configured name, in
	// configuration order.
	Peers     []Entry `json:"peers"`
	Customers []Entry `json:"customers"`
	Carriers  []Entry `json:"carriers"`
	// Destinations lists the destinations[] entries, in configuration
	// order, each named by its prefix as configured: its limit and calls
	// as a peer's (pool-wide on Redis); a destination without cps has
	// LimitCPS 0 and no Current, only its windows and max_calls. Absent
	// when none is configured.
	Destinations []Entry `json:"destinations,omitempty"`
	// RepeatDial is repeat_dial when it is on (one bucket per called
	// number, so no figures: the numbers are never listed); absent when
	// off.
	RepeatDial *RepeatDialState `json:"repeat_dial,omitempty"`
	// Errors lists the store reads that failed; their entries have a null
	// Current (and Queued, Wait for carriers).
	Errors []string `json:"errors,omitempty"`
}

// Entry is one peer, customer or carrier in a Status.
type Entry struct {
	// Name is the configured name.
	Name string `json:"name"`
	// LimitCPS is the calls-per-second limit in force: the configured one,
	// or Override's while one is live.
	LimitCPS float64 `json:"limit_cps"`
	// Override is the live limit override of this name (PUT
	// /api/v1/limits), with the configured values it replaces; absent when
	// none.
	Override *LimitOverride `json:"override,omitempty"`
	// WindowLimit and WindowSeconds describe the rolling window Current is
	// counted in: at most WindowLimit calls in any WindowSeconds (1 s and
	// floor(cps) for cps >= 1; one call per 1/cps s below 1 cps; both include
	// the admission guard). For carriers the window is 1 s and the limit cps.
	// For a peer or customer with a burst, whose token bucket replaces the
	// 1 s window, WindowLimit is the burst and WindowSeconds 0.
	WindowLimit   float64 `json:"window_limit"`
	WindowSeconds float64 `json:"window_seconds"`
	// Current is the number of calls in the current window, read from the
	// store (with a burst: the tokens in use, Burst - Tokens); null when it
	// could not be read (or, for carriers, when the store does not report
	// sent calls).
	Current *int `json:"current"`
	// Percent is 100 * Current / WindowLimit; null when Current is.
	Percent *float64 `json:"percent"`
	// Burst is the capacity of the token bucket of a peer or customer with
	// a burst (the one in force: a live override's, else the configured);
	// absent without one.
	Burst int `json:"burst,omitempty"`
	// Tokens is the token bucket's level: how many calls it would admit at
	// once now. Absent without a burst, or when it could not be read.
	Tokens *int `json:"tokens,omitempty"`
	// Windows are the extra rolling windows of a peer or customer
	// (windows: [{calls, per}]) with the calls in each now; absent when it
	// has none.
	Windows []WindowState `json:"windows,omitempty"`
	// Queued is, for carriers, the number of calls holding a slot still in the
	// future (waiting to be sent), pool-wide on Redis.
	Queued *int `json:"queued,omitempty"`
	// WaitSeconds is, for carriers, the least wait a call reserving a slot
	// now would have: the last reserved slot plus one interval, from now.
	WaitSeconds *float64 `json:"wait_seconds,omitempty"`
	// MaxWaitSeconds is, for carriers, the configured max_wait.
	MaxWaitSeconds float64 `json:"max_wait_seconds,omitempty"`
	// Up is, for carriers, whether this node sends calls to the carrier
	// (false while its probes or calls fail); null when the node does not
	// report health.
	Up *bool `json:"up,omitempty"`
	// Health says why a carrier is in its state and since when (empty for
	// a carrier up since it was configured).
	Health string `json:"health,omitempty"`
	// EffectiveCPS is, for carriers, the rate the carrier is paced at now:
	// LimitCPS, or less while an adaptive carrier pushes back.
	EffectiveCPS *float64 `json:"effective_cps,omitempty"`
	// InService is, for carriers, false while the carrier is out of
	// service (OutOfService says since when, by whom and why); null when
	// the node does not report it.
	InService *bool `json:"in_service,omitempty"`
	// OutOfService is, for carriers, the operator's mark that took the
	// carrier out of service (pool-wide); absent while in service.
	OutOfService *CarrierService `json:"out_of_service,omitempty"`
	// ASR is, for carriers, the answer-seizure ratio on this node over
	// asr_window; absent before the node sent the carrier a call.
	ASR *CarrierASR `json:"asr,omitempty"`
	// Pause is, for carriers, the pool's Retry-After pause in force, read
	// from the store; absent when the carrier is not paused (or the node
	// does not report pauses).
	Pause *CarrierPause `json:"pause,omitempty"`
	// MaxCalls is the configured max_calls (0 = no limit).
	MaxCalls int `json:"max_calls"`
	// ActiveCalls is the pool's calls set up and not yet ended, read from
	// the store; null without max_calls or when it could not be read.
	ActiveCalls *int `json:"active_calls"`
}

// RepeatDialState is repeat_dial in a Status: at most Calls calls to any
// one called number in any PerSeconds, pool-wide; Shadow when refusals
// are only counted.
type RepeatDialState struct {
	Calls      int     `json:"calls"`
	PerSeconds float64 `json:"per_seconds"`
	Shadow     bool    `json:"shadow,omitempty"`
}

// WindowState is one extra rolling window of a peer or customer: at most
// Calls calls in any PerSeconds, Current of them now.
type WindowState struct {
	// Calls and PerSeconds are the configured window.
	Calls      int     `json:"calls"`
	PerSeconds float64 `json:"per_seconds"`
	// Current is the calls in the window now, pool-wide on Redis; null
	// when it could not be read.
	Current *int `json:"current"`
	// Percent is 100 * Current / Calls; null when Current is.
	Percent *float64 `json:"percent"`
}

// LimitRequest is the JSON body of PUT /api/v1/limits/{scope}/{name}.
type LimitRequest struct {
	// CPS replaces the configured cps (> 0, <= config.MaxCPS).
	CPS float64 `json:"cps"`
	// Burst replaces a peer's or customer's burst (0: none; else >= cps);
	// omitted: the configured burst stays. Not for carriers.
	Burst *int `json:"burst,omitempty"`
	// TTL is how long the override lives, a Go duration ("1h"; required,
	// at most limits.MaxTTL).
	TTL string `json:"ttl"`
}

// LimitOverride is one live limit override.
type LimitOverride struct {
	// Scope is "peer", "customer" or "carrier"; Name the configured name.
	Scope string `json:"scope"`
	Name  string `json:"name"`
	// CPS and Burst are the override's values (Burst absent: the
	// configured burst stays).
	CPS   float64 `json:"cps"`
	Burst *int    `json:"burst,omitempty"`
	// ConfiguredCPS and ConfiguredBurst are what the configuration says,
	// in force again when the override ends.
	ConfiguredCPS   float64 `json:"configured_cps"`
	ConfiguredBurst int     `json:"configured_burst,omitempty"`
	// Until is when the override ends; TTLSeconds how long it has left.
	Until      time.Time `json:"until"`
	TTLSeconds float64   `json:"ttl_seconds"`
	// SetBy is the remote address of the request that set it; SetAt when.
	SetBy string    `json:"set_by,omitempty"`
	SetAt time.Time `json:"set_at"`
	// Ignored says why the override does not apply (its name is not in
	// this node's configuration, e.g. removed by a reload); empty when it
	// applies.
	Ignored string `json:"ignored,omitempty"`
}

// LimitList is the JSON answer of GET /api/v1/limits.
type LimitList struct {
	// Overrides are the live overrides, by expiry.
	Overrides []LimitOverride `json:"overrides"`
}

// LimitChange is the JSON answer of a successful PUT or DELETE on
// /api/v1/limits/{scope}/{name}.
type LimitChange struct {
	// Status is "set" or "removed".
	Status string `json:"status"`
	// Override is the override now live (PUT).
	Override *LimitOverride `json:"override,omitempty"`
	// Previous is the override replaced (PUT) or removed (DELETE).
	Previous *LimitOverride `json:"previous,omitempty"`
}

// CarrierPause is a carrier's Retry-After pause, pool-wide.
type CarrierPause struct {
	// Until is when its span ends (then one call tries the carrier);
	// SecondsLeft how long that is from the status's time (0 once
	// half-open).
	Until       time.Time `json:"until"`
	SecondsLeft float64   `json:"seconds_left"`
	// Since is when the carrier was first paused (a pause extended keeps
	// it).
	Since time.Time `json:"since"`
	// Reason says why: the Retry-After asked, in which answer, on what
	// evidence, and the span it was capped to.
	Reason string `json:"reason"`
	// HalfOpen reports that the span is over and one call may try the
	// carrier; Probing that such a call is under way.
	HalfOpen bool `json:"half_open,omitempty"`
	Probing  bool `json:"probing,omitempty"`
}

// CarrierService is a carrier taken out of service by hand, pool-wide.
type CarrierService struct {
	// Since is when it was taken out; By who took it out (the remote
	// address of the request); Reason what they said (may be empty).
	Since  time.Time `json:"since"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// CarrierASR is a carrier's answer-seizure ratio on one node.
type CarrierASR struct {
	// Percent is 100 × Answered / Seizures over WindowSeconds.
	Percent       float64 `json:"percent"`
	Seizures      int     `json:"seizures"`
	Answered      int     `json:"answered"`
	WindowSeconds float64 `json:"window_seconds"`
	// OutUntil is when a carrier below its min_asr is back in service
	// (absent while in service); Reason says why it is out.
	OutUntil *time.Time `json:"out_until,omitempty"`
	Reason   string     `json:"reason,omitempty"`
}

// ServiceRequest is the optional JSON body of PUT
// /api/v1/carriers/{name}/service.
type ServiceRequest struct {
	// Reason says why, for status and logs (printable, at most 200
	// characters).
	Reason string `json:"reason,omitempty"`
}

// ServiceChange is the JSON answer of a successful PUT or DELETE
// /api/v1/carriers/{name}/service.
type ServiceChange struct {
	// Status is "out_of_service" (PUT) or "in_service" (DELETE).
	Status string `json:"status"`
	// Carrier is the carrier's name.
	Carrier string `json:"carrier"`
	// OutOfService is the mark now in force (PUT).
	OutOfService *CarrierService `json:"out_of_service,omitempty"`
	// Previous is the mark replaced (PUT) or removed (DELETE); absent when
	// the carrier was in service.
	Previous *CarrierService `json:"previous,omitempty"`
}

// PauseChange is the JSON answer of a successful DELETE
// /api/v1/carriers/{name}/pause.
type PauseChange struct {
	// Status is "lifted".
	Status string `json:"status"`
	// Carrier is the carrier's name.
	Carrier string `json:"carrier"`
	// Previous is the pause that ended.
	Previous *CarrierPause `json:"previous,omitempty"`
}

// Health is the JSON answer of /healthz and /readyz.
type Health struct {
	// Status is "ok" or "unavailable".
	Status string `json:"status"`
	// Error says why the node is not ready.
	Error string `json:"error,omitempty"`
}

// ReloadResult is the JSON answer of a successful POST /api/v1/reload.
type ReloadResult struct {
	// Status is "reloaded".
	Status string `json:"status"`
	// ConfigHash and LoadedAt describe the configuration now in use.
	ConfigHash string    `json:"config_hash"`
	LoadedAt   time.Time `json:"loaded_at"`
}

// Error is the JSON body of every error answer. The client returns it as an
// error (*Error) for any answer that is not 2xx.
type Error struct {
	// Message says what went wrong.
	Message string `json:"error"`
	// Errors lists every problem of a rejected configuration file, one
	// "path: message" per line.
	Errors []string `json:"errors,omitempty"`
	// Code is the HTTP status code; it is not part of the JSON body.
	Code int `json:"-"`
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Code != 0 {
		fmt.Fprintf(&b, "http %d: ", e.Code)
	}
	b.WriteString(e.Message)
	for _, line := range e.Errors {
		b.WriteString("\n  ")
		b.WriteString(line)
	}
	return b.String()
}
