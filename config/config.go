package config

import (
	"encoding/json"
	"net/netip"
	"time"
)

// Config is one validated, immutable snapshot of the configuration. Callers
// must not modify a Config they did not build themselves; a reload produces a
// new one.
type Config struct {
	// NodeID names this node in the pool: in Redis (live calls, the
	// heartbeat that reports two processes with one node_id), metrics and
	// logs. Unique per node.
	NodeID string `cfg:"node_id"`
	SIP    SIP    `cfg:"sip"`
	Store  Store  `cfg:"store"`
	HTTP   HTTP   `cfg:"http"`
	Log    Log    `cfg:"log"`
	// Records writes one call record (JSON) per call that reached a
	// decision, to a file, stdout and/or syslog.
	Records Records `cfg:"records"`
	// Shadow counts would-be refusals (result "shadow_rejected") and admits
	// the calls anyway: limits are measured, not enforced.
	Shadow bool `cfg:"shadow"`
	// CustomerHeader is the header of an initial INVITE that names the
	// customer (which the peer must list in its customers).
	CustomerHeader string     `cfg:"customer_header"`
	Peers          []Peer     `cfg:"peers"`
	Customers      []Customer `cfg:"customers"`
	Carriers       []Carrier  `cfg:"carriers"`
	// Routes maps a route name to the carriers it tries and how it
	// chooses the first: a list of carrier names (tried in order), or a
	// block {policy, carriers}.
	Routes map[string]Route `cfg:"routes"`
	// Priority names the calls no limit refuses: emergency numbers and
	// RFC 4412 Resource-Priority namespaces.
	Priority Priority `cfg:"priority"`
	// Destinations are limits and routes by called-number prefix, for the
	// whole pool; the longest matching prefix applies.
	Destinations []Destination `cfg:"destinations"`
	// RepeatDial bounds the calls to any one called number, pool-wide.
	RepeatDial RepeatDial `cfg:"repeat_dial"`

	idx *index // lookup tables built at load; nil in hand-built Configs
}

// SIP is the SIP front end's configuration.
type SIP struct {
	// Listen holds listen URLs: "udp://host:port", "tcp://host:port" or
	// "tls://host:port" (SIP over TLS; needs sip.tls.cert_file). IPv4 and
	// IPv6 addresses may be listed together: each address family sends
	// from its own listener, and a lone IPv6 wildcard ([::]) takes IPv4
	// too. An IPv4 address in brackets ("udp://[10.1.2.3]:5060", from a
	// template of either family) is taken without them.
	Listen []string `cfg:"listen"`
	// Advertise is host[:port] put in Via and Record-Route; empty means the
	// listen address.
	Advertise string `cfg:"advertise"`
	// RecordRoute adds a Record-Route header to forwarded initial INVITEs.
	RecordRoute bool `cfg:"record_route"`
	// UnknownSource is "reject" (403 Forbidden) or "drop" (no answer).
	UnknownSource string `cfg:"unknown_source"`
	// Reject is the answer to a call refused by admission.
	Reject Reject `cfg:"reject"`
	// DialogSecret keys the dialog token the proxy puts in its Record-Route
	// and requires back in the Route of every in-dialog request (sealed
	// with AES-256-GCM under a key derived from it, bound to the Call-ID
	// and the caller's tag), so no request passes as in-dialog, unlimited,
	// without a call set up through the proxy. Every node of a pool needs
	// the same value; empty means a random key per process (in-dialog
	// requests of calls set up before a restart or through another node
	// are then refused). A secret: set it with CPSGUARD_SIP_DIALOG_SECRET,
	// never shown.
	DialogSecret string `cfg:"dialog_secret"`
	// DialogTokenText is how the proxy writes its dialog tokens and
	// stateless branches: "auto" (the default) writes opaque text (digits,
	// lowercase consonants and '_', which no parser takes for a header
	// name) unless the heartbeat shows a node of an older release in the
	// pool, then base64url, which such releases read; "base64url" always
	// writes base64url, for the calls that may outlive a planned rollback
	// to such a release (which refuses this key: remove it as the node
	// restarts on it). Both are always read.
	DialogTokenText string `cfg:"dialog_token_text"`
	// TCP bounds the TCP connections the proxy accepts (tls:// listeners'
	// too).
	TCP TCP `cfg:"tcp"`
	// TLS is the certificate of the tls:// listeners and the CAs that
	// verify clients and TLS carriers. Its files are read again when they
	// change (checked at a handshake, at most once a second).
	TLS SIPTLS `cfg:"tls"`
	// RejectCalls is the answer to a call refused because a max_calls
	// place (peer, customer or carrier) is full.
	RejectCalls Reject `cfg:"reject_calls"`
	// MaxCallDuration caps how long a call holds its max_calls places:
	// the node that set it up frees them then, BYE or not. At most
	// MaxMaxCallDuration (30 days).
	MaxCallDuration time.Duration `cfg:"max_call_duration"`
	// CallRefreshTTL is how long a call's places live unless the node that
	// set it up refreshes them (it does every third of it): the places of
	// a node that died are free again within this time. Read at start.
	CallRefreshTTL time.Duration `cfg:"call_refresh_ttl"`
	// StripHeaders are removed from initial INVITEs before they are
	// forwarded, whatever the case the sender wrote their names in. Unset (nil) means the customer header; an empty list
	// strips nothing.
	StripHeaders []string `cfg:"strip_headers"`
	// MaxInflight bounds the initial INVITEs being decided at once on this
	// node (from arrival until the call is refused, forwarded or waiting
	// out its first pacing slot); beyond it a new initial INVITE gets 503,
	// statelessly (over UDP after waiting up to InflightWait for a unit).
	// 0 (the default) derives it from GOMAXPROCS (InflightPerCPU per
	// processor).
	MaxInflight int `cfg:"max_inflight"`
	// InflightWait is how long a new INVITE that arrived over UDP waits in
	// its listener's read queue for a unit of MaxInflight to come free
	// before it gets its 503: a burst of decisions shorter than this is
	// decided rather than shed. 0 sheds at once; at most
	// MaxInflightWait, under the caller's first retransmission (500 ms).
	InflightWait time.Duration `cfg:"inflight_wait"`
	// DrainGrace is how long a node that stops (SIGTERM, or POST
	// /api/v1/drain as a Kubernetes preStop does) lets the calls it is
	// deciding, pacing or forwarding finish while new INVITEs get 503;
	// then the rest are cancelled (503 upstream, CANCEL downstream). The
	// value current when the drain starts applies. Keep
	// terminationGracePeriodSeconds or TimeoutStopSec above it.
	DrainGrace time.Duration `cfg:"drain_grace"`
}

