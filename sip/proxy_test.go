package sip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// fakeAdmitter answers admissions from a script.
type fakeAdmitter struct {
	mu      sync.Mutex
	refuse  int // index of the refusing bucket, -1 = admit
	err     error
	counts  []int // Decision.Counts of admissions
	mode    admission.Mode
	calls   int
	buckets [][]admission.Bucket
	members []string
}

func (f *fakeAdmitter) Admit(_ context.Context, member string, b []admission.Bucket) (admission.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.buckets = append(f.buckets, b)
	f.members = append(f.members, member)
	if f.err != nil {
		return admission.Decision{}, f.err
	}
	if f.refuse >= 0 {
		if f.refuse < len(b) && b[f.refuse].Over != admission.OverRefuse {
			// Over a bucket that lets the call through (shadow, count),
			// as the stores decide.
			over := make([]bool, len(b))
			over[f.refuse] = true
			return admission.Decision{Admit: true, Refused: -1, Counts: f.counts, Mode: f.mode, Over: over}, nil
		}
		return admission.Decision{Admit: false, Refused: f.refuse, RetryAfter: time.Second}, nil
	}
	return admission.Decision{Admit: true, Refused: -1, Counts: f.counts, Mode: f.mode}, nil
}

// fakePacer is a real pacing.Pacer (Acquire: slots, late wakes, the send
// gate) over a fake slot store that grants slots after a fixed wait, or
// none for full carriers, on the machine's clock woken late on demand.
type fakePacer struct {
	mu       sync.Mutex
	wait     time.Duration
	full     map[string]bool // by key
	err      error
	reserved []string // keys
	released []string // keys
	// paused are the spans of the pauses asked for (Pause); local keeps
	// the pauses and the overload evidence.
	paused []time.Duration
	local  *pacing.LocalSlots
	// rates are the adaptive carriers' effective rates (Adapt), by key;
	// overloads counts the decreases asked for; reservedCPS is the rate
	// each Acquire was asked to pace at.
	rates       map[string]float64
	overloads   int
	reservedCPS []float64
	// lateWakes makes the next sleeps of the pacer (waits for a slot, or
	// in the send gate) return that many times late by lateBy, as a
	// starved scheduler would: the clock jumps lateBy ahead.
	lateWakes int
	lateBy    time.Duration
	// ahead is how far the pacer's clock is ahead of the machine's (the
	// late wakes so far).
	ahead time.Duration
	// releasedMembers are the call attempts that gave a slot back.
	releasedMembers map[string]bool
	// queueWait is the wait Queue reports, by key.
	queueWait map[string]time.Duration

	once  sync.Once
	pacer *pacing.Pacer
}

func (f *fakePacer) init() *pacing.Pacer {
	f.once.Do(func() {
		f.local = pacing.NewLocalSlots(nil)
		f.pacer = pacing.NewPacerClock(fakeSlots{f}, fakeClock{f})
	})
	return f.pacer
}

func (f *fakePacer) Acquire(ctx context.Context, c pacing.Carrier, member string, trace pacing.Tracer, gate ...pacing.GateKey) (pacing.Ticket, error) {
	f.init()
	f.mu.Lock()
	f.reservedCPS = append(f.reservedCPS, c.CPS)
	f.mu.Unlock()
	return f.pacer.Acquire(ctx, c, member, trace, gate...)
}

// fakeClock is a fakePacer's clock: the machine's, ahead by the late
// wakes so far.
type fakeClock struct{ f *fakePacer }

func (c fakeClock) Now() time.Time {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return time.Now().Add(c.f.ahead)
}

func (c fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := pacing.SystemClock.Sleep(ctx, d); err != nil {
		return err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.lateWakes > 0 {
		c.f.lateWakes--
		c.f.ahead += c.f.lateBy
	}
	return nil
}

// fakeSlots is a fakePacer's slot store.
type fakeSlots struct{ f *fakePacer }

func (s fakeSlots) Reserve(ctx context.Context, key, member string, _ pacing.Share, _, maxWait time.Duration) (pacing.Slot, error) {
	f := s.f
	if st, err := f.local.Paused(ctx, key); err == nil && st.Paused && st.Left > 0 {
		return pacing.Slot{Paused: true, Wait: st.Left, Key: key, Member: member}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return pacing.Slot{}, f.err
	}
	if f.full[key] {
		return pacing.Slot{OK: false, Wait: maxWait + time.Second}, nil
	}
	f.reserved = append(f.reserved, key)
	wait := f.wait
	if f.releasedMembers[member] {
		// Taken again after a late wake: as in a real slot set with room,
		// the next slot is now (a fixed wait again would model a queue
		// that never drains).
		wait = 0
	}
	return pacing.Slot{OK: true, Wait: wait, Key: key, Member: member}, nil
}

func (s fakeSlots) Release(_ context.Context, key, member string) error {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, key)
	if f.releasedMembers == nil {
		f.releasedMembers = map[string]bool{}
	}
	f.releasedMembers[member] = true
	return nil
}

// The proxy adapts through fakePacer itself; pauses and evidence are a
// LocalSlots'.
var errFakeSlots = errors.New("fakeSlots: not used by Acquire")

func (s fakeSlots) Pause(ctx context.Context, key string, span time.Duration, reason string) (pacing.Pause, error) {
	return s.f.local.Pause(ctx, key, span, reason)
}

func (s fakeSlots) Paused(ctx context.Context, key string) (pacing.Pause, error) {
	return s.f.local.Paused(ctx, key)
}

func (s fakeSlots) ProbeDone(ctx context.Context, key, member string, ok bool) (pacing.Pause, error) {
	return s.f.local.ProbeDone(ctx, key, member, ok)
}

func (s fakeSlots) OpenPause(ctx context.Context, key string, minAge time.Duration) (pacing.Pause, error) {
	return s.f.local.OpenPause(ctx, key, minAge)
}

func (s fakeSlots) Unpause(ctx context.Context, key string) (pacing.Pause, error) {
	return s.f.local.Unpause(ctx, key)
}

func (s fakeSlots) Evidence(ctx context.Context, key, peer string, overload bool, w pacing.EvidenceWindows) (pacing.Evidence, error) {
	return s.f.local.Evidence(ctx, key, peer, overload, w)
}

func (fakeSlots) Adapt(context.Context, string, pacing.AIMD, bool) (pacing.Rate, error) {
	return pacing.Rate{}, errFakeSlots
}

func (fakeSlots) Queue(context.Context, string, time.Duration) (pacing.QueueState, error) {
	return pacing.QueueState{}, errFakeSlots
}

func (s fakeSlots) Respace(ctx context.Context, key, prefix string) (time.Time, error) {
	return s.f.local.Respace(ctx, key, prefix)
}

// Pause records the span and pauses the carrier in the fake's LocalSlots
// (Reserve refuses a paused carrier; no half-open).
func (f *fakePacer) Pause(ctx context.Context, c pacing.Carrier, span time.Duration, reason string) (pacing.Pause, error) {
	p := f.init()
	f.mu.Lock()
	f.paused = append(f.paused, span)
	f.mu.Unlock()
	return p.Pause(ctx, c, span, reason)
}

func (f *fakePacer) Paused(ctx context.Context, c pacing.Carrier) (pacing.Pause, error) {
	return f.init().Paused(ctx, c)
}

func (f *fakePacer) ProbeDone(ctx context.Context, c pacing.Carrier, member string, ok bool) (pacing.Pause, error) {
	return f.init().ProbeDone(ctx, c, member, ok)
}

func (f *fakePacer) OpenPause(ctx context.Context, c pacing.Carrier, minAge time.Duration) (pacing.Pause, error) {
	return f.init().OpenPause(ctx, c, minAge)
}

func (f *fakePacer) Unpause(ctx context.Context, c pacing.Carrier) (pacing.Pause, error) {
	return f.init().Unpause(ctx, c)
}

func (f *fakePacer) LocalPause(c pacing.Carrier) pacing.Pause { return f.init().LocalPause(c) }

// Queue reports the wait set for c in queueWait (0: none).
func (f *fakePacer) Queue(_ context.Context, c pacing.Carrier) (pacing.QueueState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return pacing.QueueState{Wait: f.queueWait[c.Key]}, nil
}

func (f *fakePacer) Evidence(ctx context.Context, c pacing.Carrier, peer string, overload bool, w pacing.EvidenceWindows) (pacing.Evidence, error) {
	return f.init().Evidence(ctx, c, peer, overload, w)
}

// Adapt cuts the rate in half on overload (no clock, no increase) and
// records each call.
func (f *fakePacer) Adapt(_ context.Context, c pacing.Carrier, a pacing.AIMD, overload bool) (pacing.Rate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rates == nil {
		f.rates = map[string]float64{}
	}
	r, ok := f.rates[c.Key]
	if !ok {
		r = a.Max
	}
	if overload {
		r = max(r*a.Decrease, a.Min)
		f.overloads++
	}
	f.rates[c.Key] = r
	return pacing.Rate{CPS: r, Cut: overload}, nil
}

func (f *fakePacer) Respace(ctx context.Context, c pacing.Carrier, gate pacing.GateKey, lowered bool) error {
	return f.init().Respace(ctx, c, gate, lowered)
}

