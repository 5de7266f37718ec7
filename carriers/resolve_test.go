package carriers

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestPickSRVWeights: within the lowest priority, targets are chosen in
// proportion to their weights (RFC 2782); a zero weight is chosen rarely,
// a higher priority only when no lower one has an address.
func TestPickSRVWeights(t *testing.T) {
	a, b, c, z := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3"), netip.MustParseAddr("192.0.2.4")
	targets := []srvTarget{
		{priority: 10, weight: 70, port: 5060, addrs: []netip.Addr{a}},
		{priority: 10, weight: 30, port: 5060, addrs: []netip.Addr{b}},
		{priority: 10, weight: 0, port: 5060, addrs: []netip.Addr{z}},
		{priority: 20, weight: 100, port: 5060, addrs: []netip.Addr{c}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[netip.Addr]int{}
	const n = 10000
	for range n {
		ap, ok := pickSRV(targets, rng.IntN, nil)
		if !ok {
			t.Fatal("no target picked")
		}
		counts[ap.Addr()]++
	}
	if counts[c] != 0 {
		t.Errorf("priority 20 picked %d times while priority 10 has addresses", counts[c])
	}
	if got := float64(counts[a]) / n; got < 0.65 || got > 0.75 {
		t.Errorf("weight 70 of 100 picked %.3f of the time", got)
	}
	if got := float64(counts[b]) / n; got < 0.25 || got > 0.35 {
		t.Errorf("weight 30 of 100 picked %.3f of the time", got)
	}
	if got := float64(counts[z]) / n; got > 0.02 {
		t.Errorf("weight 0 picked %.3f of the time, want rarely", got)
	}
	// No address at priority 10: priority 20.
	for i := range 3 {
		targets[i].addrs = nil
	}
	if ap, ok := pickSRV(targets, rng.IntN, nil); !ok || ap.Addr() != c {
		t.Errorf("with priority 10 empty: got %v, %v; want %v", ap, ok, c)
	}
}
