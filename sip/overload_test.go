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
	"github.com/cpsguard/cpsguard/sip/internal/load"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
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
	if to := res.To(); to == nil || !strings.HasPrefix(msgpart.Tag(to.Params), shedTag) {
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

// TestCarrierTimeoutWhileBehindIsNotCounted: a call the carrier did not
// ring in time, while the node is behind on its own queue, is not held
// against the carrier (the answer may have waited in the node's own
// queue); once the node has not been behind for load.Memory, it is,
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
	p.behind.Note(time.Now())
	timedOut(p, cfg)
	if got := rc.last(); got.Result != carriers.Undecided {
		t.Fatalf("a carrier timeout while the node is behind reported %+v, want Undecided (not counted)", got)
	}
	p.behind.Note(time.Now().Add(-load.Memory - time.Second))
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
	if !h.p.inflight.TryTake(1) {
		t.Fatal("the unit is taken already")
	}
	t.Cleanup(h.p.inflight.Release)
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
