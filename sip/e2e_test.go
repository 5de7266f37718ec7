package sip

// End-to-end tests of issue 4: real sockets on loopback, SIPp as the
// dialer, a private redis-server behind the real admission and pacing
// stores, the proxy in process, and a measuring carrier (internal/siptest)
// that timestamps every INVITE as it is read. Different peers dial from
// different 127.0.0.x addresses. Every load is bounded in calls and time.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
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
)

// e2eYAML is the base configuration; %s are filled per test.
const e2eYAML = `
node_id: e2e
sip:
  listen: [udp://127.0.0.1:0, tcp://127.0.0.1:0]
  record_route: true
  unknown_source: %s
  reject: {code: 503, reason: CPS Limit Exceeded, retry_after: 1s}
store:
  key_prefix: e2e
http:
  listen: 127.0.0.1:0
log: {level: info, format: text}
customer_header: X-Customer
peers:
  - {name: dialer-1, sources: [127.0.0.2/32], cps: %s, customer: acme, customers: [acme, globex]}
  - {name: dialer-3, sources: [127.0.0.3/32], cps: 1000, customer: acme, customers: [acme]}
customers:
  - {name: acme, cps: %s}
  - {name: globex, cps: %s}
carriers:
%s
routes:
  default: [%s]
`

type e2eCarrier struct {
	name, uri string
	cps       float64
	maxWait   time.Duration
}

type e2eOpts struct {
	unknown               string // reject | drop
	peerCPS, acme, globex float64
	carriers              []e2eCarrier
	edit                  func(*config.Config) // optional, after parsing
	// carrierExtra adds settings to a carrier's flow map by name, e.g.
	// "probe: {interval: 0s}".
	carrierExtra map[string]string
}

func (o e2eOpts) yaml() string {
	if o.unknown == "" {
		o.unknown = "reject"
	}
	var cs, names []string
	for _, c := range o.carriers {
		extra := ""
		if x := o.carrierExtra[c.name]; x != "" {
			extra = ", " + x
		}
		cs = append(cs, fmt.Sprintf("  - {name: %s, uri: %q, cps: %g, max_wait: %s%s}", c.name, c.uri, c.cps, c.maxWait, extra))
		names = append(names, c.name)
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return fmt.Sprintf(e2eYAML, o.unknown, f(o.peerCPS), f(o.acme), f(o.globex), strings.Join(cs, "\n"), strings.Join(names, ", "))
}

// startE2E runs redis-server, the real stores and the proxy.
func startE2E(t *testing.T, o e2eOpts) *harness {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	redistest.Require(t, "sipp")
	srv := redistest.Start(t)
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
	if o.edit != nil {
		o.edit(cfg)
	}
	return startProxy(t, cfg, adm, pacing.NewPacer(slots))
}

// sipp runs SIPp to completion (bounded by limit) in a temporary directory
// and returns its exit code and output.
func sipp(t *testing.T, limit time.Duration, args ...string) (int, string) {
	t.Helper()
	return sippIn(t, t.TempDir(), limit, args...)
}

// sippIn is sipp run in dir, where SIPp leaves its files (-trace_counts).
func sippIn(t *testing.T, dir string, limit time.Duration, args ...string) (int, string) {
	t.Helper()
	bin := redistest.Require(t, "sipp")
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	full := append([]string{"-nostdin", "-trace_err", "-timeout", strconv.Itoa(int(limit.Seconds())) + "s"}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			t.Fatalf("sipp: %v", err)
		}
	}
	if code != 0 {
		// Keep SIPp's own account of what went wrong.
		logs, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 4000 {
				b = b[:4000]
			}
			out = append(out, b...)
		}
	}
	return code, string(out)
}