// MaxDrainGrace bounds sip.drain_grace.
const MaxDrainGrace = 10 * time.Minute

// MaxMaxCallDuration bounds sip.max_call_duration: a dialog token lives
// that long, and its end is kept until its expiry as Unix nanoseconds
// (an int64), which a duration of a few hundred years overflows.
const MaxMaxCallDuration = 30 * 24 * time.Hour

// MaxInflightWait bounds sip.inflight_wait.
const MaxInflightWait = 400 * time.Millisecond

// InflightPerCPU is the default sip.max_inflight per processor the Go
// runtime uses (GOMAXPROCS).
const InflightPerCPU = 32

// Inflight returns the bound on decisions in flight: MaxInflight, or
// InflightPerCPU times procs when it is 0.
func (s SIP) Inflight(procs int) int {
	if s.MaxInflight > 0 {
		return s.MaxInflight
	}
	return InflightPerCPU * max(procs, 1)
}

// TCP bounds accepted SIP-over-TCP connections: a half-sent message must
// not hold a goroutine and a descriptor for ever.
type TCP struct {
	// IdleTimeout closes a connection that sends nothing for that long,
	// or does not read what the node writes to it for that long; and a
	// connection a party opened to the node that takes longer to send a
	// message whole, counted from its first byte.
	IdleTimeout time.Duration `cfg:"idle_timeout"`
	// MaxConnections caps accepted connections open at once; strangers
	// (neither a peer's source nor a carrier's address) hold at most a
	// quarter of it.
	MaxConnections int `cfg:"max_connections"`
	// MaxConnectionsPerSource caps them per source: an IPv4 address, or an
	// IPv6 /64.
	MaxConnectionsPerSource int `cfg:"max_connections_per_source"`
}

