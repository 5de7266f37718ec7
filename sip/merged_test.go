package sip

import (
	"strconv"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// TestMergedInvitesBounded: INVITEs of one dialog id (the same Call-ID
// and From tag from the same peer leg, another Via branch each: RFC 3261
// 8.2.2.2's merged requests) are separate calls to the node, and each
// in-dialog request and each end looked at all of them under the lock
// every call's setup takes. Past maxCallsPerDialog live ones, a new one is
// answered 482 before admission, never forwarded, and counted
// (sip_errors_total{reason="merged_request"}). A dialog id's calls that
// ended make room again.
func TestMergedInvitesBounded(t *testing.T) {
	h, tr, car, _ := startRawCallsProxy(t, 0, nil)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	const id = "merged-call"
	send := func(i int) {
		inv := rawInviteFrom(peer, h.udp, id, "ftag-merged")
		inv.RemoveHeader("Via")
		peer.send(h.udp, withVia(inv, peer.addr(), "z9hG4bK.merged-"+strconv.Itoa(i)))
	}
	finals := func() (ok, merged int) {
		for _, r := range peer.responses() {
			if msgpart.CallID(r) != id || r.CSeq().MethodName != sipmsg.INVITE {
				continue
			}
			switch r.StatusCode {
			case 200:
				ok++
			case sipmsg.StatusLoopDetected:
				merged++
			}
		}
		return ok, merged
	}
	for i := range maxCallsPerDialog {
		send(i)
		waitFor(t, func() bool { ok, _ := finals(); return ok == i+1 }, "the "+strconv.Itoa(i+1)+"th merged INVITE answered 200")
	}
	send(maxCallsPerDialog)
	waitFor(t, func() bool { _, m := finals(); return m == 1 }, "the INVITE past the bound answered 482")
	if n := len(car.requests(sipmsg.INVITE)); n != maxCallsPerDialog {
		t.Errorf("the carrier got %d INVITEs, want %d (the one past the bound never forwarded)", n, maxCallsPerDialog)
	}
	if n := sipErrors(h, "merged_request"); n != 1 {
		t.Errorf("merged_request counted %v, want 1", n)
	}
	if n := tr.Live(); n != maxCallsPerDialog {
		t.Errorf("%d calls live, want %d", n, maxCallsPerDialog)
	}

	// Another dialog id of the same peer (another From tag) is not held
	// back by the first's calls.
	other := rawInviteFrom(peer, h.udp, id, "ftag-other")
	other.RemoveHeader("Via")
	peer.send(h.udp, withVia(other, peer.addr(), "z9hG4bK.merged-other"))
	waitFor(t, func() bool { ok, _ := finals(); return ok == maxCallsPerDialog+1 }, "another dialog id's INVITE answered 200")
}
