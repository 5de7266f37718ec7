package sip

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
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
		{"node's entries dropped, the others kept", func(r *sipmsg.Response) {
			rrs := msgpart.RecordRoutes(r, nil)
			for r.RemoveHeader("Record-Route") {
			}
			for _, h := range rrs {
				if tok, _ := h.Address.UriParams.Get(tokenParam); tok == "" {
					r.AppendHeader(h)
				}
			}
		}, true, ""},
		{"node's entry gone, carrier's kept above", func(r *sipmsg.Response) {
			for r.RemoveHeader("Record-Route") {
			}
			r.AppendHeader(sipmsg.NewHeader("Record-Route", "<sip:192.0.2.98;lr>"))
		}, true, "192.0.2.98"},
	} {
		for _, upstream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/upstream proxy %v", tc.name, upstream), func(t *testing.T) {
				mendCase(t, tc.edit, tc.mended, tc.carrier, upstream)
			})
		}
	}
}

// upstreamRR is the Record-Route of a proxy before the node (a peer's
// SBC), which its INVITE carries and the caller's 2xx must end with.
const upstreamRR = "<sip:127.0.0.2:5099;lr>"

// mendCase runs one call of TestCarrierRecordRouteMended: the carrier's
// 2xx edited by edit; with upstream, the INVITE came through a proxy that
// record-routed it.
func mendCase(t *testing.T, edit func(*sipmsg.Response), mended bool, carrier string, upstream bool) {
	var byeCode atomic.Int64
	byeCode.Store(200)
	h, tr, car, store := startRawCallsProxyOK(t, 1, &byeCode, edit)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	inv := rawInviteFrom(peer, h.udp, "first", "ftag-first")
	if upstream {
		inv.AppendHeader(sipmsg.NewHeader("Record-Route", upstreamRR))
	}
	peer.send(h.udp, inv)
	ok := finalOfRaw(peer, "first", sipmsg.INVITE, 0)
	if ok == nil || ok.StatusCode != 200 {
		t.Fatalf("the call: final %v, want 200", ok)
	}
	rrs := msgpart.RecordRoutes(ok, nil)
	if upstream {
		if len(rrs) < 2 || rrs[len(rrs)-1].Address.Host != "127.0.0.2" || rrs[len(rrs)-1].Address.Port != 5099 {
			t.Fatalf("the caller's 2xx does not end with the upstream proxy's Record-Route:\n%s", ok)
		}
		if n := strings.Count(ok.String(), "127.0.0.2:5099"); n != 1 {
			t.Fatalf("the upstream proxy's Record-Route is in the 2xx %d times, want once:\n%s", n, ok)
		}
		rrs = rrs[:len(rrs)-1]
	}
	if len(rrs) == 0 || !h.p.isMe(&rrs[len(rrs)-1].Address) {
		t.Fatalf("the caller's 2xx does not end with the node's Record-Route:\n%s", ok)
	}
	if tok, _ := rrs[len(rrs)-1].Address.UriParams.Get(tokenParam); tok == "" {
		t.Fatalf("the node's Record-Route lost its dialog token:\n%s", ok)
	}
	if carrier != "" && !strings.Contains(ok.String(), carrier) {
		t.Fatalf("the carrier's own Record-Route %s is gone:\n%s", carrier, ok)
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("record_route")); (got > 0) != mended {
		t.Fatalf("sip_errors_total{reason=record_route} = %v, mended %v", got, mended)
	}
	ack := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.ACK)
	ack.CSeq().SeqNo = ok.CSeq().SeqNo
	bye := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE)
	if upstream {
		// The upstream proxy takes its own Route off.
		ack.RemoveHeader("Route")
		bye.RemoveHeader("Route")
	}
	peer.send(h.udp, withVia(ack, peer.addr(), "z9hG4bK.ack-first"))
	peer.send(h.udp, withVia(bye, peer.addr(), "z9hG4bK.bye-first"))
	if r := finalOfRaw(peer, "first", sipmsg.BYE, 0); r == nil || r.StatusCode != 200 {
		t.Fatalf("the caller's BYE: final %v, want the carrier's 200", r)
	}
	if n := len(car.requests(sipmsg.BYE)); n != 1 {
		t.Fatalf("BYEs at the carrier: %d, want 1", n)
	}
	live := peerPlaces(t, store)
	waitFor(t, func() bool { return tr.Live() == 0 && live() == 0 }, "the call's place freed")
	rawAnsweredCall(t, peer, h.udp, "second")
}

// With sip.record_route false the forwarded INVITE carries only the
// Record-Route of the proxies before the node, theirs to keep: a 2xx
// without them is relayed as it is, and nothing is counted (h69).
func TestNoRecordRouteNoMend(t *testing.T) {
	var byeCode atomic.Int64
	h, _, _, _ := startRawCallsProxyOK(t, 1, &byeCode, nil)
	out := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5070})
	lr := sipmsg.NewParams()
	lr.Add("lr", "")
	out.AppendHeader(&sipmsg.RecordRouteHeader{Address: sipmsg.Uri{Scheme: "sip", Host: "127.0.0.2", Port: 5099, UriParams: lr}})
	res := sipmsg.NewResponseFromRequest(out, 200, "OK", nil)
	for res.RemoveHeader("Record-Route") {
	}
	if h.p.mendRecordRoute(out, res) || len(msgpart.RecordRoutes(res, nil)) != 0 {
		t.Fatalf("a 2xx mended without the node's Record-Route in the INVITE:\n%s", res)
	}
	if got := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("record_route")); got != 0 {
		t.Fatalf("sip_errors_total{reason=record_route} = %v, want 0", got)
	}
}
