package sip

// Issue 22, items A5 and B: a carrier's Retry-After pauses it for the pool
// only on pool-wide evidence, for at most retry_after_max; a paused carrier
// is skipped, not waited for; when the span ends one call tries it before
// the rest follow (half-open). Real sockets, a private redis-server, real
// stores; every run bounded in calls and time, assertions on counts.

import (
	"strconv"
	"strings"
	"sync/atomic"
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
)

// startE2EPool runs one redis-server and n proxies on it, each with stores
// of its own: n nodes of one pool.
func startE2EPool(t *testing.T, o e2eOpts, n int) []*harness {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	srv := redistest.Start(t)
	var hs []*harness
	for i := range n {
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rc.Close() })
		ctx := ctxT(t, 10*time.Second)
		adm := admission.NewRedisStore(rc, admission.RedisOptions{Timeout: 500 * time.Millisecond})
		if err := adm.Load(ctx); err != nil {
			t.Fatalf("load admission scripts: %v", err)
		}
		slots := pacing.NewRedisSlots(rc, pacing.RedisOptions{Timeout: 500 * time.Millisecond})
		if err := slots.Load(ctx); err != nil {
			t.Fatalf("load pacing scripts: %v", err)
		}
		cfg, err := config.Parse([]byte(o.yaml()))
		if err != nil {
			t.Fatalf("config: %v\n%s", err, o.yaml())
		}
		cfg.NodeID = "node-" + strconv.Itoa(i+1)
		if o.edit != nil {
			o.edit(cfg)
		}
		hs = append(hs, startProxy(t, cfg, adm, pacing.NewPacer(slots)))
	}
	return hs
}

// retryAfterCarrier answers every INVITE whose Request-URI user is in
// refuse (all of them when refuse is empty) with 503 and Retry-After: ra
// while refusing is set, and 200 otherwise.
func retryAfterCarrier(t *testing.T, ra string, refusing *atomic.Bool, refuse ...string) *siptest.Carrier {
	return siptest.StartCarrier(t, "127.0.0.1", func(req *sipmsg.Request) siptest.Answer {
		if !refusing.Load() {
			return siptest.Answer{}
		}
		if len(refuse) > 0 {
			hit := false
			for _, u := range refuse {
				hit = hit || req.Recipient.User == u
			}
			if !hit {
				return siptest.Answer{}
			}
		}
		return siptest.Answer{Code: 503, Header: []string{"Retry-After: " + ra}}
	})
}

// dial makes one call from caller through the proxy at addr to user and
// returns its final status (0: none within 5 s).
func dial(t *testing.T, caller *siptest.Caller, addr, user string) int {
	t.Helper()
	req := caller.Invite(addr)
	req.Recipient.User = user
	res := caller.Final(ctxT(t, 5*time.Second), req)
	if res == nil {
		return 0
	}
	return res.StatusCode
}

// TestE2ERetryAfterNoHerd (item B): a carrier answering every call with
// 503 and Retry-After: 2, offered 10 CPS for 6 s. A paused carrier is
// skipped at once (the calls go to the next carrier, reroute reason
// paused), never waited for, and when a span ends one call tries it: it
// sees about one INVITE per span, not the calls that waited through the
// span (measured before: 28 INVITEs in bursts of 10).
func TestE2ERetryAfterNoHerd(t *testing.T) {
	var refusing atomic.Bool
	refusing.Store(true)
	ra := retryAfterCarrier(t, "2", &refusing)
	backup := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"ra", "sip:" + ra.Addr, 10, 5 * time.Second},
		{"backup", "sip:" + backup.Addr, 100, time.Second}}})
	const n = 60
	code, out := sipp(t, 60*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "10", "-m", strconv.Itoa(n), h.udp)
	if code != 0 {
		t.Fatalf("caller sipp exit %d:\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-1", n)
	// One INVITE at the start, then one per 2 s span of a 6 s run: about 4.
	// A herd (calls waiting through the span) is 10 a span.
	got := ra.Count("INVITE")
	if got < 2 || got > 9 {
		t.Errorf("the Retry-After carrier got %d INVITEs in a 6 s run at 10 CPS, want about one per 2 s span (2-9); arrivals: %s",
			got, gaps(ra.Arrivals()))
	}
	t.Logf("the Retry-After carrier got %d INVITEs; arrivals: %s", got, gaps(ra.Arrivals()))
	// Every call goes on to the backup (on a loaded box one may find it
	// full after late wakes: a few are allowed for).
	if b := backup.Count("INVITE"); b < n-3 || b > n {
		t.Errorf("backup got %d INVITEs, want (about) %d: every call, the Retry-After carrier answers none", b, n)
	}
	if r := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("ra", metrics.ReroutePaused)); r < n/2 {
		t.Errorf("reroutes_total{ra,paused} = %v, want most of the %d calls (skipped while paused)", r, n)
	}
	if f := testutil.ToFloat64(h.m.Pacing.WithLabelValues("ra", metrics.PacingFull)); f != 0 {
		t.Errorf("pacing_total{ra,full} = %v, want 0: a paused carrier is paused, not full", f)
	}
	if f := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("ra", metrics.RerouteFull)); f != 0 {
		t.Errorf("reroutes_total{ra,full} = %v, want 0", f)
	}
}