func (f *fakePacer) counts() (reserved, released int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reserved), len(f.released)
}

func testConfig(carriers ...config.Carrier) *config.Config {
	names := make([]string, len(carriers))
	for i, c := range carriers {
		names[i] = c.Name
		if c.Probe == nil {
			// These tests are about the call path, and many read the raw
			// messages at a carrier: no OPTIONS probes in between (the
			// e2e tests run with probing on, the default).
			carriers[i].Probe = &config.Probe{}
		}
	}
	return &config.Config{
		SIP: config.SIP{
			Listen:        []string{"udp://127.0.0.1:0", "tcp://127.0.0.1:0"},
			RecordRoute:   true,
			UnknownSource: "reject",
			Reject:        config.Reject{Code: 503, Reason: "CPS Limit Exceeded"},
		},
		Store:          config.Store{KeyPrefix: "t"},
		CustomerHeader: "X-Customer",
		Peers: []config.Peer{{
			Name: "dialer-1", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")},
			CPS: 50, Customer: "acme", Customers: []string{"acme", "beta"},
		}},
		Customers: []config.Customer{{Name: "acme", CPS: 20}, {Name: "beta", CPS: 5}, {Name: "gamma", CPS: 5}},
		Carriers:  carriers,
		Routes:    map[string]config.Route{"default": config.OrderedRoute(names...)},
	}
}

func carrierCfg(name string, c *siptest.Carrier) config.Carrier {
	return config.Carrier{Name: name, URI: "sip:" + c.Addr, CPS: 100, MaxWait: time.Second}
}

type harness struct {
	p     *Proxy
	m     *metrics.Metrics
	udp   string // ip:port
	tcp   string
	adm   *fakeAdmitter
	pacer *fakePacer
}

func testLogger() *slog.Logger {
	if os.Getenv("SIP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func startProxy(t *testing.T, cfg *config.Config, adm Admitter, pacer Pacer) *harness {
	t.Helper()
	return startProxyWith(t, func() *config.Config { return cfg }, adm, pacer)
}

// startProxyWith is startProxy reading its configuration from cfg (a test
// swaps the snapshot to reload).
func startProxyWith(t *testing.T, cfg func() *config.Config, adm Admitter, pacer Pacer) *harness {
	t.Helper()
	return startProxyOpts(t, Options{Config: cfg, Admission: adm, Pacer: pacer})
}

// startProxyOpts starts a proxy with opts (metrics and logger are the
// harness's). Benchmarks use it too.
func startProxyOpts(t testing.TB, opts Options) *harness {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry())
	opts.Metrics = m
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	adm, pacer := opts.Admission, opts.Pacer
	p, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	select {
	case <-p.Ready():
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v", err)
		}
	})
	h := &harness{p: p, m: m}
	for _, a := range p.Addrs() {
		if s, ok := strings.CutPrefix(a, "udp://"); ok {
			h.udp = s
		}
		if s, ok := strings.CutPrefix(a, "tcp://"); ok {
			h.tcp = s
		}
	}
	if f, ok := adm.(*fakeAdmitter); ok {
		h.adm = f
	}
	if f, ok := pacer.(*fakePacer); ok {
		h.pacer = f
	}
	return h
}

func newFakes() (*fakeAdmitter, *fakePacer) {
	return &fakeAdmitter{refuse: -1}, &fakePacer{full: map[string]bool{}}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestNewRequiresOptions(t *testing.T) {
	adm, pacer := newFakes()
	cfg := func() *config.Config { return testConfig() }
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no config", Options{Admission: adm, Pacer: pacer}},
		{"no admission", Options{Config: cfg, Pacer: pacer}},
		{"no pacer", Options{Config: cfg, Admission: adm}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil {
				t.Fatalf("New(%s) = nil error, want error", tc.name)
			}
		})
	}
}

func TestForwardedCallIsRewrittenAndAnswered(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")

	res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 200 {
		t.Fatalf("final = %v, want 200", res)
	}
	if got := res.GetHeaders("Via"); len(got) != 1 {
		t.Errorf("response Vias = %d, want 1 (the proxy's removed)", len(got))
	}
	if res.RecordRoute() == nil {
		t.Errorf("200 OK has no Record-Route")
	}
	inv := car.Invites()
	if len(inv) != 1 {
		t.Fatalf("carrier INVITEs = %d, want 1", len(inv))
	}
	got := inv[0]
	if hp := got.Recipient.Host + ":" + itoa(got.Recipient.Port); hp != car.Addr {
		t.Errorf("Request-URI host:port = %s, want %s", hp, car.Addr)
	}
	if got.Recipient.User != "100" {
		t.Errorf("Request-URI user = %q, want 100", got.Recipient.User)
	}
	if n := len(got.GetHeaders("Via")); n != 2 {
		t.Errorf("carrier Vias = %d, want 2", n)
	}
	if v := got.Via(); v.Host != "127.0.0.1" || itoa(v.Port) != strings.Split(h.udp, ":")[1] {
		t.Errorf("top Via = %s, want the proxy %s", v.SentBy(), h.udp)
	}
	if mf := got.MaxForwards(); mf == nil || mf.Val() != 69 {
		t.Errorf("Max-Forwards = %v, want 69", mf)
	}
	if rr := got.RecordRoute(); rr == nil || !strings.Contains(rr.Value(), ";lr") {
		t.Errorf("Record-Route = %v, want the proxy with lr", rr)
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeForwarded)) == 1
	}, "calls_total{forwarded} = 1")
	if n := testutil.ToFloat64(h.m.Admission.WithLabelValues("customer", "acme", metrics.ResultAdmitted)); n != 1 {
		t.Errorf("admission_total{customer,acme,admitted} = %v, want 1", n)
	}
	if len(adm.buckets) != 1 || len(adm.buckets[0]) != 2 {
		t.Fatalf("admission calls = %v, want one call with peer and customer buckets", adm.buckets)
	}
	if k := adm.buckets[0][0].Key; k != "t:{peer:dialer-1}" {
		t.Errorf("peer bucket key = %q", k)
	}
	if k := adm.buckets[0][1].Key; k != "t:{customer:acme}" {
		t.Errorf("customer bucket key = %q", k)
	}
	if m := adm.members[0]; !strings.Contains(m, "/z9hG4bK") {
		t.Errorf("member = %q, want Call-ID/branch", m)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestRejections(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	for _, tc := range []struct {
		name    string
		cfg     func(*config.Config)
		adm     func(*fakeAdmitter)
		pacer   func(*fakePacer)
		src     string
		headers []string
		code    int
		outcome string
		peer    string
	}{
		{name: "unknown source", src: "127.0.0.9", code: 403, outcome: metrics.OutcomeRejectedForbidden, peer: PeerUnknown},
		{name: "customer header not allowed", src: "127.0.0.2", headers: []string{"X-Customer: gamma"}, code: 403, outcome: metrics.OutcomeRejectedForbidden},
		{name: "customer header unknown", src: "127.0.0.2", headers: []string{"X-Customer: nobody"}, code: 403, outcome: metrics.OutcomeRejectedForbidden},
		{name: "over limit", src: "127.0.0.2", adm: func(f *fakeAdmitter) { f.refuse = 1 }, code: 503, outcome: metrics.OutcomeRejectedCPS},
		{name: "over limit custom reject", src: "127.0.0.2", cfg: func(c *config.Config) {
			c.SIP.Reject = config.Reject{Code: 486, Reason: "Busy CPS", RetryAfter: 1500 * time.Millisecond}
		}, adm: func(f *fakeAdmitter) { f.refuse = 0 }, code: 486, outcome: metrics.OutcomeRejectedCPS},
		{name: "admission store error", src: "127.0.0.2", adm: func(f *fakeAdmitter) { f.err = errors.New("redis down") }, code: 503, outcome: metrics.OutcomeRejectedStore},
		{name: "pacing store error", src: "127.0.0.2", pacer: func(f *fakePacer) { f.err = errors.New("redis down") }, code: 503, outcome: metrics.OutcomeRejectedStore},
		{name: "carrier full", src: "127.0.0.2", pacer: func(f *fakePacer) { f.full["t:{carrier:a}"] = true }, code: 503, outcome: metrics.OutcomeRejectedQueue},
		{name: "shadow admits", src: "127.0.0.2", cfg: func(c *config.Config) { c.Shadow = true }, adm: func(f *fakeAdmitter) { f.refuse = 0 }, code: 200, outcome: metrics.OutcomeForwarded},
		{name: "max forwards zero", src: "127.0.0.2", headers: []string{"Max-Forwards: 0"}, code: 483},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(carrierCfg("a", car))
			if tc.cfg != nil {
				tc.cfg(cfg)
			}
			adm, pacer := newFakes()
			if tc.adm != nil {
				tc.adm(adm)
			}
			if tc.pacer != nil {
				tc.pacer(pacer)
			}
			h := startProxy(t, cfg, adm, pacer)
			caller := siptest.StartCaller(t, tc.src)
			before := car.Count("INVITE")
			res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp, tc.headers...))
			if res == nil || res.StatusCode != tc.code {
				t.Fatalf("final = %v, want %d", res, tc.code)
			}
			if tc.code == 486 {
				if ra := res.GetHeader("Retry-After"); ra == nil || ra.Value() != "2" {
					t.Errorf("Retry-After = %v, want 2", ra)
				}
				if res.Reason != "Busy CPS" {
					t.Errorf("reason = %q, want Busy CPS", res.Reason)
				}
			}
			if tc.code != 200 && car.Count("INVITE") != before {
				t.Errorf("carrier saw the rejected call")
			}
			if tc.outcome != "" {
				peer := tc.peer
				if peer == "" {
					peer = "dialer-1"
				}
				// The outcome is counted as the handler returns, just after the answer.
				waitFor(t, func() bool { return testutil.ToFloat64(h.m.Calls.WithLabelValues(peer, tc.outcome)) == 1 },
					"calls_total{"+peer+","+tc.outcome+"} = 1")
			}
		})
	}
}

