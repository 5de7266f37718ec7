package carriers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/policy"
)

// Carriers may be named by host name in their URI. The proxy resolves those
// names itself, at start and every resolveEvery, so that
//
//   - a carrier's address is known (its answers and in-dialog requests are
//     told from a stranger's by source address, and the host name is no
//     wildcard that makes every address "known");
//   - the carrier leg recorded in a dialog token is the address the INVITE
//     was really sent to.
//
// A name without a port in the URI is looked up in DNS SRV records first
// (RFC 3263 4.2; RFC 2782): _sip._udp.<host>, _sip._tcp.<host>, or
// _sips._tcp.<host> for TLS (sips: or ;transport=tls). Each call then goes
// to a target of the lowest priority that has an address, chosen among
// them in proportion to their weights; a lower priority (a higher number)
// takes calls only while no target before it resolves. A single target
// "." says the carrier publishes no SIP service there: the carrier is
// unusable. With no SRV record (or a port in the URI), the name's A and
// AAAA records are used, with the URI's port or the transport's default.
// The transport always comes from the URI (no NAPTR lookup: the
// configuration says it). Among a target's addresses, one of a family the
// node listens on for the transport is preferred (dual stack).
//
// A name that does not resolve leaves its carrier unusable (the call moves
// to the next carrier of its route) until a later refresh succeeds; the
// last good answer is kept while a refresh fails.

// resolveEvery is how often carrier host names are resolved again.
const resolveEvery = 30 * time.Second

// resolveTimeout bounds one resolution (SRV and the targets' addresses).
const resolveTimeout = 2 * time.Second

// srvTargetsMax bounds the SRV targets of one name that are resolved.
const srvTargetsMax = 16

// errNoSIPService is a carrier's SRV answer of one "." target (RFC 2782).
var errNoSIPService = errors.New("SRV record says no SIP service (target \".\")")

// nameKey is one carrier host name as it is looked up: the name (lower
// case), the transport, and whether SRV records are asked for (no port in
// the URI).
type nameKey struct {
	host      string
	transport string // "UDP", "TCP", "TLS"
	srv       bool
}

func keyOf(t policy.Target) nameKey {
	return nameKey{host: strings.ToLower(strings.Trim(t.Host, "[]")), transport: t.Transport, srv: !t.PortGiven}
}

// srvService is the SRV service and protocol of a transport (RFC 3263
// 4.1: TLS is _sips._tcp).
func srvService(transport string) (service, proto string) {
	switch transport {
	case "TCP":
		return "sip", "tcp"
	case "TLS":
		return "sips", "tcp"
	}
	return "sip", "udp"
}

// srvTarget is one place a name's calls may go: an SRV target (priority,
// weight, port, its addresses), or the name's own addresses with the
// URI's port (priority and weight 0).
type srvTarget struct {
	priority, weight uint16
	port             uint16
	addrs            []netip.Addr
}

// resolved is what a nameKey resolved to, in priority order.
type resolved struct {
	targets []srvTarget
}

// resolver keeps the addresses of carrier host names. Safe for
// concurrent use.
type resolver struct {
	lookupSRV func(ctx context.Context, service, proto, name string) ([]*net.SRV, error)
	lookupIP  func(ctx context.Context, host string) ([]netip.Addr, error)
	// intN picks the weighted SRV target (math/rand/v2's IntN).
	intN func(n int) int

	mu    sync.RWMutex
	names map[nameKey]resolved
	addrs map[netip.Addr]struct{} // every address of names
}

// newResolver resolves with r (nil: net.DefaultResolver).
func newResolver(r *net.Resolver) *resolver {
	if r == nil {
		r = net.DefaultResolver
	}
	return &resolver{
		lookupSRV: func(ctx context.Context, service, proto, name string) ([]*net.SRV, error) {
			_, recs, err := r.LookupSRV(ctx, service, proto, name)
			return recs, err
		},
		lookupIP: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return r.LookupNetIP(ctx, "ip", host)
		},
		intN:  rand.IntN,
		names: map[nameKey]resolved{},
		addrs: map[netip.Addr]struct{}{},
	}
}

// has reports whether a is an address of a resolved carrier host name.
func (r *resolver) has(a netip.Addr) bool {
	r.mu.RLock()
	_, ok := r.addrs[a]
	r.mu.RUnlock()
	return ok
}

// resolvesTo reports whether host (a carrier's host name) resolved to a,
// through SRV or its own records.
func (r *resolver) resolvesTo(host string, a netip.Addr) bool {
	host = strings.ToLower(host)
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k, res := range r.names {
		if k.host != host {
			continue
		}
		for _, t := range res.targets {
			if slices.Contains(t.addrs, a) {
				return true
			}
		}
	}
	return false
}

