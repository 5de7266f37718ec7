package sip

import (
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// rawAnsweringSetup starts a raw carrier on 127.0.0.1 that answers every
// initial INVITE 200 (rawAnswerer: To tag "raw-callee") and every other
// request but ACK 200, a node routing to it, and a raw peer on 127.0.0.2;
// answer builds the carrier's 200 again (a retransmission).
func rawAnsweringSetup(t *testing.T) (h *harness, car, peer *udpEnd, answer func(*sipmsg.Request) *sipmsg.Response) {
	t.Helper()
	car = startUDPEnd(t, "127.0.0.1", nil)
	self := car.addr()
	answer = rawAnswerer(func() string { return self }, nil)
	car.mu.Lock()
	car.answer = answer
	car.mu.Unlock()
	adm, pacer := newFakes()
	h = startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	return h, car, startUDPEnd(t, "127.0.0.2", nil), answer
}

// inviteAnswers counts the responses of code e got to its INVITE of
// Call-ID id.
func inviteAnswers(e *udpEnd, id string, code int) int {
	n := 0
	for _, r := range e.responses() {
		if r.StatusCode == code && msgpart.CallID(r) == id && r.CSeq().MethodName == sipmsg.INVITE {
			n++
		}
	}
	return n
}

// TestAnsweredCallLetsGoOfItsTransactions: an answered call whose caller
// never ACKs keeps its INVITE transactions (sipgo's server and client
// ones) answeredLinger after the 2xx, not RFC 6026's 32 s. sipgo's
// transactions keep the call's parsed messages and state, so at 1,200
// calls/s 32 s of them held a live heap of about 440 MB (BENCHMARKS.md,
// session 12). Within the linger a carrier's 2xx retransmission still
// reaches the caller (its ACK may be on its way); after it, a late one is
// a stray and dropped, and a late copy of the INVITE is absorbed by its
// tombstone, never decided again. (A call whose caller ACKs ends them at
// the ACK: TestAckedCallEndsItsTransactions.)
func TestAnsweredCallLetsGoOfItsTransactions(t *testing.T) {
	h, car, peer, answer := rawAnsweringSetup(t)
	const id = "linger"
	peer.send(h.udp, rawInviteFrom(peer, h.udp, id, "ftag-"+id))
	if ok := finalOfRaw(peer, id, sipmsg.INVITE, 0); ok == nil || ok.StatusCode != 200 {
		t.Fatalf("call %s: final %v, want 200", id, ok)
	}
	answered := time.Now()
	invites := car.requests(sipmsg.INVITE)
	if len(invites) != 1 {
		t.Fatalf("the carrier got %d INVITEs, want 1", len(invites))
	}
	inv := invites[0]
	count := func(code int) int { return inviteAnswers(peer, id, code) }

	// Within the linger: relayed.
	car.send(h.udp, answer(inv))
	waitFor(t, func() bool { return count(200) == 2 }, "the carrier's 2xx retransmission within the linger at the caller")

	// After it: the carrier's 2xx again, and a copy of the caller's INVITE.
	time.Sleep(time.Until(answered.Add(answeredLinger + time.Second)))
	car.send(h.udp, answer(inv))
	peer.send(h.udp, rawInviteFrom(peer, h.udp, id, "ftag-"+id))
	// A request of the call from the caller passes the same worker (one
	// Call-ID) after both, in order: once its answer is back, both were
	// handled. (An OPTIONS out of dialog: answered by the screen.)
	opt := rawInviteFrom(peer, h.udp, id, "ftag-"+id)
	opt.Method = sipmsg.OPTIONS
	opt.CSeq().MethodName, opt.CSeq().SeqNo = sipmsg.OPTIONS, 2
	opt.RemoveHeader("Via")
	peer.send(h.udp, withVia(opt, peer.addr(), "z9hG4bK.opt-"+id))
	if r := finalOfRaw(peer, id, sipmsg.OPTIONS, 0); r == nil {
		t.Fatalf("the caller's OPTIONS: no answer")
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
	if n := len(car.requests(sipmsg.ACK)); n != 0 {
		t.Errorf("the carrier got %d ACKs, want none: the caller sent none", n)
	}
}

// TestForwardedRefusalCopyAnsweredAgain: a call forwarded and refused by
// its carrier (486 relayed) keeps sipgo's server transaction only until
// the caller's ACK and Timer I (T4, 5 s) after it; a copy of the INVITE
// after that was a new transaction and a new decision, forwarded to the
// carrier again. It now gets the refusal again from the refused table
// (refused.go), as a copy of the node's own refusal does, and the carrier
// sees one INVITE.
func TestForwardedRefusalCopyAnsweredAgain(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", func(req *sipmsg.Request) *sipmsg.Response {
		if !req.IsInvite() {
			return nil
		}
		res := sipmsg.NewResponseFromRequest(req, 486, "Busy Here", nil)
		res.To().Params.Add("tag", "busy-callee")
		return res
	})
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	const id = "busy-copy"
	inv := rawInviteFrom(peer, h.udp, id, "ftag-"+id)
	peer.send(h.udp, inv)
	busy := finalOfRaw(peer, id, sipmsg.INVITE, 0)
	if busy == nil || busy.StatusCode != 486 {
		t.Fatalf("the call's final answer: %v, want the carrier's 486", busy)
	}
	// The ACK of the 486 (hop by hop: the INVITE's branch, its To tag).
	ack := sipmsg.NewRequest(sipmsg.ACK, inv.Recipient)
	for _, name := range []string{"Via", "From", "Call-ID", "Max-Forwards"} {
		ack.AppendHeader(sipmsg.HeaderClone(inv.GetHeader(name)))
	}
	ack.AppendHeader(sipmsg.HeaderClone(busy.To()))
	ack.AppendHeader(&sipmsg.CSeqHeader{SeqNo: inv.CSeq().SeqNo, MethodName: sipmsg.ACK})
	peer.send(h.udp, ack)
	time.Sleep(sipmsg.T4 + time.Second) // Timer I: the transaction is gone
	peer.send(h.udp, rawInviteFrom(peer, h.udp, id, "ftag-"+id))
	again := finalOfRaw(peer, id, sipmsg.INVITE, 1)
	if again == nil || again.StatusCode != 486 || msgpart.Tag(again.To().Params) != "busy-callee" {
		t.Errorf("the copy's answer: %v, want the same 486 (To tag busy-callee)", again)
	}
	if n := len(car.requests(sipmsg.INVITE)); n != 1 {
		t.Errorf("the carrier got %d INVITEs, want 1: the copy was decided and forwarded again", n)
	}
}