func TestUnknownSourceDropIsSilent(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.UnknownSource = "drop"
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.9")
	tx, err := caller.Transaction(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	select {
	case r := <-tx.Responses():
		t.Fatalf("got %d, want silence", r.StatusCode)
	case <-time.After(1500 * time.Millisecond):
	}
	if n := car.Count("INVITE"); n != 0 {
		t.Errorf("carrier INVITEs = %d, want 0", n)
	}
}

func TestRerouteOnFullAndOnCarrier503(t *testing.T) {
	bad := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 503} })
	good := siptest.StartCarrier(t, "127.0.0.1", nil)
	third := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("bad", bad), carrierCfg("full", third), carrierCfg("good", good))
	adm, pacer := newFakes()
	pacer.full["t:{carrier:full}"] = true
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 200 {
		t.Fatalf("final = %v, want 200 from the third carrier", res)
	}
	if bad.Count("INVITE") != 1 || third.Count("INVITE") != 0 || good.Count("INVITE") != 1 {
		t.Errorf("INVITEs bad/full/good = %d/%d/%d, want 1/0/1", bad.Count("INVITE"), third.Count("INVITE"), good.Count("INVITE"))
	}
	if n := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("bad", "failed")); n != 1 {
		t.Errorf("reroutes{bad,failed} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("full", "full")); n != 1 {
		t.Errorf("reroutes{full,full} = %v, want 1", n)
	}
	if reserved, _ := pacer.counts(); reserved != 2 {
		t.Errorf("slots reserved = %d, want 2 (bad and good)", reserved)
	}
}

func TestAllCarriersFailRelaysLastFailure(t *testing.T) {
	bad := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 503} })
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("bad", bad)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 503 {
		t.Fatalf("final = %v, want the carrier's 503", res)
	}
}

func TestBusyIsFinal(t *testing.T) {
	busy := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 486} })
	good := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("busy", busy), carrierCfg("good", good)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 486 {
		t.Fatalf("final = %v, want 486", res)
	}
	if good.Count("INVITE") != 0 {
		t.Errorf("a 486 was rerouted")
	}
}

func TestCancelWhileQueued(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	pacer.wait = 3 * time.Second
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := ctxT(t, 5*time.Second)
	inv := caller.Invite(h.udp)
	tx, err := caller.Transaction(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	waitQueued(t, h, "a")
	cres := caller.Final(ctx, siptest.CancelFor(inv))
	if cres == nil || cres.StatusCode != 200 {
		t.Fatalf("CANCEL answer = %v, want 200", cres)
	}
	if res := finalOf(ctx, tx); res == nil || res.StatusCode != 487 {
		t.Fatalf("INVITE final = %v, want 487", res)
	}
	waitFor(t, func() bool { _, rel := pacer.counts(); return rel == 1 }, "slot released")
	waitFor(t, func() bool {
		return testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeCanceled)) == 1
	}, "outcome canceled")
	if n := car.Count("INVITE"); n != 0 {
		t.Errorf("carrier INVITEs = %d, want 0", n)
	}
	if q := testutil.ToFloat64(h.m.Queued.WithLabelValues("a")); q != 0 {
		t.Errorf("queued = %v, want 0", q)
	}
}

func TestCancelAfterForwardReachesCarrier(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Ring: -1} })
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := ctxT(t, 5*time.Second)
	inv := caller.Invite(h.udp)
	tx, err := caller.Transaction(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	for r := range tx.Responses() {
		if r.StatusCode == 180 {
			break
		}
	}
	if cres := caller.Final(ctx, siptest.CancelFor(inv)); cres == nil || cres.StatusCode != 200 {
		t.Fatalf("CANCEL answer = %v, want 200", cres)
	}
	if res := finalOf(ctx, tx); res == nil || res.StatusCode != 487 {
		t.Fatalf("INVITE final = %v, want 487", res)
	}
	waitFor(t, func() bool { return car.Count("CANCEL") == 1 || carrierCancelled(car) }, "CANCEL at the carrier")
}

// carrierCancelled: sipgo answers a matching CANCEL inside the transaction
// layer without calling the CANCEL handler, so the carrier's INVITE handler
// returning early is the sign; Count("CANCEL") covers unmatched ones.
func carrierCancelled(c *siptest.Carrier) bool { return c.Cancelled() > 0 }

func TestOptionsAndOtherMethods(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	peer := siptest.StartCaller(t, "127.0.0.2")
	stranger := siptest.StartCaller(t, "127.0.0.9")
	for _, tc := range []struct {
		from   *siptest.Caller
		method sipmsg.RequestMethod
		code   int
	}{
		{peer, sipmsg.OPTIONS, 200}, // a keepalive of a known party
		{peer, sipmsg.MESSAGE, 405},
		{peer, sipmsg.BYE, 405},
		{stranger, sipmsg.OPTIONS, 403}, // unknown_source: reject, for every method
		{stranger, sipmsg.REGISTER, 403},
	} {
		req := tc.from.Invite(h.udp)
		req.Method = tc.method
		res := tc.from.Final(ctxT(t, 5*time.Second), req)
		if res == nil || res.StatusCode != tc.code {
			t.Errorf("%s from %s: final = %v, want %d", tc.method, tc.from.Addr, res, tc.code)
		}
	}
}

// TestOptionsWhileStoreUnusable: an upstream dispatcher's keepalive gets
// 503 while the store cannot decide calls, so it routes around the node.
func TestOptionsWhileStoreUnusable(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	var usable atomic.Bool
	cfg := testConfig(carrierCfg("a", car))
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Usable: usable.Load})
	peer := siptest.StartCaller(t, "127.0.0.2")
	options := func() int {
		req := peer.Invite(h.udp)
		req.Method = sipmsg.OPTIONS
		if res := peer.Final(ctxT(t, 5*time.Second), req); res != nil {
			return res.StatusCode
		}
		return 0
	}
	if got := options(); got != 503 {
		t.Errorf("OPTIONS with the store unusable: %d, want 503", got)
	}
	usable.Store(true)
	if got := options(); got != 200 {
		t.Errorf("OPTIONS with the store usable: %d, want 200", got)
	}
}

func TestMalformedIsCountedAndCallsStillWork(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	fixtures, err := os.ReadDir("../testdata/sip")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fixtures {
		data, err := os.ReadFile("../testdata/sip/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		siptest.WriteRaw(t, "127.0.0.2", h.udp, data)
		n++
	}
	siptest.WriteRaw(t, "127.0.0.2", h.udp, make([]byte, 40000)) // oversized, zeros only: ignored
	siptest.WriteRaw(t, "127.0.0.2", h.udp, []byte(strings.Repeat("X", 40000)))
	caller := siptest.StartCaller(t, "127.0.0.2")
	res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 200 {
		t.Fatalf("call after garbage: final = %v, want 200", res)
	}
	waitFor(t, func() bool { return errorsCounted(h.m) >= float64(n) }, "sip errors counted")
	if n := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("oversized")); n < 1 {
		t.Errorf("sip_errors_total{oversized} = %v, want >= 1", n)
	}
}

func errorsCounted(m *metrics.Metrics) float64 {
	total := 0.0
	for _, r := range []string{"parse", "oversized", "malformed", "transaction", "source"} {
		total += testutil.ToFloat64(m.SIPErrors.WithLabelValues(r))
	}
	return total
}

