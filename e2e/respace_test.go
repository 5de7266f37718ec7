//go:build linux

package e2e

// A carrier's cps lowered while calls wait for its slots, by a reload of
// the configuration (SIGHUP) or by a live override (PUT
// /api/v1/limits/carrier/<name>): the calls already queued hold slots
// spaced for the old rate, and must take one again at the new rate, so
// that once the change is in force on every node the carrier never sees
// the old rate again (before, it did for up to max_wait), nor more than
// the old rate meanwhile. Measured at the carrier by kernel receive time,
// in every rolling second that starts at or after the change (the second
// that straddles it is left out: calls sent just before it were paced for
// the old rate); with the queue full and half full on the in-process
// store, on one node on Redis and on a pool of two nodes sharing one
// redis-server that reload one after the other.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// The scenario of every test here: a carrier of respaceHigh cps and a
// max_wait of respaceMaxWait, offered respaceOffered calls a second in all
// for respaceLoad, lowered to respaceLow cps once its queue is full.
const (
	respaceHigh, respaceLow = 10.0, 4.0
	respaceMaxWait          = 2 * time.Second
	respaceOffered          = 20.0
	respaceLoad             = 6 * time.Second
)

// respaceConf is a node of the scenario: one peer with room to spare, one
// carrier of cps (max_wait respaceMaxWait) at carAddr.
func respaceConf(id, redisAddr, carAddr, token string, cps float64) nodeConf {
	return nodeConf{id: id, redis: redisAddr, redisTimeout: 200 * time.Millisecond, token: token,
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000}},
		carriers: []carrierConf{{name: "carrier", addr: carAddr, cps: cps, maxWait: respaceMaxWait}}}
}

