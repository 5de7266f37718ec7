package config

import (
	"net/netip"
	"time"
)

// Config is one validated, immutable snapshot of the configuration. Callers
// must not modify a Config they did not build themselves; a reload produces a
// new one.
type Config struct {
	NodeID         string
	SIP            SIP
	Store          Store
	HTTP           HTTP
	Log            Log
	Shadow         bool
	CustomerHeader string
	Peers          []Peer
	Customers      []Customer
	Carriers       []Carrier
	// Routes maps a route name to the carriers it tries, in order.
	Routes map[string][]string
}

// SIP is the SIP front end's configuration.
type SIP struct {
	// Listen holds listen URLs: "udp://host:port" or "tcp://host:port".
	Listen []string
	// Advertise is host[:port] put in Via and Record-Route; empty means the
	// listen address.
	Advertise string
	// RecordRoute adds a Record-Route header to forwarded initial INVITEs.
	RecordRoute bool
	// UnknownSource is "reject" (403 Forbidden) or "drop" (no answer).
	UnknownSource string
	// Reject is the answer to a call refused by admission.
	Reject Reject
}

// Reject describes the SIP response sent for a CPS rejection.
type Reject struct {
	Code   int
	Reason string
	// RetryAfter adds a Retry-After header when > 0.
	RetryAfter time.Duration
}

// Store selects and tunes the shared store.
type Store struct {
	// Redis is nil for the in-process store.
	Redis     *Redis
	KeyPrefix string
	// OnError is "local", "admit" or "reject".
	OnError string
}

// Redis addresses a standalone server, a Sentinel group or a Cluster.
type Redis struct {
	// Addrs: one = standalone, several = cluster; sentinels when MasterName is set.
	Addrs      []string
	MasterName string
	Username   string
	Password   string
	DB         int
	// Timeout bounds every Redis call made for a SIP call.
	Timeout time.Duration
}

// HTTP is the operations endpoint.
type HTTP struct {
	Listen string
	// Token is the bearer token required by write endpoints; empty = none.
	Token string
}

// Log configures log/slog.
type Log struct {
	Level  string // debug | info | warn | error
	Format string // json | text
}

// Peer is a party that sends calls, identified by source address.
type Peer struct {
	Name      string
	Sources   []netip.Prefix
	CPS       float64
	Customer  string
	Customers []string
	Route     string
}

// Customer is the party a call belongs to.
type Customer struct {
	Name  string
	CPS   float64
	Route string
}

// Carrier is a downstream destination with a pacing limit.
type Carrier struct {
	Name    string
	URI     string
	CPS     float64
	MaxWait time.Duration
}

// PeerByAddr returns the peer owning addr by longest-prefix match over all
// peers' sources, or nil. Ties cannot happen in a validated Config.
func (c *Config) PeerByAddr(addr netip.Addr) *Peer {
	addr = addr.Unmap()
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
	for i := range c.Customers {
		if c.Customers[i].Name == name {
			return &c.Customers[i]
		}
	}
	return nil
}

// Carrier returns the carrier named name, or nil.
func (c *Config) Carrier(name string) *Carrier {
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
	return "default"
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
