//go:build linux

package e2e

// Redis failures during a SIPp load: killed and restarted, or hung
// (SIGSTOP) and resumed. Every call gets a final answer, the node reports
// the fallback in cpsguard_store_up and logs each switch once.

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

const (
	msgFallback = "redis failed, switching to fallback"
	msgBack     = "redis answers again, back on the shared store"
)

// waitStoreUp polls cpsguard_store_up on every node until it is want, and
// returns how long that took.
func waitStoreUp(t *testing.T, nodes []*node, want float64, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok := true
		var got []string
		for _, n := range nodes {
			m, err := n.metrics()
			if err != nil {
				t.Fatalf("node %s: %v", n.id, err)
			}
			v := sumMetric(m, "cpsguard_store_up")
			got = append(got, fmt.Sprintf("%s=%g", n.id, v))
			if v != want {
				ok = false
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("cpsguard_store_up: %s after %s, want all %g", strings.Join(got, " "), limit, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func TestRedisFailureDuringLoad(t *testing.T) {
	cases := []struct {
		name           string
		fault, recover func(*redistest.Server)
	}{
		{"killed", (*redistest.Server).Kill, (*redistest.Server).Restart},
		{"hung", (*redistest.Server).Pause, (*redistest.Server).Resume},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			car := startCarrier(t, "127.0.0.1")
			var nodes []*node
			for i := 0; i < 2; i++ {
				nodes = append(nodes, startNode(t, nodeConf{id: fmt.Sprintf("fault-%d", i), redis: srv.Addr(),
					onError: "local", logLevel: "debug", // the default, spelled out
					peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 200}},
					carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 1000, maxWait: time.Second}}}, true))
			}
			waitStoreUp(t, nodes, 1, 5*time.Second)

			const rate, seconds = 20, 10
			runs := make([]sippRun, len(nodes))
			var wg sync.WaitGroup
			for i, n := range nodes {
				wg.Go(func() { runs[i] = dial(t, "127.0.0.2", n.sip, rate, rate*seconds, 40*time.Second) })
			}

			time.Sleep(2 * time.Second)
			faultAt := time.Now()
			tc.fault(srv)
			down := waitStoreUp(t, nodes, 0, 5*time.Second)
			downAt := time.Now()
			time.Sleep(2 * time.Second) // calls keep flowing on the fallback
			recoverAt := time.Now()
			tc.recover(srv)
			back := waitStoreUp(t, nodes, 1, 10*time.Second)
			t.Logf("store_up 0 on every node %s after the fault, 1 again %s after recovery", down.Round(time.Millisecond), back.Round(time.Millisecond))
			wg.Wait()

			offered := 0
			for i, r := range runs {
				offered += rate * seconds
				if r.code != 0 || r.n("SuccessfulCall") != rate*seconds {
					t.Errorf("SIPp against node %s: every call must get a final answer (200 or 503) and end:\n%s", nodes[i].id, r.failure())
				}
			}
			out := poolOutcomes(t, nodes, offered)
			if out["rejected_store"] != 0 || int(out["forwarded"]) != offered {
				// Seen with a hung Redis: the store call times out as a socket
				// "i/o timeout" after the call's budget (store.redis.timeout)
				// expired, and store.Failover takes that for a caller that gave
				// up: 503, no fallback, no switch until the heartbeat fails.
				t.Errorf("outcomes %v: want all %d forwarded (limits not binding, on_error local: "+
					"a Redis timeout must move the call to the fallback, not reject it)", out, offered)
			}
			if got := len(car.arrivalTimes()); got != offered {
				t.Errorf("carrier got %d calls, want %d", got, offered)
			}
			for _, n := range nodes {
				// One switch per outage, logged once; no return while Redis is
				// down; the return logged after recovery. On this shared box a
				// Redis answer can take longer than the 50 ms timeout outside
				// the outage too: such extra switches are real timeouts, so
				// they are reported, not failed.
				fb, bk := n.logTimes(msgFallback), n.logTimes(msgBack)
				inOutage, backWhileDown, backAfter := countIn(fb, faultAt, recoverAt), countIn(bk, downAt, recoverAt), countIn(bk, recoverAt, time.Now())
				if inOutage > 1 || backWhileDown != 0 || backAfter < 1 {
					t.Errorf("node %s: %d switches to the fallback logged during the outage (want 1), %d returns logged while Redis was down (want 0), %d after recovery (want >= 1):\n%s",
						n.id, inOutage, backWhileDown, backAfter, n.grep(`"redis `))
				}
				if len(fb) != 1 || len(bk) != 1 {
					t.Logf("node %s switched %d times to the fallback and %d times back in all (timeouts outside the outage on a busy box)", n.id, len(fb), len(bk))
				}
				if t.Failed() {
					t.Logf("node %s store failures and switches:\n%s\n%s", n.id, n.grep("store failed"), n.grep("redis"))
				}
				if e := n.metric("cpsguard_store_errors_total"); e == 0 {
					t.Errorf("node %s: cpsguard_store_errors_total = 0, want the outage counted", n.id)
				}
			}
		})
	}
}

