package sip

import (
	"bytes"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// TestAckedCallEndsItsTransactions: once the caller's ACK of an answered
// call passed the node (both legs UDP), the call's INVITE transactions
// end; they held every parsed message of the call for the 8 s linger.
// What they were kept for still works from what the node keeps instead:
// a 2xx retransmission of the carrier (its ACK was lost) gets the
// caller's ACK again, as it was relayed, and is not relayed to the caller
// (the client transaction, which relays it, is gone); a forking carrier's
// 2xx of another To tag is ACKed and BYEd at the carrier once, its copy
// ACKed again; the same 2xx from another source is nobody's answer; a
// copy of the caller's INVITE is absorbed by its tombstone; and after
// the linger, a retransmission is a stray, dropped.
func TestAckedCallEndsItsTransactions(t *testing.T) {
	h, car, peer, answer := rawAnsweringSetup(t)
	const id = "acked"
	rawAnsweredCall(t, peer, h.udp, id)
	answered := time.Now()
	invites := car.requests(sipmsg.INVITE)
	if len(invites) != 1 {
		t.Fatalf("the carrier got %d INVITEs, want 1", len(invites))
	}
	inv := invites[0]
	acks := func(tag string) []*sipmsg.Request {
		var out []*sipmsg.Request
		for _, r := range car.requests(sipmsg.ACK) {
			if msgpart.Tag(r.To().Params) == tag {
				out = append(out, r)
			}
		}
		return out
	}
	waitFor(t, func() bool { return len(acks("raw-callee")) == 1 && h.p.acked.len() == 1 },
		"the caller's ACK at the carrier, and the call's transactions ended")
	count := func(code int) int { return inviteAnswers(peer, id, code) }

	// What the call keeps of its ACK is the bytes it was sent as, not the
	// parsed request (some 30 objects for every mark phase of the 8 s).
	var kept *ackedCall
	h.p.acked.mu.Lock()
	for _, a := range h.p.acked.m {
		kept = a
	}
	h.p.acked.mu.Unlock()
	if kept.ack != nil || len(kept.wire) == 0 {
		t.Errorf("the ACKed call keeps its ACK parsed (%v) or no bytes of it (%d)", kept.ack != nil, len(kept.wire))
	} else if m, err := sipmsg.ParseMessage(kept.wire); err != nil || m.String() != acks("raw-callee")[0].String() {
		t.Errorf("the ACK kept (%v) is not the one relayed:\n%s\nvs\n%s", err, kept.wire, acks("raw-callee")[0])
	}

	// The carrier did not get the ACK: its 2xx again.
	car.send(h.udp, answer(inv))
	waitFor(t, func() bool { return len(acks("raw-callee")) == 2 }, "the caller's ACK sent again for the carrier's 2xx retransmission")
	first, again := acks("raw-callee")[0], acks("raw-callee")[1]
	if first.String() != again.String() {
		t.Errorf("the ACK sent again differs from the one relayed:\n%s\nvs\n%s", first, again)
	}

	// The same 2xx from the caller's address: nobody's answer.
	peer.send(h.udp, answer(inv))

	// A fork: another To tag.
	fork := answer(inv)
	fork.To().Params.Remove("tag")
	fork.To().Params.Add("tag", "fork-callee")
	car.send(h.udp, fork)
	waitFor(t, func() bool { return len(acks("fork-callee")) == 1 }, "the fork's 2xx ACKed at the carrier")
	car.send(h.udp, fork)
	waitFor(t, func() bool { return len(acks("fork-callee")) == 2 }, "the fork's copy ACKed again")
	byes := func() int {
		n := 0
		for _, r := range car.requests(sipmsg.BYE) {
			if msgpart.Tag(r.To().Params) == "fork-callee" {
				n++
			}
		}
		return n
	}
	waitFor(t, func() bool { return byes() >= 1 }, "the fork's BYE at the carrier")

	// A copy of the caller's INVITE.
	peer.send(h.udp, rawInviteFrom(peer, h.udp, id, "ftag-"+id))

	// After the linger: the 2xx again is a stray.
	time.Sleep(time.Until(answered.Add(answeredLinger + time.Second)))
	car.send(h.udp, answer(inv))
	// The caller's BYE passes the same worker (one Call-ID) after all of
	// them, in order: once its answer is back, all were handled.
	ok := finalOfRaw(peer, id, sipmsg.INVITE, 0)
	bye := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE)
	peer.send(h.udp, withVia(bye, peer.addr(), "z9hG4bK.bye-"+id))
	if r := finalOfRaw(peer, id, sipmsg.BYE, 0); r == nil || r.StatusCode != 200 {
		t.Fatalf("the caller's BYE: final %v, want 200", r)
	}
	if n := count(200); n != 1 {
		t.Errorf("the caller got %d 2xx of its INVITE, want 1: a retransmission or fork was relayed", n)
	}
	if n := count(100); n != 1 {
		t.Errorf("the caller got %d 100 Trying, want 1: the INVITE's copy was taken for a new call", n)
	}
	if n := len(car.requests(sipmsg.INVITE)); n != 1 {
		t.Errorf("the carrier got %d INVITEs, want 1", n)
	}
	if n := len(acks("raw-callee")); n != 2 {
		t.Errorf("the carrier got %d ACKs of the answer, want 2: the caller's and one for the retransmission within the linger", n)
	}
	if n := byes(); n != 1 {
		t.Errorf("the carrier got %d BYEs of the fork, want 1", n)
	}
}