// TestE2EOnePeersRetryAfterDoesNotPauseThePool (item A5): a peer that is
// the only caller of a carrier on its node gets 503 with Retry-After: 600
// (a number the carrier refuses); another peer calls the same carrier
// through another node. The evidence is the pool's: two callers, one
// refused, so the carrier is not paused and the other peer's calls still
// reach it.
func TestE2EOnePeersRetryAfterDoesNotPauseThePool(t *testing.T) {
	var refusing atomic.Bool
	refusing.Store(true)
	shared := retryAfterCarrier(t, "600", &refusing, "666")
	other := siptest.StartCarrier(t, "127.0.0.1", nil)
	hs := startE2EPool(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"shared", "sip:" + shared.Addr, 100, time.Second},
		{"other", "sip:" + other.Addr, 100, time.Second}}}, 2)
	p1, p3 := siptest.StartCaller(t, "127.0.0.2"), siptest.StartCaller(t, "127.0.0.3")

	if c := dial(t, p3, hs[1].udp, "100"); c != 200 {
		t.Fatalf("dialer-3 through node 2: final %d, want 200", c)
	}
	if c := dial(t, p1, hs[0].udp, "666"); c != 200 {
		t.Fatalf("dialer-1 through node 1 to a refused number: final %d, want 200 (from the other carrier)", c)
	}
	if got := shared.Count("INVITE"); got != 2 {
		t.Fatalf("shared carrier got %d INVITEs, want 2", got)
	}
	time.Sleep(300 * time.Millisecond) // a pause would be written in the background
	for i := range 3 {
		if c := dial(t, p3, hs[1].udp, "100"); c != 200 {
			t.Fatalf("dialer-3 call %d: final %d, want 200", i, c)
		}
	}
	if got := shared.Count("INVITE"); got != 5 {
		t.Errorf("shared carrier got %d INVITEs, want 5: one peer's Retry-After paused the carrier for the pool (other carrier got %d)",
			got, other.Count("INVITE"))
	}
}

