package config

import (
	"net/netip"
	"slices"
)

// index holds lookup tables built once when a Config is loaded, so the
// per-call lookups are map hits instead of scans. A Config built by hand (or
// copied and then given new slices) has no valid index and falls back to
// linear scans: index() checks that the slices are the ones it was built
// from.
type index struct {
	peers     *Peer // &Peers[0] at build time, to detect copied-and-edited Configs
	nPeers    int
	peerNames map[string]int
	customers map[string]int
	custBase  *Customer
	carriers  map[string]int
	carrBase  *Carrier
	// v4 and v6 hold, per prefix length (longest first), the masked
	// prefixes of that length and the index of the peer owning each.
	v4, v6 []prefixTable
}

type prefixTable struct {
	bits  int
	peers map[netip.Prefix]int
}

func first[T any](s []T) *T {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// buildIndex fills c.idx. It must run on a validated Config (unique names,
// unique prefixes) before the Config is shared.
func (c *Config) buildIndex() {
	x := &index{
		peers:     first(c.Peers),
		nPeers:    len(c.Peers),
		peerNames: make(map[string]int, len(c.Peers)),
		customers: make(map[string]int, len(c.Customers)),
		custBase:  first(c.Customers),
		carriers:  make(map[string]int, len(c.Carriers)),
		carrBase:  first(c.Carriers),
	}
	for i, cu := range c.Customers {
		x.customers[cu.Name] = i
	}
	for i, p := range c.Peers {
		x.peerNames[p.Name] = i
	}
	for i, ca := range c.Carriers {
		x.carriers[ca.Name] = i
	}
	v4 := map[int]map[netip.Prefix]int{}
	v6 := map[int]map[netip.Prefix]int{}
	for i, p := range c.Peers {
		for _, pfx := range p.Sources {
			pfx = pfx.Masked()
			m := v6
			if pfx.Addr().Is4() {
				m = v4
			}
			if m[pfx.Bits()] == nil {
				m[pfx.Bits()] = map[netip.Prefix]int{}
			}
			m[pfx.Bits()][pfx] = i
		}
	}
	x.v4, x.v6 = tables(v4), tables(v6)
	c.idx = x
}

func tables(m map[int]map[netip.Prefix]int) []prefixTable {
	out := make([]prefixTable, 0, len(m))
	for bits, peers := range m {
		out = append(out, prefixTable{bits: bits, peers: peers})
	}
	slices.SortFunc(out, func(a, b prefixTable) int { return b.bits - a.bits })
	return out
}

// index returns c.idx if it still describes c's slices, else nil.
func (c *Config) index() *index {
	x := c.idx
	if x == nil || x.peers != first(c.Peers) || x.nPeers != len(c.Peers) ||
		x.custBase != first(c.Customers) || len(x.customers) != len(c.Customers) ||
		x.carrBase != first(c.Carriers) || len(x.carriers) != len(c.Carriers) {
		return nil
	}
	return x
}

func (x *index) peerByAddr(c *Config, addr netip.Addr) *Peer {
	ts := x.v6
	if addr.Is4() {
		ts = x.v4
	}
	for _, t := range ts {
		pfx, err := addr.Prefix(t.bits)
		if err != nil {
			continue
		}
		if i, ok := t.peers[pfx]; ok {
			return &c.Peers[i]
		}
	}
	return nil
}