func TestGoroutinesReturnToBaseline(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	pacer.wait = 20 * time.Millisecond
	// Limits above the load: the send gate holds no call past max_wait, so
	// with the default limits most of the burst would get 503 (that is
	// TestSendGateWaitDeadlineOnEveryLoop's business, not this test's).
	cfg := testConfig(carrierCfg("a", car))
	cfg.Carriers[0].CPS = 1000
	cfg.Peers[0].CPS = 1000
	cfg.Customers[0].CPS = 1000
	// And a bound on decisions in flight above the burst: shedding is
	// TestOverloadShedsNewCallsNotDialogs' business (the default, 32 per core, is 64 here).
	cfg.SIP.MaxInflight = 1000
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	// Warm up connections and pools, then measure.
	caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	time.Sleep(100 * time.Millisecond)
	base := runtime.NumGoroutine()

	var wg sync.WaitGroup
	var ok atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := caller.Final(ctxT(t, 10*time.Second), caller.Invite(h.udp))
			code := 0
			if res != nil {
				code = res.StatusCode
			}
			if code == 200 {
				ok.Add(1)
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if n := ok.Load(); n != 100 {
		t.Errorf("answered calls = %d, want 100 (final codes %v; 0: none)", n, codes)
	}
	waitFor(t, func() bool { return h.p.active.Load() == 0 }, "no active calls")
	var now int
	for i := 0; i < 100; i++ {
		now = runtime.NumGoroutine()
		if now <= base+5 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("goroutines = %d after load, baseline %d\n%s", now, base, buf[:runtime.Stack(buf, true)])
}

func finalOf(ctx context.Context, tx sipmsg.ClientTransaction) *sipmsg.Response {
	for {
		select {
		case r := <-tx.Responses():
			if !r.IsProvisional() {
				return r
			}
		case <-tx.Done():
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

func waitQueued(t *testing.T, h *harness, carrier string) {
	t.Helper()
	waitFor(t, func() bool { return testutil.ToFloat64(h.m.Queued.WithLabelValues(carrier)) >= 1 }, "call queued")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLargeInviteOverUDP(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	req := caller.Invite(h.udp, "Content-Type: application/sdp")
	req.SetBody([]byte("v=0\r\n" + strings.Repeat("a=x-padding:0123456789abcdef0123456789abcdef\r\n", 40)))
	res := caller.Final(ctxT(t, 5*time.Second), req)
	if res == nil || res.StatusCode != 200 {
		t.Fatalf("%d-byte INVITE: final = %v, want 200", len(req.String()), res)
	}
}

func TestServeDrainsCallsInFlight(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Ring: time.Second} })
	adm, pacer := newFakes()
	p, err := New(Options{Config: func() *config.Config { return testConfig(carrierCfg("a", car)) },
		Admission: adm, Pacer: pacer, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	<-p.Ready()
	addr := strings.TrimPrefix(p.Addrs()[0], "udp://")
	caller := siptest.StartCaller(t, "127.0.0.2")
	tx, err := caller.Transaction(ctxT(t, 10*time.Second), caller.Invite(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	waitFor(t, func() bool { return car.Count("INVITE") == 1 }, "call at the carrier")
	cancel() // shutdown while the carrier rings
	// Serve starts draining in its own goroutine: an INVITE sent before
	// that is an ordinary call, not the late one this test is about.
	waitFor(t, p.draining.Load, "draining")

	late := caller.Final(ctxT(t, 5*time.Second), caller.Invite(addr))
	if late == nil || late.StatusCode != 503 {
		t.Errorf("INVITE while draining: %v, want 503", late)
	}
	if res := finalOf(ctxT(t, 5*time.Second), tx); res == nil || res.StatusCode != 200 {
		t.Errorf("call in flight at shutdown: final %v, want the carrier's 200", res)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
	if car.Cancelled() != 0 {
		t.Errorf("carrier got a CANCEL for a call that could finish")
	}
}

// sip.drain_grace replaces the built-in 5 s: a call that rings for 6 s
// when the node starts to drain is still answered (with the 5 s constant
// it was cancelled: 503 upstream, CANCEL to the carrier).
func TestServeDrainGraceFromConfig(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Ring: 6 * time.Second} })
	adm, pacer := newFakes()
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.DrainGrace = 30 * time.Second
	p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	<-p.Ready()
	addr := strings.TrimPrefix(p.Addrs()[0], "udp://")
	caller := siptest.StartCaller(t, "127.0.0.2")
	tx, err := caller.Transaction(ctxT(t, 20*time.Second), caller.Invite(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	waitFor(t, func() bool { return car.Count("INVITE") == 1 }, "call at the carrier")
	cancel()
	waitFor(t, p.draining.Load, "draining")
	if res := finalOf(ctxT(t, 20*time.Second), tx); res == nil || res.StatusCode != 200 {
		t.Errorf("call ringing 6 s into a 30 s drain: final %v, want the carrier's 200", res)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after the last call ended")
	}
	if car.Cancelled() != 0 {
		t.Errorf("carrier got a CANCEL within the drain grace")
	}
}

func TestReloadAppliesToTheNextCall(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	before := testConfig(carrierCfg("a", car))
	after := testConfig(carrierCfg("a", car))
	after.Peers[0].Customers = append(after.Peers[0].Customers, "gamma")
	var mu sync.Mutex
	cur := before
	p, err := New(Options{Config: func() *config.Config { mu.Lock(); defer mu.Unlock(); return cur },
		Admission: adm, Pacer: pacer, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-p.Ready()
	addr := strings.TrimPrefix(p.Addrs()[0], "udp://")
	caller := siptest.StartCaller(t, "127.0.0.2")
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(addr, "X-Customer: gamma")); res == nil || res.StatusCode != 403 {
		t.Fatalf("before reload: %v, want 403", res)
	}
	mu.Lock()
	cur = after
	mu.Unlock()
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(addr, "X-Customer: gamma")); res == nil || res.StatusCode != 200 {
		t.Fatalf("after reload: %v, want 200", res)
	}
}

// rawCarrier answers a CANCEL with 200 and then answers the INVITE with 200
// anyway: the answer crosses the CANCEL, as it can on a real network.
type rawCarrier struct {
	conn *net.UDPConn
	mu   sync.Mutex
	got  map[sipmsg.RequestMethod]int
}

func startRawCarrier(t *testing.T) *rawCarrier { t.Helper(); return startRawCarrierOpt(t, false) }

// startRawCarrierOpt is startRawCarrier that, with answerInitial, answers
// an initial INVITE (no To tag) 200 at once, so a dialog can be set up
// before the INVITE whose answer crosses the CANCEL (a re-INVITE).
func startRawCarrierOpt(t *testing.T, answerInitial bool) *rawCarrier {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rc := &rawCarrier{conn: conn, got: map[sipmsg.RequestMethod]int{}}
	go func() {
		buf := make([]byte, 65535)
		var invite *sipmsg.Request
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			msg, err := sipmsg.ParseMessage(append([]byte(nil), buf[:n]...))
			if err != nil {
				continue
			}
			req, ok := msg.(*sipmsg.Request)
			if !ok {
				continue
			}
			rc.mu.Lock()
			rc.got[req.Method]++
			rc.mu.Unlock()
			send := func(res *sipmsg.Response) { _, _ = conn.WriteToUDP([]byte(res.String()), from) }
			switch req.Method {
			case sipmsg.INVITE:
				if answerInitial && !msgpart.HasToTag(req) {
					ok := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
					ok.To().Params.Add("tag", "raw-initial")
					ok.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "raw", Host: "127.0.0.1", Port: conn.LocalAddr().(*net.UDPAddr).Port}})
					send(ok)
					continue
				}
				invite = req
				ring := sipmsg.NewResponseFromRequest(req, 180, "Ringing", nil)
				ring.To().Params.Add("tag", "raw")
				send(ring)
			case sipmsg.CANCEL:
				send(sipmsg.NewResponseFromRequest(req, 200, "OK", nil))
				if invite != nil {
					ok := sipmsg.NewResponseFromRequest(invite, 200, "OK", nil)
					ok.To().Params.Add("tag", "raw")
					ok.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "raw", Host: "127.0.0.1", Port: conn.LocalAddr().(*net.UDPAddr).Port}})
					send(ok)
				}
			case sipmsg.BYE:
				send(sipmsg.NewResponseFromRequest(req, 200, "OK", nil))
			}
		}
	}()
	return rc
}

func (rc *rawCarrier) count(m sipmsg.RequestMethod) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.got[m]
}

func TestAnswerCrossingCancelIsRelayed(t *testing.T) {
	raw := startRawCarrier(t)
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + raw.conn.LocalAddr().String(), CPS: 100, MaxWait: time.Second})
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := ctxT(t, 5*time.Second)
	inv := caller.Invite(h.udp)
	tx, err := caller.Transaction(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	for r := range tx.Responses() {
		if r.StatusCode == 180 {
			break
		}
	}
	if cres := caller.Final(ctx, siptest.CancelFor(inv)); cres == nil || cres.StatusCode != 200 {
		t.Fatalf("CANCEL answer = %v, want 200", cres)
	}
	// The carrier's answer is relayed (RFC 3261 16.7): a 2xx that crossed
	// the CANCEL reaches the caller, who must ACK and BYE it; the proxy
	// does not end the call behind the caller's back.
	if res := finalOf(ctx, tx); res == nil || res.StatusCode != 200 {
		t.Fatalf("INVITE final = %v, want the carrier's 200 that crossed the CANCEL", res)
	}
	time.Sleep(200 * time.Millisecond)
	if n := raw.count(sipmsg.BYE); n != 0 {
		t.Errorf("BYEs from the proxy = %d, want 0 (the caller got the 200)", n)
	}
}

// TestKnownSources: a peer's source and a carrier's address (an IP in its
// URI, or an address its host name resolved to) are known; nothing else is,
// and a carrier named by host name is no wildcard.
func TestKnownSources(t *testing.T) {
	cfg := &config.Config{
		Peers: []config.Peer{{Name: "p", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}},
		Carriers: []config.Carrier{{Name: "c", URI: "sip:127.0.0.50:5070"},
			{Name: "n", URI: "sip:carrier.example:5060"}},
	}
	dns := startStubDNS(t)
	dns.setIPs("carrier.example", "127.0.0.60")
	set, err := carriers.New(carriers.Options{Config: func() *config.Config { return cfg }, Pacer: &fakePacer{}, Resolver: dns.resolver()})
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{carriers: set}
	if errs := set.Resolve(context.Background()); len(errs) != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.2", true},  // a peer's source
		{"127.0.0.50", true}, // a carrier's IP
		{"127.0.0.60", true}, // a carrier's resolved host name
		{"127.0.0.9", false}, // nobody
		{"192.0.2.1", false}, // nobody
	} {
		if got := p.knownSource(cfg, netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("knownSource(%s): got %v, want %v", tc.addr, got, tc.want)
		}
	}
}

