package sip

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/admission"
	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/statelessbranch"
)

// rawInvite builds an initial INVITE from the raw end point e to proxy
// (Call-ID id, From tag ftag; no From tag when ftag is empty).
func rawInviteFrom(e *udpEnd, proxy, id, ftag string) *sipmsg.Request {
	host, port, _ := net.SplitHostPort(proxy)
	p, _ := strconv.Atoi(port)
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: host, Port: p})
	mf := sipmsg.MaxForwardsHeader(70)
	req.AppendHeader(&mf)
	chost, cport, _ := net.SplitHostPort(e.addr())
	cp, _ := strconv.Atoi(cport)
	from := &sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: chost}, Params: sipmsg.NewParams()}
	if ftag != "" {
		from.Params.Add("tag", ftag)
	}
	req.AppendHeader(from)
	req.AppendHeader(&sipmsg.ToHeader{Address: sipmsg.Uri{Scheme: "sip", User: "100", Host: host}, Params: sipmsg.NewParams()})
	cid := sipmsg.CallIDHeader(id)
	req.AppendHeader(&cid)
	req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.INVITE})
	req.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: chost, Port: cp}})
	return withVia(req, e.addr(), "z9hG4bK.inv-"+id)
}

// finalOfRaw waits for e's final response to the request of Call-ID id and
// method m (nil after 5 s).
func finalOfRaw(e *udpEnd, id string, m sipmsg.RequestMethod, skip int) *sipmsg.Response {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n := 0
		for _, r := range e.responses() {
			if r.StatusCode >= 200 && msgpart.CallID(r) == id && r.CSeq().MethodName == m {
				if n == skip {
					return r
				}
				n++
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// rawAnsweredCall places a call from the raw end point e (its INVITE and
// ACK leave from e's own socket, as its in-dialog requests will) and
// returns its 200.
func rawAnsweredCall(t *testing.T, e *udpEnd, proxy, id string) *sipmsg.Response {
	t.Helper()
	e.send(proxy, rawInviteFrom(e, proxy, id, "ftag-"+id))
	ok := finalOfRaw(e, id, sipmsg.INVITE, 0)
	if ok == nil || ok.StatusCode != 200 {
		t.Fatalf("call %s: final %v, want 200", id, ok)
	}
	ack := inDialogOf(t, &siptest.Caller{Addr: e.addr()}, proxy, ok, sipmsg.ACK)
	ack.CSeq().SeqNo = ok.CSeq().SeqNo
	e.send(proxy, withVia(ack, e.addr(), "z9hG4bK.ack-"+id))
	return ok
}

// TestReInviteLimitOneBranchManySentBy: a peer that reuses one Via branch
// for every re-INVITE of its dialog and changes only the Via's sent-by port
// makes each one a new transaction to sipgo; the per-dialog limit must
// count each of them (it counted none: the admission store took them for
// one retransmission and answered "duplicate", and all reached the carrier).
func TestReInviteLimitOneBranchManySentBy(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	_, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), admission.NewLocalStore(nil), pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	ok := rawAnsweredCall(t, peer, h.udp, "one-branch")
	as := &siptest.Caller{Addr: peer.addr()}
	const n = 20
	for i := 0; i < n; i++ {
		re := inDialogOf(t, as, h.udp, ok, sipmsg.INVITE)
		re.CSeq().SeqNo = uint32(10 + i)
		peer.send(h.udp, withVia(re, "127.0.0.2:"+strconv.Itoa(20000+i), "z9hG4bK.same-branch"))
		// Each is answered (200 relayed, or the node's 503) before the next.
		if r := finalOfRaw(peer, "one-branch", sipmsg.INVITE, 1+i); r == nil {
			t.Fatalf("re-INVITE %d: no final answer", i+1)
		}
	}
	if got := car.Count("INVITE") - 1; got > reinviteLimit {
		t.Fatalf("re-INVITEs at the carrier = %d, want at most %d", got, reinviteLimit)
	}
	if sipErrors(h, "reinvite_limit") == 0 {
		t.Errorf("sip_errors_total{reinvite_limit} = 0, want the refused ones counted")
	}
}

// TestReInviteDuplicateIsNoAdmission: the handler sees a re-INVITE only
// when sipgo made a new transaction of it, so one whose member the store
// has counted already is a copy replayed after its transaction ended: it
// is refused, not let through uncounted.
func TestReInviteDuplicateIsNoAdmission(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	_, pacer := newFakes()
	cfg := testConfig(carrierCfg("a", car))
	h := startProxy(t, cfg, admission.NewLocalStore(nil), pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ok := answeredCall(t, caller, h.udp)
	re := withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.INVITE), caller.Addr, "z9hG4bK.dup-1")
	re.SetSource(caller.Addr)
	hop, code := h.p.prepareInDialog(re, false)
	if code != 0 {
		t.Fatalf("prepareInDialog: %d", code)
	}
	if ok, err := h.p.reinviteAllowed(cfg, re, hop); !ok || err != nil {
		t.Fatalf("first re-INVITE: %v, %v; want allowed", ok, err)
	}
	if ok, err := h.p.reinviteAllowed(cfg, re, hop); ok || err != nil {
		t.Fatalf("the same transaction again: %v, %v; want refused", ok, err)
	}
}

// TestInviteWithoutFromTagIsRefused: an initial INVITE without a From tag
// gets 400 and never reaches the carrier (it was admitted, and its
// carrier's BYE, with no To tag, was answered 405 as out of dialog: the
// call's max_calls places stayed for max_call_duration). A request that
// carries the proxy's dialog token in its Route is in a dialog whatever
// its tags say: without a To tag it is refused, neither taken for a new
// call nor answered 405.
func TestInviteWithoutFromTagIsRefused(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	h, tr, _ := startCallsProxy(t, car, 5, 0)
	peer := startUDPEnd(t, "127.0.0.2", nil)

	peer.send(h.udp, rawInviteFrom(peer, h.udp, "no-from-tag", ""))
	if r := finalOfRaw(peer, "no-from-tag", sipmsg.INVITE, 0); r == nil || r.StatusCode != 400 {
		t.Fatalf("INVITE without From tag: final %v, want 400", r)
	}
	if n := car.Count("INVITE"); n != 0 {
		t.Fatalf("carrier INVITEs = %d, want 0", n)
	}

	ok := rawAnsweredCall(t, peer, h.udp, "tagged")
	as := &siptest.Caller{Addr: peer.addr()}
	// The dialog's token on an INVITE without To tag: not a new call.
	re := inDialogOf(t, as, h.udp, ok, sipmsg.INVITE)
	re.RemoveHeader("To")
	re.AppendHeader(&sipmsg.ToHeader{Address: *ok.To().Address.Clone(), Params: sipmsg.NewParams()})
	peer.send(h.udp, withVia(re, peer.addr(), "z9hG4bK.untagged-re"))
	if r := finalOfRaw(peer, "tagged", sipmsg.INVITE, 1); r == nil || r.StatusCode != 403 {
		t.Fatalf("INVITE with the token but no To tag: final %v, want 403", r)
	}
	// A BYE with the token but no To tag: refused as in-dialog, not 405.
	bye := inDialogOf(t, as, h.udp, ok, sipmsg.BYE)
	bye.RemoveHeader("To")
	bye.AppendHeader(&sipmsg.ToHeader{Address: *ok.To().Address.Clone(), Params: sipmsg.NewParams()})
	peer.send(h.udp, withVia(bye, peer.addr(), "z9hG4bK.untagged-bye"))
	if r := finalOfRaw(peer, "tagged", sipmsg.BYE, 0); r == nil || r.StatusCode != 403 {
		t.Fatalf("BYE with the token but no To tag: final %v, want 403", r)
	}
	if n := car.Count("INVITE"); n != 1 {
		t.Fatalf("carrier INVITEs = %d, want 1 (the tagged call only)", n)
	}
	if tr.Live() != 1 {
		t.Fatalf("tracked calls = %d, want 1", tr.Live())
	}
}

// startRawCallsProxy starts a proxy with peer max_calls peerMax, its
// places in a Tracker on an in-process store, and one carrier: the raw end
// point car, which answers initial INVITEs 200 and BYEs with *byeCode (0:
// no answer).
// byeRelayProxy is startRawCallsProxy for a test of one relay (stateful:
// sipgo's transactions only, else the stateless one too, for the test's
// length) whose carrier answers BYEs 200.
func byeRelayProxy(t *testing.T, stateful bool, peerMax int) (*harness, *callplaces.Tracker, *udpEnd, *callplaces.LocalStore) {
	t.Helper()
	statefulOnly.Store(stateful)
	t.Cleanup(func() { statefulOnly.Store(false) })
	var byeCode atomic.Int64
	byeCode.Store(200)
	return startRawCallsProxy(t, peerMax, &byeCode)
}

// shortByeTimeout sets byeTimeout (Timer F for the node's BYE ends) to d
// for the test's length.
func shortByeTimeout(t *testing.T, d time.Duration) {
	old := byeTimeout
	byeTimeout = d
	t.Cleanup(func() { byeTimeout = old })
}

func startRawCallsProxy(t *testing.T, peerMax int, byeCode *atomic.Int64) (*harness, *callplaces.Tracker, *udpEnd, *callplaces.LocalStore) {
	t.Helper()
	return startRawCallsProxyOK(t, peerMax, byeCode, nil)
}

// startRawCallsProxyOK is startRawCallsProxy whose carrier passes its 2xx
// to edit (when not nil) before sending it.
func startRawCallsProxyOK(t *testing.T, peerMax int, byeCode *atomic.Int64, edit func(*sipmsg.Response)) (*harness, *callplaces.Tracker, *udpEnd, *callplaces.LocalStore) {
	t.Helper()
	car := startAnsweringEndWith(t, func(car *udpEnd, req *sipmsg.Request, invite func(*sipmsg.Request) *sipmsg.Response) *sipmsg.Response {
		if req.Method != sipmsg.BYE {
			res := invite(req)
			if res != nil && res.IsSuccess() && edit != nil {
				edit(res)
			}
			return res
		}
		if c := int(byeCode.Load()); c != 0 {
			return sipmsg.NewResponseFromRequest(req, c, "Answer", nil)
		}
		return nil
	})
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
	cfg.Peers[0].MaxCalls = peerMax
	cfg.SIP.RejectCalls.Code, cfg.SIP.RejectCalls.Reason = 503, "Call Limit Exceeded"
	store := callplaces.NewLocalStore(nil)
	tr := callplaces.NewTracker(store, callplaces.TrackerOptions{TTL: time.Minute})
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Calls: tr})
	return h, tr, car, store
}