// fakeServerTx is a server transaction that records its end.
type fakeServerTx struct {
	mu         sync.Mutex
	terminated bool
	done       chan struct{}
}

func (f *fakeServerTx) Terminate() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.terminated {
		f.terminated = true
		close(f.done)
	}
}
func (f *fakeServerTx) OnTerminate(sipmsg.FnTxTerminate) bool { return true }
func (f *fakeServerTx) Done() <-chan struct{}                 { return f.done }
func (f *fakeServerTx) Err() error                            { return nil }
func (f *fakeServerTx) Respond(*sipmsg.Response) error        { return nil }
func (f *fakeServerTx) Acks() <-chan *sipmsg.Request          { return nil }
func (f *fakeServerTx) OnCancel(sipmsg.FnTxCancel) bool       { return true }
func (f *fakeServerTx) wasTerminated() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terminated
}

// TestAckBeforeHandlerReturns: the caller's ACK may pass the node before
// the call's handler returned (holdAnswered not run yet); the handler
// then ends the transactions itself. An ACK that does not acknowledge
// the answer (another To tag, another CSeq) ends nothing, and nothing of
// it is kept.
func TestAckBeforeHandlerReturns(t *testing.T) {
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "a", URI: "sip:127.0.0.1:5999", CPS: 100, MaxWait: time.Second}), adm, pacer)
	setup := func(tag string, seq uint32) (*call, *fakeServerTx, *fakeClientTx, string) {
		out := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5999})
		branch := "z9hG4bK.out-" + tag + "-" + strconv.Itoa(int(seq))
		out = withVia(out, "127.0.0.9:5060", branch)
		from := &sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: "127.0.0.2"}, Params: sipmsg.NewParams()}
		from.Params.Add("tag", "ftag")
		out.AppendHeader(from)
		cid := sipmsg.CallIDHeader("early-ack-" + tag)
		out.AppendHeader(&cid)
		out.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.INVITE})
		out.SetTransport("UDP")
		out.SetDestination("127.0.0.1:5999")
		to := &sipmsg.ToHeader{Address: out.Recipient, Params: sipmsg.NewParams()}
		to.Params.Add("tag", tag)
		ack := msgpart.RequestOf(out, sipmsg.ACK, out.Recipient, false, to, seq)
		stx, ctx := &fakeServerTx{done: make(chan struct{})}, newFakeClientTx()
		lc := &liveCall{answered: true, ackFirst: ack}
		c := &call{p: h.p, callID: msgpart.CallID(out), tx: stx, lc: lc, answered: true, answeredAt: time.Now(),
			ackLeg: &relayLeg{p: h.p, out: out, tx: ctx, fk: &forkSet{okKnown: true, okTag: "callee"}}}
		return c, stx, ctx, branch
	}

	c, stx, ctx, branch := setup("callee", 1)
	h.p.holdAnswered(c)
	if !stx.wasTerminated() || !ctx.wasTerminated() {
		t.Errorf("an ACK before the handler returned: server ended %v, client ended %v; want both", stx.wasTerminated(), ctx.wasTerminated())
	}
	if h.p.acked.get(branch, time.Now()) == nil {
		t.Errorf("nothing kept for the call's retransmissions")
	}

	for _, bad := range []struct {
		tag string
		seq uint32
	}{{"other", 1}, {"callee", 2}} {
		c, stx, ctx, branch := setup(bad.tag, bad.seq)
		c.ackLeg.fk.okTag = "callee"
		h.p.holdAnswered(c)
		if stx.wasTerminated() || ctx.wasTerminated() || h.p.acked.get(branch, time.Now()) != nil {
			t.Errorf("an ACK with To tag %q and CSeq %d ended the call's transactions", bad.tag, bad.seq)
		}
		c.lc.mu.Lock()
		kept := c.lc.ackFirst != nil || c.lc.txs != nil || !c.lc.ackDone
		c.lc.mu.Unlock()
		if kept {
			t.Errorf("an ACK with To tag %q and CSeq %d: the call still keeps its ACK or transactions, or waits for another", bad.tag, bad.seq)
		}
	}
}