// TestNoOpenRelay: an in-dialog request travels only between the two legs
// its dialog token names. The peer's BYE goes to the carrier leg whatever
// its Request-URI says; the same token from another peer, or from a
// stranger, gets 403; the carrier's BYE goes to the address the call came
// from, not to the caller's (private) Contact.
func TestNoOpenRelay(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	cfg := testConfig(carrierCfg("a", car))
	cfg.Peers = append(cfg.Peers, config.Peer{Name: "dialer-2", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")},
		CPS: 50, Customer: "acme"})
	h := startProxy(t, cfg, adm, pacer)
	elsewhere := siptest.StartCarrier(t, "127.0.0.77", nil)

	// A raw peer on 127.0.0.2 whose Contact is a private address it cannot
	// be reached on (behind NAT).
	peer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	proxyAddr, _ := net.ResolveUDPAddr("udp", h.udp)
	read := func(c *net.UDPConn, want func(sipmsg.Message) bool) sipmsg.Message {
		t.Helper()
		buf := make([]byte, 65535)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			m, err := sipmsg.ParseMessage(append([]byte(nil), buf[:n]...))
			if err == nil && want(m) {
				return m
			}
		}
	}
	invite := "INVITE sip:100@" + h.udp + " SIP/2.0\r\nVia: SIP/2.0/UDP " + peer.LocalAddr().String() + ";branch=z9hG4bK-or1\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:p@x>;tag=ptag\r\nTo: <sip:100@y>\r\nCall-ID: or-1\r\nCSeq: 1 INVITE\r\n" +
		"Contact: <sip:p@10.9.9.9:5060>\r\nContent-Length: 0\r\n\r\n"
	if _, err := peer.WriteToUDP([]byte(invite), proxyAddr); err != nil {
		t.Fatal(err)
	}
	ok := read(peer, func(m sipmsg.Message) bool { r, ok := m.(*sipmsg.Response); return ok && r.StatusCode == 200 }).(*sipmsg.Response)

	// The carrier's BYE (From: the callee's tag, To: the caller's) from the
	// carrier's IP on another port: refused. From the carrier's address, it
	// reaches the peer at the address its call came from.
	from, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	var rr []string
	for _, h := range ok.GetHeaders("Record-Route") {
		rr = append(rr, "Route: "+h.Value()+"\r\n")
	}
	cbye := "BYE sip:p@10.9.9.9:5060 SIP/2.0\r\n" +
		strings.Join(rr, "") + "Max-Forwards: 70\r\nFrom: " + ok.To().Value() + "\r\nTo: " + ok.From().Value() + "\r\n" +
		"Call-ID: or-1\r\nCSeq: 9 BYE\r\nContent-Length: 0\r\n\r\n"
	viaOf := func(addr string) string { return "Via: SIP/2.0/UDP " + addr + ";branch=z9hG4bK-cbye\r\n" }
	if _, err := from.WriteToUDP([]byte(strings.Replace(cbye, "\r\n", "\r\n"+viaOf(from.LocalAddr().String()), 1)), proxyAddr); err != nil {
		t.Fatal(err)
	}
	if res := read(from, func(m sipmsg.Message) bool { _, ok := m.(*sipmsg.Response); return ok }).(*sipmsg.Response); res.StatusCode != 403 {
		t.Fatalf("carrier's BYE from another port: %d, want 403", res.StatusCode)
	}
	cm, err := sipmsg.ParseMessage([]byte(cbye))
	if err != nil {
		t.Fatal(err)
	}
	creq := cm.(*sipmsg.Request)
	creq.SetTransport("UDP")
	creq.SetDestination(h.udp)
	tx, err := car.Caller(t).Transaction(ctxT(t, 5*time.Second), creq)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	got := read(peer, func(m sipmsg.Message) bool { r, ok := m.(*sipmsg.Request); return ok && r.Method == sipmsg.BYE }).(*sipmsg.Request)
	if got.CallID().Value() != "or-1" {
		t.Errorf("peer got %s", got.StartLine())
	}

	// The peer's BYE with its Request-URI pointed elsewhere, from the
	// socket its call came from.
	caller := &siptest.Caller{Addr: peer.LocalAddr().String()}
	bye := withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.BYE), caller.Addr, "z9hG4bK-or-bye")
	bye.Recipient.Host, bye.Recipient.Port = "127.0.0.77", mustPort(t, elsewhere.Addr)
	if _, err := peer.WriteToUDP([]byte(bye.String()), proxyAddr); err != nil {
		t.Fatal(err)
	}
	if res := read(peer, func(m sipmsg.Message) bool {
		r, ok := m.(*sipmsg.Response)
		return ok && r.StatusCode >= 200 && r.CSeq().MethodName == sipmsg.BYE
	}).(*sipmsg.Response); res.StatusCode != 200 {
		t.Fatalf("peer's BYE: final = %v, want 200", res)
	}
	if car.Count("BYE") != 1 || elsewhere.Count("BYE") != 0 {
		t.Errorf("BYEs: carrier %d, elsewhere %d; want 1, 0", car.Count("BYE"), elsewhere.Count("BYE"))
	}
	for _, tc := range []struct{ name, from string }{{"another peer", "127.0.0.3"}, {"a stranger", "127.0.0.9"}} {
		c := siptest.StartCaller(t, tc.from)
		if res := c.Final(ctxT(t, 5*time.Second), inDialogOf(t, c, h.udp, ok, sipmsg.BYE)); res == nil || res.StatusCode != 403 {
			t.Errorf("%s with the token: final = %v, want 403", tc.name, res)
		}
	}
	if n := car.Count("BYE"); n != 1 {
		t.Errorf("carrier BYEs = %d, want 1 (only the peer's)", n)
	}
}

func mustPort(t testing.TB, hostPort string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// TestIsMeOnUnspecifiedListener: a proxy listening on 0.0.0.0 is reached on
// the machine's own addresses (and its advertised host), not on any host
// that happens to use the same port, so a carrier SBC's Route entry after
// the proxy's own stays in the route set.
func TestIsMeOnUnspecifiedListener(t *testing.T) {
	for _, adv := range []string{"", "198.51.100.7"} {
		t.Run("advertise="+adv, func(t *testing.T) {
			cfg := testConfig()
			cfg.SIP.Listen = []string{"udp://0.0.0.0:0"}
			cfg.SIP.Advertise = adv
			adm, pacer := newFakes()
			h := startProxy(t, cfg, adm, pacer)
			_, port, _ := net.SplitHostPort(h.udp)
			uri := func(host string) *sipmsg.Uri {
				var u sipmsg.Uri
				if err := sipmsg.ParseUri("sip:"+host+":"+port+";lr", &u); err != nil {
					t.Fatal(err)
				}
				return &u
			}
			want := map[string]bool{
				"127.0.0.1":   true,  // an interface address of this machine
				"203.0.113.5": false, // a carrier SBC on the same port
			}
			if adv != "" {
				want[adv] = true
			}
			for host, w := range want {
				if got := h.p.isMe(uri(host)); got != w {
					t.Errorf("isMe(%s:%s) = %v, want %v", host, port, got, w)
				}
			}

			msg, err := sipmsg.ParseMessage([]byte("BYE sip:b@127.0.0.2:5060 SIP/2.0\r\n" +
				"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-1\r\n" +
				"Route: <sip:127.0.0.1:" + port + ";lr>, <sip:203.0.113.5:" + port + ";lr>\r\n" +
				"From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\nCall-ID: c\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"))
			if err != nil {
				t.Fatal(err)
			}
			req := msg.(*sipmsg.Request)
			if n := popOwnRoutes(h.p, req); n != 1 {
				t.Errorf("popOwnRoutes = %d, want 1", n)
			}
			if r := req.Route(); r == nil || r.Address.Host != "203.0.113.5" {
				t.Errorf("top Route after popping = %v, want the SBC's", r)
			}
		})
	}
}

// rawSend sends the datagram build makes (given the local address) from a
// socket on ip to proxy, and returns that socket for the answers.
func rawSend(t *testing.T, ip, proxy string, build func(laddr string) string) *net.UDPConn {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	ra, err := net.ResolveUDPAddr("udp", proxy)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	if _, err := conn.WriteToUDP([]byte(build(conn.LocalAddr().String())), ra); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn
}

// rawUDP sends one raw request from a fresh socket on ip to the proxy and
// returns the first line of every datagram that comes back: it waits up to
// 5 s for the first one, then listens for `quiet` more (a retransmission
// would come within 0.5 s, then 1 s after that). With first false it only
// listens for quiet.
func rawUDP(t *testing.T, ip, proxy string, build func(laddr string) string, quiet time.Duration, first bool) []string {
	t.Helper()
	conn := rawSend(t, ip, proxy, build)
	defer conn.Close()
	var got []string
	buf := make([]byte, 65535)
	deadline := time.Now().Add(quiet)
	if first {
		deadline = time.Now().Add(5 * time.Second)
	}
	for i := 0; i < 100; i++ {
		_ = conn.SetReadDeadline(deadline)
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			break // deadline
		}
		line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
		got = append(got, line)
		if len(got) == 1 {
			deadline = time.Now().Add(quiet)
		}
	}
	return got
}

