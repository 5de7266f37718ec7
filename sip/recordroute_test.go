package sip

import (
	"strings"
	"sync/atomic"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCarrierRecordRouteMended: a carrier's 2xx whose Record-Route list
// does not end with the node's entries (dropped, or with one of the
// carrier's below them) had the caller send its BYE around the node, and
// the call held its max_calls place until max_call_duration (h67). The
// node mends the list before relaying it: the caller's BYE comes through
// the node, and the place is free for the next call. An entry of the
// carrier's above the node's is its own business and is kept.
func TestCarrierRecordRouteMended(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*sipmsg.Response)
		mended  bool
		carrier string // a Record-Route of the carrier's the caller must still get
	}{
		{"kept", nil, false, ""},
		{"dropped", func(r *sipmsg.Response) {
			for r.RemoveHeader("Record-Route") {
			}
		}, true, ""},
		{"carrier's entry below the node's", func(r *sipmsg.Response) {
			r.AppendHeader(sipmsg.NewHeader("Record-Route", "<sip:192.0.2.99;lr>"))
		}, true, ""},
		{"carrier's entry above the node's", func(r *sipmsg.Response) {
			rrs := r.GetHeaders("Record-Route")
			for r.RemoveHeader("Record-Route") {
			}
			r.AppendHeader(sipmsg.NewHeader("Record-Route", "<sip:192.0.2.98;lr>"))
			for _, h := range rrs {
				r.AppendHeader(h)
			}
		}, false, "192.0.2.98"},
		{"node's entry gone, carrier's kept above", func(r *sipmsg.Response) {
			for r.RemoveHeader("Record-Route") {
			}
			r.AppendHeader(sipmsg.NewHeader("Record-Route", "<sip:192.0.2.98;lr>"))
		}, true, "192.0.2.98"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var byeCode atomic.Int64
			byeCode.Store(200)
			h, tr, car, store := startRawCallsProxyOK(t, 1, &byeCode, tc.edit)
			peer := startUDPEnd(t, "127.0.0.2", nil)
			ok := rawAnsweredCall(t, peer, h.udp, "first")
			rrs := recordRoutesOf(ok, nil)
			if len(rrs) == 0 || !h.p.isMe(&rrs[len(rrs)-1].Address) {
				t.Fatalf("the caller's 2xx does not end with the node's Record-Route:\n%s", ok)
			}
			if tok, _ := rrs[len(rrs)-1].Address.UriParams.Get(tokenParam); tok == "" {
				t.Fatalf("the node's Record-Route lost its dialog token:\n%s", ok)
			}
			if tc.carrier != "" && !strings.Contains(ok.String(), tc.carrier) {
				t.Fatalf("the carrier's own Record-Route %s is gone:\n%s", tc.carrier, ok)
			}
			if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("record_route")); (got > 0) != tc.mended {
				t.Fatalf("sip_errors_total{reason=record_route} = %v, mended %v", got, tc.mended)
			}
			bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.bye-first")
			peer.send(h.udp, bye)
			if r := finalOfRaw(peer, "first", sipmsg.BYE, 0); r == nil || r.StatusCode != 200 {
				t.Fatalf("the caller's BYE: final %v, want the carrier's 200", r)
			}
			if n := len(car.requests(sipmsg.BYE)); n != 1 {
				t.Fatalf("BYEs at the carrier: %d, want 1", n)
			}
			live := peerPlaces(t, store)
			waitFor(t, func() bool { return tr.Live() == 0 && live() == 0 }, "the call's place freed")
			rawAnsweredCall(t, peer, h.udp, "second")
		})
	}
}