// portOf is the port of addr: host:port, or a URL ending in one.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// reconfigure writes c as n's configuration (on the same ports), renamed
// into place so that the node's file watch never reads half of it, sends
// SIGHUP, and returns the time of the node's first "config reloaded"
// record after the write: the node logs it once the new configuration is
// in force.
func (n *node) reconfigure(t *testing.T, c nodeConf) time.Time {
	t.Helper()
	before := len(n.logTimes("config reloaded"))
	tmp := filepath.Join(filepath.Dir(n.cfgPath), ".next-"+filepath.Base(n.cfgPath))
	if err := os.WriteFile(tmp, []byte(c.yaml(portOf(t, n.sip), portOf(t, n.http), portOf(t, n.sipTLS))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, n.cfgPath); err != nil {
		t.Fatal(err)
	}
	n.signal(syscall.SIGHUP)
	var at []time.Time
	if !wait(5*time.Second, func() bool { at = n.logTimes("config reloaded"); return len(at) > before }) {
		t.Fatalf("node %s: no \"config reloaded\" within 5 s of SIGHUP\n%s", n.id, n.logTail())
	}
	return at[before]
}

// waitFull waits until one of the nodes refused the carrier a call for
// want of a slot within max_wait: the carrier's queue is full.
func waitFull(t *testing.T, nodes []*node, limit time.Duration) {
	t.Helper()
	if !wait(limit, func() bool {
		for _, n := range nodes {
			if n.metric("cpsguard_pacing_total", `carrier="carrier"`, `result="full"`) > 0 {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the carrier's queue is not full after %v (is the load running?)", limit)
	}
}

// waitQueued waits until the nodes hold at least want calls waiting for
// the carrier's slots in all, failing the test after limit.
func waitQueued(t *testing.T, nodes []*node, want float64, limit time.Duration) {
	t.Helper()
	var got float64
	if !wait(limit, func() bool {
		got = 0
		for _, n := range nodes {
			got += n.metric("cpsguard_pacing_queued", `carrier="carrier"`)
		}
		return got >= want
	}) {
		t.Fatalf("the carrier's queue holds %v calls after %v, want >= %v (is the load running?)", got, limit, want)
	}
}

// startRespaceLoad dials the nodes from 127.0.0.2, respaceOffered calls a
// second in all for load (one SIPp per node), in the background.
// The returned func waits for the runs, fails the test unless every call
// ended with 200 or 503, and returns the number of calls offered.
func startRespaceLoad(t *testing.T, nodes []*node, load time.Duration) (done func() int) {
	t.Helper()
	rate := respaceOffered / float64(len(nodes))
	calls := int(rate * load.Seconds())
	runs := make([]sippRun, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { runs[i] = dial(t, "127.0.0.2", n.sip, rate, calls, 40*time.Second) })
	}
	return func() int {
		t.Helper()
		wg.Wait()
		for i, r := range runs {
			if r.code != 0 {
				t.Errorf("SIPp against node %s: every call must end with 200 or 503:\n%s", nodes[i].id, r.failure())
			}
		}
		return calls * len(nodes)
	}
}

// checkRespaced checks the carrier's INVITEs against a change of its cps
// from respaceHigh to respaceLow at change: never more than respaceHigh
// in a rolling second (no node had a higher limit), at most respaceLow in
// every rolling second that starts at or after the change, and not
// starved (no second without a call, and half the new cps at least, over
// the 3 s that start settle after the change). Every call the nodes
// forwarded reached the carrier; the others were refused for want of a
// slot within max_wait.
func checkRespaced(t *testing.T, car *carrier, nodes []*node, offered int, change time.Time, settle time.Duration, what string) {
	t.Helper()
	all := car.arrivalTimes()
	var before, after []time.Time
	for _, at := range all {
		if at.Before(change) {
			before = append(before, at)
		} else {
			after = append(after, at)
		}
	}
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("%s: %d INVITEs at the carrier before the change and %d after, want some of each", what, len(before), len(after))
	}
	// The premise: before the change the carrier got the old rate.
	if got := siptest.MaxInWindow(before, time.Second); got < int(respaceHigh)-2 {
		t.Errorf("%s: at most %d INVITEs in a rolling second before the change, want about %v: the carrier was not busy", what, got, respaceHigh)
	}
	story := func() string {
		var b strings.Builder
		b.WriteString("per second from the change:")
		for k := -2; k < 5; k++ {
			from := change.Add(time.Duration(k) * time.Second)
			fmt.Fprintf(&b, " %+ds: %d", k, countIn(all, from, from.Add(time.Second-time.Nanosecond)))
		}
		b.WriteString("\narrivals from 1 s before the change to 3 s after it (ms from the change, Call-ID): ")
		for _, a := range car.callArrivals(change.Add(-time.Second), change.Add(3*time.Second)) {
			fmt.Fprintf(&b, "%d[%s] ", a.at.Sub(change).Milliseconds(), a.id)
		}
		return b.String()
	}
	if top, at := siptest.MaxInWindowAt(all, time.Second); top > int(respaceHigh) {
		t.Errorf("%s: %d INVITEs at the carrier in the rolling second from %v after the change, want <= %v (the old cps, the highest in force); %s",
			what, top, at.Sub(change).Round(time.Millisecond), respaceHigh, story())
	}
	got, at := siptest.MaxInWindowAt(after, time.Second)
	if got > int(respaceLow) {
		t.Errorf("%s: %d INVITEs at the carrier in the rolling second from %v after the change, want <= %v (the new cps); %s",
			what, got, at.Sub(change).Round(time.Millisecond), respaceLow, story())
	}
	// Not starved: the calls that took a slot again, and the new ones,
	// get the new rate's slots.
	from := change.Add(settle)
	if n, want := countIn(after, from, from.Add(3*time.Second)), int(3*respaceLow/2); n < want {
		t.Errorf("%s: %d INVITEs at the carrier in the 3 s from %v after the change, want >= %d (half the new cps): starved; %s",
			what, n, settle, want, story())
	}
	prev := from
	for _, at := range after {
		if at.Before(from) {
			continue
		}
		if !at.Before(from.Add(3 * time.Second)) {
			break
		}
		if gap := at.Sub(prev); gap >= time.Second {
			t.Errorf("%s: no INVITE at the carrier for %v from %v after the change: starved; %s",
				what, gap.Round(time.Millisecond), prev.Sub(change).Round(time.Millisecond), story())
			break
		}
		prev = at
	}
	out := poolOutcomes(t, nodes, offered)
	if int(out["forwarded"]) != len(all) || int(out["forwarded"]+out["rejected_queue"]) != offered {
		t.Errorf("%s: outcomes %v: want forwarded = the carrier's calls (%d) and forwarded + rejected_queue = %d", what, out, len(all), offered)
	}
	t.Logf("%s: at most %d INVITEs in a rolling second from the change; %s", what, got, story())
	for _, n := range nodes {
		t.Logf("node %s: %s", n.id, n.grep(`"carrier limit changed`))
	}
}

// callArrival is the first INVITE of a Call-ID at a carrier.
type callArrival struct {
	id string
	at time.Time
}

// callArrivals returns the first INVITEs of the calls that arrived in
// [from, to], in order.
func (c *carrier) callArrivals(from, to time.Time) []callArrival {
	c.mu.Lock()
	var out []callArrival
	for id, at := range c.arrivals {
		if !at.Before(from) && !at.After(to) {
			out = append(out, callArrival{id, at})
		}
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// TestReloadLowersQueuedCarrierCPS: a reload lowers the carrier's cps
// while its queue is full, on the in-process store: the calls queued do
// not reach it at the old rate.
func TestReloadLowersQueuedCarrierCPS(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, respaceConf("respace", "", car.addr, "", respaceHigh), true)
	done := startRespaceLoad(t, []*node{n}, respaceLoad)
	waitFull(t, []*node{n}, 10*time.Second)
	change := n.reconfigure(t, respaceConf("respace", "", car.addr, "", respaceLow))
	offered := done()
	checkRespaced(t, car, []*node{n}, offered, change, 500*time.Millisecond, "reload")
}

// TestReloadLowersHalfQueuedCarrierCPS: the same with the queue half
// full: the calls queued find a slot at the new rate when they take one
// again, beside the calls that came after the change.
func TestReloadLowersHalfQueuedCarrierCPS(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, respaceConf("respace-half", "", car.addr, "", respaceHigh), true)
	done := startRespaceLoad(t, []*node{n}, respaceLoad)
	waitQueued(t, []*node{n}, respaceHigh*respaceMaxWait.Seconds()/2, 10*time.Second)
	change := n.reconfigure(t, respaceConf("respace-half", "", car.addr, "", respaceLow))
	offered := done()
	checkRespaced(t, car, []*node{n}, offered, change, 500*time.Millisecond, "reload, queue half full")
}

// TestPoolReloadLowersQueuedCarrierCPS: both nodes of a pool on one Redis
// reload a lower cps for the carrier, 500 ms apart, while its queue is
// full. Between the two reloads the pool paces for both limits, never
// above the old one; from the last one on, the carrier sees the new one
// only, and gets it again within max_wait.
func TestPoolReloadLowersQueuedCarrierCPS(t *testing.T) {
	srv := redistest.Start(t)
	car := startCarrier(t, "127.0.0.1")
	var nodes []*node
	for _, id := range []string{"respace-a", "respace-b"} {
		nodes = append(nodes, startNode(t, respaceConf(id, srv.Addr(), car.addr, "", respaceHigh), true))
	}
	done := startRespaceLoad(t, nodes, respaceLoad+respaceMaxWait+time.Second)
	waitFull(t, nodes, 10*time.Second)
	first := nodes[0].reconfigure(t, respaceConf(nodes[0].id, srv.Addr(), car.addr, "", respaceLow))
	time.Sleep(500 * time.Millisecond)
	last := nodes[1].reconfigure(t, respaceConf(nodes[1].id, srv.Addr(), car.addr, "", respaceLow))
	offered := done()
	t.Logf("node %s reloaded %v after node %s", nodes[1].id, last.Sub(first).Round(time.Millisecond), nodes[0].id)
	// Each node removes its own calls' slots only, so the second one's
	// removal can leave a hole in front of slots the first node's calls
	// took behind them: the carrier may idle until those come due, within
	// max_wait of the last reload.
	checkRespaced(t, car, nodes, offered, last, respaceMaxWait+500*time.Millisecond, "pool reload")
}

// TestOverrideLowersQueuedCarrierCPS: a live override lowers the carrier's
// cps while its queue is full, on one node on Redis: the calls queued do
// not reach it at the old rate.
func TestOverrideLowersQueuedCarrierCPS(t *testing.T) {
	srv := redistest.Start(t)
	car := startCarrier(t, "127.0.0.1")
	const token = "e2e-token"
	n := startNode(t, respaceConf("respace-ovr", srv.Addr(), car.addr, token, respaceHigh), true)
	done := startRespaceLoad(t, []*node{n}, respaceLoad)
	waitFull(t, []*node{n}, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := httpapi.SetLimit(ctx, n.http, token, "carrier", "carrier", httpapi.LimitRequest{CPS: respaceLow, TTL: "1m"}); err != nil {
		t.Fatal(err)
	}
	// The node applies the override before it logs it (and answers).
	set := n.logTimes("limit override set")
	if len(set) != 1 {
		t.Fatalf("node logged %d \"limit override set\" records, want 1", len(set))
	}
	offered := done()
	checkRespaced(t, car, []*node{n}, offered, set[0], 500*time.Millisecond, "override")
}
