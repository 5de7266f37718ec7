package policy

import (
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/pacing"
)

// Policy is what the call path needs of one configuration snapshot,
// derived once (New). It never changes.
type Policy struct {
	cfg       *config.Config
	peers     []Scoped
	customers []Scoped
	carriers  []Carrier
	peerAt    map[*config.Peer]int
	custAt    map[*config.Customer]int
	carrAt    map[*config.Carrier]int
	ips       map[netip.Addr]struct{}

	// Destinations and priority (destinations.go).
	dests     []Destination
	destAt    map[string]int  // by key name (the prefix without '+')
	destLens  []int           // the prefixes' lengths, longest first
	prioNums  []string        // priority.numbers matched as prefixes, normalised
	prioExact map[string]bool // priority.numbers matched exactly (911$), normalised
	prioSpace map[string]bool
}

// Scoped is one peer or customer: its keys and admission buckets.
type Scoped struct {
	// Scope is ScopePeer or ScopeCustomer; Name the configured name.
	Scope Scope
	Name  string
	// ID is "scope:name", unique across scopes: the name of the scope in
	// this node's in-process tables (the send gate).
	ID string
	// Key is the admission bucket's key (Key).
	Key string
	// CallsKey is the max_calls place's key, MaxCalls its limit (0: none).
	CallsKey string
	MaxCalls int
	// CPS and Burst are the configured limits (before a live override).
	CPS   float64
	Burst int
	// Shadow reports that the scope's limits are shadowed (its own
	// shadow, or the global one): its buckets let a call over them
	// through (admission.OverShadow) and its max_calls place does not
	// refuse.
	Shadow bool
	// Reject is the scope's own answer to a call its limits refuse (nil:
	// sip.reject, or sip.reject_calls for max_calls).
	Reject *config.Reject

	windows []config.Window
	// buckets are Buckets(CPS, Burst), derived at load; nil when CPS <= 0.
	buckets []admission.Bucket
}

// Carrier is one carrier: its keys, pacing settings and parsed URI.
type Carrier struct {
	// Name is the configured name.
	Name string
	// ID is "carrier:name", the carrier's name in this node's in-process
	// tables (the send gate).
	ID string
	// Key is the slot set's key (Key); CallsKey the max_calls place's,
	// MaxCalls its limit (0: none).
	Key      string
	CallsKey string
	MaxCalls int
	// MaxWait is the longest a call waits for one of its slots.
	MaxWait time.Duration
	// Target is the parsed URI; Err is set instead when it does not parse
	// (the carrier is unusable).
	Target Target
	Err    error

	uri string // as configured, to tell a Config edited in place
}

// New derives the Policy of cfg. A nil cfg gives a nil Policy.
func New(cfg *config.Config) *Policy {
	if cfg == nil {
		return nil
	}
	prefix := cfg.Store.KeyPrefix
	p := &Policy{
		cfg:       cfg,
		peers:     make([]Scoped, len(cfg.Peers)),
		customers: make([]Scoped, len(cfg.Customers)),
		carriers:  make([]Carrier, len(cfg.Carriers)),
		peerAt:    make(map[*config.Peer]int, len(cfg.Peers)),
		custAt:    make(map[*config.Customer]int, len(cfg.Customers)),
		carrAt:    make(map[*config.Carrier]int, len(cfg.Carriers)),
		ips:       map[netip.Addr]struct{}{},
	}
	for i := range cfg.Peers {
		pe := &cfg.Peers[i]
		p.peers[i] = newPeer(cfg, pe)
		p.peerAt[pe] = i
	}
	for i := range cfg.Customers {
		cu := &cfg.Customers[i]
		p.customers[i] = newCustomer(cfg, cu)
		p.custAt[cu] = i
	}
	p.deriveDestinations()
	for i := range cfg.Carriers {
		car := &cfg.Carriers[i]
		p.carriers[i] = newCarrier(prefix, car)
		p.carrAt[car] = i
		if c := &p.carriers[i]; c.Err == nil {
			if ip, err := netip.ParseAddr(strings.Trim(c.Target.Host, "[]")); err == nil {
				p.ips[ip.Unmap().WithZone("")] = struct{}{}
			}
		}
	}
	return p
}