// TestByeFreesPlacesOnItsAnswer: a call's max_calls places are freed when
// the carrier answers the peer's BYE 2xx or 481, never on another 3xx-6xx,
// 408 included (the call goes on), nor for a BYE that is not relayed: Max-Forwards 0 (483
// here) or one from the peer's IP on another port (403). They were freed when the BYE was sent,
// so a peer with max_calls 1 held two live calls. Both relays.
func TestByeFreesPlacesOnItsAnswer(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		for _, tc := range []struct {
			name      string
			carrier   int // the carrier's answer to the BYE
			mutate    func(*sipmsg.Request)
			otherPort bool
			want      int // what the peer gets
			ends      bool
		}{
			{name: "200", carrier: 200, want: 200, ends: true},
			{name: "481", carrier: 481, want: 481, ends: true},
			// A far proxy's 408 to a BYE the peer aimed at nobody (its
			// Request-URI, its Route) while the carrier's call goes on (h69).
			{name: "408", carrier: 408, want: 408},
			{name: "500 stale CSeq", carrier: 500, want: 500},
			{name: "420 unknown Require", carrier: 420, want: 420,
				mutate: func(r *sipmsg.Request) { r.AppendHeader(sipmsg.NewHeader("Require", "x-unknown")) }},
			{name: "Max-Forwards 0", carrier: 200, want: 483,
				mutate: func(r *sipmsg.Request) { mf := sipmsg.MaxForwardsHeader(0); r.ReplaceHeader(&mf) }},
			{name: "Max-Forwards 1", carrier: 200, want: 200, ends: true,
				mutate: func(r *sipmsg.Request) { mf := sipmsg.MaxForwardsHeader(1); r.ReplaceHeader(&mf) }},
			{name: "peer's IP, another port", carrier: 200, want: 403, otherPort: true},
		} {
			t.Run(fmt.Sprintf("stateful=%v/%s", stateful, tc.name), func(t *testing.T) {
				statefulOnly.Store(stateful)
				defer statefulOnly.Store(false)
				var byeCode atomic.Int64
				byeCode.Store(int64(tc.carrier))
				h, tr, car, store := startRawCallsProxy(t, 1, &byeCode)
				peer := startUDPEnd(t, "127.0.0.2", nil)
				ok := rawAnsweredCall(t, peer, h.udp, "first")
				from := peer
				if tc.otherPort {
					from = startUDPEnd(t, "127.0.0.2", nil)
				}
				bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), from.addr(), "z9hG4bK.bye-first")
				if tc.mutate != nil {
					tc.mutate(bye)
				}
				from.send(h.udp, bye)
				if r := finalOfRaw(from, "first", sipmsg.BYE, 0); r == nil || r.StatusCode != tc.want {
					t.Fatalf("BYE: final %v, want %d", r, tc.want)
				}
				if (tc.want == 483 || tc.want == 403) && len(car.requests(sipmsg.BYE)) != 0 {
					t.Fatalf("the refused BYE reached the carrier")
				}
				if tc.ends {
					// Forgotten by the Tracker, then freed in the store: the
					// second call needs the place itself.
					live := peerPlaces(t, store)
					waitFor(t, func() bool { return tr.Live() == 0 && live() == 0 }, "the call's places freed")
					rawAnsweredCall(t, peer, h.udp, "second")
					return
				}
				peer.send(h.udp, rawInviteFrom(peer, h.udp, "second", "ftag-second"))
				if r := finalOfRaw(peer, "second", sipmsg.INVITE, 0); r == nil || r.StatusCode != 503 {
					t.Fatalf("second call while the first is up: final %v, want 503 (max_calls 1)", r)
				}
				if tr.Live() != 1 {
					t.Fatalf("tracked calls = %d, want 1", tr.Live())
				}
			})
		}
	}
}