// on_error reject refuses calls with 503 while Redis is down and /readyz
// says not ready; on_error admit admits without limits.
func TestRedisDownPolicies(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		srv := redistest.Start(t)
		car := startCarrier(t, "127.0.0.1")
		n := startNode(t, nodeConf{id: "reject", redis: srv.Addr(), onError: "reject",
			peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 100}},
			carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 1000}}}, true)
		srv.Kill()
		// The first call (or the heartbeat) finds Redis gone.
		r := dial(t, "127.0.0.2", n.sip, 10, 20, 30*time.Second)
		if r.code != 0 {
			t.Fatalf("SIPp: every call must get a final answer (503 while Redis is down):\n%s", r.failure())
		}
		out := n.waitOutcomes(20, 5*time.Second)
		if out["rejected_store"] != 20 {
			t.Errorf("outcomes %v, want rejected_store = 20", out)
		}
		if got := len(car.arrivalTimes()); got != 0 {
			t.Errorf("carrier got %d calls while the store was down under on_error reject, want 0", got)
		}
		if code, body, err := n.get("/readyz"); err != nil || code == 200 {
			t.Errorf("/readyz = %d %q %v while Redis is down under reject, want not ready", code, body, err)
		}
		if up := n.metric("cpsguard_store_up"); up != 0 {
			t.Errorf("cpsguard_store_up = %g, want 0", up)
		}
		srv.Restart()
		if err := n.waitHTTP("/readyz", 10*time.Second); err != nil {
			t.Fatalf("/readyz after Redis is back: %v", err)
		}
		r = dial(t, "127.0.0.2", n.sip, 10, 10, 30*time.Second)
		if r.code != 0 {
			t.Fatalf("SIPp after recovery:\n%s", r.failure())
		}
		n.waitOutcomes(30, 5*time.Second)
		if got := len(car.arrivalTimes()); got != 10 {
			t.Errorf("carrier got %d calls after recovery, want 10", got)
		}
	})
	t.Run("admit", func(t *testing.T) {
		srv := redistest.Start(t)
		car := startCarrier(t, "127.0.0.1")
		const limit = 5
		n := startNode(t, nodeConf{id: "admit", redis: srv.Addr(), onError: "admit",
			peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: limit}},
			carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 1000}}}, true)
		srv.Kill()
		const calls = 6 * limit
		r := dial(t, "127.0.0.2", n.sip, 3*limit, calls, 30*time.Second)
		if r.code != 0 {
			t.Fatalf("SIPp: every call must be answered:\n%s", r.failure())
		}
		out := n.waitOutcomes(calls, 5*time.Second)
		if int(out["forwarded"]) != calls {
			t.Errorf("outcomes %v, want all %d forwarded (fail open)", out, calls)
		}
		if code, _, err := n.get("/readyz"); err != nil || code != 200 {
			t.Errorf("/readyz = %d %v under on_error admit with Redis down, want 200 (calls are served)", code, err)
		}
	})
}

// A Sentinel master failover during a SIPp load on two nodes: every call is
// answered and forwarded (on_error local bridges the failover), the nodes
// go to the fallback and come back on the new master.
func TestSentinelFailoverDuringLoad(t *testing.T) {
	redistest.Require(t, "redis-cli")
	st := redistest.StartSentinel(t, "e2e", 1)
	car := startCarrier(t, "127.0.0.1")
	var nodes []*node
	for i := 0; i < 2; i++ {
		nodes = append(nodes, startNode(t, nodeConf{id: fmt.Sprintf("sentinel-%d", i),
			sentinels: st.SentinelAddrs(), masterName: st.MasterName, onError: "local", logLevel: "debug",
			peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 200}},
			carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 1000, maxWait: time.Second}}}, true))
	}
	waitStoreUp(t, nodes, 1, 5*time.Second)

	const rate, seconds = 10, 15
	runs := make([]sippRun, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { runs[i] = dial(t, "127.0.0.2", n.sip, rate, rate*seconds, 60*time.Second) })
	}
	time.Sleep(2 * time.Second)
	st.Master.Kill()
	down := waitStoreUp(t, nodes, 0, 5*time.Second)
	// Sentinel notices after down-after (1 s), elects and promotes the
	// replica; the probe finds the new master through the sentinels.
	back := waitStoreUp(t, nodes, 1, 20*time.Second)
	t.Logf("master killed: store_up 0 after %s, 1 again %s later (failover)", down.Round(time.Millisecond), back.Round(time.Millisecond))
	wg.Wait()

	offered := 0
	for i, r := range runs {
		offered += rate * seconds
		if r.code != 0 || r.n("SuccessfulCall") != rate*seconds {
			t.Errorf("SIPp against node %s: every call must be answered and end:\n%s", nodes[i].id, r.failure())
		}
	}
	out := poolOutcomes(t, nodes, offered)
	if int(out["forwarded"]) != offered {
		t.Errorf("outcomes %v: want all %d forwarded through the failover (on_error local)", out, offered)
		for _, n := range nodes {
			t.Logf("node %s store failures and switches:\n%s\n%s", n.id, n.grep("store failed"), n.grep("redis"))
		}
	}
	if got := len(car.arrivalTimes()); got != offered {
		t.Errorf("carrier got %d calls, want %d", got, offered)
	}
	for _, n := range nodes {
		if f, b := n.logCount(msgFallback), n.logCount(msgBack); f < 1 || b < 1 {
			t.Errorf("node %s logged %q %d times and %q %d times, want the switch and the return", n.id, msgFallback, f, msgBack, b)
		} else if f != 1 || b != 1 {
			t.Logf("node %s switched %d times to the fallback and %d times back during the failover", n.id, f, b)
		}
	}
}