func scenario(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "testdata", "sipp", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tail keeps the end of SIPp's output for failure messages.
func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// gaps lists the times between arrivals, for failure messages.
func gaps(arr []time.Time) string {
	var b strings.Builder
	for i := 1; i < len(arr); i++ {
		fmt.Fprintf(&b, "%.1f ", float64(arr[i].Sub(arr[i-1]).Microseconds())/1000)
	}
	return b.String() + "(ms)"
}

func calls(h *harness, peer, outcome string) int {
	return int(testutil.ToFloat64(h.m.Calls.WithLabelValues(peer, outcome)))
}

// waitCalls waits until every call of a load has its outcome counted.
func waitCalls(t *testing.T, h *harness, peer string, want int) {
	t.Helper()
	outcomes := []string{metrics.OutcomeForwarded, metrics.OutcomeRejectedCPS, metrics.OutcomeRejectedQueue,
		metrics.OutcomeRejectedForbidden, metrics.OutcomeRejectedStore, metrics.OutcomeCanceled}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, detail := 0, ""
		for _, o := range outcomes {
			n += calls(h, peer, o)
			detail += fmt.Sprintf("%s=%d ", o, calls(h, peer, o))
		}
		active := h.p.active.Load()
		if n >= want && active == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("outcomes for %s: %s(want %d in all), active handlers %d", peer, detail, want, active)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Case 1: offered 3 × the peer's CPS for 5 s, the carrier sees at most the
// limit in every rolling second, at least 95 % of limit × seconds get
// through, and every call is answered.
func TestE2EPeerLimitHoldsAtCarrier(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	const limit, seconds = 20, 5
	h := startE2E(t, e2eOpts{peerCPS: limit, acme: 1000, globex: 1000,
		carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 1000, time.Second}}})
	offered := 3 * limit * seconds
	code, out := sipp(t, 40*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", strconv.Itoa(3*limit), "-m", strconv.Itoa(offered), "-l", "500", h.udp)
	if code != 0 {
		t.Fatalf("sipp exit %d (every call must be answered with 200 or 503):\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-1", offered)
	arr := car.Arrivals()
	if got := siptest.MaxInWindow(arr, time.Second); got > limit {
		t.Errorf("max INVITEs in a rolling second at the carrier = %d, want <= %d; gaps: %s", got, limit, gaps(arr))
	}
	if min := limit * seconds * 95 / 100; len(arr) < min {
		t.Errorf("forwarded = %d, want >= %d (95%% of %d × %d s)", len(arr), min, limit, seconds)
	}
	fwd, rej := calls(h, "dialer-1", metrics.OutcomeForwarded), calls(h, "dialer-1", metrics.OutcomeRejectedCPS)
	if fwd != len(arr) || fwd+rej != offered {
		t.Errorf("forwarded %d + rejected_cps %d, carrier saw %d; want forwarded = carrier and sum = %d", fwd, rej, len(arr), offered)
	}
	if n := car.Count("BYE"); n != len(arr) {
		t.Errorf("BYEs at the carrier = %d, want %d (one per answered call)", n, len(arr))
	}
}

// Case 2: two carriers at 20 CPS with max_wait 1 s, offered 60 CPS: each
// carrier stays within 20 in every rolling second, the overflow of the
// first goes to the second, the rest gets 503 (rejected_queue).
func TestE2ECarrierPacingAndOverflow(t *testing.T) {
	a := siptest.StartCarrier(t, "127.0.0.1", nil)
	b := siptest.StartCarrier(t, "127.0.0.1", nil)
	const cps, seconds = 20, 5
	h := startE2E(t, e2eOpts{peerCPS: 1000, acme: 1000, globex: 1000, carriers: []e2eCarrier{
		{"a", "sip:" + a.Addr, cps, time.Second}, {"b", "sip:" + b.Addr, cps, time.Second}}})
	offered := 3 * cps * seconds
	code, out := sipp(t, 40*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", strconv.Itoa(3*cps), "-m", strconv.Itoa(offered), "-l", "500", h.udp)
	if code != 0 {
		t.Fatalf("sipp exit %d:\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-1", offered)
	for _, c := range []struct {
		name string
		car  *siptest.Carrier
	}{{"a", a}, {"b", b}} {
		if got := siptest.MaxInWindow(c.car.Arrivals(), time.Second); got > cps {
			t.Errorf("carrier %s: max INVITEs in a rolling second = %d, want <= %d; gaps: %s", c.name, got, cps, gaps(c.car.Arrivals()))
		}
	}
	na, nb := len(a.Arrivals()), len(b.Arrivals())
	// Each carrier can take cps × (seconds + max_wait) at most; the first is
	// filled before the second gets anything. The floors are loose (three
	// quarters): a loaded box wakes some slots late, and a late wake takes
	// the next slot; the ceilings above are the promise.
	if na < cps*seconds*3/4 {
		t.Errorf("carrier a got %d calls, want >= %d (kept busy)", na, cps*seconds*3/4)
	}
	if nb < cps*seconds*3/4 {
		t.Errorf("carrier b got %d calls, want >= %d (overflow goes to the second carrier)", nb, cps*seconds*3/4)
	}
	fwd := calls(h, "dialer-1", metrics.OutcomeForwarded)
	queue := calls(h, "dialer-1", metrics.OutcomeRejectedQueue)
	if fwd != na+nb || fwd+queue != offered || queue == 0 {
		t.Errorf("forwarded %d (carriers %d+%d), rejected_queue %d; want forwarded = carriers, sum = %d, some 503s",
			fwd, na, nb, queue, offered)
	}
	if n := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("a", "full")); n == 0 {
		t.Errorf("reroutes_total{a,full} = 0, want overflow counted")
	}
}

// Case 3: a customer limit below the peer's binds; a customer header the
// peer may not use gets 403.
func TestE2ECustomerLimitAndForbiddenHeader(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	const limit, seconds = 10, 3
	h := startE2E(t, e2eOpts{peerCPS: 50, acme: 1000, globex: limit,
		carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 1000, time.Second}}})
	offered := 3 * limit * seconds
	code, out := sipp(t, 30*time.Second, "-sf", scenario(t, "uac_customer.xml"), "-key", "customer", "globex",
		"-i", "127.0.0.2", "-s", "100", "-r", strconv.Itoa(3*limit), "-m", strconv.Itoa(offered), h.udp)
	if code != 0 {
		t.Fatalf("sipp exit %d:\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-1", offered)
	arr := car.Arrivals()
	if got := siptest.MaxInWindow(arr, time.Second); got > limit {
		t.Errorf("max INVITEs in a rolling second = %d, want <= %d (customer limit); gaps: %s", got, limit, gaps(arr))
	}
	if min := limit * seconds * 95 / 100; len(arr) < min {
		t.Errorf("forwarded = %d, want >= %d", len(arr), min)
	}
	if n := testutil.ToFloat64(h.m.Admission.WithLabelValues("customer", "globex", metrics.ResultRejected)); n == 0 {
		t.Errorf("admission_total{customer,globex,rejected} = 0, want the customer bucket to refuse")
	}
	if n := testutil.ToFloat64(h.m.Admission.WithLabelValues("peer", "dialer-1", metrics.ResultRejected)); n != 0 {
		t.Errorf("admission_total{peer,dialer-1,rejected} = %v, want 0 (peer limit not reached)", n)
	}

	// dialer-3 may not name globex.
	before := len(car.Arrivals())
	code, out = sipp(t, 20*time.Second, "-sf", scenario(t, "uac_customer.xml"), "-key", "customer", "globex",
		"-i", "127.0.0.3", "-s", "100", "-r", "10", "-m", "5", h.udp)
	if code != 0 {
		t.Fatalf("sipp exit %d (403 is a normal outcome):\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-3", 5)
	if n := calls(h, "dialer-3", metrics.OutcomeRejectedForbidden); n != 5 {
		t.Errorf("calls_total{dialer-3,rejected_forbidden} = %d, want 5", n)
	}
	if n := len(car.Arrivals()); n != before {
		t.Errorf("carrier saw %d forbidden calls", n-before)
	}
}

// Case 4: an unknown source gets 403, or nothing in drop mode; the carrier
// sees nothing either way.
func TestE2EUnknownSource(t *testing.T) {
	for _, mode := range []string{"reject", "drop"} {
		t.Run(mode, func(t *testing.T) {
			car := siptest.StartCarrier(t, "127.0.0.1", nil)
			h := startE2E(t, e2eOpts{unknown: mode, peerCPS: 100, acme: 100, globex: 100,
				carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 100, time.Second}}})
			args := []string{"-sf", scenario(t, "uac.xml"), "-i", "127.0.0.9", "-s", "100", "-r", "10", "-m", "3", h.udp}
			if mode == "drop" {
				args = append(args, "-recv_timeout", "1500", "-nd", "-max_retrans", "1")
			}
			code, out := sipp(t, 20*time.Second, args...)
			switch {
			case mode == "reject" && code != 0:
				t.Fatalf("sipp exit %d, want 0 (403 is a normal outcome):\n%s", code, tail(out))
			case mode == "drop" && code == 0:
				t.Fatalf("sipp exit 0, want failed calls (no answer in drop mode):\n%s", tail(out))
			}
			// In drop mode a stranger's datagram is dropped before it is
			// parsed: it is counted as an error, not as a call.
			if mode == "drop" {
				if n := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("unknown_source")); n < 3 {
					t.Errorf("sip_errors_total{unknown_source} = %v, want >= 3", n)
				}
			} else if n := calls(h, PeerUnknown, metrics.OutcomeRejectedForbidden); n < 3 {
				t.Errorf("calls_total{unknown,rejected_forbidden} = %d, want >= 3", n)
			}
			if n := car.Count("INVITE"); n != 0 {
				t.Errorf("carrier INVITEs = %d, want 0", n)
			}
		})
	}
}

