package sip

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// TestRemovedPartiesEndTheirCalls: a reload that removes a peer, or a
// carrier, while its calls are up leaves those calls to end as they would
// have: the removed party's BYE, carrying its dialog token from its leg's
// address, is relayed, and so is the other leg's answer to it, and the
// call frees its places. Both were refused as a stranger's (h46), and the
// calls held their places until max_call_duration; under unknown_source
// drop they were dropped before the screen (h51). A stranger's request
// with a token that does not open is refused as any stranger's: 403, or
// silence under drop, counted unknown_source.
func TestRemovedPartiesEndTheirCalls(t *testing.T) {
	for _, tc := range []struct{ removed, unknown string }{
		{"peer", "reject"}, {"carrier", "reject"}, {"peer", "drop"}, {"carrier", "drop"},
	} {
		removed := tc.removed
		t.Run(removed+"/unknown_source="+tc.unknown, func(t *testing.T) {
			answerBye := func(req *sipmsg.Request) *sipmsg.Response {
				if req.Method == sipmsg.BYE {
					return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
				}
				return nil
			}
			car := startUDPEnd(t, "127.0.0.3", nil)
			car.mu.Lock()
			car.answer = func(req *sipmsg.Request) *sipmsg.Response {
				if req.IsInvite() {
					res := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
					res.AppendHeader(car.contact())
					return res
				}
				return answerBye(req)
			}
			car.mu.Unlock()
			before := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
			before.Peers[0].MaxCalls = 5
			after := testConfig(config.Carrier{Name: "other", URI: "sip:127.0.0.4:9", CPS: 100, MaxWait: time.Second})
			after.Peers[0].MaxCalls = 5
			if removed == "peer" {
				after = testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
				after.Peers[0].MaxCalls = 5
				after.Peers[0].Sources = []netip.Prefix{netip.MustParsePrefix("127.0.0.9/32")}
			}
			var cur atomic.Pointer[config.Config]
			cur.Store(before)
			adm, pacer := newFakes()
			store := callplaces.NewLocalStore(nil)
			tr := callplaces.NewTracker(store, callplaces.TrackerOptions{TTL: time.Minute})
			h := startProxyOpts(t, Options{Config: cur.Load, Admission: adm, Pacer: pacer, Calls: tr})
			live := peerPlaces(t, store)
			peer := startUDPEnd(t, "127.0.0.2", answerBye)
			ok := rawAnsweredCall(t, peer, h.udp, "removed-"+removed)
			if live() != 1 {
				t.Fatalf("places after the answer = %d, want 1", live())
			}
			after.SIP.UnknownSource = tc.unknown
			cur.Store(after) // the reload

			// A stranger's BYE with a token that does not open: refused.
			stranger := startUDPEnd(t, "127.0.0.7", nil)
			forged := calleeRequest(stranger, sipmsg.BYE, nil, ok, "x", 9, "z9hG4bK.forged")
			forged.AppendHeader(sipmsg.NewHeader("Route", "<sip:"+h.udp+";lr;"+tokenParam+"=0000>"))
			stranger.send(h.udp, forged)
			if tc.unknown == "reject" {
				waitFor(t, func() bool { return len(stranger.responses()) == 1 }, "the stranger's answer")
				if c := stranger.responses()[0].StatusCode; c != 403 {
					t.Fatalf("a stranger's BYE with a forged token: %d, want 403", c)
				}
			}
			waitFor(t, func() bool { return sipErrors(h, "unknown_source") >= 1 }, "the stranger counted as one")
			if n := sipErrors(h, "bad_dialog_token"); n != 0 {
				t.Errorf("a stranger's forged token counted bad_dialog_token (%v): it is a stranger's request", n)
			}

			if removed == "peer" {
				bye := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE)
				peer.send(h.udp, withVia(bye, peer.addr(), "z9hG4bK.removed-peer-bye"))
				waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) == 1 }, "the removed peer's BYE at the carrier")
				waitFor(t, func() bool { return len(peer.responses()) > 0 }, "the carrier's 200 at the removed peer")
				if c := peer.responses()[len(peer.responses())-1].StatusCode; c != 200 {
					t.Fatalf("the removed peer's BYE answered %d, want the carrier's 200", c)
				}
			} else {
				var routes []string
				for _, rr := range ok.GetHeaders("Record-Route") {
					routes = append(routes, rr.Value())
				}
				bye := calleeRequest(car, sipmsg.BYE, routes, ok, msgpart.Tag(ok.To().Params), 50, "z9hG4bK.removed-car-bye")
				car.send(h.udp, bye)
				waitFor(t, func() bool { return len(peer.requests(sipmsg.BYE)) == 1 }, "the removed carrier's BYE at the caller")
				waitFor(t, func() bool { return len(car.responses()) > 0 }, "the caller's 200 at the removed carrier")
				if c := car.responses()[0].StatusCode; c != 200 {
					t.Fatalf("the removed carrier's BYE answered %d, want the caller's 200", c)
				}
			}
			waitFor(t, func() bool { return live() == 0 && tr.Live() == 0 }, "the call's places given back")
			if tc.unknown == "drop" && len(stranger.responses()) != 0 {
				t.Errorf("a stranger got %d answers under unknown_source drop, want none", len(stranger.responses()))
			}
		})
	}
}