// TestAckedTableBounds: the table forgets calls past their expiry, and
// the oldest first beyond maxAcked.
func TestAckedTableBounds(t *testing.T) {
	var tab ackedTable
	now := time.Now()
	a := &ackedCall{exp: now.Add(time.Second)}
	tab.add("a", a, now)
	if tab.get("a", now) != a || tab.get("a", now.Add(2*time.Second)) != nil {
		t.Fatalf("get: a kept call is found until its expiry only")
	}
	tab.add("b", &ackedCall{exp: now.Add(3 * time.Second)}, now.Add(2*time.Second))
	if n := tab.len(); n != 1 {
		t.Errorf("after a's expiry: %d kept, want 1", n)
	}
	for i := 0; i < maxAcked+10; i++ {
		tab.add(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i)}), uint16(i)).String(), &ackedCall{exp: now.Add(time.Hour)}, now)
	}
	if n := tab.len(); n > maxAcked {
		t.Errorf("%d kept, want at most %d", n, maxAcked)
	}
}

// TestAckedCallFreesItsTransactions: at the caller's ACK the call's two
// INVITE transactions are not only ended but unreachable, so the
// collector frees the call's messages then, not at the end of the linger
// (sipgo's Terminate leaves the Accepted state's timer armed, and its
// function holds the transaction: sipgohook.EndLinger). A call whose caller has
// not ACKed yet keeps them.
func TestAckedCallFreesItsTransactions(t *testing.T) {
	h, _, peer, _ := rawAnsweringSetup(t)
	const id = "acked-free"
	peer.send(h.udp, rawInviteFrom(peer, h.udp, id, "ftag-"+id))
	ok := finalOfRaw(peer, id, sipmsg.INVITE, 0)
	if ok == nil || ok.StatusCode != 200 {
		t.Fatalf("call %s: final %v, want 200", id, ok)
	}
	gone := heldTxs(t, h, id)

	ack := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.ACK)
	ack.CSeq().SeqNo = ok.CSeq().SeqNo
	peer.send(h.udp, withVia(ack, peer.addr(), "z9hG4bK.ack-"+id))
	waitFor(t, func() bool { return h.p.acked.len() == 1 }, "the call's transactions ended at the ACK")
	txsFreed(t, gone)
}

// heldTxs waits until the answered call id's handler left its INVITE
// transactions on the call for the caller's ACK, and returns a check that
// both are unreachable (after a collection); they must not be yet.
func heldTxs(t *testing.T, h *harness, id string) (gone func() bool) {
	t.Helper()
	var txs *answeredTxs
	waitFor(t, func() bool {
		for _, f := range h.p.calls.Find(id) {
			if lc, isLive := f.Data.(*liveCall); isLive {
				lc.mu.Lock()
				txs = lc.txs
				lc.mu.Unlock()
			}
		}
		return txs != nil
	}, "the answered call's transactions held for its caller's ACK")
	server, isServer := txs.server.(*sipmsg.ServerTx)
	client, isClient := txs.client.(*sipmsg.ClientTx)
	if !isServer || !isClient {
		t.Fatalf("the call's transactions are %T and %T, want sipgo's", txs.server, txs.client)
	}
	ws, wc := weak.Make(server), weak.Make(client)
	gone = func() bool {
		runtime.GC()
		return ws.Value() == nil && wc.Value() == nil
	}
	if gone() {
		t.Fatalf("the transactions were freed before the caller's ACK")
	}
	return gone
}

