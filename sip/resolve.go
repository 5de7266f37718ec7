package sip

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/config"
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
// A name that does not resolve leaves its carrier unusable (the call moves
// to the next carrier of its route) until a later refresh succeeds; the
// last good answer is kept while a refresh fails.

// resolveEvery is how often carrier host names are resolved again.
const resolveEvery = 30 * time.Second

// resolveTimeout bounds one resolution.
const resolveTimeout = 2 * time.Second

// carrierResolver keeps the addresses of carrier host names. Safe for
// concurrent use.
type carrierResolver struct {
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)

	mu    sync.RWMutex
	hosts map[string][]netip.Addr // lower-case host name → addresses
	addrs map[netip.Addr]struct{} // every address of hosts
}

func newCarrierResolver() *carrierResolver {
	return &carrierResolver{
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		hosts: map[string][]netip.Addr{},
		addrs: map[netip.Addr]struct{}{},
	}
}

// has reports whether a is an address of a resolved carrier host name.
func (r *carrierResolver) has(a netip.Addr) bool {
	r.mu.RLock()
	_, ok := r.addrs[a]
	r.mu.RUnlock()
	return ok
}

// resolvesTo reports whether host (a carrier's host name) resolved to a.
func (r *carrierResolver) resolvesTo(host string, a netip.Addr) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Contains(r.hosts[strings.ToLower(host)], a)
}

// addr returns the first address of host, resolving it now when it was
// never resolved.
func (r *carrierResolver) addr(ctx context.Context, host string) (netip.Addr, error) {
	key := strings.ToLower(host)
	r.mu.RLock()
	as := r.hosts[key]
	r.mu.RUnlock()
	if len(as) > 0 {
		return as[0], nil
	}
	as, err := r.resolve(ctx, key)
	if err != nil {
		return netip.Addr{}, err
	}
	r.mu.Lock()
	r.hosts[key] = as
	for _, a := range as {
		r.addrs[a] = struct{}{}
	}
	r.mu.Unlock()
	return as[0], nil
}

func (r *carrierResolver) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	as, err := r.lookup(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve carrier host %q: %w", host, err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		out = append(out, a.Unmap().WithZone(""))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("resolve carrier host %q: no address", host)
	}
	return out, nil
}

// refresh resolves every host name of cfg's carriers again and forgets the
// names no carrier uses any more; a name that fails keeps its last answer.
// It returns the errors, one per failed name.
func (r *carrierResolver) refresh(ctx context.Context, cfg *config.Config) []error {
	if cfg == nil {
		return nil
	}
	var names []string
	seen := map[string]bool{}
	for _, c := range carrierTargets(cfg) {
		if c.Err != nil {
			continue
		}
		h := strings.ToLower(strings.Trim(c.Target.Host, "[]"))
		if _, err := netip.ParseAddr(h); err == nil || seen[h] {
			continue
		}
		seen[h] = true
		names = append(names, h)
	}
	next := make(map[string][]netip.Addr, len(names))
	var errs []error
	for _, h := range names {
		as, err := r.resolve(ctx, h)
		if err != nil {
			errs = append(errs, err)
			r.mu.RLock()
			as = r.hosts[h]
			r.mu.RUnlock()
		}
		if len(as) > 0 {
			next[h] = as
		}
	}
	addrs := map[netip.Addr]struct{}{}
	for _, as := range next {
		for _, a := range as {
			addrs[a] = struct{}{}
		}
	}
	r.mu.Lock()
	r.hosts, r.addrs = next, addrs
	r.mu.Unlock()
	return errs
}

// run refreshes the names every resolveEvery until ctx ends.
func (p *Proxy) runResolver(ctx context.Context) {
	defer p.panics.Recover("sip.resolver", nil)
	t := time.NewTicker(resolveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, err := range p.resolver.refresh(ctx, p.cfg()) {
				p.log.Warn("carrier host name does not resolve; its last addresses are kept", "error", err)
			}
		}
	}
}

// isCarrierAddr reports whether a is the address of one of cfg's carriers
// (an IP in its URI, or an address its host name resolved to).
func (p *Proxy) isCarrierAddr(cfg *config.Config, a netip.Addr) bool {
	if _, ok := carrierIPs(cfg)[a]; ok {
		return true
	}
	return p.resolver.has(a)
}

// carrierAddrPort returns the address a request to carrier target t is sent
// to: t's IP, or the first address of its host name.
func (p *Proxy) carrierAddrPort(t target) (netip.AddrPort, error) {
	host := strings.Trim(t.host, "[]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(ip.Unmap().WithZone(""), uint16(t.port)), nil
	}
	a, err := p.resolver.addr(p.base, host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, uint16(t.port)), nil
}
