package sip

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/policy"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// Carriers' host names are resolved by the carriers.Set (SRV, A, AAAA;
// at start and every 30 s). The proxy asks it where each request goes,
// preferring an address of a family it has a listener of the request's
// transport for, and warns of names it cannot reach from its own family.

// gapsEvery is how often the proxy checks the carriers' resolved names
// against its listeners' families (warnFamilyGaps).
const gapsEvery = 30 * time.Second

// runFamilyGaps logs the carrier host names the node has no listener of
// their family for, when they change, every gapsEvery until ctx ends.
func (p *Proxy) runFamilyGaps(ctx context.Context) {
	defer p.panics.Recover("sip.family_gaps", nil)
	t := time.NewTicker(gapsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.warnFamilyGaps()
		}
	}
}

// familyGaps lists the resolved carrier host names none of whose
// addresses is of a family the node has a listener of the name's
// transport for (what `cpsguard check` says of carriers written as an
// address), sorted.
func (p *Proxy) familyGaps() []string {
	var gaps []string
	for _, name := range p.carriers.Resolved() {
		n := msgpart.LowerTransport(name.Transport)
		fams := map[bool]bool{}
		ok := false
		for _, a := range name.Addrs {
			v6 := !a.Is4()
			fams[v6] = true
			if _, has := p.locals[localKey{network: n, v6: v6}]; has {
				ok = true
			}
		}
		if ok || len(fams) == 0 {
			continue
		}
		fam := "IPv4"
		if fams[true] {
			fam = "IPv6"
		}
		gaps = append(gaps, fmt.Sprintf("%s resolves to %s addresses only, and sip.listen has no %s:// listener on %s", name.Host, fam, n, fam))
	}
	slices.Sort(gaps)
	return gaps
}

// warnFamilyGaps logs familyGaps when they changed since the last call
// (at start, then every gapsEvery). Called from one goroutine at a time:
// Serve before the gaps loop starts, then that loop.
func (p *Proxy) warnFamilyGaps() {
	gaps := p.familyGaps()
	if slices.Equal(gaps, p.lastGaps) {
		return
	}
	p.lastGaps = gaps
	for _, g := range gaps {
		p.log.Warn("carrier host name has no address the node can send from: Record-Route names the node by another family's address", "carrier_host", g)
	}
}

// isCarrierAddr reports whether a is the address of one of cfg's carriers
// (an IP in its URI, or an address its host name resolved to).
func (p *Proxy) isCarrierAddr(cfg *config.Config, a netip.Addr) bool {
	if _, ok := carrierIPs(cfg)[a]; ok {
		return true
	}
	return p.carriers.Known(a)
}

// carrierAddrPort returns the address a request to carrier target t is sent
// to: t's IP and port, or where its host name resolves (SRV, else A and
// AAAA; an address of a family the node listens on for t's transport
// first).
func (p *Proxy) carrierAddrPort(t target) (netip.AddrPort, error) {
	n := msgpart.LowerTransport(t.transport)
	return p.carriers.Addr(p.base, policy.Target{Host: t.host, Port: t.port, PortGiven: t.portGiven, Transport: t.transport, HostPort: t.hp},
		func(a netip.Addr) bool {
			_, ok := p.locals[localKey{network: n, v6: !a.Is4()}]
			return ok
		})
}