// newScoped derives a scope named name whose keys are named keyName.
func newScoped(prefix string, scope Scope, name, keyName string, cps float64, burst int, windows []config.Window, maxCalls int, shadow bool, reject *config.Reject) Scoped {
	s := Scoped{
		Scope: scope, Name: name, ID: string(scope) + ":" + name,
		Key: Key(prefix, scope, keyName), CallsKey: CallsKey(prefix, scope, keyName), MaxCalls: maxCalls,
		CPS: cps, Burst: burst, Shadow: shadow, Reject: reject, windows: windows,
	}
	if cps > 0 || len(windows) > 0 {
		s.buckets = s.derive(cps, burst)
	}
	return s
}

func newPeer(cfg *config.Config, pe *config.Peer) Scoped {
	return newScoped(cfg.Store.KeyPrefix, ScopePeer, pe.Name, pe.Name, pe.CPS, pe.Burst, pe.Windows, pe.MaxCalls, cfg.Shadow || pe.Shadow, pe.Reject)
}

func newCustomer(cfg *config.Config, cu *config.Customer) Scoped {
	return newScoped(cfg.Store.KeyPrefix, ScopeCustomer, cu.Name, cu.Name, cu.CPS, cu.Burst, cu.Windows, cu.MaxCalls, cfg.Shadow || cu.Shadow, cu.Reject)
}

func newCarrier(prefix string, car *config.Carrier) Carrier {
	t, err := ParseCarrierURI(car.URI)
	return Carrier{
		Name: car.Name, ID: string(ScopeCarrier) + ":" + car.Name,
		Key: Key(prefix, ScopeCarrier, car.Name), CallsKey: CallsKey(prefix, ScopeCarrier, car.Name),
		MaxCalls: car.MaxCalls, MaxWait: car.MaxWait, Target: t, Err: err, uri: car.URI,
	}
}

// Config is the snapshot p was derived from.
func (p *Policy) Config() *config.Config { return p.cfg }

// Peers returns the peers, index-aligned with Config().Peers.
func (p *Policy) Peers() []Scoped { return p.peers }

// Customers returns the customers, index-aligned with Config().Customers.
func (p *Policy) Customers() []Scoped { return p.customers }

// Carriers returns the carriers, index-aligned with Config().Carriers.
func (p *Policy) Carriers() []Carrier { return p.carriers }

// CarrierIPs returns the carriers' addresses written as IPs in their URIs
// (host names are resolved elsewhere).
func (p *Policy) CarrierIPs() map[netip.Addr]struct{} { return p.ips }

// Peer returns the derived values of pe, a peer of Config(); a peer of
// another snapshot is derived afresh.
func (p *Policy) Peer(pe *config.Peer) *Scoped {
	if i, ok := p.peerAt[pe]; ok && p.peers[i].current(pe.Name, pe.CPS, pe.Burst, pe.Windows, pe.MaxCalls, p.cfg.Shadow || pe.Shadow, pe.Reject) {
		return &p.peers[i]
	}
	s := newPeer(p.cfg, pe)
	return &s
}

// Customer returns the derived values of cu, a customer of Config(); a
// customer of another snapshot is derived afresh.
func (p *Policy) Customer(cu *config.Customer) *Scoped {
	if i, ok := p.custAt[cu]; ok && p.customers[i].current(cu.Name, cu.CPS, cu.Burst, cu.Windows, cu.MaxCalls, p.cfg.Shadow || cu.Shadow, cu.Reject) {
		return &p.customers[i]
	}
	s := newCustomer(p.cfg, cu)
	return &s
}

// Carrier returns the derived values of car, a carrier of Config(); a
// carrier of another snapshot is derived afresh.
func (p *Policy) Carrier(car *config.Carrier) *Carrier {
	if i, ok := p.carrAt[car]; ok && p.carriers[i].current(car) {
		return &p.carriers[i]
	}
	c := newCarrier(p.cfg.Store.KeyPrefix, car)
	return &c
}