// txsFreed fails unless gone (heldTxs) turns true well within the 8 s
// linger. Before each look it has the runtime sweep the timers sipgo
// stopped (sweepTimerHeaps), as a busy node's timers have it done all the
// time: what is left holds the transactions for real (a linger timer
// still armed, or the node's own reference).
func txsFreed(t *testing.T, gone func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		sweepTimerHeaps(t)
		if gone() {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("after the ACK, the call's transactions are still reachable; want neither (a linger timer still holds one)")
}

// sweepTimerHeaps has the runtime take the stopped timers out of every
// P's timer heap. sipgo stops rather than fires a client transaction's
// Timers A and B at its final answer (B set for 32 s) and a server
// transaction's 1xx timer at its first answer; a stopped timer stays in
// its P's heap, its function (and so the transaction) with it, until the
// runtime sweeps the heap: when its deadline reaches the head, when
// stopped timers are a quarter of it (looked at by its own P), or once a
// timer reset while in that heap comes due (Go 1.23 on, runtime/time.go:
// timers.check runs adjust, a scan of the whole heap, before it runs a
// timer when minWhenModified has passed). On a node under load
// the last comes at once (endAnswered's own timers are moved to now at
// every ACK), but in a quiet test it can come after the check: a heap
// dump of a failing run (CI, and 8 of 120 local runs of
// TestAckedStreamCallEndsItsTransactions's cases) showed allp → a P's
// timer heap → Timer B's function → the ClientTx, and the server
// transaction through the client's end callback (holdAnswered). Running
// those timers in the node instead cost ~4 % of its CPU per call (each
// timer moved makes the runtime walk that P's whole heap), for memory a
// loaded node frees anyway (live heap at 1,200 CPS unchanged, BENCHMARKS.md
// session 16).
//
// GOMAXPROCS goroutines, spinning until all of them have started (so
// most likely each on its own P), each arm a timer on their P and reset
// it to 1 ms: that heap is swept before the timer fires. Nothing pins a
// goroutine to a P (one preempted while it spins may go on on another's
// P), so a look may leave a heap unswept: txsFreed looks again, and a
// miss can only fail the test, never pass it. It sweeps stopped timers
// only, the node's as well as sipgo's: TestStopTxTimerFires checks that
// endAnswered fires its linger timers rather than stopping them.
func sweepTimerHeaps(t *testing.T) {
	t.Helper()
	procs := runtime.GOMAXPROCS(0)
	var running atomic.Int32
	fired := make(chan struct{}, procs)
	for range procs {
		go func() {
			running.Add(1)
			for running.Load() < int32(procs) {
			}
			tm := time.AfterFunc(time.Hour, func() { fired <- struct{}{} })
			tm.Reset(time.Millisecond)
		}()
	}
	for range procs {
		select {
		case <-fired:
		case <-time.After(5 * time.Second):
			t.Fatal("a timer moved to 1 ms did not fire in 5 s")
		}
	}
}

// TestAckedStreamCallEndsItsTransactions: a call with a TCP or TLS leg
// ends its INVITE transactions at its caller's ACK as a UDP one does
// (they held every message of the call for the 8 s linger, ~0.1 MB per
// answered call per second), and a 2xx retransmission from its carrier
// within the linger gets that ACK again, over the carrier's transport
// (over TLS on a connection whose certificate names the carrier).
func TestAckedStreamCallEndsItsTransactions(t *testing.T) {
	k := newTLSPKI(t)
	for _, tc := range []struct{ name, caller, carrier string }{
		{"udp caller, tcp carrier", "udp", "tcp"},
		{"tls caller, tls carrier", "tls", "tls"},
		{"tls caller, udp carrier", "tls", "udp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			car := siptest.StartCarrierTLS(t, "127.0.0.1", k.carrierTLS(t), nil)
			cc := carrierCfg("a", car)
			switch tc.carrier {
			case "tcp":
				cc.URI = "sip:" + car.Addr + ";transport=tcp"
			case "tls":
				cc.URI = "sip:" + car.TLSAddr + ";transport=tls"
			}
			adm, pacer := newFakes()
			h := startProxy(t, k.tlsConfig(false, cc), adm, pacer)
			proxy := h.udp
			caller := siptest.StartCaller(t, "127.0.0.2")
			if tc.caller == "tls" {
				proxy = tlsAddr(t, h)
				caller = siptest.StartTLSCaller(t, "127.0.0.2", k.clientTLS(t, "", ""))
			}
			ok := answeredCall(t, caller, proxy)
			id := msgpart.CallID(ok)
			gone := heldTxs(t, h, id)

			ack := inDialogOf(t, caller, proxy, ok, sipmsg.ACK)
			if tc.caller == "tls" {
				ack = overTLS(ack, proxy)
			}
			ack.CSeq().SeqNo = ok.CSeq().SeqNo
			if err := caller.Client().WriteRequest(ack); err != nil {
				t.Fatalf("caller's ACK: %v", err)
			}
			waitFor(t, func() bool { return car.Count("ACK") == 1 && h.p.acked.len() == 1 },
				"the caller's ACK at the carrier, and the call's transactions ended")
			txsFreed(t, gone)

			// The carrier's 2xx again, as sipgo hands the node a 2xx that
			// matches no transaction.
			inv := car.Invites()
			if len(inv) != 1 {
				t.Fatalf("the carrier got %d INVITEs, want 1", len(inv))
			}
			again := sipmsg.NewResponseFromRequest(inv[0], 200, "OK", nil)
			again.To().Params.Remove("tag")
			again.To().Params.Add("tag", msgpart.Tag(ok.To().Params))
			again.SetSource(car.Addr)
			again.SetTransport(strings.ToUpper(tc.carrier))
			if !h.p.ackedAnswer(again) {
				t.Fatal("the carrier's 2xx retransmission was not taken for the call's")
			}
			waitFor(t, func() bool { return car.Count("ACK") == 2 }, "the caller's ACK sent again to the carrier")
		})
	}
}

