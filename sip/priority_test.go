package sip

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// redisHarness is a proxy on the real admission and pacing stores of a
// private redis-server, with the configuration parsed from YAML.
type redisHarness struct {
	*harness
	cfg *config.Config
	adm *admission.RedisStore
}

// startRedisProxy parses yaml (with %CARRIER% replaced by car's address)
// and runs the proxy on a private redis-server.
func startRedisProxy(t *testing.T, yaml string, car *siptest.Carrier) *redisHarness {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { rc.Close() })
	ctx := ctxT(t, 10*time.Second)
	adm := admission.NewRedisStore(rc, admission.RedisOptions{Timeout: 2 * time.Second})
	if err := adm.Load(ctx); err != nil {
		t.Fatalf("load admission scripts: %v", err)
	}
	slots := pacing.NewRedisSlots(rc, pacing.RedisOptions{Timeout: 2 * time.Second})
	if err := slots.Load(ctx); err != nil {
		t.Fatalf("load pacing scripts: %v", err)
	}
	yaml = strings.ReplaceAll(yaml, "%CARRIER%", car.Addr)
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	h := startProxy(t, cfg, adm, pacing.NewPacer(slots))
	return &redisHarness{harness: h, cfg: cfg, adm: adm}
}

// priorityYAML: dialer-1 may claim Resource-Priority, dialer-2 may not;
// both are held to 10 cps and 30 calls a minute, dialer-1 to 5 calls at
// once; the carrier takes 10 cps and lets a call wait 1 s at most.
const priorityYAML = `
node_id: prio
sip: {listen: ["udp://127.0.0.1:0", "tcp://127.0.0.1:0"]}
store: {key_prefix: prio}
log: {level: info, format: text}
priority: {numbers: ["911", "112"], resource_priority: [esnet, ets]}
peers:
  - {name: dialer-1, sources: [127.0.0.2/32], cps: 10, windows: [{calls: 30, per: 1m}], max_calls: 5,
     customer: acme, customers: [acme], allow_resource_priority: true}
  - {name: dialer-2, sources: [127.0.0.3/32], cps: 10, windows: [{calls: 30, per: 1m}],
     customer: acme, customers: [acme]}
customers: [{name: acme, cps: 1000}]
carriers: [{name: a, uri: "sip:%CARRIER%", cps: 10, max_wait: 1s, probe: {interval: 0s}}]
routes: {default: [a]}
`

// placeCalls sends n INVITEs from c at once, to user with extra headers,
// and returns their final answers' codes (0: none).
func placeCalls(t *testing.T, c *siptest.Caller, proxy string, n int, user string, headers ...string) []int {
	t.Helper()
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := c.Invite(proxy, headers...)
			req.Recipient.User = user
			if res := c.Final(ctxT(t, 20*time.Second), req); res != nil {
				codes[i] = res.StatusCode
			}
		}()
	}
	wg.Wait()
	return codes
}

// countCodes counts the answers by code.
func countCodes(codes []int) map[int]int {
	out := map[int]int{}
	for _, c := range codes {
		out[c]++
	}
	return out
}

func priorityCalls(h *harness, peer, kind string) int {
	return int(testutil.ToFloat64(h.m.Priority.WithLabelValues(peer, kind)))
}