// Case 5: CANCEL while queued gets 487 and the carrier never sees the call;
// CANCEL after forwarding reaches the carrier.
func TestE2ECancel(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		car := siptest.StartCarrier(t, "127.0.0.1", nil)
		// 0.2 CPS: after one call the next slot is 5 s away.
		h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100,
			carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 0.2, 10 * time.Second}}})
		caller := siptest.StartCaller(t, "127.0.0.2")
		if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
			t.Fatalf("first call: %v, want 200", res)
		}
		code, out := sipp(t, 20*time.Second, "-sf", scenario(t, "uac_cancel.xml"), "-i", "127.0.0.2", "-s", "100",
			"-m", "1", h.udp)
		if code != 0 {
			t.Fatalf("sipp exit %d (want 200 to CANCEL, 487 to INVITE):\n%s", code, tail(out))
		}
		waitCalls(t, h, "dialer-1", 2)
		if n := calls(h, "dialer-1", metrics.OutcomeCanceled); n != 1 {
			t.Errorf("calls_total{canceled} = %d, want 1", n)
		}
		if n := car.Count("INVITE"); n != 1 {
			t.Errorf("carrier INVITEs = %d, want 1 (the cancelled call never sent)", n)
		}
		if q := testutil.ToFloat64(h.m.Queued.WithLabelValues("a")); q != 0 {
			t.Errorf("queued = %v, want 0", q)
		}
	})
	t.Run("forwarded", func(t *testing.T) {
		car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Ring: -1} })
		h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100,
			carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 100, time.Second}}})
		code, out := sipp(t, 20*time.Second, "-sf", scenario(t, "uac_cancel.xml"), "-i", "127.0.0.2", "-s", "100",
			"-m", "2", "-r", "10", h.udp)
		if code != 0 {
			t.Fatalf("sipp exit %d:\n%s", code, tail(out))
		}
		waitFor(t, func() bool { return car.Cancelled() == 2 }, "2 CANCELs at the carrier")
		if n := car.Count("INVITE"); n != 2 {
			t.Errorf("carrier INVITEs = %d, want 2", n)
		}
	})
}