// TestE2ELoneCallerPauseIsShort (item A5): the only caller of a carrier in
// the whole pool gets 503 with Retry-After: 600. It pauses the carrier (it
// can only slow itself down), but single-peer evidence pauses it for
// lonePause (5 s) at most, not ten minutes: a call after that reaches it.
func TestE2ELoneCallerPauseIsShort(t *testing.T) {
	var refusing atomic.Bool
	refusing.Store(true)
	car := retryAfterCarrier(t, "600", &refusing)
	backup := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"car", "sip:" + car.Addr, 100, time.Second},
		{"backup", "sip:" + backup.Addr, 100, time.Second}}})
	p1 := siptest.StartCaller(t, "127.0.0.2")
	if c := dial(t, p1, h.udp, "100"); c != 200 {
		t.Fatalf("first call: final %d, want 200 (from the backup)", c)
	}
	refusing.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for car.Count("INVITE") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no call reached the carrier within 10 s of a lone caller's Retry-After: 600 (backup got %d)", backup.Count("INVITE"))
		}
		if c := dial(t, p1, h.udp, "100"); c != 200 {
			t.Fatalf("call: final %d, want 200", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// twoPeersRefused pauses carrier "car" (a retryAfterCarrier refusing
// user 100) for the pool: dialer-1 and dialer-3 both call it (user 200),
// then both get its 503 with Retry-After (pool-wide evidence). The
// carrier has then seen 4 INVITEs.
func twoPeersRefused(t *testing.T, h *harness, car *siptest.Carrier) {
	t.Helper()
	p1, p3 := siptest.StartCaller(t, "127.0.0.2"), siptest.StartCaller(t, "127.0.0.3")
	for _, user := range []string{"200", "100"} {
		for _, c := range []*siptest.Caller{p1, p3} {
			if code := dial(t, c, h.udp, user); code != 200 {
				t.Fatalf("call from %s to %s: final %d, want 200", c.Addr, user, code)
			}
		}
	}
	if got := car.Count("INVITE"); got != 4 {
		t.Fatalf("carrier got %d INVITEs, want 4 (two calls of each peer)", got)
	}
}

// TestE2ERetryAfterMaxCapsTheSpan (item B): two peers refused with
// Retry-After: 600 pause the carrier for the pool, but for
// carriers[].retry_after_max (here 1 s) at most; then one call tries it.
func TestE2ERetryAfterMaxCapsTheSpan(t *testing.T) {
	var refusing atomic.Bool
	refusing.Store(true)
	car := retryAfterCarrier(t, "600", &refusing, "100")
	backup := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"car", "sip:" + car.Addr, 100, time.Second},
		{"backup", "sip:" + backup.Addr, 100, time.Second}},
		carrierExtra: map[string]string{"car": "retry_after_max: 1s"}})
	twoPeersRefused(t, h, car)
	refusing.Store(false)
	p := siptest.StartCaller(t, "127.0.0.2")
	deadline := time.Now().Add(10 * time.Second)
	for car.Count("INVITE") < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("no call reached the carrier within 10 s of a Retry-After: 600 capped by retry_after_max 1s")
		}
		if c := dial(t, p, h.udp, "100"); c != 200 {
			t.Fatalf("call: final %d, want 200", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2EGoodProbeEndsThePause (item B): a carrier paused for the pool
// (Retry-After: 600, retry_after_max 10m) is re-tested once its OPTIONS
// probe answers: one call tries it, and when that call is answered the
// pause is over for every call.
func TestE2EGoodProbeEndsThePause(t *testing.T) {
	var refusing atomic.Bool
	refusing.Store(true)
	car := retryAfterCarrier(t, "600", &refusing, "100")
	backup := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"car", "sip:" + car.Addr, 100, time.Second},
		{"backup", "sip:" + backup.Addr, 100, time.Second}},
		carrierExtra: map[string]string{"car": "retry_after_max: 10m, probe: {interval: 200ms, timeout: 100ms, down_after: 2, up_after: 1}"}})
	twoPeersRefused(t, h, car)
	refusing.Store(false)
	p := siptest.StartCaller(t, "127.0.0.2")
	deadline := time.Now().Add(10 * time.Second)
	for car.Count("INVITE") < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("no call reached the paused carrier within 10 s although its probes answer (OPTIONS %d)", car.Count("OPTIONS"))
		}
		if c := dial(t, p, h.udp, "100"); c != 200 {
			t.Fatalf("call: final %d, want 200", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The probe call was answered: the pause is over, every call goes.
	before := car.Count("INVITE")
	for i := range 5 {
		if c := dial(t, p, h.udp, "100"); c != 200 {
			t.Fatalf("call %d after the pause: final %d, want 200", i, c)
		}
	}
	if got := car.Count("INVITE") - before; got < 4 {
		t.Errorf("%d of 5 calls after the probe call was answered reached the carrier, want (nearly) all", got)
	}
}

// TestE2EOperatorLiftsAPause (item A5): an operator's Unpause ends a pool
// pause at once.
func TestE2EOperatorLiftsAPause(t *testing.T) {
	var refusing atomic.Bool
	refusing.Store(true)
	car := retryAfterCarrier(t, "600", &refusing, "100")
	backup := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"car", "sip:" + car.Addr, 100, time.Second},
		{"backup", "sip:" + backup.Addr, 100, time.Second}},
		carrierExtra: map[string]string{"car": "retry_after_max: 10m"}})
	twoPeersRefused(t, h, car)
	refusing.Store(false)
	ctx := ctxT(t, 5*time.Second)
	var st pacing.Pause
	waitFor(t, func() bool {
		var err error
		st, _, err = h.set().CarrierPause(ctx, "car")
		return err == nil && st.Paused
	}, "the carrier paused")
	if left := time.Until(st.Until); left < 9*time.Minute || left > 10*time.Minute+time.Second {
		t.Errorf("pause ends in %v, want about 10m", left)
	}
	if !strings.Contains(st.Reason, "Retry-After") {
		t.Errorf("pause reason %q, want it to name the Retry-After", st.Reason)
	}
	p := siptest.StartCaller(t, "127.0.0.2")
	if c := dial(t, p, h.udp, "100"); c != 200 || car.Count("INVITE") != 4 {
		t.Fatalf("call while paused: final %d, carrier INVITEs %d; want 200 from the backup, still 4", c, car.Count("INVITE"))
	}
	lifted, ok, err := h.set().Unpause(ctx, "car")
	if err != nil || !ok || !lifted.Changed || lifted.Paused {
		t.Fatalf("Unpause = %+v, %v, %v; want the lifted pause", lifted, ok, err)
	}
	if st, _, err := h.set().CarrierPause(ctx, "car"); err != nil || st.Paused {
		t.Fatalf("after Unpause: %+v, %v; want no pause", st, err)
	}
	for i := range 3 {
		if c := dial(t, p, h.udp, "100"); c != 200 {
			t.Fatalf("call %d after Unpause: final %d, want 200", i, c)
		}
	}
	if got := car.Count("INVITE"); got != 7 {
		t.Errorf("carrier got %d INVITEs, want 7 (every call after Unpause)", got)
	}
	if _, ok, _ := h.set().Unpause(ctx, "nope"); ok {
		t.Error("Unpause of a carrier that is not configured reports ok")
	}
}
