package sip

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
)

// slowAdmitter is a store that holds every admission until released, once
// holding is on.
type slowAdmitter struct {
	*fakeAdmitter
	mu      sync.Mutex
	hold    chan struct{} // nil: answer at once
	entered chan struct{}
}

func (s *slowAdmitter) Admit(ctx context.Context, member string, b []admission.Bucket) (admission.Decision, error) {
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		s.entered <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
			return admission.Decision{}, ctx.Err()
		}
	}
	return s.fakeAdmitter.Admit(ctx, member, b)
}

// TestOverloadShedsNewCallsNotDialogs: with sip.max_inflight 1 and a call
// being decided (its admission held by a slow store), a second new INVITE
// gets 503 at once, statelessly, counted rejected_overload, and never
// reaches the store; a BYE of a call already set up still passes; the
// held call completes and gives its unit back.
func TestOverloadShedsNewCallsNotDialogs(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	fa, pacer := newFakes()
	adm := &slowAdmitter{fakeAdmitter: fa, entered: make(chan struct{}, 4)}
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.MaxInflight = 1
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")

	ok := answeredCall(t, caller, h.udp) // a call already set up
	waitFor(t, func() bool { return h.p.Inflight() == 0 }, "no call in flight after the first call")

	hold := make(chan struct{})
	adm.mu.Lock()
	adm.hold = hold
	adm.mu.Unlock()
	held := make(chan *sipmsg.Response, 1)
	go func() { held <- caller.Final(ctxT(t, 10*time.Second), caller.Invite(h.udp)) }()
	select {
	case <-adm.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first new call never reached the store")
	}
	storeCalls := func() int { fa.mu.Lock(); defer fa.mu.Unlock(); return fa.calls }
	before := storeCalls()

	res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp))
	if res == nil || res.StatusCode != 503 {
		t.Fatalf("second new INVITE while one is decided: got %v, want 503", res)
	}
	if got := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedOverload)); got != 1 {
		t.Errorf("calls_total{rejected_overload}: got %v, want 1", got)
	}
	if to := res.To(); to == nil || !strings.HasPrefix(tagOf(to.Params), shedTag) {
		t.Errorf("overload answer's To tag: got %v, want one starting %q (its ACK is dropped by the screen)", to, shedTag)
	}

	bye := caller.Final(ctxT(t, 5*time.Second), inDialogOf(t, caller, h.udp, ok, sipmsg.BYE))
	if bye == nil || bye.StatusCode != 200 {
		t.Fatalf("BYE of a call set up, while overloaded: got %v, want 200", bye)
	}
	if n := car.Count("BYE"); n != 1 {
		t.Errorf("BYEs at the carrier: got %d, want 1", n)
	}

	close(hold)
	if r := <-held; r == nil || r.StatusCode != 200 {
		t.Fatalf("the held call: got %v, want 200", r)
	}
	if got := storeCalls() - before; got != 1 {
		t.Errorf("store calls after the held one entered: got %d, want 1 (the shed call never reaches the store)", got)
	}
	waitFor(t, func() bool { return h.p.Inflight() == 0 }, "the held call's unit given back")

	// The bound is free again: the next call goes through.
	adm.mu.Lock()
	adm.hold = nil
	adm.mu.Unlock()
	answeredCall(t, caller, h.udp)
}