// Case 6: BYE travels through the proxy via Record-Route, over UDP and over
// TCP on both legs.
func TestE2EByeViaRecordRouteUDPAndTCP(t *testing.T) {
	for _, tp := range []string{"udp", "tcp"} {
		t.Run(tp, func(t *testing.T) {
			car := siptest.StartCarrier(t, "127.0.0.1", nil)
			uri := "sip:" + car.Addr
			if tp == "tcp" {
				uri += ";transport=tcp"
			}
			h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100,
				carriers: []e2eCarrier{{"a", uri, 100, time.Second}}})
			target, mode := h.udp, "u1"
			if tp == "tcp" {
				target, mode = h.tcp, "t1"
			}
			code, out := sipp(t, 30*time.Second, "-sf", scenario(t, "uac.xml"), "-t", mode, "-i", "127.0.0.2", "-s", "100",
				"-d", "100", "-r", "10", "-m", "10", target)
			if code != 0 {
				t.Fatalf("sipp exit %d:\n%s", code, tail(out))
			}
			waitFor(t, func() bool { return car.Count("BYE") == 10 }, "10 BYEs at the carrier")
			if n := car.Count("ACK"); n != 10 {
				t.Errorf("ACKs at the carrier = %d, want 10", n)
			}
			inv := car.Invites()
			if len(inv) == 0 || inv[0].Transport() != strings.ToUpper(tp) {
				t.Fatalf("carrier INVITE transport = %v, want %s", inv, tp)
			}
			if rr := inv[0].RecordRoute(); rr == nil {
				t.Errorf("forwarded INVITE has no Record-Route")
			}
		})
	}
}

