//go:build linux

package e2e

// One limit, live, for the whole pool: an override set on one node is
// applied by the others within a second, and ends for all of them on
// DELETE or at its TTL.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
	"github.com/cpsguard/cpsguard/internal/redistest"
)

// burst sends n INVITEs from peer to node at once and returns how many got
// 200 and how many 503 (the 200s are ACKed).
func burst(t *testing.T, peer *rawPeer, n *node, tag string, calls int) (ok, refused int) {
	t.Helper()
	ids := make([]string, calls)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", tag, i)
		peer.send(n.sip, peer.invite(n.sip, ids[i]))
	}
	for _, id := range ids {
		m := peer.final(id, "INVITE", 5*time.Second)
		switch m.code {
		case 200:
			ok++
			peer.send(n.sip, ackFor2xx(peer, m))
		case 503:
			refused++
		default:
			t.Errorf("call %s: final %d, want 200 or 503", id, m.code)
		}
	}
	return ok, refused
}

// waitLimit polls n's cpsguard_limit_cps of the peer until it is want and
// returns how long that took (failing the test after limit).
func waitLimit(t *testing.T, n *node, peer string, want float64, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := n.metric("cpsguard_limit_cps", `scope="peer"`, `name="`+peer+`"`)
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("node %s: cpsguard_limit_cps{peer %s} = %v after %v, want %v", n.id, peer, got, limit, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPoolLimitOverride(t *testing.T) {
	srv := redistest.Start(t)
	car := startCarrier(t, "127.0.0.1")
	const token = "e2e-token"
	var nodes []*node
	for _, id := range []string{"ovr-a", "ovr-b"} {
		nodes = append(nodes, startNode(t, nodeConf{id: id, redis: srv.Addr(), redisTimeout: 200 * time.Millisecond, token: token,
			peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000}},
			carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 1000}}}, true))
	}
	a, b := nodes[0], nodes[1]
	peer := startRawPeer(t, "127.0.0.2")
	ctx := context.Background()

	if ok, _ := burst(t, peer, b, "before", 4); ok != 4 {
		t.Fatalf("before any override node B admitted %d of 4 calls, want 4", ok)
	}
	time.Sleep(1200 * time.Millisecond) // those calls leave the 1 s window

	// PUT on A: B applies it within a second.
	if _, err := httpapi.SetLimit(ctx, a.http, "", "peer", "dialer", httpapi.LimitRequest{CPS: 1, TTL: "1m"}); err == nil {
		t.Fatal("PUT without the token succeeded")
	}
	if _, err := httpapi.SetLimit(ctx, a.http, token, "peer", "dialer", httpapi.LimitRequest{CPS: 1, TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	t.Logf("node B applied the override after %v", waitLimit(t, b, "dialer", 1, time.Second))
	if ok, refused := burst(t, peer, b, "over", 4); ok != 1 || refused != 3 {
		t.Errorf("with a 1 cps override set on A, node B admitted %d and refused %d of 4 calls, want 1 and 3", ok, refused)
	}
	st, err := httpapi.FetchStatus(ctx, b.http)
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Peers[0]; p.LimitCPS != 1 || p.Override == nil || p.Override.ConfiguredCPS != 1000 {
		t.Errorf("node B status of the peer = %+v, want limit_cps 1 with the override", p)
	}
	if n := a.logCount("limit override set"); n != 1 {
		t.Errorf("node A logged %d audit lines for the PUT, want 1", n)
	}

	// DELETE on A: B is back at the configured cps within a second.
	if _, err := httpapi.RemoveLimit(ctx, a.http, token, "peer", "dialer"); err != nil {
		t.Fatal(err)
	}
	waitLimit(t, b, "dialer", 1000, time.Second)
	time.Sleep(1200 * time.Millisecond)
	if ok, _ := burst(t, peer, b, "deleted", 4); ok != 4 {
		t.Errorf("after DELETE node B admitted %d of 4 calls, want 4", ok)
	}

	// TTL: the override ends by itself on every node.
	time.Sleep(1200 * time.Millisecond)
	// Before the PUT: the override is written after this, so it may not
	// end before set + 2 s. Taken after the PUT returned, the time the
	// answer took on its way back (a loaded machine) was counted against
	// the TTL, and an override that ended exactly on time failed.
	set := time.Now()
	if _, err := httpapi.SetLimit(ctx, a.http, token, "peer", "dialer", httpapi.LimitRequest{CPS: 1, TTL: "2s"}); err != nil {
		t.Fatal(err)
	}
	waitLimit(t, b, "dialer", 1, time.Second)
	if ok, refused := burst(t, peer, b, "ttl", 3); ok != 1 || refused != 2 {
		t.Errorf("under the 2 s override node B admitted %d and refused %d of 3, want 1 and 2", ok, refused)
	}
	waitLimit(t, b, "dialer", 1000, 3*time.Second)
	if over := time.Since(set); over < 2*time.Second {
		t.Errorf("override ended after %v, before its 2 s TTL", over)
	}
	waitLimit(t, a, "dialer", 1000, time.Second)
	time.Sleep(1200 * time.Millisecond)
	if ok, _ := burst(t, peer, b, "expired", 4); ok != 4 {
		t.Errorf("after the TTL node B admitted %d of 4 calls, want 4", ok)
	}
	if l, err := httpapi.FetchLimits(ctx, b.http); err != nil || len(l.Overrides) != 0 {
		t.Errorf("GET limits on B after the TTL = %+v, %v; want none", l, err)
	}
}