// TestInflightUnitOfAnAbsorbedInviteIsReturned: an INVITE sipgo absorbs
// (no handler claims its entry) gives its unit back on the sweep, and a
// finished INVITE's tombstone lets its late retransmission pass without a
// unit.
func TestInflightUnitOfAnAbsorbedInviteIsReturned(t *testing.T) {
	var ctr inflightCount
	tb := newInviteTable()
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5060})
	via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP",
		Host: "127.0.0.2", Port: 5062, Params: sipmsg.NewParams()}
	via.Params.Add("branch", "z9hG4bK-1")
	req.AppendHeader(via)
	cid := sipmsg.CallIDHeader("absorbed")
	req.AppendHeader(&cid)
	req.SetSource("127.0.0.2:5062")
	acquire := func() bool { ctr.Add(1); return true }
	if got := tb.register(req, acquire, &ctr); got != regNew {
		t.Fatalf("register of a new INVITE with a unit to spare: got %d, want regNew", got)
	}
	if got := tb.register(req, func() bool { t.Error("a retransmission took a unit"); return false }, &ctr); got != regLive {
		t.Fatalf("register of a retransmission: got %d, want regLive", got)
	}
	now := time.Now()
	tb.sweep(now)
	if got := ctr.Load(); got != 1 {
		t.Fatalf("units after a sweep at once: got %d, want 1", got)
	}
	tb.sweep(now.Add(inflightOrphan + time.Millisecond))
	if got := ctr.Load(); got != 0 {
		t.Fatalf("units after the orphan age: got %d, want 0", got)
	}
	// A retransmission of an INVITE no handler took goes to sipgo again.
	tb.m[inviteKeyOf(req)].created = now.Add(-inflightOrphan - time.Millisecond)
	if got := tb.register(req, nil, &ctr); got != regAnswered {
		t.Fatalf("register of a retransmission of an orphan: got %d, want regAnswered (passed to sipgo)", got)
	}

	// Claimed and finished: a tombstone for tombstoneTTL.
	e, done := tb.claim(req)
	done(false, false)
	if tb.lookup(inviteKeyOf(req)) != nil {
		t.Error("lookup found a finished INVITE (a CANCEL must go to sipgo)")
	}
	// A copy after the handler ended is decided again (the proxy ended
	// its refusals' transactions), so it asks for a unit like any new
	// INVITE: replaying refused INVITEs does not get past the bound.
	asked := false
	if got := tb.register(req, func() bool { asked = true; return false }, &ctr); got != regShed || !asked {
		t.Fatalf("register of a copy after the answer with no unit to spare: got %d (unit asked %v), want regShed", got, asked)
	}
	tb.sweep(e.finished.Add(tombstoneTTL + time.Millisecond))
	if got := tb.size(); got != 0 {
		t.Errorf("entries after the tombstone age: got %d, want 0", got)
	}

	// A forwarded call's handler leaves the transaction to sipgo: copies
	// of its INVITE, however late within Timer L, go to sipgo (which
	// absorbs them) and never take a unit or get shed as new calls.
	if got := tb.register(req, acquire, &ctr); got != regNew {
		t.Fatalf("register of the next call: got %d, want regNew", got)
	}
	e, done = tb.claim(req)
	done(true, false)
	for _, age := range []time.Duration{0, tombstoneTTL + time.Second, keptTTL - time.Second} {
		tb.sweep(e.finished.Add(age))
		if got := tb.register(req, func() bool { t.Errorf("a copy %v after a forwarded call's end asked for a unit", age); return false }, &ctr); got != regAnswered {
			t.Fatalf("register of a copy %v after a forwarded call ended: got %d, want regAnswered (sipgo absorbs it)", age, got)
		}
	}
	tb.sweep(e.finished.Add(keptTTL + time.Millisecond))
	if got := tb.size(); got != 0 {
		t.Errorf("entries after keptTTL: got %d, want 0", got)
	}

	// An answered call's transaction lasts answeredLinger only: copies of
	// its INVITE are absorbed by the tombstone itself, at any age within
	// keptTTL (before and after the linger), never passed to sipgo, which
	// would make a new call of one once its transaction ended.
	if got := tb.register(req, acquire, &ctr); got != regNew {
		t.Fatalf("register of the next call: got %d, want regNew", got)
	}
	e, done = tb.claim(req)
	done(true, true)
	for _, age := range []time.Duration{0, answeredLinger + time.Second, keptTTL - time.Second} {
		tb.sweep(e.finished.Add(age))
		if got := tb.register(req, func() bool { t.Errorf("a copy %v after an answered call's end asked for a unit", age); return false }, &ctr); got != regAbsorbed {
			t.Fatalf("register of a copy %v after an answered call ended: got %d, want regAbsorbed", age, got)
		}
	}
	tb.sweep(e.finished.Add(keptTTL + time.Millisecond))
	if got := tb.size(); got != 0 {
		t.Errorf("entries after keptTTL: got %d, want 0", got)
	}
}

// TestCarrierTimeoutWhileBehindIsNotCounted: a call the carrier did not
// ring in time, while the node is behind on its own queue, is not held
// against the carrier (the answer may have waited in the node's own
// queue); once the node has not been behind for overloadMemory, it is,
// and asks for a confirming probe.
func TestCarrierTimeoutWhileBehindIsNotCounted(t *testing.T) {
	fa, pacer := newFakes()
	car := carrierCfg("a", siptest.StartCarrier(t, "127.0.0.1", nil))
	car.Probe = &config.Probe{Interval: time.Hour, Timeout: time.Second, DownAfter: 1, UpAfter: 1}
	cfg := testConfig(car)
	rc := newReportingCarriers(t, cfg, pacer)
	p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: fa, Pacer: pacer, Carriers: rc, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	p.noteBehind(time.Now())
	timedOut(p, cfg)
	if got := rc.last(); got.Result != carriers.Undecided {
		t.Fatalf("a carrier timeout while the node is behind reported %+v, want Undecided (not counted)", got)
	}
	p.noteBehind(time.Now().Add(-overloadMemory - time.Second))
	timedOut(p, cfg)
	if got := rc.last(); got.Result != carriers.TimedOut {
		t.Fatalf("a carrier timeout of a node not behind reported %+v, want TimedOut", got)
	}
}

// timedOut makes one call attempt to cfg's first carrier miss its setup
// timeout (the leg's hook).
func timedOut(p *Proxy, cfg *config.Config) {
	h := &carrierHooks{c: &call{p: p, cfg: cfg, peer: "dialer-1", ctx: context.Background()}, car: &cfg.Carriers[0]}
	h.timedOut()
}