// Case 7: a carrier answering 503 moves the call to the next carrier, where
// it completes; after down_after (3) such answers in a row the node probes
// it at once, down_after probes get 503 too, so it is marked down (passive
// detection, confirmed) and later calls skip it without trying. Both
// carriers are SIPp here, so the scenarios are proven too.
func TestE2ERerouteOnCarrier503(t *testing.T) {
	p1, p2 := redistest.FreePort(t), redistest.FreePort(t)
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"down", fmt.Sprintf("sip:127.0.0.1:%d", p1), 100, time.Second},
		{"up", fmt.Sprintf("sip:127.0.0.1:%d", p2), 100, time.Second}},
		// Probes every hour: the first one, at start, fails before SIPp
		// starts (one failure, not three); the one the failed calls ask
		// for marks "down" down.
		carrierExtra: map[string]string{
			"down": "probe: {interval: 1h, timeout: 100ms, down_after: 3, up_after: 1}",
			"up":   "probe: {interval: 1h, timeout: 100ms, down_after: 3, up_after: 1}",
		}})
	for _, name := range []string{"down", "up"} {
		waitFor(t, func() bool {
			return testutil.ToFloat64(h.m.CarrierProbes.WithLabelValues(name, metrics.ProbeFailed)) == 1
		}, "the first probe of "+name)
	}
	const n, downAfter = 10, 3
	var wg sync.WaitGroup
	results := make([]struct {
		code int
		out  string
	}, 2)
	for i, sc := range []struct {
		file  string
		port  int
		calls int
	}{{"uas_503.xml", p1, 2*downAfter - 1}, {"uas.xml", p2, n}} { // + the confirming probes: down_after - 1, the probe at start failed already
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].code, results[i].out = sipp(t, 30*time.Second, "-sf", scenario(t, sc.file), "-i", "127.0.0.1",
				"-p", strconv.Itoa(sc.port), "-m", strconv.Itoa(sc.calls))
		}()
	}
	waitUDPBound(t, "127.0.0.1", p1, p2)
	code, out := sipp(t, 30*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "10", "-m", strconv.Itoa(n), h.udp)
	wg.Wait()
	if code != 0 {
		t.Errorf("caller sipp exit %d (every call must complete on the second carrier):\n%s", code, tail(out))
	}
	for i, name := range []string{"uas_503", "uas"} {
		if results[i].code != 0 || code != 0 {
			t.Errorf("carrier %s sipp exit %d:\n%s", name, results[i].code, tail(results[i].out))
		}
	}
	if r := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("down", "failed")); r != downAfter {
		t.Errorf("reroutes_total{down,failed} = %v, want %d (then the carrier is down)", r, downAfter)
	}
	if r := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("down", "down")); r != n-downAfter {
		t.Errorf("reroutes_total{down,down} = %v, want %d (skipped while down)", r, n-downAfter)
	}
	if up := testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("down")); up != 0 {
		t.Errorf("carrier_up{down} = %v, want 0", up)
	}
	if up := testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("up")); up != 1 {
		t.Errorf("carrier_up{up} = %v, want 1", up)
	}
}

// Case 8: garbage datagrams and truncated messages interleaved with real
// calls: the calls still complete, the junk is counted.
func TestE2EGarbageInterleavedWithCalls(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100,
		carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 100, time.Second}}})
	var junk [][]byte
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "sip", "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		junk = append(junk, b)
	}
	if len(junk) == 0 {
		t.Fatal("no fixtures in testdata/sip")
	}
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		sent := 0
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- sent
				return
			case <-tick.C:
				for _, src := range []string{"127.0.0.2", "127.0.0.7"} {
					siptest.WriteRaw(t, src, h.udp, junk[sent%len(junk)])
					sent++
				}
			}
		}
	}()
	const n = 40
	code, out := sipp(t, 30*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "20", "-m", strconv.Itoa(n), h.udp)
	close(stop)
	sent := <-done
	if code != 0 {
		t.Fatalf("sipp exit %d with junk interleaved:\n%s", code, tail(out))
	}
	waitFor(t, func() bool { return car.Count("BYE") == n }, "every call completed")
	if errs := errorsCounted(h.m); errs == 0 {
		t.Errorf("sip_errors_total = 0 after %d junk messages", sent)
	}
}