// SIPTLS configures SIP over TLS: the tls:// listeners, and the proxy's
// own connections to carriers whose URI is sips: or ;transport=tls.
type SIPTLS struct {
	// CertFile is the PEM certificate (chain) the tls:// listeners
	// present, with KeyFile; required with a tls:// listener. It is also
	// the client certificate offered to a TLS carrier that asks for one.
	CertFile string `cfg:"cert_file"`
	// KeyFile is CertFile's private key (PEM).
	KeyFile string `cfg:"key_file"`
	// ClientCAFile, when set, is a PEM file of CAs: the tls:// listeners
	// then require a client certificate signed by one of them (mutual
	// TLS) and refuse the connection at the handshake otherwise. Empty:
	// no client certificate is asked for (peers are known by source
	// address either way).
	ClientCAFile string `cfg:"client_ca_file"`
	// CAFile is a PEM file of the CAs that verify TLS carriers'
	// certificates (empty: the system roots). A carrier's certificate
	// must name the host of its URI (RFC 5922), or the address the call
	// goes to when the URI holds an IP address.
	CAFile string `cfg:"ca_file"`
	// StrangerHandshakesPerSecond caps the TLS handshakes the node starts
	// for strangers (neither a peer's source nor a carrier's address), all
	// tls:// listeners and stranger addresses together: a token bucket of
	// that rate holding one second's worth. A stranger's connection beyond
	// it is closed at accept, before the handshake (each costs the node a
	// key exchange and a signature). Peers' and carriers' handshakes are
	// not limited.
	StrangerHandshakesPerSecond int `cfg:"stranger_handshakes_per_second"`
}

// MaxStrangerHandshakesPerSecond bounds sip.tls.stranger_handshakes_per_second.
const MaxStrangerHandshakesPerSecond = 100000

// anyMaxCalls reports whether a peer, customer, carrier or destination has
// max_calls.
func (c *Config) anyMaxCalls() bool {
	for _, p := range c.Peers {
		if p.MaxCalls > 0 {
			return true
		}
	}
	for _, cu := range c.Customers {
		if cu.MaxCalls > 0 {
			return true
		}
	}
	for _, ca := range c.Carriers {
		if ca.MaxCalls > 0 {
			return true
		}
	}
	for _, d := range c.Destinations {
		if d.MaxCalls > 0 {
			return true
		}
	}
	return false
}

// Stripped returns the headers removed from initial INVITEs: StripHeaders,
// or the customer header when StripHeaders is unset.
func (c *Config) Stripped() []string {
	if c.SIP.StripHeaders != nil {
		return c.SIP.StripHeaders
	}
	if c.CustomerHeader == "" {
		return nil
	}
	return []string{c.CustomerHeader}
}

// Reject describes the SIP response sent for a CPS rejection.
type Reject struct {
	// Code is the SIP status of the answer (4xx, 5xx or 6xx).
	Code int `cfg:"code"`
	// Reason is its reason phrase.
	Reason string `cfg:"reason"`
	// RetryAfter adds a Retry-After header when > 0.
	RetryAfter time.Duration `cfg:"retry_after"`
}

// Store selects and tunes the shared store.
type Store struct {
	// Redis is nil for the in-process store (no store.redis in the file
	// and no CPSGUARD_STORE_REDIS_* variable); a store.redis left empty
	// or null is an error, not the in-process store.
	Redis *Redis `cfg:"redis"`
	// KeyPrefix starts every Redis key of the pool; nodes that share it
	// share their limits.
	KeyPrefix string `cfg:"key_prefix"`
	// OnError is "local", "admit" or "reject".
	OnError string `cfg:"on_error"`
}

// Redis addresses a standalone server, a Sentinel group or a Cluster.
type Redis struct {
	// Addrs: one = standalone, several = cluster; sentinels when MasterName is set.
	Addrs []string `cfg:"addrs"`
	// MasterName, when set, makes Addrs the Sentinels of that master.
	MasterName string `cfg:"master_name"`
	// Username is the ACL user (empty: the default user).
	Username string `cfg:"username"`
	// Password authenticates to Redis (and to the Sentinels). A secret:
	// set it with CPSGUARD_STORE_REDIS_PASSWORD, never shown.
	Password string `cfg:"password"`
	// DB is the database number (standalone and Sentinel only).
	DB int `cfg:"db"`
	// Timeout bounds every Redis call made for a SIP call. At most 10s
	// (MaxRedisTimeout).
	Timeout time.Duration `cfg:"timeout"`
	// TLS encrypts the connections to Redis (and to sentinels).
	TLS RedisTLS `cfg:"tls"`
	// ExpectedNodes is the pool's size that the fallback assumes until
	// this node has counted the live nodes in Redis: a node that starts
	// while Redis is down divides every limit by it (0 means 1, a node
	// alone), and until 10 heartbeats were answered it divides by no
	// fewer. Set it to the number of nodes sharing this Redis, or a pool
	// started during an outage admits that many times its limits. At most
	// MaxExpectedNodes. Read at start.
	ExpectedNodes int `cfg:"expected_nodes"`
}

