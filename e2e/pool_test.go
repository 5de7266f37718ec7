//go:build linux

package e2e

// One limit for the pool: three nodes on one private redis-server, one peer
// (one source address) dialing all of them at 1.5 × its limit in total;
// measured at the carrier by kernel receive time.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// dialAll runs one SIPp caller per node concurrently, each at rate for
// calls, from source ip; it fails the test unless every call ends normally.
func dialAll(t *testing.T, nodes []*node, ip string, rate float64, calls int, limit time.Duration) {
	t.Helper()
	runs := make([]sippRun, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { runs[i] = dial(t, ip, n.sip, rate, calls, limit) })
	}
	wg.Wait()
	for i, r := range runs {
		if r.code != 0 {
			t.Errorf("SIPp against node %s: every call must end with 200 or 503:\n%s", nodes[i].id, r.failure())
		} else {
			t.Logf("SIPp against node %s: %s", nodes[i].id, r.summary())
		}
	}
}

// startPool starts n nodes on one Redis with the given peers and carriers.
func startPool(t *testing.T, redisAddr string, n int, peers []peerConf, carriers []carrierConf) []*node {
	t.Helper()
	var nodes []*node
	for i := 0; i < n; i++ {
		nodes = append(nodes, startNode(t, nodeConf{id: fmt.Sprintf("pool-%d", i), redis: redisAddr,
			redisTimeout: 200 * time.Millisecond, peers: peers, carriers: carriers}, true))
	}
	return nodes
}

// poolOutcomes sums call outcomes over the nodes, once all want are counted.
func poolOutcomes(t *testing.T, nodes []*node, want int) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		sum := map[string]float64{}
		total := 0.0
		for _, n := range nodes {
			for k, v := range n.outcomes() {
				sum[k] += v
				total += v
			}
		}
		if int(total) >= want || time.Now().After(deadline) {
			return sum
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPoolPeerLimitHoldsAcrossNodes(t *testing.T) {
	srv := redistest.Start(t)
	car := startCarrier(t, "127.0.0.1")
	const limit, seconds, nodesN = 20, 5, 3
	nodes := startPool(t, srv.Addr(), nodesN,
		[]peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: limit}},
		[]carrierConf{{name: "carrier", addr: car.addr, cps: 1000, maxWait: time.Second}})

	// 1.5 × the limit in total, split over the nodes.
	rate := 1.5 * limit / nodesN
	calls := int(rate * seconds)
	dialAll(t, nodes, "127.0.0.2", rate, calls, 40*time.Second)

	offered := calls * nodesN
	out := poolOutcomes(t, nodes, offered)
	arr := car.arrivalTimes()
	if got := siptest.MaxInWindow(arr, time.Second); got > limit {
		t.Errorf("max INVITEs in a rolling second at the carrier = %d, want <= %d (one limit for the pool); gaps: %s",
			got, limit, gaps(arr))
	}
	// 95 % is the goal; this box is shared and SIPp's rate drifts, so the
	// floor is 85 % (the upper bound above never gets a tolerance).
	if floor := limit * seconds * 85 / 100; len(arr) < floor {
		t.Errorf("carrier got %d calls, want >= %d (85%% of %d × %d s)", len(arr), floor, limit, seconds)
	}
	t.Logf("carrier got %d of %d offered (%d%% of limit × seconds), at most %d in a rolling second; outcomes %v",
		len(arr), offered, len(arr)*100/(limit*seconds), siptest.MaxInWindow(arr, time.Second), out)
	if int(out["forwarded"]) != len(arr) || int(out["forwarded"]+out["rejected_cps"]) != offered {
		t.Errorf("outcomes %v: want forwarded = carrier (%d) and forwarded + rejected_cps = %d", out, len(arr), offered)
	}
	for _, n := range nodes {
		if f := n.outcomes()["forwarded"]; f == 0 {
			t.Errorf("node %s forwarded nothing: the load was not shared", n.id)
		}
	}
}

func TestPoolCarrierPacedByAllNodes(t *testing.T) {
	srv := redistest.Start(t)
	car := startCarrier(t, "127.0.0.1")
	const carrierCPS, seconds, nodesN = 10, 5, 3
	nodes := startPool(t, srv.Addr(), nodesN,
		[]peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000}},
		[]carrierConf{{name: "carrier", addr: car.addr, cps: carrierCPS, maxWait: time.Second}})

	rate := 1.5 * carrierCPS / nodesN
	calls := int(rate * seconds)
	dialAll(t, nodes, "127.0.0.2", rate, calls, 40*time.Second)

	offered := calls * nodesN
	out := poolOutcomes(t, nodes, offered)
	arr := car.arrivalTimes()
	if got := siptest.MaxInWindow(arr, time.Second); got > carrierCPS {
		t.Errorf("max INVITEs in a rolling second at the carrier = %d, want <= %d (paced by the pool); gaps: %s",
			got, carrierCPS, gaps(arr))
	}
	if floor := carrierCPS * seconds * 85 / 100; len(arr) < floor {
		t.Errorf("carrier got %d calls, want >= %d (85%% of %d × %d s)", len(arr), floor, carrierCPS, seconds)
	}
	t.Logf("carrier got %d of %d offered, at most %d in a rolling second; outcomes %v",
		len(arr), offered, siptest.MaxInWindow(arr, time.Second), out)
	if int(out["forwarded"]) != len(arr) || int(out["forwarded"]+out["rejected_queue"]) != offered {
		t.Errorf("outcomes %v: want forwarded = carrier (%d) and forwarded + rejected_queue = %d", out, len(arr), offered)
	}
}