// TestCarrierByeEndsTheCallWhateverThePeerAnswers: the carrier's BYE ends
// the call, and frees its places, whatever the peer answers but a
// challenge (h67: a peer that answered 500 held the call, and the
// carrier's places with it, until max_call_duration; with a peer
// max_calls only its own calls, without one as many as its cps let it
// place). A 401 or 407 keeps it for Timer F, for the carrier's BYE to come
// again with credentials, and ends it then. Both relays.
func TestCarrierByeEndsTheCallWhateverThePeerAnswers(t *testing.T) {
	shortByeTimeout(t, 600*time.Millisecond)
	for _, stateful := range []bool{false, true} {
		for _, tc := range []struct {
			peer int // the peer's answer to the carrier's BYE
			ends bool
		}{{500, true}, {486, true}, {403, true}, {408, true}, {407, false}, {401, false}} {
			t.Run(fmt.Sprintf("stateful=%v/%d", stateful, tc.peer), func(t *testing.T) {
				h, tr, car, store := byeRelayProxy(t, stateful, 1)
				peer := startUDPEnd(t, "127.0.0.2", byeAnswers(func(seq uint32) int {
					if seq > 1 {
						return 200 // the BYE sent again
					}
					return tc.peer
				}))
				rawAnsweredCall(t, peer, h.udp, "first")
				waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 }, "the ACK at the carrier")
				bye := calleeByeOf(car.requests(sipmsg.INVITE)[0], "raw-callee")
				car.send(h.udp, withVia(bye, car.addr(), "z9hG4bK.callee-bye"))
				answers := func() int {
					n := 0
					for _, r := range car.responses() {
						if r.CSeq().MethodName == sipmsg.BYE && r.StatusCode == tc.peer {
							n++
						}
					}
					return n
				}
				waitFor(t, func() bool { return answers() == 1 }, "the peer's answer relayed to the carrier")
				if tc.ends {
					live := peerPlaces(t, store)
					waitFor(t, func() bool { return tr.Live() == 0 && live() == 0 }, "the call's places freed")
					// The dialog is over at the node but for the carrier's
					// BYEs: one sent again (a new transaction, after the
					// peer's 503 with Retry-After, say) reaches the peer, so
					// that its side ends too (h69: it got 481, and the peer
					// kept the call up).
					answered := func(seq uint32, code int) func() bool {
						return func() bool {
							for _, r := range car.responses() {
								if r.CSeq().SeqNo == seq && r.StatusCode == code {
									return true
								}
							}
							return false
						}
					}
					carrierRequest(car, h.udp, sipmsg.BYE, 2, "z9hG4bK.callee-bye-2")
					waitFor(t, answered(2, 200), "the peer's 200 to the carrier's BYE sent again")
					if n := len(peer.requests(sipmsg.BYE)); n != 2 {
						t.Fatalf("BYEs at the peer: %d, want 2", n)
					}
					// Nothing else of the dialog passes: the carrier's INFO,
					// the peer's own BYE.
					carrierRequest(car, h.udp, sipmsg.INFO, 3, "z9hG4bK.callee-info")
					waitFor(t, answered(3, 481), "481 to the carrier's INFO after the end")
					if n := len(peer.requests(sipmsg.INFO)); n != 0 {
						t.Fatalf("INFOs at the peer after the end: %d, want 0", n)
					}
					rawAnsweredCall(t, peer, h.udp, "second")
					return
				}
				time.Sleep(100 * time.Millisecond) // the end it must not make yet
				if tr.Live() != 1 {
					t.Fatalf("tracked calls after a challenged BYE = %d, want 1", tr.Live())
				}
				// No BYE with credentials within Timer F (shortened here):
				// the call ends as for a BYE never answered (h70: a peer
				// that challenged every BYE held the carrier's places).
				live := peerPlaces(t, store)
				waitFor(t, func() bool { return tr.Live() == 0 && live() == 0 }, "the challenged call ended after Timer F")
			})
		}
	}
}