// MaxExpectedNodes bounds store.redis.expected_nodes.
const MaxExpectedNodes = 1000

// RedisTLS configures TLS to Redis. With Enabled and no CAFile the system
// roots verify the server; CertFile and KeyFile (both or neither) are the
// client certificate for servers that require one (tls-auth-clients yes).
type RedisTLS struct {
	// Enabled turns TLS on.
	Enabled bool `cfg:"enabled"`
	// CAFile is a PEM file of the CAs that verify the server (empty: the
	// system roots).
	CAFile string `cfg:"ca_file"`
	// CertFile is the client certificate (PEM), with KeyFile.
	CertFile string `cfg:"cert_file"`
	// KeyFile is the client certificate's private key (PEM).
	KeyFile string `cfg:"key_file"`
	// ServerName is the name the server's certificate must carry (empty:
	// the host of the address).
	ServerName string `cfg:"server_name"`
}

// HTTP is the operations endpoint.
type HTTP struct {
	// Listen is host:port of /metrics, /healthz, /readyz and /api/v1/.
	Listen string `cfg:"listen"`
	// Token is the bearer token required by write endpoints; empty = none.
	Token string `cfg:"token"`
}

// Log configures log/slog.
type Log struct {
	Level  string `cfg:"level"`  // debug | info | warn | error
	Format string `cfg:"format"` // json | text
	// Events logs one line at info per call not forwarded on its first
	// try: refused (by a limit, the queue, a down route, policy) or
	// rerouted, with its call id, source, peer, customer, dialled number,
	// carrier, reason and answer.
	Events bool `cfg:"events"`
	// EventsPerSecond caps those lines; the rest are counted and the count
	// logged ("call events suppressed").
	EventsPerSecond int `cfg:"events_per_second"`
}

// Records configures the call records: one JSON object per call that
// reached a decision (forwarded, refused, cancelled), written when the
// call ends. Every sink is fed through a bounded queue of its own, never
// waited for on the call path: a record that finds its queue full is
// dropped and counted (cpsguard_records_dropped_total{sink}). No sink
// set: no records. Per node, reloadable: a changed path reopens the file.
type Records struct {
	// File is the path of the JSON-lines file (one record a line); empty:
	// no file. Rotated by size: the full file is renamed with a timestamp
	// and a new one started.
	File string `cfg:"file"`
	// MaxSizeMB is the size in megabytes at which the file is rotated.
	MaxSizeMB int `cfg:"max_size_mb"`
	// MaxBackups is the number of rotated files kept (0 keeps them all).
	MaxBackups int `cfg:"max_backups"`
	// Stdout writes the records to standard output too, one a line (the
	// logs go to standard error).
	Stdout bool `cfg:"stdout"`
	// Syslog sends each record as an RFC 5424 message (facility local0,
	// severity info, app-name cpsguard, msgid "call", the JSON as the
	// message) to udp://host:port or tcp://host:port (octet-counted
	// framing, RFC 6587); empty: none.
	Syslog string `cfg:"syslog"`
	// Buffer is how many records each sink may hold waiting to be written
	// before new ones are dropped.
	Buffer int `cfg:"buffer"`
}

// Enabled reports whether any sink is set.
func (r Records) Enabled() bool { return r.File != "" || r.Stdout || r.Syslog != "" }

