//go:build linux

package e2e

// A carrier taken out of service by hand, for the pool: through one
// node's API, every node skips it, and the other node's API puts it back.

import (
	"context"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
	"github.com/cpsguard/cpsguard/internal/redistest"
)

// waitInService polls n's status until carrier's in_service is want
// (failing the test after limit).
func waitInService(t *testing.T, n *node, carrier string, want bool, limit time.Duration) httpapi.Entry {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st, err := httpapi.FetchStatus(context.Background(), n.http)
		if err == nil {
			for _, e := range st.Carriers {
				if e.Name == carrier && e.InService != nil && *e.InService == want {
					return e
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: carrier %s in_service not %v after %v (%v)", n.id, carrier, want, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPoolCarrierOutOfService(t *testing.T) {
	srv := redistest.Start(t)
	first, second := startCarrier(t, "127.0.0.1"), startCarrier(t, "127.0.0.1")
	const token = "e2e-token"
	var nodes []*node
	for _, id := range []string{"svc-a", "svc-b"} {
		nodes = append(nodes, startNode(t, nodeConf{id: id, redis: srv.Addr(), redisTimeout: 200 * time.Millisecond, token: token,
			peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000}},
			carriers: []carrierConf{{name: "first", addr: first.addr, cps: 1000}, {name: "second", addr: second.addr, cps: 1000}}}, true))
	}
	a, b := nodes[0], nodes[1]
	peer := startRawPeer(t, "127.0.0.2")
	ctx := context.Background()

	if ok, _ := burst(t, peer, b, "before", 3); ok != 3 || first.count("INVITE") != 3 || second.count("INVITE") != 0 {
		t.Fatalf("before: %d of 3 answered; INVITEs first %d, second %d; want 3, 3, 0", ok, first.count("INVITE"), second.count("INVITE"))
	}
	if _, err := httpapi.SetService(ctx, a.http, "", "first", true, ""); err == nil {
		t.Fatal("PUT without the token succeeded")
	}
	c, err := httpapi.SetService(ctx, a.http, token, "first", true, "maintenance")
	if err != nil || c.Status != "out_of_service" {
		t.Fatalf("PUT on node A: %+v, %v", c, err)
	}
	e := waitInService(t, b, "first", false, 2*time.Second)
	if e.OutOfService == nil || e.OutOfService.Reason != "maintenance" || e.Up == nil || !*e.Up {
		t.Errorf("node B status of the carrier: out_of_service %+v, up %v; want the mark, still up", e.OutOfService, e.Up)
	}
	if ok, _ := burst(t, peer, b, "out", 3); ok != 3 || first.count("INVITE") != 3 || second.count("INVITE") != 3 {
		t.Errorf("out of service: %d of 3 answered through node B; INVITEs first %d, second %d; want 3, 3, 3", ok, first.count("INVITE"), second.count("INVITE"))
	}
	if got := b.metric("cpsguard_reroutes_total", `carrier="first"`, `reason="out_of_service"`); got != 3 {
		t.Errorf("node B reroutes_total{first,out_of_service} = %v, want 3", got)
	}
	if got := b.metric("cpsguard_carrier_in_service", `carrier="first"`); got != 0 {
		t.Errorf("node B carrier_in_service{first} = %v, want 0", got)
	}

	// Back in service through node B: node A sends to it again.
	if c, err := httpapi.SetService(ctx, b.http, token, "first", false, ""); err != nil || c.Previous == nil || c.Previous.Reason != "maintenance" {
		t.Fatalf("DELETE on node B: %+v, %v", c, err)
	}
	waitInService(t, a, "first", true, 2*time.Second)
	if ok, _ := burst(t, peer, a, "back", 2); ok != 2 || first.count("INVITE") != 5 {
		t.Errorf("back in service: %d of 2 answered through node A; INVITEs first %d, want 5", ok, first.count("INVITE"))
	}
	if n := a.logCount("carrier taken out of service"); n != 1 {
		t.Errorf("node A logged %d audit lines for the PUT, want 1", n)
	}
}
