package sip

import (
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// TestAnsweredCallLetsGoOfItsTransactions: an answered call's INVITE
// transactions (sipgo's server and client ones) last answeredLinger after
// the 2xx, not RFC 6026's 32 s. sipgo's transactions keep the call's
// parsed messages and state, so at 1,200 calls/s 32 s of them held a live
// heap of about 440 MB (BENCHMARKS.md, session 12). Within the linger a
// carrier's 2xx retransmission (its ACK was lost) still reaches the
// caller; after it, a late one is a stray and dropped, and a late copy of
// the INVITE is absorbed by its tombstone, never decided again.
func TestAnsweredCallLetsGoOfItsTransactions(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	self := car.addr()
	answer := rawAnswerer(func() string { return self }, nil)
	car.mu.Lock()
	car.answer = answer
	car.mu.Unlock()
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	const id = "linger"
	ok := rawAnsweredCall(t, peer, h.udp, id)
	answered := time.Now()
	invites := car.requests(sipmsg.INVITE)
	if len(invites) != 1 {
		t.Fatalf("the carrier got %d INVITEs, want 1", len(invites))
	}
	inv := invites[0]
	count := func(code int) int {
		n := 0
		for _, r := range peer.responses() {
			if r.StatusCode == code && callID(r) == id && r.CSeq().MethodName == sipmsg.INVITE {
				n++
			}
		}
		return n
	}

	// Within the linger: relayed.
	car.send(h.udp, answer(inv))
	waitFor(t, func() bool { return count(200) == 2 }, "the carrier's 2xx retransmission within the linger at the caller")

	// After it: the carrier's 2xx again, and a copy of the caller's INVITE.
	time.Sleep(time.Until(answered.Add(answeredLinger + time.Second)))
	car.send(h.udp, answer(inv))
	peer.send(h.udp, rawInviteFrom(peer, h.udp, id, "ftag-"+id))
	// The caller's BYE and its answer pass the same worker (one Call-ID)
	// after both, in order: once its 200 is back, both were handled.
	bye := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE)
	peer.send(h.udp, withVia(bye, peer.addr(), "z9hG4bK.bye-"+id))
	if r := finalOfRaw(peer, id, sipmsg.BYE, 0); r == nil || r.StatusCode != 200 {
		t.Fatalf("the caller's BYE: final %v, want 200", r)
	}
	if n := count(200); n != 2 {
		t.Errorf("the caller got %d 2xx of its INVITE, want 2: a retransmission after the linger was relayed (the transactions lasted)", n)
	}
	if n := count(100); n != 1 {
		t.Errorf("the caller got %d 100 Trying, want 1: the INVITE's late copy was taken for a new call", n)
	}
	if n := len(car.requests(sipmsg.INVITE)); n != 1 {
		t.Errorf("the carrier got %d INVITEs, want 1", n)
	}
}