// Peer is a party that sends calls, identified by source address.
type Peer struct {
	// Name is the peer's name (1-64 of [A-Za-z0-9._-]).
	Name string `cfg:"name"`
	// Sources are the addresses or CIDRs calls of this peer come from; the
	// longest prefix over all peers wins.
	Sources []netip.Prefix `cfg:"sources"`
	// CPS is the peer's limit of admitted calls per rolling second, for
	// the whole pool.
	CPS float64 `cfg:"cps"`
	// MaxCalls caps the calls of this peer set up and not yet ended, for
	// the whole pool (0 = no limit).
	MaxCalls int `cfg:"max_calls"`
	// Customer is the customer of a call that names none in the customer
	// header.
	Customer string `cfg:"customer"`
	// Customers are the customers this peer may name in the customer
	// header (Customer among them).
	Customers []string `cfg:"customers"`
	// Route is the route of the peer's calls whose customer has none
	// (else "default").
	Route string `cfg:"route"`
	// Burst, when > 0, replaces the peer's rolling 1 s window with a token
	// bucket of rate CPS and capacity Burst (>= CPS).
	Burst int `cfg:"burst"`
	// Windows are extra rolling windows, all of which must hold beside the
	// 1 s one (or the token bucket).
	Windows []Window `cfg:"windows"`
	// Shadow makes this peer's limits (cps, burst, windows, max_calls)
	// count would-be refusals (result "shadow_rejected") and admit the
	// calls anyway, while other limits are enforced.
	Shadow bool `cfg:"shadow"`
	// Reject, when set, is the answer to a call this peer's limits refuse,
	// instead of sip.reject (cps, burst, windows) or sip.reject_calls
	// (max_calls).
	Reject *Reject `cfg:"reject"`
	// AllowResourcePriority lets this peer's calls claim priority with a
	// Resource-Priority header of a namespace in priority.resource_priority.
	// Without it the header is ignored (and the claim counted, kind
	// refused_claim); emergency numbers are priority whoever dials them.
	AllowResourcePriority bool `cfg:"allow_resource_priority"`
	// Weight is the peer's share of a saturated carrier that is shared by
	// peer (share_by: peer; with share_by: customer, of its calls that name
	// no customer): while the carrier is the bottleneck the peer gets at
	// least weight / (the sum of the weights of those waiting for it) of
	// the carrier's CPS, and what it leaves goes to the others. 1 to 1000.
	Weight int `cfg:"weight"`
}

// Customer is the party a call belongs to.
type Customer struct {
	// Name is the customer's name, as the customer header gives it.
	Name string `cfg:"name"`
	// CPS is the customer's limit of admitted calls per rolling second,
	// for the whole pool, whichever peer sends them.
	CPS float64 `cfg:"cps"`
	// Route is the route of the customer's calls (before the peer's).
	Route string `cfg:"route"`
	// MaxCalls caps the customer's live calls, pool-wide (0 = no limit).
	MaxCalls int `cfg:"max_calls"`
	// Burst and Windows are as on Peer.
	Burst   int      `cfg:"burst"`
	Windows []Window `cfg:"windows"`
	// Shadow is as on Peer, for this customer's limits.
	Shadow bool `cfg:"shadow"`
	// Reject, when set, is the answer to a call this customer's limits
	// refuse, instead of sip.reject or sip.reject_calls.
	Reject *Reject `cfg:"reject"`
	// Weight is the customer's share of a saturated carrier shared by
	// customer (share_by: customer): while the carrier is
	// the bottleneck the customer gets at least weight / (the sum of the
	// weights of those waiting for it) of the carrier's CPS, and what it
	// leaves goes to the others. 1 to 1000.
	Weight int `cfg:"weight"`
}

// ShareWeight is the peer's Weight (0, a Config built by hand: 1).
func (p *Peer) ShareWeight() int { return max(p.Weight, 1) }

// ShareWeight is the customer's Weight (0, a Config built by hand: 1).
func (c *Customer) ShareWeight() int { return max(c.Weight, 1) }

// How a carrier's slots are shared among its callers (Carrier.ShareBy).
const (
	ShareByCustomer = "customer"
	ShareByPeer     = "peer"
	ShareByNone     = "none"
)

// MaxWeight is the largest weight of a peer or customer.
const MaxWeight = 1000

// Window is an extra rolling window of a peer or customer: at most Calls
// admitted calls in any interval of length Per (1 s to 24 h).
type Window struct {
	// Calls is the most admitted calls in any interval of length Per.
	Calls int `cfg:"calls"`
	// Per is the window's length.
	Per time.Duration `cfg:"per"`
}