// pick returns where a call to t goes: a target of t's name chosen by
// pickSRV (resolving the name now when it never was), prefer telling the
// addresses of a family the node listens on.
func (r *resolver) pick(ctx context.Context, t policy.Target, prefer func(netip.Addr) bool) (netip.AddrPort, error) {
	k := keyOf(t)
	r.mu.RLock()
	res, ok := r.names[k]
	r.mu.RUnlock()
	if !ok {
		var err error
		if res, err = r.resolve(ctx, k, t.Port); err != nil {
			return netip.AddrPort{}, err
		}
		r.mu.Lock()
		r.names[k] = res
		for _, tg := range res.targets {
			for _, a := range tg.addrs {
				r.addrs[a] = struct{}{}
			}
		}
		r.mu.Unlock()
	}
	ap, ok := pickSRV(res.targets, r.intN, prefer)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("carrier host %q: no address", k.host)
	}
	return ap, nil
}

// pickSRV chooses among targets (in priority order) by RFC 2782: the
// lowest priority that has an address, and within it a target at random
// in proportion to its weight (weight 0 rarely). The address is the
// target's first one that prefer accepts (prefer nil: any), else its
// first.
func pickSRV(targets []srvTarget, intN func(int) int, prefer func(netip.Addr) bool) (netip.AddrPort, bool) {
	for i := 0; i < len(targets); {
		j := i
		for j < len(targets) && targets[j].priority == targets[i].priority {
			j++
		}
		group := targets[i:j]
		i = j
		sum, n := 0, 0
		for _, t := range group {
			if len(t.addrs) > 0 {
				sum += int(t.weight)
				n++
			}
		}
		if n == 0 {
			continue
		}
		// RFC 2782: the zero weights first (in random order), then a
		// running sum of the weights against a number in [0, sum].
		var zeros, weighted []*srvTarget
		for k := range group {
			switch t := &group[k]; {
			case len(t.addrs) == 0:
			case t.weight == 0:
				zeros = append(zeros, t)
			default:
				weighted = append(weighted, t)
			}
		}
		var chosen *srvTarget
		if r := intN(sum + 1); r == 0 && len(zeros) > 0 {
			chosen = zeros[intN(len(zeros))]
		} else {
			run := 0
			for _, t := range weighted {
				run += int(t.weight)
				if run >= r {
					chosen = t
					break
				}
			}
		}
		if chosen == nil {
			return netip.AddrPort{}, false
		}
		a := chosen.addrs[0]
		if prefer != nil {
			for _, b := range chosen.addrs {
				if prefer(b) {
					a = b
					break
				}
			}
		}
		return netip.AddrPortFrom(a, chosen.port), true
	}
	return netip.AddrPort{}, false
}

// resolve looks k up: its SRV records when k.srv (their targets' A and
// AAAA records), else, or when there is none, its own A and AAAA records
// with port.
func (r *resolver) resolve(ctx context.Context, k nameKey, port int) (resolved, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	if k.srv {
		service, proto := srvService(k.transport)
		recs, err := r.lookupSRV(ctx, service, proto, k.host)
		if err == nil && len(recs) > 0 {
			return r.resolveSRV(ctx, k, recs)
		}
		// No SRV record (or no answer): the name's own addresses
		// (RFC 3263 4.2).
	}
	as, err := r.lookupAddrs(ctx, k.host)
	if err != nil {
		return resolved{}, fmt.Errorf("resolve carrier host %q: %w", k.host, err)
	}
	return resolved{targets: []srvTarget{{port: uint16(port), addrs: as}}}, nil
}

// resolveSRV resolves the targets of a name's SRV records.
func (r *resolver) resolveSRV(ctx context.Context, k nameKey, recs []*net.SRV) (resolved, error) {
	if len(recs) == 1 && (recs[0].Target == "." || recs[0].Target == "") {
		return resolved{}, fmt.Errorf("resolve carrier host %q: %w", k.host, errNoSIPService)
	}
	recs = slices.Clone(recs)
	slices.SortStableFunc(recs, func(a, b *net.SRV) int { return cmp.Compare(a.Priority, b.Priority) })
	if len(recs) > srvTargetsMax {
		recs = recs[:srvTargetsMax]
	}
	var out resolved
	var firstErr error
	for _, rec := range recs {
		name := strings.TrimSuffix(rec.Target, ".")
		if name == "" || rec.Port == 0 {
			continue
		}
		as, err := r.lookupAddrs(ctx, name)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		out.targets = append(out.targets, srvTarget{priority: rec.Priority, weight: rec.Weight, port: rec.Port, addrs: as})
	}
	for _, t := range out.targets {
		if len(t.addrs) > 0 {
			return out, nil
		}
	}
	if firstErr == nil {
		firstErr = errors.New("no address")
	}
	return resolved{}, fmt.Errorf("resolve carrier host %q: SRV targets: %w", k.host, firstErr)
}