// A pool on a Redis 10 ms of round trip away (another zone) at the default
// 50 ms timeout holds the peer's limit on Redis, and stays there: the
// usual production case, end to end. (What broke it further away, h60,
// is pinned by store's tests: a new connection's handshake, the probe's
// round trips, the heartbeat's bound. At this load and distance the
// connections the pool starts with suffice, so this one guards the whole,
// not those.)
func TestPoolOnADistantRedis(t *testing.T) {
	srv := redistest.Start(t)
	addr := redistest.Delayed(t, srv.Addr(), 5*time.Millisecond)
	car := startCarrier(t, "127.0.0.1")
	const limit, seconds, nodesN = 20, 5, 2
	var nodes []*node
	for i := range nodesN {
		nodes = append(nodes, startNode(t, nodeConf{id: fmt.Sprintf("far-%d", i), redis: addr,
			redisTimeout: 50 * time.Millisecond,
			peers:        []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: limit}},
			carriers:     []carrierConf{{name: "carrier", addr: car.addr, cps: 1000, maxWait: time.Second}}}, true))
	}
	rate := 1.5 * limit / nodesN
	calls := int(rate * seconds)
	dialAll(t, nodes, "127.0.0.2", rate, calls, 40*time.Second)
	out := poolOutcomes(t, nodes, calls*nodesN)
	arr := car.arrivalTimes()
	if got := siptest.MaxInWindow(arr, time.Second); got > limit {
		t.Errorf("max INVITEs in a rolling second at the carrier = %d, want <= %d (one limit for the pool); gaps: %s",
			got, limit, gaps(arr))
	}
	t.Logf("carrier got %d of %d offered, at most %d in a rolling second; outcomes %v",
		len(arr), calls*nodesN, siptest.MaxInWindow(arr, time.Second), out)
	for _, n := range nodes {
		if up := n.metric("cpsguard_store_up"); up != 1 {
			t.Errorf("node %s: cpsguard_store_up = %v, want 1 (on Redis)", n.id, up)
		}
		if c := n.logCount("switching to fallback"); c != 0 {
			t.Errorf("node %s switched to its fallback %d times with Redis 10 ms away:\n%s", n.id, c, n.logTail())
		}
	}
}

// msgCareful is the log line of a node's careful span (store/careful.go).
const msgCareful = "redis may not count the pool's last calls: this node admits within its share as well for one window of each limit"

// A Redis that forgets the pool's last window under load, while two nodes
// are offered 1.5 × a peer's limit or 1.5 × a carrier's cps: restarted
// (killed and started again empty: the nodes fall back and come back), or
// wiped at once without a restart (FLUSHALL and SCRIPT FLUSH back to back:
// what a restart the nodes do not notice, or a failover to a replica that
// never had the scripts, leaves). Redis alone let the pool through up to
// twice its limits in the second after (h61: 31–37 at 30); the nodes now
// keep to their shares for a window (store's careful spans).
//
// The bound is 1.25 × the limit, not the limit: the shares are exact only
// when the nodes had made equal parts of the last window's calls, and a
// carrier's schedule is whole again only once every node has put its
// waiting calls' slots back (measured: 20–21 at a peer's 20 and at a
// carrier's 20). The code before gave 27–31 and 38–40 in these runs.
func TestPoolHoldsThroughARedisRestartedEmpty(t *testing.T) {
	type limitCase struct {
		name      string
		peer, car float64
	}
	type event struct {
		name string
		run  func(*redistest.Server)
	}
	var cases []struct {
		limitCase
		event
	}
	for _, l := range []limitCase{{"peer limit", 20, 1000}, {"carrier cps", 1000, 20}} {
		for _, e := range []event{
			{"restarted", func(s *redistest.Server) { s.Kill(); s.Restart() }},
			{"forgot", func(s *redistest.Server) { s.Forget(t) }},
		} {
			cases = append(cases, struct {
				limitCase
				event
			}{l, e})
		}
	}
	for _, tc := range cases {
		t.Run(tc.limitCase.name+" "+tc.event.name, func(t *testing.T) {
			srv := redistest.Start(t)
			car := startCarrier(t, "127.0.0.1")
			const seconds, nodesN = 6, 2
			limit := int(min(tc.peer, tc.car))
			nodes := startPool(t, srv.Addr(), nodesN,
				[]peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: tc.peer}},
				[]carrierConf{{name: "carrier", addr: car.addr, cps: tc.car, maxWait: time.Second}})
			rate := 1.5 * float64(limit) / nodesN
			calls := int(rate * seconds)
			var wg sync.WaitGroup
			wg.Go(func() {
				time.Sleep(seconds * time.Second / 2)
				tc.run(srv)
			})
			dialAll(t, nodes, "127.0.0.2", rate, calls, 40*time.Second)
			wg.Wait()
			out := poolOutcomes(t, nodes, calls*nodesN)
			arr := car.arrivalTimes()
			got := siptest.MaxInWindow(arr, time.Second)
			t.Logf("carrier got %d of %d offered, at most %d in a rolling second (limit %d); outcomes %v",
				len(arr), calls*nodesN, got, limit, out)
			if bound := limit * 5 / 4; got > bound {
				t.Errorf("max INVITEs in a rolling second at the carrier = %d, want <= %d (1.25 × %d); gaps: %s", got, bound, limit, gaps(arr))
			}
			for _, n := range nodes {
				// Every node learns it: each runs its own variant of the
				// scripts (lua.SetVariant), so each meets NOSCRIPT.
				if c := n.logCount(msgCareful); c == 0 {
					t.Errorf("node %s did not log its careful span:\n%s", n.id, n.logTail())
				}
			}
		})
	}
}