// Carrier is a downstream destination with a pacing limit.
type Carrier struct {
	// Name is the carrier's name, as routes list it.
	Name string `cfg:"name"`
	// URI is where its calls go: sip:host[:port][;transport=udp|tcp|tls],
	// or sips:host[:port] (TLS). A host name without a port is looked up
	// in DNS SRV records first (_sip._udp, _sip._tcp, or _sips._tcp for
	// TLS; priority and weight), else its A/AAAA records with the
	// transport's default port; resolved at start and every 30 s. Over
	// TLS the carrier's certificate must name host (sip.tls.ca_file).
	URI string `cfg:"uri"`
	// CPS is the pace of calls sent to it, for the whole pool: never more
	// than cps in any rolling second.
	CPS float64 `cfg:"cps"`
	// MaxWait is the longest a call waits for a slot of this carrier;
	// a call that would wait longer tries the next carrier of its route.
	// At most 24h.
	MaxWait time.Duration `cfg:"max_wait"`
	// MaxCalls caps the live calls sent to this carrier, pool-wide (0 = no
	// limit); a full carrier is skipped like a full pacing queue.
	MaxCalls int `cfg:"max_calls"`
	// SetupTimeout is how long the carrier has to answer a forwarded INVITE
	// with a provisional response above 100 (or a final one); then the
	// INVITE is cancelled and the next carrier of the route tried. 0 means
	// DefaultSetupTimeout.
	SetupTimeout time.Duration `cfg:"setup_timeout"`
	// RetryAfterMax caps the pause a 503 or 500 with Retry-After asks
	// the pool for (0 means DefaultRetryAfterMax): a longer Retry-After
	// pauses the carrier this long, then one call tries it.
	RetryAfterMax time.Duration `cfg:"retry_after_max"`
	// Burst and Windows are refused on carriers (see the validation
	// message); they exist so the file gets a clear error rather than
	// "unknown key".
	Burst   int      `cfg:"burst"`
	Windows []Window `cfg:"windows"`
	// Probe checks the carrier with SIP OPTIONS; nil means DefaultProbe
	// (on). A down carrier is skipped by routing.
	Probe *Probe `cfg:"probe"`
	// Adaptive lets the carrier's overload answers (Overload) lower its
	// effective CPS for the whole pool (multiplicative decrease), which then
	// climbs back towards CPS (additive increase).
	Adaptive bool `cfg:"adaptive"`
	// Overload says which answers are overload answers and how an adaptive
	// carrier's effective CPS moves; nil means DefaultOverload(CPS).
	Overload *Overload `cfg:"overload"`
	// MinASR is the least answer-seizure ratio (percent of the calls a
	// node sent the carrier that it answered) the carrier must keep over
	// asr_window once it had min_seizures calls there: below it, the
	// node takes the carrier out of service for one asr_window, then
	// judges it afresh. 0 turns it off. Per node; a peer dialling numbers
	// nobody answers lowers it too.
	MinASR float64 `cfg:"min_asr"`
	// MinSeizures is how many calls (seizures) the carrier must have had
	// within asr_window before min_asr judges it (0 means
	// DefaultMinSeizures).
	MinSeizures int `cfg:"min_seizures"`
	// ASRWindow is how far back the answer-seizure ratio looks, and how
	// long a carrier below min_asr stays out of service (0 means
	// DefaultASRWindow).
	ASRWindow time.Duration `cfg:"asr_window"`
	// ShareBy says how the carrier's slots are shared when it is the
	// bottleneck: "none" (the default: first come, first served; one
	// caller's burst may take every slot for max_wait), "customer" (by the
	// customers waiting for it, by weight; a call without a customer
	// counts as its peer's) or "peer" (by the peers waiting, by weight). A
	// call within its share gets a slot within about an interval, however
	// long the others' queue. Sharing costs every call to the carrier two
	// to three times the store work of its slot reservation (measured:
	// +0.05-0.09 ms of Redis CPU a call), which is why it is turned on per
	// carrier, where callers compete for it.
	ShareBy string `cfg:"share_by"`
}

// Route is one route: its carriers, and how a call chooses the first it
// tries; the others follow in the route's order. In the file it is
// either a list of carrier names (policy ordered) or a block.
type Route struct {
	// Policy chooses the first carrier of a call: ordered (the list's
	// first), weighted (at random, in proportion to the carriers'
	// weights: a carrier of weight w takes w/Σw of the calls) or
	// least_wait (the carrier whose next free pacing slot is soonest,
	// pool-wide). Empty means ordered.
	Policy string `cfg:"policy"`
	// Carriers are the route's carriers, in order: names, or blocks
	// {name, weight}.
	Carriers []RouteCarrier `cfg:"carriers"`

	// list: written as a list of names (validation messages name its
	// items routes.<name>[i]).
	list bool
}

// RouteCarrier is one carrier of a route.
type RouteCarrier struct {
	// Name is the carrier's name.
	Name string `cfg:"name"`
	// Weight is the carrier's share of a weighted route's calls (its
	// weight over the sum of the route's weights; percentages when they
	// add up to 100). Only with policy weighted.
	Weight int `cfg:"weight"`
}

// Route policies.
const (
	RouteOrdered   = "ordered"
	RouteWeighted  = "weighted"
	RouteLeastWait = "least_wait"
)

// OrderedRoute is the route that tries names in order (a list in the
// file).
func OrderedRoute(names ...string) Route {
	r := Route{Policy: RouteOrdered, list: true, Carriers: make([]RouteCarrier, len(names))}
	for i, n := range names {
		r.Carriers[i].Name = n
	}
	return r
}