// An INVITE that reuses a live INVITE's branch and sent-by with a new
// Call-ID is one transaction to sipgo (absorbed as a retransmission), so
// it is one entry here: it takes no unit of the inflight bound that no
// handler would give back (review finding: a peer could pin the bound).
func TestInviteKeyFollowsSipgo(t *testing.T) {
	parse := func(raw string) *sipmsg.Request {
		t.Helper()
		m, err := sipmsg.ParseMessage([]byte(strings.ReplaceAll(raw, "\n", "\r\n")))
		if err != nil {
			t.Fatal(err)
		}
		return m.(*sipmsg.Request)
	}
	invite := func(branch, port, callID string) *sipmsg.Request {
		return parse("INVITE sip:100@127.0.0.1 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.2" + port + ";branch=" + branch +
			"\nFrom: <sip:a@x>;tag=1\nTo: <sip:100@127.0.0.1>\nCall-ID: " + callID + "\nCSeq: 1 INVITE\nContent-Length: 0\n\n")
	}
	a := inviteKeyOf(invite("z9hG4bK-1", ":5060", "one"))
	if b := inviteKeyOf(invite("z9hG4bK-1", "", "two")); a != b {
		t.Errorf("same branch and sent-by (default port), new Call-ID: keys %q and %q differ", a, b)
	}
	if b := inviteKeyOf(invite("z9hG4bK-2", ":5060", "one")); a == b {
		t.Error("another branch: same key")
	}
	if x, y := inviteKeyOf(invite("legacy", ":5060", "one")), inviteKeyOf(invite("legacy", ":5060", "two")); x == y {
		t.Error("RFC 2543 branch: the Call-ID must stay in the key, as in sipgo's")
	}
}

// TestShedsDoNotMaskCarrierTimeouts (issue 22, item C10): a shed, whether
// a peer overran its own share of the read queue or found the inflight
// bound taken, says nothing of the node's own lateness: a carrier's
// timeout right after it still counts against the carrier.
func TestShedsDoNotMaskCarrierTimeouts(t *testing.T) {
	for _, bound := range []bool{false, true} {
		t.Run(fmt.Sprintf("inflight bound taken %v", bound), func(t *testing.T) {
			fa, pacer := newFakes()
			car := carrierCfg("a", siptest.StartCarrier(t, "127.0.0.1", nil))
			car.Probe = &config.Probe{Interval: time.Hour, Timeout: time.Second, DownAfter: 1, UpAfter: 1}
			cfg := testConfig(car)
			rc := newReportingCarriers(t, cfg, pacer)
			p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: fa, Pacer: pacer, Carriers: rc, Logger: testLogger()})
			if err != nil {
				t.Fatal(err)
			}
			p.noteShed("dialer-1", time.Now(), bound)
			timedOut(p, cfg)
			if got := rc.last(); got.Result != carriers.TimedOut {
				t.Errorf("a carrier timeout right after a shed reported %+v, want TimedOut (counted)", got)
			}
		})
	}
}

// TestE2EOnePeersShedsDoNotKeepADeadCarrierUp (issue 22, item C10): a
// peer whose new calls are shed again and again (the inflight bound is
// taken) does not keep a dead carrier up: its probes still fail and count.
func TestE2EOnePeersShedsDoNotKeepADeadCarrierUp(t *testing.T) {
	adm, pacer := newFakes()
	dead := carrierCfg("dead", siptest.StartCarrier(t, "127.0.0.1", nil))
	dead.URI = fmt.Sprintf("sip:127.0.0.1:%d", redistest.FreePort(t)) // nothing answers there
	dead.Probe = &config.Probe{Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond, DownAfter: 2, UpAfter: 1}
	cfg := testConfig(dead)
	cfg.SIP.MaxInflight = 1
	h := startProxy(t, cfg, adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")

	// The node's one unit is taken (as by a call being decided): every new
	// call of the peer is shed, one after the other.
	if !h.p.tryInflight(1) {
		t.Fatal("the unit is taken already")
	}
	t.Cleanup(h.p.inflight.release)
	stop := make(chan struct{})
	shedding := make(chan struct{})
	go func() {
		defer close(shedding)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = caller.Final(ctxT(t, 2*time.Second), caller.Invite(h.udp))
			time.Sleep(50 * time.Millisecond)
		}
	}()
	deadline := time.Now().Add(8 * time.Second)
	for testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("dead")) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	<-shedding
	sheds := testutil.ToFloat64(h.m.Calls.WithLabelValues("dialer-1", metrics.OutcomeRejectedOverload))
	if up := testutil.ToFloat64(h.m.CarrierUp.WithLabelValues("dead")); up != 0 {
		t.Fatalf("a dead carrier still up after 8 s of failed probes while one peer's calls were shed (%v sheds, %v probes failed)",
			sheds, testutil.ToFloat64(h.m.CarrierProbes.WithLabelValues("dead", metrics.ProbeFailed)))
	}
	if sheds < 2 {
		t.Fatalf("%v calls shed: the test did not shed", sheds)
	}
}