// current reports whether s was derived from these values: a Config
// edited in place after use (tests do) is derived afresh, not served stale.
func (s *Scoped) current(name string, cps float64, burst int, windows []config.Window, maxCalls int, shadow bool, reject *config.Reject) bool {
	return s.Name == name && s.CPS == cps && s.Burst == burst && s.MaxCalls == maxCalls &&
		s.Shadow == shadow && s.Reject == reject &&
		len(s.windows) == len(windows) && (len(windows) == 0 || &s.windows[0] == &windows[0])
}

// current reports whether c was derived from car's present values.
func (c *Carrier) current(car *config.Carrier) bool {
	return c.Name == car.Name && c.uri == car.URI && c.MaxWait == car.MaxWait && c.MaxCalls == car.MaxCalls
}

// Buckets returns s's admission buckets at cps and burst (the configured
// limits or a live override's): a token bucket when burst > 0, else the
// 1 s window (none when cps <= 0: a destination may have windows only),
// then one bucket per extra window; each lets a call over it through
// uncounted when s is shadowed (admission.OverShadow). For the configured
// limits it returns the buckets derived at load, which the caller must not
// modify.
func (s *Scoped) Buckets(cps float64, burst int) []admission.Bucket {
	if s.buckets != nil && cps == s.CPS && burst == s.Burst {
		return s.buckets
	}
	return s.derive(cps, burst)
}

func (s *Scoped) derive(cps float64, burst int) []admission.Bucket {
	out := make([]admission.Bucket, 0, 1+len(s.windows))
	switch {
	case cps <= 0:
	case burst > 0:
		out = append(out, admission.TokenBucket(s.Key, cps, burst))
	default:
		out = append(out, s.Window(cps))
	}
	for _, w := range s.windows {
		out = append(out, admission.WindowBucket(s.Key, w.Calls, w.Per))
	}
	if s.Shadow {
		for i := range out {
			out[i].Over = admission.OverShadow
		}
	}
	return out
}

// Window returns s's 1 s window bucket at cps.
func (s *Scoped) Window(cps float64) admission.Bucket {
	limit, window := admission.LimitFor(cps)
	return admission.Bucket{Key: s.Key, Limit: limit, Window: window}
}

// Pacing is what pacing needs of c at the effective rate cps: its slot
// set, cps and max_wait.
func (c *Carrier) Pacing(cps float64) pacing.Carrier {
	return pacing.Carrier{Key: c.Key, CPS: cps, MaxWait: c.MaxWait}
}

// Cache holds the Policies of the last two snapshots it was asked for:
// after a reload, calls admitted under the previous snapshot finish
// without deriving it again and again. The zero Cache is ready to use.
type Cache struct{ last atomic.Pointer[[2]*Policy] }

// Of returns the Policy of cfg, deriving it when cfg is neither of the
// last two snapshots (nil for a nil cfg). Concurrent first calls may each
// derive it; they get equal Policies.
func (c *Cache) Of(cfg *config.Config) *Policy {
	if cfg == nil {
		return nil
	}
	last := c.last.Load()
	if last != nil {
		for _, p := range last {
			if p.of(cfg) {
				return p
			}
		}
	}
	p := New(cfg)
	next := [2]*Policy{p}
	if last != nil {
		next[1] = last[0]
	}
	c.last.Store(&next)
	return p
}

// of reports whether p was derived from cfg (a Config whose slices were
// given new lengths in place is not).
func (p *Policy) of(cfg *config.Config) bool {
	return p != nil && p.cfg == cfg && len(p.peers) == len(cfg.Peers) &&
		len(p.customers) == len(cfg.Customers) && len(p.carriers) == len(cfg.Carriers)
}

// snapshots is the Cache behind Of.
var snapshots Cache

// Of returns the Policy of cfg from one process-wide Cache: the proxy and
// the API, reading the same snapshot, share one derivation (nil for a nil
// cfg). Tests that alternate between Configs only derive more often.
func Of(cfg *config.Config) *Policy { return snapshots.Of(cfg) }