// Names returns the route's carrier names, in order.
func (r Route) Names() []string {
	out := make([]string, len(r.Carriers))
	for i, c := range r.Carriers {
		out[i] = c.Name
	}
	return out
}

// PolicyName returns the route's policy (RouteOrdered when unset).
func (r Route) PolicyName() string {
	if r.Policy == "" {
		return RouteOrdered
	}
	return r.Policy
}

// MarshalJSON writes an ordered route without weights as its list of
// names, as the file may write it, so the configuration hash of a pool
// that writes its routes as lists does not change with this type.
func (r Route) MarshalJSON() ([]byte, error) {
	plain := r.PolicyName() == RouteOrdered
	for _, c := range r.Carriers {
		plain = plain && c.Weight == 0
	}
	if plain {
		return json.Marshal(r.Names())
	}
	type route Route // without this method
	return json.Marshal(route(r))
}

// Defaults of a carrier's answer-seizure ratio health (min_asr).
const (
	DefaultMinSeizures = 20
	DefaultASRWindow   = time.Minute
)

// ASRHealth returns the carrier's answer-seizure ratio settings with
// every default filled in (minASR 0: off).
func (c *Carrier) ASRHealth() (minASR float64, minSeizures int, window time.Duration) {
	minSeizures, window = c.MinSeizures, c.ASRWindow
	if minSeizures <= 0 {
		minSeizures = DefaultMinSeizures
	}
	if window <= 0 {
		window = DefaultASRWindow
	}
	return c.MinASR, minSeizures, window
}

// Sharing is the carrier's ShareBy ("", a Config built by hand:
// ShareByNone).
func (c *Carrier) Sharing() string {
	if c.ShareBy == "" {
		return ShareByNone
	}
	return c.ShareBy
}

// Probe configures a carrier's health probing: a SIP OPTIONS every
// Interval; the carrier is down after DownAfter failed probes in a row (no
// answer within Timeout, or a 5xx or 408) and up again after UpAfter good
// ones (any other answer, as Kamailio's dispatcher counts them).
type Probe struct {
	// Interval between probes; 0 turns probing (and passive down-marking)
	// off: the carrier is then always up.
	Interval time.Duration `cfg:"interval"`
	// Timeout is how long one probe waits for an answer.
	Timeout time.Duration `cfg:"timeout"`
	// DownAfter failed probes in a row, or failed calls in a row (setup
	// timeouts, 5xx, 408), mark the carrier down.
	DownAfter int `cfg:"down_after"`
	// UpAfter good probes in a row mark a down carrier up.
	UpAfter int `cfg:"up_after"`
}

// DefaultProbe is a carrier's probe when the file names none.
var DefaultProbe = Probe{Interval: 5 * time.Second, Timeout: time.Second, DownAfter: 3, UpAfter: 2}

// Probing returns the carrier's probe settings (DefaultProbe when unset).
func (c *Carrier) Probing() Probe {
	if c.Probe != nil {
		return *c.Probe
	}
	return DefaultProbe
}

// Overload says which answers of a carrier are overload answers, and, for
// an adaptive carrier, how its effective CPS moves (AIMD).
type Overload struct {
	// Codes are the final status codes that mean overload (default 503).
	Codes []int `cfg:"codes"`
	// Reasons match, case-insensitively, inside the reason phrase of any
	// final non-2xx answer: a carrier that says "CPS exceeded" in a 403 is
	// overloaded too.
	Reasons []string `cfg:"reasons"`
	// Decrease multiplies the effective CPS on an overload answer (0 < d <
	// 1; default 0.7), at most once per second pool-wide.
	Decrease float64 `cfg:"decrease"`
	// MinCPS is the floor of the effective CPS (default 10 % of cps).
	MinCPS float64 `cfg:"min_cps"`
	// Increase is added to the effective CPS per second until it is back
	// at cps (default 5 % of cps per second).
	Increase float64 `cfg:"increase"`
}

// Overloaded returns the carrier's overload settings with every default
// filled in.
func (c *Carrier) Overloaded() Overload {
	o := Overload{}
	if c.Overload != nil {
		o = *c.Overload
	}
	if o.Codes == nil {
		o.Codes = []int{503}
	}
	if o.Decrease == 0 {
		o.Decrease = DefaultDecrease
	}
	if o.MinCPS == 0 {
		o.MinCPS = c.CPS * DefaultMinShare
	}
	if o.Increase == 0 {
		o.Increase = c.CPS * DefaultIncreaseShare
	}
	return o
}