// TestAckedCallCarrierAnswersFromAnotherPort: a carrier may answer from
// another port of its address than the one the INVITE went to (a UDP
// response may leave from any socket; the node takes a carrier's
// responses by its address, screenResponse). Its 2xx retransmission
// after the caller's ACK is the call's, and gets that ACK again, as the
// client transaction's linger relayed it to the caller for a new ACK.
func TestAckedCallCarrierAnswersFromAnotherPort(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	alt := startUDPEnd(t, "127.0.0.1", nil)
	self := car.addr()
	answer := rawAnswerer(func() string { return self }, nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	car.mu.Lock()
	car.answer = func(req *sipmsg.Request) *sipmsg.Response {
		if res := answer(req); res != nil && req.IsInvite() {
			alt.send(h.udp, res) // from the carrier's other socket
		}
		return nil
	}
	car.mu.Unlock()
	peer := startUDPEnd(t, "127.0.0.2", nil)
	const id = "acked-alt-port"
	rawAnsweredCall(t, peer, h.udp, id)
	invites := car.requests(sipmsg.INVITE)
	if len(invites) != 1 {
		t.Fatalf("the carrier got %d INVITEs, want 1", len(invites))
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 1 && h.p.acked.len() == 1 },
		"the caller's ACK at the carrier, and the call's transactions ended")
	alt.send(h.udp, answer(invites[0]))
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) == 2 },
		"the caller's ACK sent again for the 2xx retransmission from the carrier's other port")
	if n := len(peer.responses()); n != 2 {
		t.Errorf("the caller got %d responses, want 2 (100, 200): the retransmission was relayed", n)
	}
}

// endingClientTx is a client transaction that ends right as its end is
// asked to be told (OnTerminate), before its caller does anything else.
type endingClientTx struct{ *fakeClientTx }

func (e endingClientTx) OnTerminate(f sipmsg.FnTxTerminate) bool {
	e.end()
	f("", nil)
	return true
}

// TestHoldAnsweredTxEndsMeanwhile: a call's client transaction that ends
// (Timer M, shutdown) while holdAnswered leaves its transactions on the
// call must not leave them there: liveCall lives as long as the call, and
// the transactions hold every message of it.
func TestHoldAnsweredTxEndsMeanwhile(t *testing.T) {
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "a", URI: "sip:127.0.0.1:5999", CPS: 100, MaxWait: time.Second}), adm, pacer)
	out := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5999})
	out = withVia(out, "127.0.0.9:5060", "z9hG4bK.out-ends")
	cid := sipmsg.CallIDHeader("ends-meanwhile")
	out.AppendHeader(&cid)
	out.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.INVITE})
	out.SetTransport("UDP")
	out.SetDestination("127.0.0.1:5999")
	lc := &liveCall{answered: true}
	c := &call{p: h.p, callID: msgpart.CallID(out), tx: &fakeServerTx{done: make(chan struct{})}, lc: lc, answered: true, answeredAt: time.Now(),
		ackLeg: &relayLeg{p: h.p, out: out, tx: endingClientTx{newFakeClientTx()}, fk: &forkSet{okKnown: true, okTag: "callee"}}}
	h.p.holdAnswered(c)
	lc.mu.Lock()
	kept, done := lc.txs != nil, lc.ackDone
	lc.mu.Unlock()
	if kept || !done {
		t.Errorf("the client transaction ended while the handler held it: the call keeps its transactions %v, waits for an ACK %v; want neither", kept, !done)
	}
}