// Every call ends: after a SIPp load through the real stores, the
// goroutine count returns to where it was before the load.
func TestE2EGoroutinesReturnAfterLoad(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startE2E(t, e2eOpts{peerCPS: 30, acme: 1000, globex: 1000,
		carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 40, time.Second}}})
	// Warm up sockets, pools and the Redis connection pool.
	if code, out := sipp(t, 20*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "20", "-m", "20", h.udp); code != 0 {
		t.Fatalf("warm-up sipp exit %d:\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-1", 20)
	time.Sleep(200 * time.Millisecond)
	base := runtime.NumGoroutine()

	// 3 s at twice the peer limit: forwarded, paced and rejected calls.
	code, out := sipp(t, 30*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "60", "-m", "180", "-l", "500", h.udp)
	if code != 0 {
		t.Fatalf("sipp exit %d:\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-1", 200)
	var now int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if now = runtime.NumGoroutine(); now <= base+5 {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("goroutines = %d after the load, %d before\n%s", now, base, buf[:runtime.Stack(buf, true)])
}

// waitUDPBound waits until something listens on each UDP port of ip (a
// SIPp carrier started in the background), reading /proc/net/udp rather
// than probing the port, which could take it from the process starting.
func waitUDPBound(t *testing.T, ip string, ports ...int) {
	t.Helper()
	a := netip.MustParseAddr(ip).As4()
	deadline := time.Now().Add(10 * time.Second)
	for _, port := range ports {
		// /proc/net/udp shows the address little-endian in hex.
		want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], port)
		for {
			b, err := os.ReadFile("/proc/net/udp")
			if err != nil {
				t.Fatalf("read /proc/net/udp: %v", err)
			}
			if strings.Contains(string(b), " "+want+" ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nothing bound to udp %s:%d within 10s", ip, port)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Carrier health (issue 12): a carrier with nothing listening is marked
// down by its probes and skipped without a setup timeout; once a SIPp
// carrier listens on its port, its probes bring it back and calls go to it
// again.
func TestE2EDeadCarrierSkippedThenBack(t *testing.T) {
	pDead := redistest.FreePort(t)
	live := siptest.StartCarrier(t, "127.0.0.1", nil)
	const probe = "probe: {interval: 200ms, timeout: 100ms, down_after: 2, up_after: 2}"
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"first", fmt.Sprintf("sip:127.0.0.1:%d", pDead), 100, time.Second},
		{"second", "sip:" + live.Addr, 100, time.Second}},
		carrierExtra: map[string]string{"first": probe, "second": probe}})

	waitFor(t, func() bool { return testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("first")) == 0 }, "the dead carrier marked down")
	const n = 10
	code, out := sipp(t, 30*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "10", "-m", strconv.Itoa(n), h.udp)
	if code != 0 {
		t.Fatalf("caller sipp exit %d:\n%s", code, tail(out))
	}
	if got := live.Count("INVITE"); got != n {
		t.Errorf("live carrier got %d INVITEs, want %d", got, n)
	}
	if r := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("first", metrics.RerouteDown)); r != n {
		t.Errorf("reroutes_total{first,down} = %v, want %d: every call skips the down carrier", r, n)
	}
	if r := testutil.ToFloat64(h.m.CarrierResponses.WithLabelValues("first", metrics.ClassTimeout)); r != 0 {
		t.Errorf("carrier_responses_total{first,timeout} = %v, want 0: no call waited for the dead carrier", r)
	}
	if r := testutil.ToFloat64(h.m.CarrierProbes.WithLabelValues("second", metrics.ProbeOK)); r < 1 {
		t.Errorf("carrier_probes_total{second,ok} = %v, want >= 1 (siptest answers OPTIONS 200)", r)
	}

	// The carrier comes back: SIPp (uas.xml answers OPTIONS 200) on its port.
	bin := redistest.Require(t, "sipp")
	ctx, cancel := context.WithCancel(context.Background())
	back := exec.CommandContext(ctx, bin, "-nostdin", "-sf", scenario(t, "uas.xml"), "-i", "127.0.0.1",
		"-p", strconv.Itoa(pDead), "-bg", "-timeout", "30s")
	back.Dir = t.TempDir()
	if err := back.Start(); err != nil {
		cancel()
		t.Fatalf("start sipp carrier: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = back.Wait() })
	waitFor(t, func() bool { return testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("first")) == 1 }, "the carrier back up")
	code, out = sipp(t, 30*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.3", "-s", "100",
		"-r", "10", "-m", "3", h.udp)
	if code != 0 {
		t.Fatalf("caller sipp exit %d after the carrier came back:\n%s", code, tail(out))
	}
	if got := live.Count("INVITE"); got != n {
		t.Errorf("live carrier got %d INVITEs after the first carrier came back, want still %d", got, n)
	}
	if r := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("first", metrics.RerouteDown)); r != n {
		t.Errorf("reroutes_total{first,down} = %v after it came back, want still %d", r, n)
	}
}