// Defaults of Overload.
const (
	DefaultDecrease      = 0.7
	DefaultMinShare      = 0.1
	DefaultIncreaseShare = 0.05
)

// DefaultRetryAfterMax is a carrier's retry_after_max when none is set;
// MaxRetryAfterMax bounds it.
const (
	DefaultRetryAfterMax = time.Minute
	MaxRetryAfterMax     = time.Hour
)

// MaxRedisTimeout bounds store.redis.timeout: a call waits that long for
// Redis before its store.on_error policy decides it, and the store bounds
// a whole call by twice it and a switch to the fallback by five times it,
// which a duration near its int64 limit overflows (2 × 2562047h is
// -1h34m: every such store call would find its context already expired).
const MaxRedisTimeout = 10 * time.Second

// MaxMaxWait bounds a carrier's max_wait: a longer one is a typo rather
// than a queue (no caller waits a day for its call to be sent), and the
// stores add it to clock readings and TTLs, which a duration near its
// int64 limit would overflow.
const MaxMaxWait = 24 * time.Hour

// RetryAfterCap returns the longest pause the carrier's Retry-After may
// ask for (DefaultRetryAfterMax when unset).
func (c *Carrier) RetryAfterCap() time.Duration {
	if c.RetryAfterMax > 0 {
		return c.RetryAfterMax
	}
	return DefaultRetryAfterMax
}

// DefaultSetupTimeout is a carrier's setup_timeout when none is set.
const DefaultSetupTimeout = 2 * time.Second

// Setup returns the carrier's setup timeout (DefaultSetupTimeout when unset).
func (c *Carrier) Setup() time.Duration {
	if c.SetupTimeout > 0 {
		return c.SetupTimeout
	}
	return DefaultSetupTimeout
}

// PeerByAddr returns the peer owning addr by longest-prefix match over all
// peers' sources, or nil. Overlapping sources are allowed when one prefix is
// more specific than the other: 10.0.0.0/8 on one peer and 10.1.2.3/32 on
// another send 10.1.2.3 to the second peer and the rest of 10/8 to the first.
// Two peers with the same prefix are rejected by validation, so ties cannot
// happen in a loaded Config. IPv4-mapped IPv6 addresses match IPv4 prefixes.
func (c *Config) PeerByAddr(addr netip.Addr) *Peer {
	addr = addr.Unmap()
	if x := c.index(); x != nil {
		return x.peerByAddr(c, addr)
	}
	var best *Peer
	bestBits := -1
	for i := range c.Peers {
		p := &c.Peers[i]
		for _, pfx := range p.Sources {
			if pfx.Bits() > bestBits && pfx.Contains(addr) {
				best, bestBits = p, pfx.Bits()
			}
		}
	}
	return best
}

// Customer returns the customer named name, or nil.
func (c *Config) Customer(name string) *Customer {
	if x := c.index(); x != nil {
		if i, ok := x.customers[name]; ok {
			return &c.Customers[i]
		}
		return nil
	}
	for i := range c.Customers {
		if c.Customers[i].Name == name {
			return &c.Customers[i]
		}
	}
	return nil
}

// Peer returns the peer named name, or nil.
func (c *Config) Peer(name string) *Peer {
	if x := c.index(); x != nil {
		if i, ok := x.peerNames[name]; ok {
			return &c.Peers[i]
		}
		return nil
	}
	for i := range c.Peers {
		if c.Peers[i].Name == name {
			return &c.Peers[i]
		}
	}
	return nil
}

// Carrier returns the carrier named name, or nil.
func (c *Config) Carrier(name string) *Carrier {
	if x := c.index(); x != nil {
		if i, ok := x.carriers[name]; ok {
			return &c.Carriers[i]
		}
		return nil
	}
	for i := range c.Carriers {
		if c.Carriers[i].Name == name {
			return &c.Carriers[i]
		}
	}
	return nil
}

// RouteFor returns the route name of a call: its customer's route, else its
// peer's, else "default". Either argument may be nil.
func (c *Config) RouteFor(p *Peer, cu *Customer) string {
	if cu != nil && cu.Route != "" {
		return cu.Route
	}
	if p != nil && p.Route != "" {
		return p.Route
	}
	return DefaultRoute
}

// MayUseCustomer reports whether peer p may name customer in the customer
// header.
func (p *Peer) MayUseCustomer(customer string) bool {
	for _, c := range p.Customers {
		if c == customer {
			return true
		}
	}
	return false
}