// TestStatelessByeTimeoutEndsTheCall: a BYE relayed statelessly that the
// far leg never answers ends its call after Timer F (RFC 3261 15.1.1), as
// the stateful relay's transaction does; the table of BYEs waiting for
// their answer is empty again.
func TestStatelessByeTimeoutEndsTheCall(t *testing.T) {
	shortByeTimeout(t, 300*time.Millisecond)
	var byeCode atomic.Int64 // the carrier never answers a BYE
	h, tr, car, _ := startRawCallsProxy(t, 1, &byeCode)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	ok := rawAnsweredCall(t, peer, h.udp, "silent")
	peer.send(h.udp, withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.bye-silent"))
	waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == 1 }, "the BYE at the carrier")
	if b, _ := car.requests(sipmsg.BYE)[0].Via().Params.Get("branch"); !strings.HasPrefix(b, statelessbranch.Prefix) {
		t.Fatalf("BYE branch %q: not relayed statelessly", b)
	}
	waitFor(t, func() bool { return tr.Live() == 0 && h.p.byes.size() == 0 }, "the call ended by the BYE's timeout")
}

// TestInitialInviteHops: an initial INVITE with no hop left (Max-Forwards
// 0) is answered 483, not forwarded, and counted as a SIP error
// (too_many_hops); one with a hop left (1) is forwarded with 0, as RFC
// 3261 16.3 has a proxy do (a carrier's B2BUA takes it).
func TestInitialInviteHops(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	inv := rawInviteFrom(peer, h.udp, "no-hop", "ftag-no-hop")
	mf := sipmsg.MaxForwardsHeader(0)
	inv.ReplaceHeader(&mf)
	peer.send(h.udp, inv)
	if r := finalOfRaw(peer, "no-hop", sipmsg.INVITE, 0); r == nil || r.StatusCode != 483 {
		t.Fatalf("INVITE with Max-Forwards 0: final %v, want 483", r)
	}
	if n := car.Count("INVITE"); n != 0 {
		t.Fatalf("carrier INVITEs = %d, want 0", n)
	}
	if n := sipErrors(h, "too_many_hops"); n != 1 {
		t.Fatalf("too_many_hops counted = %v, want 1", n)
	}

	inv = rawInviteFrom(peer, h.udp, "one-hop", "ftag-one-hop")
	mf = sipmsg.MaxForwardsHeader(1)
	inv.ReplaceHeader(&mf)
	peer.send(h.udp, inv)
	if r := finalOfRaw(peer, "one-hop", sipmsg.INVITE, 0); r == nil || r.StatusCode != 200 {
		t.Fatalf("INVITE with Max-Forwards 1: final %v, want 200", r)
	}
	got := car.Invites()
	if len(got) != 1 {
		t.Fatalf("carrier INVITEs = %d, want 1", len(got))
	}
	if mf := got[0].MaxForwards(); mf == nil || mf.Val() != 0 {
		t.Fatalf("forwarded Max-Forwards %v, want 0", mf)
	}
	if n := sipErrors(h, "too_many_hops"); n != 1 {
		t.Fatalf("too_many_hops counted = %v after the forwarded INVITE, want still 1", n)
	}
}