// When every carrier of a route is down the call is refused at once (503,
// outcome rejected_down), before admission: it costs its peer nothing.
func TestE2EAllCarriersDownRefusedAtOnce(t *testing.T) {
	pDead := redistest.FreePort(t)
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"gone", fmt.Sprintf("sip:127.0.0.1:%d", pDead), 100, time.Second}},
		carrierExtra: map[string]string{"gone": "probe: {interval: 100ms, timeout: 50ms, down_after: 1, up_after: 1}"}})
	waitFor(t, func() bool { return testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("gone")) == 0 }, "the carrier marked down")
	code, out := sipp(t, 30*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "10", "-m", "5", h.udp)
	if code != 0 {
		t.Fatalf("caller sipp exit %d (503 is a normal outcome of uac.xml):\n%s", code, tail(out))
	}
	if !strings.Contains(out, "503") {
		t.Errorf("caller saw no 503:\n%s", tail(out))
	}
	var down float64
	for _, p := range []string{"dialer-1", "dialer-3", PeerUnknown} {
		down += testutil.ToFloat64(h.m.Calls.WithLabelValues(p, metrics.OutcomeRejectedDown))
	}
	if down != 5 {
		t.Errorf("calls_total{outcome=rejected_down} = %v, want 5", down)
	}
	if a := testutil.CollectAndCount(h.m.Admission); a != 0 {
		t.Errorf("%d admission series: a call to a route that is all down was admitted (counted) first", a)
	}
}