// strangerRequest is a request from laddr to the proxy; toTag makes it an
// in-dialog one routed through the proxy towards car.
func strangerRequest(method, proxy, car, toTag string) func(string) string {
	return func(laddr string) string {
		to := "<sip:100@" + proxy + ">"
		route := ""
		ruri := "sip:100@" + proxy
		if toTag != "" {
			to += ";tag=" + toTag
			route = "Route: <sip:" + proxy + ";lr>\r\n"
			ruri = "sip:100@" + car
		}
		return method + " " + ruri + " SIP/2.0\r\n" +
			"Via: SIP/2.0/UDP " + laddr + ";branch=z9hG4bK-" + method + toTag + ";rport\r\n" + route +
			"Max-Forwards: 70\r\nFrom: <sip:x@" + laddr + ">;tag=f1\r\nTo: " + to + "\r\n" +
			"Call-ID: stranger-" + method + toTag + "\r\nCSeq: 1 " + method + "\r\n" +
			"Contact: <sip:x@" + laddr + ">\r\nContent-Length: 0\r\n\r\n"
	}
}

// TestStrangerGetsOne403: a request from an unknown source is answered
// 403 once, without a transaction that retransmits it to a possibly spoofed
// address; in drop mode an in-dialog one (To tag) gets nothing either.
func TestStrangerGetsOne403(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	t.Run("reject", func(t *testing.T) {
		adm, pacer := newFakes()
		h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
		for _, tag := range []string{"", "dlg"} {
			got := rawUDP(t, "127.0.0.9", h.udp, strangerRequest("INVITE", h.udp, car.Addr, tag), 2*time.Second, true)
			if len(got) != 1 || !strings.Contains(got[0], " 403 ") {
				t.Errorf("INVITE (To tag %q) from a stranger: got %q, want exactly one 403", tag, got)
			}
		}
		if n := car.Count("INVITE"); n != 0 {
			t.Errorf("carrier INVITEs = %d, want 0", n)
		}
	})
	t.Run("drop", func(t *testing.T) {
		cfg := testConfig(carrierCfg("a", car))
		cfg.SIP.UnknownSource = "drop"
		adm, pacer := newFakes()
		h := startProxy(t, cfg, adm, pacer)
		for _, m := range []string{"INVITE", "BYE"} {
			if got := rawUDP(t, "127.0.0.9", h.udp, strangerRequest(m, h.udp, car.Addr, "dlg"), 1500*time.Millisecond, false); len(got) != 0 {
				t.Errorf("in-dialog %s from a stranger in drop mode: got %q, want nothing", m, got)
			}
		}
		if n := car.Count("BYE") + car.Count("INVITE"); n != 0 {
			t.Errorf("carrier requests = %d, want 0", n)
		}
	})
}

// TestAckWithoutHopsIsDropped: an in-dialog ACK with Max-Forwards 0 is not
// forwarded; one with hops left is. Both are handed to onAck in turn and
// leave through the same socket, so the first datagram at the carrier must
// be the second ACK.
func TestAckWithoutHopsIsDropped(t *testing.T) {
	carrier, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer carrier.Close()
	car := carrier.LocalAddr().String()
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car, CPS: 100, MaxWait: time.Second}), adm, pacer)
	ack := func(callID string, mf int) *sipmsg.Request {
		tok := mustMint(t, h.p.keys, h.p.cfg(), dialogLegs{Peer: leg{Addr: netip.MustParseAddrPort("127.0.0.2:5061")},
			Carrier: leg{Addr: netip.MustParseAddrPort(car)}}, callID, "1")
		msg, err := sipmsg.ParseMessage([]byte("ACK sip:carrier@" + car + " SIP/2.0\r\n" +
			"Via: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-" + callID + "\r\n" +
			"Route: <sip:" + h.udp + ";lr;cg=" + tok + ">\r\n" +
			"Max-Forwards: " + itoa(mf) + "\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\n" +
			"Call-ID: " + callID + "\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		req := msg.(*sipmsg.Request)
		req.SetTransport("UDP")
		req.SetSource("127.0.0.2:5061")
		return req
	}
	// Requests leave through the listener: wait until sipgo pooled it.
	waitFor(t, func() bool { c, err := h.p.tp.GetConnection("udp", h.udp); return err == nil && c != nil }, "listener pooled")
	h.p.onAck(ack("no-hops", 0), nil)
	h.p.onAck(ack("hops-left", 70), nil)
	buf := make([]byte, 65535)
	_ = carrier.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := carrier.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no ACK reached the carrier: %v", err)
	}
	got := string(buf[:n])
	if !strings.Contains(got, "Call-ID: hops-left") {
		t.Fatalf("first ACK at the carrier:\n%s\nwant the one with hops left (Max-Forwards 0 must be dropped)", got)
	}
	if !strings.Contains(got, "Max-Forwards: 69") {
		t.Errorf("forwarded ACK:\n%s\nwant Max-Forwards 69", got)
	}
}

// TestUnreachableCarrierIsNotForwarded: when the INVITE cannot even leave
// (a TCP carrier refusing connections) the call was never forwarded: 503
// No Carrier Available and the outcome rejected_queue, not a 408 counted as
// forwarded.
func TestUnreachableCarrierIsNotForwarded(t *testing.T) {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close() // nothing listens there any more: connections are refused
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "down", URI: "sip:" + closed + ";transport=tcp", CPS: 100, MaxWait: time.Second})
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	res := caller.Final(ctxT(t, 10*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 503 || res.Reason != "No Carrier Available" {
		t.Fatalf("final = %v, want 503 No Carrier Available", res)
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedQueue)) == 1
	}, "calls_total{rejected_queue} = 1")
	if n := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeForwarded)); n != 0 {
		t.Errorf("calls_total{forwarded} = %v, want 0", n)
	}
}

// reInvite builds an in-dialog INVITE from c, routed through the proxy to
// the carrier at car, with a Route hand-crafted to name the proxy (extra
// URI parameters in routeParams, e.g. ";cg=..."): what a peer forging a
// "re-INVITE" to skip admission sends.
func reInvite(c *siptest.Caller, proxy, car, routeParams string) *sipmsg.Request {
	req := c.Invite(proxy)
	host, port, _ := net.SplitHostPort(car)
	req.Recipient.Host = host
	req.Recipient.Port, _ = strconv.Atoi(port)
	tag := sipmsg.NewParams()
	tag.Add("tag", "dialog-1")
	req.AppendHeader(&sipmsg.ToHeader{Address: req.Recipient, Params: tag})
	req.AppendHeader(sipmsg.NewHeader("Route", "<sip:"+proxy+";lr"+routeParams+">"))
	req.SetDestination(proxy)
	return req
}

// inDialogOf builds a request of the dialog the 2xx ok established, as a
// UA does (RFC 3261 12.1.2, 12.2.1.1): Request-URI the remote Contact,
// Route the Record-Route of ok copied verbatim in reverse order, From, To
// (with both tags) and Call-ID of ok, CSeq one past the INVITE's. It is
// sent to the proxy (the top Route).
func inDialogOf(t *testing.T, c *siptest.Caller, proxy string, ok *sipmsg.Response, method sipmsg.RequestMethod) *sipmsg.Request {
	t.Helper()
	ct := ok.Contact()
	if ct == nil {
		t.Fatalf("2xx without Contact:\n%s", ok)
	}
	rrs := ok.GetHeaders("Record-Route")
	if len(rrs) == 0 {
		t.Fatalf("2xx without Record-Route:\n%s", ok)
	}
	req := sipmsg.NewRequest(method, *ct.Address.Clone())
	for i := len(rrs) - 1; i >= 0; i-- {
		req.AppendHeader(sipmsg.NewHeader("Route", rrs[i].Value()))
	}
	mf := sipmsg.MaxForwardsHeader(70)
	req.AppendHeader(&mf)
	req.AppendHeader(sipmsg.HeaderClone(ok.From()))
	req.AppendHeader(sipmsg.HeaderClone(ok.To()))
	req.AppendHeader(sipmsg.HeaderClone(ok.CallID()))
	req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: ok.CSeq().SeqNo + 1, MethodName: method})
	host, port, _ := net.SplitHostPort(c.Addr)
	p, _ := strconv.Atoi(port)
	req.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: siptest.URIHost(host), Port: p}})
	req.SetTransport("UDP")
	req.SetDestination(proxy)
	return req
}

// answeredCall places a call from c through the proxy and returns its 200.
func answeredCall(t *testing.T, c *siptest.Caller, proxy string) *sipmsg.Response {
	t.Helper()
	res := c.Final(ctxT(t, 10*time.Second), c.Invite(proxy))
	if res == nil || res.StatusCode != 200 {
		t.Fatalf("initial INVITE final = %v, want 200", res)
	}
	return res
}

