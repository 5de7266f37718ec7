//go:build linux

package e2e

// Graceful shutdown of a running node, and the operations API's write
// protection.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/httpapi"
)

// SIGTERM while calls wait for a carrier slot: every call gets a final
// answer (forwarded, or 503), INVITEs arriving after SIGTERM get 503 while
// the listener is still open and never reach the carrier, and the process
// exits 0 within a bound.
func TestGracefulShutdownWithQueuedCalls(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	// 1 cps with max_wait 8 s: a burst of 8 calls queues for up to 7 s, longer
	// than the proxy's drain (5 s), so some calls are sent while draining
	// and the rest are refused when the drain ends.
	n := startNode(t, nodeConf{id: "drain",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000}},
		carriers: []carrierConf{{name: "slow", addr: car.addr, cps: 1, maxWait: 8 * time.Second}}}, true)
	c, err := startCaller(t, "127.0.0.2", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("drain-%d@e2e", i)
		ids = append(ids, id)
		if err := c.invite(n.sip, id); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Wait until calls are queued for a slot.
	deadline := time.Now().Add(5 * time.Second)
	queued := 0.0
	for time.Now().Before(deadline) {
		if queued = n.metric("cpsguard_pacing_queued"); queued >= 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if queued < 3 {
		t.Fatalf("cpsguard_pacing_queued = %g, want >= 3 calls waiting before SIGTERM", queued)
	}
	before := len(car.arrivalTimes())

	start := time.Now()
	n.signal(sigterm)
	// The signal is handled asynchronously: wait until the node says it is
	// stopping, so the INVITEs below really come after SIGTERM took effect.
	for n.logCount("cpsguard stopping") == 0 && n.alive() && time.Since(start) < 5*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	// New INVITEs until the process is gone (bounded): each gets 503 while
	// the node drains, or nothing once its listener is closed.
	var late []string
	for i := 0; i < 500 && n.alive(); i++ {
		id := fmt.Sprintf("late-%d@e2e", i)
		late = append(late, id)
		_ = c.invite(n.sip, id)
		time.Sleep(20 * time.Millisecond)
	}
	code, _ := n.stop(t, 20*time.Second) // SIGTERM already sent: waits and checks exit 0
	took := time.Since(start)
	t.Logf("exit %d %s after SIGTERM (%g calls were queued)", code, took.Round(time.Millisecond), queued)
	if took > 15*time.Second {
		t.Errorf("node took %s to exit after SIGTERM, want <= 15 s (grace 5 s + HTTP shutdown)", took)
	}

	finals := c.waitFinal(ids, 2*time.Second)
	forwarded, rejected := 0, 0
	for _, id := range ids {
		switch finals[id] {
		case 200:
			forwarded++
		case 503:
			rejected++
		default:
			t.Errorf("call %s: responses %v, want a final 200 or 503", id, c.responses(id))
		}
	}
	t.Logf("queued calls: %d forwarded, %d rejected with 503; carrier saw %d", forwarded, rejected, len(car.arrivalTimes()))
	if got := len(car.arrivalTimes()); got != forwarded {
		t.Errorf("carrier saw %d calls, callers got %d 200s", got, forwarded)
	}
	refused := 0
	for _, id := range late {
		switch f := c.final(id); f {
		case 0:
		case 503:
			refused++
		default:
			t.Errorf("INVITE after SIGTERM %s: responses %v, want 503 or no answer", id, c.responses(id))
		}
	}
	t.Logf("INVITEs after SIGTERM: %d sent, %d got 503, the rest found the listener closed", len(late), refused)
	if got := len(car.arrivalTimes()) - before; got > forwarded {
		t.Errorf("carrier got %d calls after SIGTERM", got)
	}
}

// SIGTERM while a forwarded call waits for the carrier's answer: the issue
// asks the node to "finish in-flight transactions", so the caller gets the
// carrier's 200 and the carrier no CANCEL.
func TestGracefulShutdownFinishesCallInFlight(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	car.setAnswerDelay(time.Second)
	n := startNode(t, nodeConf{id: "inflight",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 100}},
		carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 100}}}, true)
	c, err := startCaller(t, "127.0.0.2", 0)
	if err != nil {
		t.Fatal(err)
	}
	const id = "inflight@e2e"
	if err := c.invite(n.sip, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for car.count("INVITE") == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if car.count("INVITE") == 0 {
		t.Fatal("the carrier never got the call")
	}
	n.signal(sigterm)
	// Readiness fails as soon as draining starts, while the call finishes.
	deadline = time.Now().Add(2 * time.Second)
	code := 0
	for time.Now().Before(deadline) {
		if code, _, _ = n.get("/readyz"); code == 503 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 503 {
		t.Errorf("/readyz while draining with a call in flight: %d, want 503", code)
	}
	n.stop(t, 20*time.Second)
	final := c.waitFinal([]string{id}, 2*time.Second)[id]
	if final != 200 || car.count("CANCEL") != 0 {
		t.Errorf("call in flight at SIGTERM: caller got %v, carrier got %d CANCEL(s); want the carrier's 200 relayed and no CANCEL",
			c.responses(id), car.count("CANCEL"))
	}
}

// The write endpoints refuse requests without the bearer token.
func TestReloadNeedsToken(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, nodeConf{id: "token", token: "s3cret-e2e",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 10}},
		carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 10}}}, true)
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", 401},
		{"wrong token", "guess", 401},
		{"token", "s3cret-e2e", 200},
	} {
		got, err := n.post("/api/v1/reload", tc.token)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s: POST /api/v1/reload = %d, want %d", tc.name, got, tc.want)
		}
	}
	if _, err := n.status(); err != nil {
		t.Errorf("GET /api/v1/status (read endpoint, no token): %v", err)
	}
	if ok := n.metric("cpsguard_config_reloads_total", `result="success"`); ok < 1 {
		t.Errorf("cpsguard_config_reloads_total{result=success} = %g, want the authorised reload counted", ok)
	}

	// With no http.token the API is read-only: every write is 403, whatever
	// the request carries, and changes nothing.
	open := startNode(t, nodeConf{id: "notoken",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 10}},
		carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 10}}}, true)
	for _, tok := range []string{"", "guess"} {
		if got, err := open.post("/api/v1/reload", tok); err != nil || got != 403 {
			t.Errorf("no http.token, POST /api/v1/reload (token %q) = %d, %v; want 403", tok, got, err)
		}
		_, err := httpapi.SetLimit(ctxT(t, 5*time.Second), open.http, tok, "peer", "dialer", httpapi.LimitRequest{CPS: 1000, TTL: "1h"})
		var e *httpapi.Error
		if !errors.As(err, &e) || e.Code != 403 || !strings.Contains(e.Message, "http.token") {
			t.Errorf("no http.token, PUT /api/v1/limits (token %q): %v; want 403 naming http.token", tok, err)
		}
	}
	if l, err := httpapi.FetchLimits(ctxT(t, 5*time.Second), open.http); err != nil || len(l.Overrides) != 0 {
		t.Errorf("overrides after refused writes: %+v, %v; want none", l, err)
	}
}
