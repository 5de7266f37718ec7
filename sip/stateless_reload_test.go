package sip

import (
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// TestStatelessBranchAcrossSecretReload (h79, review of the codec's move): the
// response to a request relayed statelessly under one sip.dialog_secret is
// relayed after a reload that changes it (its branch verifies under the
// previous key: relayStatelessResponse's loop over cur and prev), and
// dropped as forged after a second change (that key is gone); a branch of
// the middle secret still verifies then.
func TestStatelessBranchAcrossSecretReload(t *testing.T) {
	car := startAnsweringEnd(t, func() bool { return false }) // answers no in-dialog request
	h, reload := startProxyWithSecret(t, config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}, "first-secret-0123456789")
	peer := startUDPEnd(t, "127.0.0.2", nil)
	ok := rawAnsweredCall(t, peer, h.udp, "secret-reload")
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 }, "the call's ACK at the carrier")
	peer.reset()
	car.reset()
	caller := peer.caller()

	info := func(n int, branch string) *sipmsg.Request {
		peer.send(h.udp, withVia(inDialogOf(t, caller, h.udp, ok, sipmsg.INFO), peer.addr(), branch))
		waitFor(t, func() bool { return len(car.requests(sipmsg.INFO)) == n }, "the INFO at the carrier")
		return car.requests(sipmsg.INFO)[n-1]
	}
	first := info(1, "z9hG4bK.reload-info-1") // under the first secret
	reload("second-secret-0123456789")
	second := info(2, "z9hG4bK.reload-info-2") // under the second
	if b1, b2 := first.Via().Params.GetOr("branch", ""), second.Via().Params.GetOr("branch", ""); b1 == b2 {
		t.Fatalf("one branch %q under two secrets", b1)
	}
	forged := sipErrors(h, "forged_response")

	car.send(h.udp, sipmsg.NewResponseFromRequest(first, 200, "OK", nil))
	waitFor(t, func() bool { return len(peer.responses()) == 1 }, "the 200 of the INFO of the previous secret at the caller")

	reload("third-secret-0123456789")
	car.send(h.udp, sipmsg.NewResponseFromRequest(first, 200, "OK", nil))
	waitFor(t, func() bool { return sipErrors(h, "forged_response")-forged == 1 }, "the 200 under the oldest secret counted forged")
	car.send(h.udp, sipmsg.NewResponseFromRequest(second, 200, "OK", nil))
	waitFor(t, func() bool { return len(peer.responses()) == 2 }, "the 200 of the INFO of the middle secret at the caller")
	time.Sleep(100 * time.Millisecond)
	if n := len(peer.responses()); n != 2 {
		t.Errorf("caller got %d responses, want 2", n)
	}
	if n := sipErrors(h, "forged_response") - forged; n != 1 {
		t.Errorf("forged responses = %v, want 1", n)
	}
}