// TestFailedCallTokenRefused: a call that the carrier refused after its
// Record-Route (and so the dialog token) reached the caller is over: an
// INVITE of that "dialog" (a To tag, the token in its Route) is refused
// 481 and never reaches the carrier. It was relayed as a re-INVITE for
// the token's whole life (4 h by default): an INVITE at the carrier with
// no admission, no pacing slot and no max_calls place (a UAS may take an
// INVITE of a dialog it does not know for a new one: RFC 3261 12.2.2).
// A retry of the call with the same Call-ID and From tag (after a 407,
// say) mints a token of its own and goes through.
func TestFailedCallTokenRefused(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	self := car.addr()
	var busy atomic.Bool
	busy.Store(true)
	answer := rawAnswerer(func() string { return self }, nil)
	early := func(req *sipmsg.Request, code int, reason string) *sipmsg.Response {
		res := sipmsg.NewResponseFromRequest(req, code, reason, nil)
		res.To().Params.Add("tag", "busy-callee")
		host, port, _ := net.SplitHostPort(self)
		p, _ := strconv.Atoi(port)
		res.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "callee", Host: host, Port: p}})
		return res
	}
	car.mu.Lock()
	car.answer = func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsInvite() && !msgpart.HasToTag(req) && busy.Load() {
			return early(req, 180, "Ringing") // Record-Route copied; the 486 follows
		}
		if req.IsInvite() && msgpart.HasToTag(req) {
			return sipmsg.NewResponseFromRequest(req, 200, "OK", nil) // a UAS that takes it
		}
		return answer(req)
	}
	car.mu.Unlock()
	_, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), admission.NewLocalStore(nil), pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	const id = "failed-call-token"
	peer.send(h.udp, rawInviteFrom(peer, h.udp, id, "ftag-"+id))
	var ringing *sipmsg.Response
	waitFor(t, func() bool {
		for _, r := range peer.responses() {
			if r.StatusCode == 180 {
				ringing = r
				return true
			}
		}
		return false
	}, "the 180 at the caller")
	if ringing.RecordRoute() == nil {
		t.Fatalf("the 180 at the caller has no Record-Route:\n%s", ringing)
	}
	car.send(h.udp, early(car.requests(sipmsg.INVITE)[0], 486, "Busy Here"))
	if r := finalOfRaw(peer, id, sipmsg.INVITE, 0); r == nil || r.StatusCode != 486 {
		t.Fatalf("the call's final answer: %v, want the carrier's 486", r)
	}
	busyRes := ringing
	waitFor(t, func() bool { return h.p.calls.(*callplaces.Tracker).Live() == 0 }, "the call's end")
	as := &siptest.Caller{Addr: peer.addr()}
	finalOfSeq := func(seq uint32) *sipmsg.Response {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for _, r := range peer.responses() {
				if r.StatusCode >= 200 && msgpart.CallID(r) == id && r.CSeq().SeqNo == seq {
					return r
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}
	for i, tag := range []string{"busy-callee", "made-up"} {
		re := inDialogOf(t, as, h.udp, busyRes, sipmsg.INVITE)
		re.CSeq().SeqNo = uint32(10 + i)
		re.To().Params.Add("tag", tag)
		peer.send(h.udp, withVia(re, peer.addr(), "z9hG4bK.after-fail-"+strconv.Itoa(i)))
		r := finalOfSeq(uint32(10 + i))
		if r == nil || r.StatusCode != 481 {
			t.Fatalf("INVITE with To tag %q and the failed call's token: %v, want 481", tag, r)
		}
	}
	if n := len(car.requests(sipmsg.INVITE)); n != 1 {
		t.Fatalf("INVITEs at the carrier = %d, want 1 (the refused call's)", n)
	}
	// The caller retries the call (same Call-ID and From tag, new CSeq and
	// branch) and the carrier takes it: its own token works.
	busy.Store(false)
	retry := rawInviteFrom(peer, h.udp, id, "ftag-"+id)
	retry.CSeq().SeqNo = 20
	retry.Via().Params.Add("branch", "z9hG4bK.retry-"+id)
	peer.send(h.udp, retry)
	ok := finalOfSeq(20)
	if ok == nil || ok.StatusCode != 200 {
		t.Fatalf("the retried call: %v, want 200", ok)
	}
	info := inDialogOf(t, as, h.udp, ok, sipmsg.INFO)
	info.CSeq().SeqNo = 21
	peer.send(h.udp, withVia(info, peer.addr(), "z9hG4bK.retry-info"))
	if r := finalOfSeq(21); r == nil || r.StatusCode != 200 {
		t.Fatalf("an INFO of the retried call: %v, want 200", r)
	}
}

// An in-dialog request from a peer that does not name the proxy in its
// Route (none at all here) gets 481, the proxy holding no such dialog,
// and is counted no_route: it was counted nowhere (h55).
func TestInDialogWithoutRouteCounted(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	_, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), admission.NewLocalStore(nil), pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	bye := "BYE sip:callee@" + car.addr() + " SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP " + peer.addr() + ";branch=z9hG4bK-noroute-1\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:dialer@127.0.0.2>;tag=f1\r\nTo: <sip:callee@127.0.0.1>;tag=t1\r\n" +
		"Call-ID: noroute-1@127.0.0.2\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"
	addr, err := net.ResolveUDPAddr("udp", h.udp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.conn.WriteToUDP([]byte(bye), addr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		for _, r := range peer.responses() {
			if r.StatusCode == 481 {
				return true
			}
		}
		return false
	}, "481 for the BYE without a Route")
	if n := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("no_route")); n != 1 {
		t.Errorf("sip_errors_total{no_route} = %v, want 1", n)
	}
	if len(car.requests(sipmsg.BYE)) != 0 {
		t.Error("the BYE without a Route reached the carrier")
	}
}