// Issue 24, item 1: 60 calls at once from a peer at its limits (10 cps,
// 30 a minute, 5 at once; the carrier at 10 cps with 1 s of queue), to an
// emergency number or claiming Resource-Priority esnet.1: every one is
// forwarded and answered (on main, 20 of 60 got 503). They are counted in
// the peer's windows (a normal call after them is refused), and counted by
// kind.
func TestE2EPriorityCallsAreNeverRefused(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startRedisProxy(t, priorityYAML, car)
	caller := siptest.StartCaller(t, "127.0.0.2")

	var codes []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, user := range []string{"911", "5550100"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := placeCalls(t, caller, h.udp, 30, user, "Resource-Priority: esnet.1")
			mu.Lock()
			codes = append(codes, got...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got := countCodes(codes); got[200] != 60 {
		t.Fatalf("answers to 60 priority calls: %v, want 60 × 200", got)
	}
	if n := len(car.Invites()); n != 60 {
		t.Errorf("INVITEs at the carrier: got %d, want 60", n)
	}
	for _, inv := range car.Invites() {
		if len(inv.GetHeaders("Resource-Priority")) != 1 {
			t.Fatalf("an allowed peer's INVITE at the carrier without its Resource-Priority:\n%s", inv)
		}
	}
	waitFor(t, func() bool { return calls(h.harness, "dialer-1", metrics.OutcomeForwarded) == 60 }, "60 calls counted forwarded")
	if got := priorityCalls(h.harness, "dialer-1", metrics.PriorityNumber); got != 30 {
		t.Errorf("priority_calls_total{kind=number}: got %d, want 30", got)
	}
	if got := priorityCalls(h.harness, "dialer-1", metrics.PriorityResource); got != 30 {
		t.Errorf("priority_calls_total{kind=resource_priority}: got %d, want 30", got)
	}
	if got := calls(h.harness, "dialer-1", metrics.OutcomeRejectedCPS); got != 0 {
		t.Errorf("rejected_cps: got %d, want 0", got)
	}

	// They took their places: the peer's minute window holds all 60.
	pe := policy.Of(h.cfg).Peer(&h.cfg.Peers[0])
	bs := pe.Buckets(pe.CPS, 0)
	counts, err := h.adm.Counts(ctxT(t, 5*time.Second), bs)
	if err != nil {
		t.Fatal(err)
	}
	if got := counts[len(counts)-1]; got != 60 {
		t.Errorf("calls in the peer's minute window: got %d, want 60 (priority calls are counted)", got)
	}
	// So a normal call of the peer is refused now.
	res := caller.Final(ctxT(t, 10*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 503 {
		t.Errorf("a normal call after 60 priority calls: got %v, want 503 (its window is full)", res)
	}
}

// A peer without allow_resource_priority: its Resource-Priority header is
// ignored (normal treatment: its minute window of 30 holds), every claim
// is counted refused_claim, and the header is not forwarded; its calls to
// an emergency number are priority all the same.
func TestE2EResourcePriorityClaimOfAPeerNotAllowed(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startRedisProxy(t, priorityYAML, car)
	caller := siptest.StartCaller(t, "127.0.0.3")

	codes := placeCalls(t, caller, h.udp, 60, "5550100", "resource-PRIORITY: esnet.0, ets.1")
	got := countCodes(codes)
	if got[200] > 30 || got[200]+got[503] != 60 {
		t.Errorf("answers to 60 claims of a peer not allowed: %v, want at most 30 × 200 (its window), the rest 503", got)
	}
	waitCalls(t, h.harness, "dialer-2", 60)
	if n := priorityCalls(h.harness, "dialer-2", metrics.PriorityRefusedClaim); n != 60 {
		t.Errorf("priority_calls_total{kind=refused_claim}: got %d, want 60", n)
	}
	if n := priorityCalls(h.harness, "dialer-2", metrics.PriorityResource); n != 0 {
		t.Errorf("priority_calls_total{kind=resource_priority}: got %d, want 0", n)
	}
	// The window is full; an emergency call goes through anyway.
	res := caller.Final(ctxT(t, 10*time.Second), func() *sipmsg.Request {
		r := caller.Invite(h.udp)
		r.Recipient.User = "112"
		return r
	}())
	if res == nil || res.StatusCode != 200 {
		t.Fatalf("a call to 112 from a peer over its window: got %v, want 200", res)
	}
	if n := priorityCalls(h.harness, "dialer-2", metrics.PriorityNumber); n != 1 {
		t.Errorf("priority_calls_total{kind=number}: got %d, want 1", n)
	}
	// A header naming no configured namespace is no claim at all.
	res = caller.Final(ctxT(t, 10*time.Second), caller.Invite(h.udp, "Resource-Priority: dsn.flash"))
	if res == nil || res.StatusCode != 503 {
		t.Errorf("a normal call over the window: got %v, want 503", res)
	}
	if n := priorityCalls(h.harness, "dialer-2", metrics.PriorityRefusedClaim); n != 60 {
		t.Errorf("priority_calls_total{kind=refused_claim} after a dsn header: got %d, want still 60", n)
	}
	// Nor does the carrier learn a claim the peer may not make (h46),
	// whatever the header name's case; a namespace the configuration does
	// not name is no claim, and passes (h51).
	passed := 0
	for _, inv := range car.Invites() {
		for _, h := range inv.GetHeaders("Resource-Priority") {
			if h.Value() != "dsn.flash" {
				t.Fatalf("a refused claim reached the carrier: %v", h)
			}
			passed++
		}
	}
	if passed > 1 {
		t.Errorf("%d dsn.flash headers at the carrier, want at most the one call's", passed)
	}
}

var _ = fmt.Sprint

// An exact entry (911$) makes 911 a priority call and not 9111234567, an
// Indian mobile number in national form, which a prefix entry would let
// past every limit: 20 calls at once to each from a peer at 10 cps, the
// carrier at 10 cps with 1 s of queue.
func TestE2EPriorityExactNumber(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	yaml := strings.Replace(priorityYAML, `numbers: ["911", "112"]`, `numbers: ["911$", "112"]`, 1)
	h := startRedisProxy(t, yaml, car)
	caller := siptest.StartCaller(t, "127.0.0.3")

	if got := countCodes(placeCalls(t, caller, h.udp, 20, "911")); got[200] != 20 {
		t.Fatalf("answers to 20 calls to 911: %v, want 20 × 200", got)
	}
	got := countCodes(placeCalls(t, caller, h.udp, 20, "9111234567"))
	if got[200] == 20 || got[200]+got[503] != 20 {
		t.Errorf("answers to 20 calls to 9111234567: %v, want some 503 (a normal call at 10 cps, its window full of the 911 calls)", got)
	}
	if n := priorityCalls(h.harness, "dialer-2", metrics.PriorityNumber); n != 20 {
		t.Errorf("priority_calls_total{dialer-2,number}: got %d, want 20 (911 only)", n)
	}
}

// Without priority.resource_priority a peer's Resource-Priority header is
// no claim of the node's at all: it is forwarded as any other header
// (h51: it was stripped from every peer without allow_resource_priority).
func TestResourcePriorityPassesWithoutPriorityConfig(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("c", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp, "Resource-Priority: wps.1")); res == nil || res.StatusCode != 200 {
		t.Fatalf("answer %v, want 200", res)
	}
	invs := car.Invites()
	if len(invs) != 1 || len(invs[0].GetHeaders("Resource-Priority")) != 1 {
		t.Fatalf("the carrier got %d INVITEs, the first without its Resource-Priority", len(invs))
	}
}