// lookupAddrs is host's addresses, unmapped and without zones.
func (r *resolver) lookupAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	as, err := r.lookupIP(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		out = append(out, a.Unmap().WithZone(""))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no address", host)
	}
	return out, nil
}

// refresh resolves every host name of cfg's carriers again and forgets the
// names no carrier uses any more; a name that fails keeps its last answer.
// It returns the errors, one per failed name.
func (r *resolver) refresh(ctx context.Context, cfg *config.Config) []error {
	if cfg == nil {
		return nil
	}
	type name struct {
		k    nameKey
		port int
	}
	var names []name
	seen := map[nameKey]bool{}
	for _, c := range policy.Of(cfg).Carriers() {
		if c.Err != nil {
			continue
		}
		k := keyOf(c.Target)
		if _, err := netip.ParseAddr(k.host); err == nil || seen[k] {
			continue
		}
		seen[k] = true
		names = append(names, name{k, c.Target.Port})
	}
	next := make(map[nameKey]resolved, len(names))
	var errs []error
	for _, n := range names {
		res, err := r.resolve(ctx, n.k, n.port)
		if err != nil {
			errs = append(errs, err)
			r.mu.RLock()
			res = r.names[n.k]
			r.mu.RUnlock()
		}
		if len(res.targets) > 0 {
			next[n.k] = res
		}
	}
	addrs := map[netip.Addr]struct{}{}
	for _, res := range next {
		for _, t := range res.targets {
			for _, a := range t.addrs {
				addrs[a] = struct{}{}
			}
		}
	}
	r.mu.Lock()
	r.names, r.addrs = next, addrs
	r.mu.Unlock()
	return errs
}

// runResolver resolves the carriers' host names again every resolveEvery
// until ctx ends.
func (s *Set) runResolver(ctx context.Context) {
	defer s.panics.Recover("carriers.resolver", nil)
	t := time.NewTicker(resolveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, err := range s.resolver.refresh(ctx, s.cfg()) {
				s.log.Warn("carrier host name does not resolve; its last addresses are kept", "error", err)
			}
		}
	}
}

// Resolve resolves every host name of the configured carriers now (a
// node resolves them before it takes calls, then Run every 30 s); a name
// that fails keeps its last answer. It returns the errors, one per
// failed name.
func (s *Set) Resolve(ctx context.Context) []error {
	return s.resolver.refresh(ctx, s.cfg())
}

// Addr returns where a request to a carrier at t goes: t's IP and port,
// or where its host name resolves (SRV, else A and AAAA), an address
// prefer accepts first (nil: any).
func (s *Set) Addr(ctx context.Context, t policy.Target, prefer func(netip.Addr) bool) (netip.AddrPort, error) {
	if ip, err := netip.ParseAddr(strings.Trim(t.Host, "[]")); err == nil {
		return netip.AddrPortFrom(ip.Unmap().WithZone(""), uint16(t.Port)), nil
	}
	return s.resolver.pick(ctx, t, prefer)
}

// Known reports whether a is an address a carrier's host name resolved
// to (carriers written as an IP are the configuration's:
// policy.Policy.CarrierIPs). No I/O.
func (s *Set) Known(a netip.Addr) bool { return s.resolver.has(a) }

// ResolvesTo reports whether host, a carrier's host name, resolved to a
// (through SRV or its own records).
func (s *Set) ResolvesTo(host string, a netip.Addr) bool { return s.resolver.resolvesTo(host, a) }

// Name is one carrier host name as last resolved.
type Name struct {
	// Host is the name, lower case; Transport its URI's ("UDP", "TCP",
	// "TLS").
	Host, Transport string
	// Addrs are every address it resolved to (its SRV targets' too).
	Addrs []netip.Addr
}

// Resolved lists the carrier host names as last resolved.
func (s *Set) Resolved() []Name {
	r := s.resolver
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Name, 0, len(r.names))
	for k, res := range r.names {
		n := Name{Host: k.host, Transport: k.transport}
		for _, t := range res.targets {
			n.Addrs = append(n.Addrs, t.addrs...)
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Name) int { return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Transport, b.Transport)) })
	return out
}