// TestRefusedByeBudgetSameOnBothRelays: after the peer refused the
// carrier's BYE, the carrier's BYE sent again (BYE 2) goes unanswered for
// a while, so the carrier retransmits it (10 copies, same branch: RFC
// 3261 17.1.2.2 sends 11 within Timer F). Then it sends BYE 3, a new
// transaction, well within the window: it reaches the peer over both
// relays. Over the stateless relay each copy took one of the BYEs the
// window allows, and BYE 3 got 481 (h72).
func TestRefusedByeBudgetSameOnBothRelays(t *testing.T) {
	shortByeTimeout(t, 600*time.Millisecond)
	for _, stateful := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateful=%v", stateful), func(t *testing.T) {
			h, tr, car, store := byeRelayProxy(t, stateful, 1)
			peer := startUDPEnd(t, "127.0.0.2", byeAnswers(func(seq uint32) int {
				switch seq {
				case 1:
					return 503
				case 2:
					return 0 // slow: not answered yet
				}
				return 200
			}))
			rawAnsweredCall(t, peer, h.udp, "budget")
			waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 }, "the ACK at the carrier")
			bye := calleeByeOf(car.requests(sipmsg.INVITE)[0], "raw-callee")
			car.send(h.udp, withVia(bye, car.addr(), "z9hG4bK.refused-bye-1"))
			live := peerPlaces(t, store)
			waitFor(t, func() bool { return tr.Live() == 0 && live() == 0 }, "the call's places freed")
			for i := 0; i < 10; i++ { // BYE 2 and its retransmissions
				carrierRequest(car, h.udp, sipmsg.BYE, 2, "z9hG4bK.refused-bye-2")
				time.Sleep(20 * time.Millisecond)
			}
			carrierRequest(car, h.udp, sipmsg.BYE, 3, "z9hG4bK.refused-bye-3")
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				for _, r := range car.responses() {
					if r.CSeq().SeqNo == 3 && r.StatusCode >= 200 {
						byes3 := 0
						for _, q := range peer.requests(sipmsg.BYE) {
							if q.CSeq().SeqNo == 3 {
								byes3++
							}
						}
						if r.StatusCode != 200 || byes3 == 0 {
							t.Fatalf("BYE 3 (the second BYE since the refusal, 5 min window): carrier got %d, BYE 3 at the peer %d times; want 200 from the peer", r.StatusCode, byes3)
						}
						return
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Fatal("no final answer to BYE 3")
		})
	}
}

// byeAnswers is a peer that answers each BYE the code code gives for its
// CSeq number (0: no answer) and nothing else.
func byeAnswers(code func(seq uint32) int) func(*sipmsg.Request) *sipmsg.Response {
	return func(req *sipmsg.Request) *sipmsg.Response {
		if req.Method != sipmsg.BYE {
			return nil
		}
		if c := code(req.CSeq().SeqNo); c != 0 {
			return sipmsg.NewResponseFromRequest(req, c, "Answer", nil)
		}
		return nil
	}
}

// carrierRequest sends, from car to proxy, the carrier's in-dialog request
// method of the raw call it answered (calleeByeOf's dialog), with CSeq
// number seq and a Via of branch.
func carrierRequest(car *udpEnd, proxy string, method sipmsg.RequestMethod, seq uint32, branch string) {
	m := calleeByeOf(car.requests(sipmsg.INVITE)[0], "raw-callee")
	m.Method = method
	m.ReplaceHeader(&sipmsg.CSeqHeader{SeqNo: seq, MethodName: method})
	car.send(proxy, withVia(m, car.addr(), branch))
}
