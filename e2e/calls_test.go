//go:build linux

package e2e

// max_calls for a pool: two nodes on one Redis share one peer's concurrent
// calls, measured at the carrier (INVITE to BYE, kernel receive times); a
// node killed with its calls up frees their places within
// sip.call_refresh_ttl.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// activeCalls reads the peer's active_calls from n's status (-1 when
// unreadable).
func activeCalls(n *node, peer string) int {
	st, err := n.status()
	if err != nil {
		return -1
	}
	peers, _ := st["peers"].([]any)
	for _, p := range peers {
		e, _ := p.(map[string]any)
		if e["name"] == peer {
			if v, ok := e["active_calls"].(float64); ok {
				return int(v)
			}
		}
	}
	return -1
}

func TestPoolMaxCallsHoldAcrossNodes(t *testing.T) {
	srv := redistest.Start(t)
	car := startCarrier(t, "127.0.0.1")
	const maxCalls, nodesN = 5, 2
	nodes := startPool(t, srv.Addr(), nodesN,
		[]peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000, maxCalls: maxCalls}},
		[]carrierConf{{name: "carrier", addr: car.addr, cps: 1000, maxWait: time.Second}})

	// 2-second calls at 5 a second per node: 20 wanted at once, 5 allowed.
	runs := make([]sippRun, nodesN)
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { runs[i] = dial(t, "127.0.0.2", n.sip, 5, 30, 40*time.Second, "-d", "2000") })
	}
	wg.Wait()
	for i, r := range runs {
		if r.code != 0 {
			t.Errorf("SIPp against node %s: every call must end with 200 or 503:\n%s", nodes[i].id, r.failure())
		}
	}
	out := poolOutcomes(t, nodes, 30*nodesN)
	top := car.maxConcurrent()
	t.Logf("carrier: %d calls, at most %d at once; outcomes %v", len(car.arrivalTimes()), top, out)
	if top > maxCalls {
		t.Errorf("at most %d calls at once at the carrier, want <= %d (max_calls for the pool)", top, maxCalls)
	}
	if top < maxCalls-1 {
		t.Errorf("at most %d calls at once at the carrier: the limit of %d was not used", top, maxCalls)
	}
	if out["rejected_calls"] == 0 || int(out["forwarded"]) != len(car.arrivalTimes()) {
		t.Errorf("outcomes %v: want rejected_calls > 0 and forwarded = carrier (%d)", out, len(car.arrivalTimes()))
	}
	for _, n := range nodes {
		if f := n.outcomes()["forwarded"]; f == 0 {
			t.Errorf("node %s forwarded nothing: the limit was not shared", n.id)
		}
	}
	// Every call ended with its BYE: no place is left.
	deadline := time.Now().Add(5 * time.Second)
	for activeCalls(nodes[0], "dialer") != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := activeCalls(nodes[0], "dialer"); got != 0 {
		t.Errorf("active_calls after every BYE: got %d, want 0", got)
	}
}

func TestKilledNodeFreesItsCallsWithinTTL(t *testing.T) {
	srv := redistest.Start(t)
	car := startCarrier(t, "127.0.0.1")
	const maxCalls, ttl = 5, 2 * time.Second
	peers := []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000, maxCalls: maxCalls}}
	carriers := []carrierConf{{name: "carrier", addr: car.addr, cps: 1000, maxWait: time.Second}}
	a := startNode(t, nodeConf{id: "calls-a", redis: srv.Addr(), redisTimeout: 200 * time.Millisecond,
		peers: peers, carriers: carriers, callRefreshTTL: ttl}, true)
	b := startNode(t, nodeConf{id: "calls-b", redis: srv.Addr(), redisTimeout: 200 * time.Millisecond,
		peers: peers, carriers: carriers, callRefreshTTL: ttl}, true)

	// Five long calls through a; they outlive the TTL several times over
	// while a refreshes them.
	done := make(chan struct{})
	go func() {
		defer close(done)
		dial(t, "127.0.0.2", a.sip, 50, maxCalls, 25*time.Second, "-d", "8000")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for activeCalls(b, "dialer") != maxCalls && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := activeCalls(b, "dialer"); got != maxCalls {
		t.Fatalf("active_calls seen by b: got %d, want %d", got, maxCalls)
	}
	time.Sleep(2 * ttl) // refreshed meanwhile: still held
	if got := activeCalls(b, "dialer"); got != maxCalls {
		t.Fatalf("active_calls after 2 × TTL with a alive: got %d, want %d (a refreshes its calls)", got, maxCalls)
	}
	// b refuses a sixth call while a's calls hold the places.
	if r := dial(t, "127.0.0.2", b.sip, 10, 1, 10*time.Second); r.code != 0 || b.outcomes()["rejected_calls"] != 1 {
		t.Fatalf("sixth call through b: SIPp %d, outcomes %v; want rejected_calls 1\n%s", r.code, b.outcomes(), r.failure())
	}

	a.mu.Lock()
	a.stopped = true // killed on purpose: no exit code to check
	a.mu.Unlock()
	a.kill()
	killed := time.Now()
	// a is dead: none of its places is refreshed again. Each is a member
	// of the peer's place set scored by its expiry on Redis's clock (µs),
	// and must expire within the TTL of now (a's last refresh was before
	// the kill); and b's status, which counts the set on Redis's clock,
	// must show none once the latest has expired. Both hold exactly,
	// however slow the machine: measured here through b's status polled
	// over HTTP, the time to free needed a 250 ms margin a loaded machine
	// could use up.
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	rctx := context.Background()
	now, err := rc.Time(rctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	places, err := rc.ZRangeWithScores(rctx, "e2e:{calls:peer:dialer}", 0, -1).Result()
	if err != nil || len(places) != maxCalls {
		t.Fatalf("a's places in Redis after the kill: %v, %v; want its %d calls", places, err, maxCalls)
	}
	var latest time.Time
	for _, z := range places {
		exp := time.UnixMicro(int64(z.Score))
		if exp.After(now.Add(ttl)) {
			t.Errorf("a's call %v expires %v after the kill (Redis TIME), want <= %v (call_refresh_ttl)", z.Member, exp.Sub(now), ttl)
		}
		if exp.After(latest) {
			latest = exp
		}
	}
	time.Sleep(time.Until(latest.Add(time.Millisecond)))
	got := activeCalls(b, "dialer")
	for deadline := time.Now().Add(10 * time.Second); got == -1 && time.Now().Before(deadline); got = activeCalls(b, "dialer") {
		time.Sleep(50 * time.Millisecond) // b's status unreadable: ask again
	}
	took := time.Since(killed)
	if got != 0 {
		t.Fatalf("active_calls on b %s after a was killed, after every one of its places expired: got %d, want 0", took, got)
	}
	t.Logf("a's %d calls freed %s after it was killed, as b reported it (call_refresh_ttl %s)", maxCalls, took.Round(time.Millisecond), ttl)
	// b can use them now.
	if r := dial(t, "127.0.0.2", b.sip, 10, 1, 10*time.Second); r.code != 0 || b.outcomes()["forwarded"] != 1 {
		t.Errorf("call through b after a's calls expired: SIPp %d, outcomes %v; want forwarded 1", r.code, b.outcomes())
	}
	<-done
}