// An adaptive carrier that polices 20 CPS itself (503 above it), offered
// 40 CPS through a carrier configured at 40: its overload answers lower the
// pool's effective rate (AIMD) until it settles just under 20, and the
// carrier refuses few calls once it has. CPSGUARD_ADAPTIVE_CSV=path writes
// the curve (seconds, effective cps, accepted and refused in the last
// second) for bench/adaptive.sh to plot.
func TestE2EAdaptiveCarrierSettlesUnderItsLimit(t *testing.T) {
	const limit, offered = 20, 40
	seconds := 8 // CPSGUARD_ADAPTIVE_SECONDS: longer runs for the benchmark's curve
	if v, err := strconv.Atoi(os.Getenv("CPSGUARD_ADAPTIVE_SECONDS")); err == nil && v >= 4 && v <= 120 {
		seconds = v
	}
	type answer struct {
		at time.Time
		ok bool
	}
	var mu sync.Mutex
	var answers []answer
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		n := 0
		for i := len(answers) - 1; i >= 0 && now.Sub(answers[i].at) < time.Second; i-- {
			if answers[i].ok {
				n++
			}
		}
		ok := n < limit
		answers = append(answers, answer{now, ok})
		if !ok {
			return siptest.Answer{Code: 503}
		}
		return siptest.Answer{}
	})
	h := startE2E(t, e2eOpts{peerCPS: 1000, acme: 1000, globex: 1000,
		carriers:     []e2eCarrier{{"policed", "sip:" + car.Addr, offered, time.Second}},
		carrierExtra: map[string]string{"policed": "adaptive: true"}})

	type sample struct {
		at  time.Duration
		eff float64
	}
	var samples []sample
	start := time.Now()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				samples = append(samples, sample{time.Since(start), testutil.ToFloat64(h.m.EffectiveCPS.WithLabelValues("policed"))})
			}
		}
	}()
	code, out := sipp(t, 60*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", strconv.Itoa(offered), "-m", strconv.Itoa(offered*seconds), h.udp)
	close(stop)
	<-sampled
	if code != 0 {
		t.Fatalf("caller sipp exit %d (503 is a normal outcome of uac.xml):\n%s", code, tail(out))
	}

	mu.Lock()
	defer mu.Unlock()
	lowest, settled, n := float64(offered), 0.0, 0
	for _, s := range samples {
		lowest = min(lowest, s.eff)
		if s.at > time.Duration(seconds)*time.Second/2 && s.at < time.Duration(seconds)*time.Second {
			settled += s.eff
			n++
		}
	}
	if lowest >= offered {
		t.Fatalf("effective cps never went below %d: the carrier's 503s did not lower it", offered)
	}
	if n == 0 {
		t.Fatal("no samples in the second half of the run")
	}
	// The rate settles near the carrier's limit. Above it only as far as the
	// node itself sends less than its rate (late wakes on a loaded box give
	// the carrier fewer calls, so fewer 503s push the rate down): the
	// carrier's refusals below are what the operator sees.
	if mean := settled / float64(n); mean < 0.6*limit || mean > 1.3*limit {
		t.Errorf("mean effective cps in the second half = %.1f, want near the carrier's own limit %d", mean, limit)
	}
	var ok, refused int
	half := start.Add(time.Duration(seconds) * time.Second / 2)
	for _, a := range answers {
		if a.at.Before(half) {
			continue
		}
		if a.ok {
			ok++
		} else {
			refused++
		}
	}
	if ok == 0 || refused > (ok+refused)/5 {
		t.Errorf("second half: the carrier accepted %d and refused %d calls, want at most 20 %% refused once settled", ok, refused)
	}
	if p := os.Getenv("CPSGUARD_ADAPTIVE_CSV"); p != "" {
		var b strings.Builder
		b.WriteString("seconds,effective_cps,accepted_last_second,refused_last_second\n")
		for _, s := range samples {
			at := start.Add(s.at)
			var acc, ref int
			for _, a := range answers {
				if !a.at.After(at) && at.Sub(a.at) < time.Second {
					if a.ok {
						acc++
					} else {
						ref++
					}
				}
			}
			fmt.Fprintf(&b, "%.1f,%.3f,%d,%d\n", s.at.Seconds(), s.eff, acc, ref)
		}
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("effective cps: lowest %.1f, mean in the second half %.1f; carrier second half: %d accepted, %d refused", lowest, settled/float64(n), ok, refused)
}

// A peer cannot take a live carrier away from everyone: calls it makes
// fail at the carrier (here every INVITE gets 500, as a carrier answers
// numbers it cannot route) ask for a probe, the carrier answers it, and it
// stays up for every other call.
func TestE2EFailedCallsDoNotDownALiveCarrier(t *testing.T) {
	refusing := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 500} })
	live := siptest.StartCarrier(t, "127.0.0.1", nil)
	const probe = "probe: {interval: 1h, timeout: 1s, down_after: 3, up_after: 2}"
	h := startE2E(t, e2eOpts{peerCPS: 100, acme: 100, globex: 100, carriers: []e2eCarrier{
		{"refusing", "sip:" + refusing.Addr, 100, time.Second},
		{"live", "sip:" + live.Addr, 100, time.Second}},
		carrierExtra: map[string]string{"refusing": probe, "live": probe}})
	const n = 10
	code, out := sipp(t, 30*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "10", "-m", strconv.Itoa(n), h.udp)
	if code != 0 {
		t.Fatalf("caller sipp exit %d:\n%s", code, tail(out))
	}
	if r := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("refusing", "failed")); r != n {
		t.Errorf("reroutes_total{refusing,failed} = %v, want %d: every call tried it (it stays up)", r, n)
	}
	if up := testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("refusing")); up != 1 {
		t.Errorf("carrier_up{refusing} = %v, want 1: its probes answer", up)
	}
	// The probe at start, then at least one the failed calls asked for
	// (a failure that lands while a probe is out is absorbed when the
	// probe succeeds, so how many depends on timing).
	// Counted as sent (ok or failed): on a loaded machine the probe at
	// start may time out, which is one failure, not down_after.
	probes := func() (ok, failed float64, got int) {
		return testutil.ToFloat64(h.m.CarrierProbes.WithLabelValues("refusing", metrics.ProbeOK)),
			testutil.ToFloat64(h.m.CarrierProbes.WithLabelValues("refusing", metrics.ProbeFailed)), refusing.Count("OPTIONS")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, failed, got := probes()
		if ok+failed >= 2 && got >= 1 {
			// The probe at start plus a confirming one were sent (on a
			// loaded machine the first may fail before it leaves: the
			// carrier then counts one), and the carrier answered.
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no confirming probe: probes ok %v, failed %v; OPTIONS at the carrier %d; carrier_up %v; reroutes{refusing,failed} %v",
				ok, failed, got, testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("refusing")),
				testutil.ToFloat64(h.m.Reroutes.WithLabelValues("refusing", "failed")))
		}
	}
	if up := testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("refusing")); up != 1 {
		t.Errorf("carrier_up{refusing} = %v after its confirming probe, want 1", up)
	}
}