// TestAckedCallSendsItsAckAgainAsRelayed: the caller's ACK that an ACKed
// call sends again for its carrier's 2xx retransmission (over UDP, from
// the bytes it keeps) is, byte for byte, the datagram the carrier got the
// first time, from the same address and port (a carrier may take a
// request only from the node's SIP socket): to an IPv4 or IPv6 carrier,
// from a node on one address per family or on both families' wildcards.
func TestAckedCallSendsItsAckAgainAsRelayed(t *testing.T) {
	requireIPv6(t)
	for _, tc := range []struct {
		name, carIP string
		wildcard    bool
	}{
		{"v4 carrier, node on 127.0.0.1 and ::1", "127.0.0.1", false},
		{"v6 carrier, node on 127.0.0.1 and ::1", "::1", false},
		{"v4 carrier, node on 0.0.0.0 and ::", "127.0.0.1", true},
		{"v6 carrier, node on 0.0.0.0 and ::", "::1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			car := startUDPEnd(t, tc.carIP, nil)
			self := car.addr()
			answer := rawAnswerer(func() string { return self }, nil)
			car.mu.Lock()
			car.answer = answer
			car.mu.Unlock()
			cfg := dualStackConfig(false, config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second, Probe: &config.Probe{}})
			cfg.SIP.Listen = []string{"udp://127.0.0.1:0", "udp://[::1]:0"}
			port := ""
			if tc.wildcard {
				port = itoa(redistest.FreePort(t))
				cfg.SIP.Listen = []string{"udp://0.0.0.0:" + port, "udp://[::]:" + port}
			}
			adm, pacer := newFakes()
			h := startProxy(t, cfg, adm, pacer)
			in, out := "", ""
			if tc.wildcard {
				in = "127.0.0.1:" + port
				out = net.JoinHostPort(tc.carIP, port)
			} else {
				addrs := dualStackAddrs(t, h)
				in = addrs["udp4"]
				out = addrs["udp4"]
				if tc.carIP == "::1" {
					out = addrs["udp6"]
				}
			}
			peer := startUDPEnd(t, "127.0.0.2", nil)
			const id = "acked-wire"
			rawAnsweredCall(t, peer, in, id)
			invites := car.requests(sipmsg.INVITE)
			if len(invites) != 1 {
				t.Fatalf("the carrier got %d INVITEs, want 1", len(invites))
			}
			acks := func() []rawDatagram {
				car.mu.Lock()
				defer car.mu.Unlock()
				var got []rawDatagram
				for _, d := range car.wire {
					if bytes.HasPrefix(d.b, []byte("ACK ")) {
						got = append(got, d)
					}
				}
				return got
			}
			waitFor(t, func() bool { return len(acks()) == 1 && h.p.acked.len() == 1 },
				"the caller's ACK at the carrier, and the call's transactions ended")
			h.p.acked.mu.Lock()
			for _, a := range h.p.acked.m {
				if a.wire == nil {
					t.Errorf("the ACKed call keeps its ACK parsed, not as the bytes it was sent as")
				}
			}
			h.p.acked.mu.Unlock()
			car.send(out, answer(invites[0]))
			waitFor(t, func() bool { return len(acks()) == 2 }, "the caller's ACK sent again for the carrier's 2xx retransmission")
			first, again := acks()[0], acks()[1]
			if !bytes.Equal(first.b, again.b) {
				t.Errorf("the ACK sent again is not the datagram relayed:\n%q\nvs\n%q", first.b, again.b)
			}
			if first.from.String() != again.from.String() {
				t.Errorf("the ACK sent again left from %s, the first from %s", again.from, first.from)
			}
		})
	}
}