// TestReInviteCopyAfterLingerAbsorbed: a re-INVITE's copy arriving after
// sipgo's transaction of it ended (the 8 s linger after its 2xx) is not
// relayed to the carrier a second time. Two things stop it: its
// tombstone (answered: RegAbsorbed), and behind it the re-INVITE limit's
// store member (Call-ID and branch), which takes a copy for a duplicate
// (TestReInviteDuplicateIsNoAdmission); with the first disabled by hand
// the second still holds, so this test guards the whole, not either.
func TestReInviteCopyAfterLingerAbsorbed(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	_, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), admission.NewLocalStore(nil), pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	const id = "reinvite-linger"
	ok := rawAnsweredCall(t, peer, h.udp, id)
	re := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.INVITE)
	re.CSeq().SeqNo = 5
	re = withVia(re, peer.addr(), "z9hG4bK.re-"+id)
	peer.send(h.udp, re)
	if r := finalOfRaw(peer, id, sipmsg.INVITE, 1); r == nil || r.StatusCode != 200 {
		t.Fatalf("the re-INVITE's answer: %v, want 200", r)
	}
	answered := time.Now()
	if n := car.Count("INVITE"); n != 2 {
		t.Fatalf("INVITEs at the carrier = %d, want 2", n)
	}
	time.Sleep(time.Until(answered.Add(answeredLinger + time.Second)))
	peer.send(h.udp, re)
	// The caller's BYE passes the same worker after the copy.
	bye := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE)
	bye.CSeq().SeqNo = 6
	peer.send(h.udp, withVia(bye, peer.addr(), "z9hG4bK.bye-"+id))
	if r := finalOfRaw(peer, id, sipmsg.BYE, 0); r == nil || r.StatusCode != 200 {
		t.Fatalf("the caller's BYE: final %v, want 200", r)
	}
	if n := car.Count("INVITE"); n != 2 {
		t.Errorf("INVITEs at the carrier = %d, want 2: the re-INVITE's copy after the linger was relayed again", n)
	}
}