// ringReInvites answers initial INVITEs 200 at once and rings on
// re-INVITEs (To tag) until they are cancelled.
func ringReInvites(req *sipmsg.Request) siptest.Answer {
	if msgpart.HasToTag(req) {
		return siptest.Answer{Ring: -1}
	}
	return siptest.Answer{}
}

// TestCancelOfReInviteReachesCarrier: sipgo answers a CANCEL of a
// re-INVITE (200, 487) itself; the forwarded re-INVITE must be cancelled
// too, or the carrier rings on.
func TestCancelOfReInviteReachesCarrier(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", ringReInvites)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	ctx := ctxT(t, 10*time.Second)
	inv := inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)
	tx, err := caller.Transaction(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	for r := range tx.Responses() {
		if r.StatusCode == 180 {
			break
		}
	}
	if cres := caller.Final(ctx, siptest.CancelFor(inv)); cres == nil || cres.StatusCode != 200 {
		t.Fatalf("CANCEL answer = %v, want 200", cres)
	}
	if res := finalOf(ctx, tx); res == nil || res.StatusCode != 487 {
		t.Fatalf("re-INVITE final = %v, want 487", res)
	}
	waitFor(t, func() bool { return car.Count("CANCEL") == 1 || carrierCancelled(car) }, "CANCEL at the carrier")
}

// TestReInviteAnswerCrossingCancelIsAcked: a 2xx to a re-INVITE that
// crosses the CANCEL is ACKed by the proxy (the caller already has 487);
// the dialog is not hung up.
func TestReInviteAnswerCrossingCancelIsRelayed(t *testing.T) {
	raw := startRawCarrierOpt(t, true)
	addr := raw.conn.LocalAddr().String()
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + addr, CPS: 100, MaxWait: time.Second}), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	ctx := ctxT(t, 10*time.Second)
	inv := inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE)
	tx, err := caller.Transaction(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	for r := range tx.Responses() {
		if r.StatusCode == 180 {
			break
		}
	}
	if cres := caller.Final(ctx, siptest.CancelFor(inv)); cres == nil || cres.StatusCode != 200 {
		t.Fatalf("CANCEL answer = %v, want 200", cres)
	}
	if res := finalOf(ctx, tx); res == nil || res.StatusCode != 200 {
		t.Fatalf("re-INVITE final = %v, want the carrier's 200 that crossed the CANCEL", res)
	}
	if n := raw.count(sipmsg.BYE); n != 0 {
		t.Errorf("BYEs at the carrier = %d, want 0 (a re-INVITE does not end the dialog)", n)
	}
}

// TestCarrierURIsParsedOncePerSnapshot: the carrier checks of in-dialog
// requests do not parse the carriers' URIs again on every request, and a
// new snapshot (reload) is parsed afresh.
func TestCarrierURIsParsedOncePerSnapshot(t *testing.T) {
	cfg := &config.Config{Carriers: []config.Carrier{
		{Name: "a", URI: "sip:127.0.0.50:5070"},
		{Name: "b", URI: "sip:carrier.example:5060;transport=tcp"},
	}}
	set, err := carriers.New(carriers.Options{Config: func() *config.Config { return cfg }, Pacer: &fakePacer{}})
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{carriers: set}
	a := netip.MustParseAddr("127.0.0.50")
	p.isCarrierAddr(cfg, a) // first use parses
	if n := testing.AllocsPerRun(100, func() { p.isCarrierAddr(cfg, a) }); n != 0 {
		t.Errorf("allocations per check = %v, want 0 (URIs parsed once per snapshot)", n)
	}
	if tg, err := carrierTargetOf(cfg, &cfg.Carriers[1]); err != nil || tg.host != "carrier.example" || tg.transport != "TCP" {
		t.Errorf("carrier b target = %+v, %v", tg, err)
	}
	reloaded := &config.Config{Carriers: []config.Carrier{{Name: "a", URI: "sip:127.0.0.60:5070"}}}
	if p.isCarrierAddr(reloaded, a) || !p.isCarrierAddr(reloaded, netip.MustParseAddr("127.0.0.60")) {
		t.Error("a reloaded snapshot still uses the old carrier URIs")
	}
}

// TestFailOpenAdmissionIsNotGated: an admission the store did not count
// (store.on_error: admit, every count -1) is without limits, so the send
// gate does not hold calls to the peer and customer limits either (it
// would hold them past max_wait and reject them with 503).
func TestFailOpenAdmissionIsNotGated(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.Customers[0].CPS = 2 // acme: two calls per window
	adm, pacer := newFakes()
	adm.counts, adm.mode = []int{-1, -1}, admission.ModeOpen
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	for i := 0; i < 4; i++ {
		if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
			t.Fatalf("call %d: final = %v, want 200 (fail open: no limits)", i+1, res)
		}
	}
}

// lateAnswer is a 2xx with To tag "late" and the carrier's Contact.
func lateAnswer(req *sipmsg.Request, addr string) *sipmsg.Response {
	late := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
	late.To().Params.Add("tag", "late")
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	late.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", Host: host, Port: p}})
	return late
}

// callPastFirst places a call on a route of the carrier at addr (setup
// timeout 300 ms), then a good one: the good one must answer it, and the
// first's late answer must not reach the caller.
func callPastFirst(t *testing.T, name, addr string) *harness {
	t.Helper()
	second := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	first := config.Carrier{Name: name, URI: "sip:" + addr, CPS: 100, MaxWait: time.Second, SetupTimeout: 300 * time.Millisecond}
	h := startProxy(t, testConfig(first, carrierCfg("b", second)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	res := caller.Final(ctxT(t, 20*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 200 || second.Count("INVITE") != 1 {
		t.Fatalf("final = %v, second carrier INVITEs %d; want the second carrier's 200", res, second.Count("INVITE"))
	}
	if tag, _ := res.To().Params.Get("tag"); tag == "late" {
		t.Fatal("the abandoned carrier's 200 was relayed")
	}
	return h
}

// TestTryingOnlyCarrierIsCancelledAfterSetupTimeout: a carrier that answers
// 100 Trying and never rings gets a CANCEL after its setup_timeout and the
// call goes to the next carrier (before, a 100 held the call for the 3 min
// ring timer); the first carrier's late 200 is ACKed and hung up, never
// relayed.
func TestTryingOnlyCarrierIsCancelledAfterSetupTimeout(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	car.mu.Lock()
	car.answer = func(req *sipmsg.Request) *sipmsg.Response {
		switch req.Method {
		case sipmsg.INVITE:
			// A late answer, after the proxy has moved on.
			car.later(600*time.Millisecond, req, lateAnswer(req, car.addr()))
			return sipmsg.NewResponseFromRequest(req, 100, "Trying", nil)
		case sipmsg.CANCEL, sipmsg.BYE:
			return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
		}
		return nil
	}
	car.mu.Unlock()
	got := func(m sipmsg.RequestMethod) int { return len(car.requests(m)) }
	addr := car.addr()
	h := callPastFirst(t, "trying-only", addr)
	waitFor(t, func() bool {
		return got(sipmsg.CANCEL) == 1 && got(sipmsg.ACK) >= 1 && got(sipmsg.BYE) == 1
	}, "CANCEL, then ACK and BYE of the late 200, at the first carrier")
	// The operator sees which carrier failed: a timeout for the first, a
	// 2xx (and a setup time) for the second.
	if n := testutil.ToFloat64(h.m.CarrierResponses.WithLabelValues("trying-only", metrics.ClassTimeout)); n != 1 {
		t.Errorf("carrier_responses_total{trying-only,timeout} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(h.m.CarrierResponses.WithLabelValues("b", "2xx")); n != 1 {
		t.Errorf("carrier_responses_total{b,2xx} = %v, want 1", n)
	}
	if n := testutil.CollectAndCount(h.m.CarrierSetup); n < 1 {
		t.Errorf("carrier_setup_seconds has %d series, want the second carrier's", n)
	}
}

// TestSilentCarrierLateAnswerIsCancelledAndHungUp: a carrier silent past
// its setup_timeout is left for the next carrier, but not forgotten: when
// it answers late, its first provisional response gets a CANCEL (never
// one before it: RFC 3261 9.1) and a 2xx an ACK and a BYE, never relayed.
// It was left with neither (h46: calls that rang a callee nobody waited
// for, billed until the carrier's own timers ended them).
func TestSilentCarrierLateAnswerIsCancelledAndHungUp(t *testing.T) {
	for _, ring := range []bool{true, false} {
		t.Run(fmt.Sprintf("ring=%v", ring), func(t *testing.T) {
			var rang, cancelBeforeRing atomic.Bool
			car := startUDPEnd(t, "127.0.0.1", nil)
			car.mu.Lock()
			car.answer = func(req *sipmsg.Request) *sipmsg.Response {
				switch req.Method {
				case sipmsg.INVITE:
					if len(car.requests(sipmsg.INVITE)) > 1 {
						return nil // a retransmission
					}
					// Silent past the setup timeout, then a late answer.
					if ring {
						ringing := sipmsg.NewResponseFromRequest(req, 180, "Ringing", nil)
						ringing.To().Params.Add("tag", "late")
						car.later(600*time.Millisecond, req, ringing, func() { rang.Store(true) })
					}
					car.later(800*time.Millisecond, req, lateAnswer(req, car.addr()))
				case sipmsg.CANCEL:
					if !rang.Load() {
						cancelBeforeRing.Store(true)
					}
					return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
				case sipmsg.BYE:
					return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
				}
				return nil
			}
			car.mu.Unlock()
			got := func(m sipmsg.RequestMethod) int { return len(car.requests(m)) }
			addr := car.addr()
			callPastFirst(t, "silent", addr)
			wantCancel := 0
			if ring {
				wantCancel = 1
			}
			waitFor(t, func() bool {
				return got(sipmsg.CANCEL) == wantCancel && got(sipmsg.ACK) >= 1 && got(sipmsg.BYE) == 1
			}, "the late answer cancelled or hung up at the silent carrier")
			if cancelBeforeRing.Load() {
				t.Error("a CANCEL reached the silent carrier before any provisional response")
			}
		})
	}
}

// TestOverloadAnswerLowersAnAdaptiveCarrier: an adaptive carrier's 403 "CPS
// exceeded" (matched by overload.reasons) lowers its rate through the
// pacer, moves the call on to the next carrier, and the next call to it is
// paced at the lower rate; a non-adaptive carrier's 403 stays final.
func TestOverloadAnswerLowersAnAdaptiveCarrier(t *testing.T) {
	policing := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer {
		return siptest.Answer{Code: 403, Reason: "Forbidden - CPS Exceeded"}
	})
	ok := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	first := carrierCfg("policing", policing)
	first.CPS = 40
	first.Adaptive = true
	first.Overload = &config.Overload{Reasons: []string{"cps exceeded"}}
	h := startProxy(t, testConfig(first, carrierCfg("ok", ok)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("call: %v, want 200 from the second carrier", res)
	}
	waitFor(t, func() bool { return testutil.ToFloat64(h.m.EffectiveCPS.WithLabelValues("policing")) == 28 }, "effective cps 40 x 0.7")
	pacer.mu.Lock()
	overloads := pacer.overloads
	pacer.mu.Unlock()
	if overloads != 1 {
		t.Errorf("%d decreases asked of the pacer, want 1", overloads)
	}
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("second call: %v, want 200", res)
	}
	pacer.mu.Lock()
	cps := slices.Clone(pacer.reservedCPS)
	pacer.mu.Unlock()
	// Reservations: policing (40), ok, policing (28 now), ok.
	if len(cps) != 4 || cps[0] != 40 || cps[2] != 28 {
		t.Errorf("reserved at %v cps, want the policing carrier at 40 then 28", cps)
	}
	if n := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("policing", "failed")); n != 2 {
		t.Errorf("reroutes_total{policing,failed} = %v, want 2", n)
	}

	// Not adaptive: the 403 is the carrier's final word, relayed.
	adm2, pacer2 := newFakes()
	plain := carrierCfg("policing", policing)
	h2 := startProxy(t, testConfig(plain, carrierCfg("ok", ok)), adm2, pacer2)
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h2.udp)); res == nil || res.StatusCode != 403 {
		t.Fatalf("call through a non-adaptive carrier: %v, want its 403 relayed", res)
	}
}

// A node that wakes for its slot later than pacing.MaxLate does not send
// on it (a carrier could see cps + 1 calls in a rolling second): it gives
// the slot back and takes the next; after three late wakes in a row the
// carrier counts as full for the call.
func TestLateWakeTakesTheNextSlot(t *testing.T) {
	a := siptest.StartCarrier(t, "127.0.0.1", nil)
	b := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", a), carrierCfg("b", b)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")

	pacer.mu.Lock()
	pacer.lateWakes, pacer.lateBy = 1, 3*pacing.MaxLate
	pacer.mu.Unlock()
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("call after one late wake: %v, want 200 on carrier a", res)
	}
	pacer.mu.Lock()
	reserved, released := len(pacer.reserved), len(pacer.released)
	pacer.mu.Unlock()
	if reserved != 2 || released != 1 || a.Count("INVITE") != 1 {
		t.Errorf("one late wake: %d reservations, %d released, %d INVITEs at a; want 2, 1 (the missed slot) and 1",
			reserved, released, a.Count("INVITE"))
	}
	if n := testutil.ToFloat64(h.m.Pacing.WithLabelValues("a", metrics.PacingLate)); n != 1 {
		t.Errorf("pacing_total{a,late} = %v, want 1", n)
	}

	// Late three times in a row at a: a counts as full, the call goes to b.
	pacer.mu.Lock()
	pacer.lateWakes = 3
	pacer.mu.Unlock()
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("call after three late wakes: %v, want 200 on carrier b", res)
	}
	if a.Count("INVITE") != 1 || b.Count("INVITE") != 1 {
		t.Errorf("INVITEs at a %d, at b %d; want 1 and 1 (a given up after three late wakes)", a.Count("INVITE"), b.Count("INVITE"))
	}
	if n := testutil.ToFloat64(h.m.Reroutes.WithLabelValues("a", metrics.RerouteFull)); n != 1 {
		t.Errorf("reroutes_total{a,full} = %v, want 1", n)
	}
}

// TestRetryAfterBlocksTheCarrier: a carrier's 503 with Retry-After moves
// the call to the next carrier and blocks the first for the pool (through
// the pacer) for that long; the next call goes straight to the second.
func TestRetryAfterBlocksTheCarrier(t *testing.T) {
	busy := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 503} })
	ok := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("busy", busy), carrierCfg("ok", ok)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	// The siptest carrier's 503 has no Retry-After: no block.
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("first call: %v, want 200 from the second carrier", res)
	}
	pacer.mu.Lock()
	n := len(pacer.paused)
	pacer.mu.Unlock()
	if n != 0 {
		t.Fatalf("paused %d times on a 503 without Retry-After, want 0", n)
	}
	for _, tc := range []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"2", 2 * time.Second, true},
		{"120 (maintenance);duration=60", 120 * time.Second, true},
		{"999999", maxRetryAfter, true},
		{"0", 0, false},
		{"soon", 0, false},
	} {
		r := sipmsg.NewResponse(503, "Service Unavailable")
		r.AppendHeader(sipmsg.NewHeader("Retry-After", tc.header))
		if got, ok := retryAfter(r); got != tc.want || ok != tc.ok {
			t.Errorf("Retry-After %q: got %v %v, want %v %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
	busy486 := sipmsg.NewResponse(486, "Busy Here")
	busy486.AppendHeader(sipmsg.NewHeader("Retry-After", "30"))
	if _, ok := retryAfter(busy486); ok {
		t.Error("a 486's Retry-After (one callee busy) blocks the carrier")
	}
	huge := sipmsg.NewResponse(503, "Service Unavailable")
	huge.AppendHeader(sipmsg.NewHeader("Retry-After", "9999999999"))
	if got, ok := retryAfter(huge); !ok || got != maxRetryAfter {
		t.Errorf("Retry-After 9999999999: got %v %v, want the cap %v (no overflow into a negative span)", got, ok, maxRetryAfter)
	}
}

// Calls refused because the node drains count as rejected_drain, not as
// rejected_queue ("no carrier slot"), so the alert on the latter does not
// fire on every rolling restart: an INVITE that arrives while the node
// drains, and a call still waiting for its pacing slot when the drain
// grace ends.
func TestDrainRefusalsCountAsDrain(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	pacer.wait = 30 * time.Second // the slot is far off: the call waits
	carrier := carrierCfg("a", car)
	carrier.MaxWait = time.Minute
	cfg := testConfig(carrier)
	cfg.SIP.DrainGrace = 300 * time.Millisecond
	m := metrics.New(prometheus.NewRegistry())
	p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Metrics: m, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	<-p.Ready()
	addr := strings.TrimPrefix(p.Addrs()[0], "udp://")
	caller := siptest.StartCaller(t, "127.0.0.2")
	tx, err := caller.Transaction(ctxT(t, 10*time.Second), caller.Invite(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Terminate()
	waitFor(t, func() bool { r, _ := pacer.counts(); return r == 1 }, "the call waiting for its slot")
	cancel()
	waitFor(t, p.draining.Load, "draining")
	if late := caller.Final(ctxT(t, 5*time.Second), caller.Invite(addr)); late == nil || late.StatusCode != 503 {
		t.Errorf("INVITE while draining: %v, want 503", late)
	}
	if res := finalOf(ctxT(t, 5*time.Second), tx); res == nil || res.StatusCode != 503 {
		t.Errorf("call waiting for its slot past the drain grace: final %v, want 503", res)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	for _, tc := range []struct {
		outcome string
		want    float64
	}{{metrics.OutcomeRejectedDrain, 2}, {metrics.OutcomeRejectedQueue, 0}} {
		if got := testutil.ToFloat64(m.Calls.WithLabelValues("dialer-1", tc.outcome)); got != tc.want {
			t.Errorf("calls_total{outcome=%q}: got %v, want %v", tc.outcome, got, tc.want)
		}
	}
	if car.Count("INVITE") != 0 {
		t.Errorf("carrier got %d INVITEs, want 0 (the call never had its slot)", car.Count("INVITE"))
	}
}
