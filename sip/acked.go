package sip

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/internal/fifo"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/sipgohook"
	"github.com/cpsguard/cpsguard/sip/internal/wire"
)

// An answered call's INVITE transactions (sipgo's server transaction of
// the caller's INVITE and client transaction of the INVITE sent to the
// carrier) last answeredLinger after the 2xx, so that the carrier's 2xx
// retransmissions reach the caller, whose ACK answers each. They hold
// every parsed message of the call (~13 KB): at a high rate of short
// calls, most of the node's live heap, and so of the collector's marking
// (BENCHMARKS.md, session 14).
//
// Once the caller's ACK of that 2xx passed the node, the caller has its
// answer: a later 2xx retransmission only says that the ACK did not reach
// the carrier. Once the node relayed that ACK (statelessly between UDP
// legs, screenAck; through onAck when a leg is TCP or TLS), it ends both
// transactions and keeps, until the linger would have ended, what the
// client transaction was kept for (ackedCall): the ACK as it was relayed
// (over UDP as its bytes, ~0.5 KB, at most the 16 KiB of the largest UDP
// message the node sends; else parsed), sent again to the carrier for
// each retransmission of the 2xx (from the
// carrier's address, with the answer's To tag; over TLS on a connection
// whose certificate names the carrier, ackAgain), and the INVITE's
// identity, so that a forking carrier's 2xx of another To tag is still
// ACKed and BYEd at the carrier once per tag (forkSet). A copy of the
// caller's INVITE is absorbed by its tombstone (invites.Table) as after
// the linger. A call whose caller never ACKs (or whose ACK the node did
// not relay) keeps its transactions for the linger as before.

// Ending sipgo's transactions: Terminate removes a transaction from
// sipgo's tables, but leaves the Accepted state's timer armed (v1.7.2:
// ServerTx.delete stops every timer but timer_l, ClientTx.delete every
// one but timer_m), and that timer's function holds the transaction, and
// so every message of the call, until it fires at the end of the linger:
// ending a transaction early would free nothing. endAnswered stops the
// two timers itself (they fire at once: a stopped one would hold the
// transaction as long), through their unexported fields
// (sipgohook.EndLinger), as ack.go wraps a transaction's connection. If a
// sipgo upgrade renames or retypes them, New fails
// (sipgohook.CheckTimers) and TestAckedCallFreesItsTransactions fails,
// never silently.

// answeredTxs is what an answered call's handler leaves behind for the
// caller's ACK to end (liveCall.txs): the call's two INVITE transactions
// and what outlives them.
type answeredTxs struct {
	server sipmsg.ServerTransaction
	client sipmsg.ClientTransaction
	call   *ackedCall
	// branch is the branch of the INVITE sent to the carrier (the key of
	// the ackedTable).
	branch string
}

// ackedCall is what an answered call keeps once its INVITE transactions
// ended at the caller's ACK, until its linger would have ended (exp).
// Everything but fk is set before it is shared and never changed.
type ackedCall struct {
	// The INVITE sent to the carrier, what the node's own ACK and BYE of
	// a fork take from it (hangUp, through invite): its Request-URI, From,
	// CSeq number, transport, destination and local address, and callID,
	// copies that share no memory with the INVITE (answeredOf). Built into
	// a request only for a fork, which is rare.
	ruri     sipmsg.Uri
	from     *sipmsg.FromHeader
	seq      uint32
	tp, dest string
	laddr    sipmsg.Addr
	// The caller's ACK as the node relayed it: over UDP its bytes (wire),
	// sent again from the listener it left (wireFrom, sipgo's pool's key
	// for it) to wireTo; else, over TCP or TLS, the parsed request (ack).
	// Parsed, an ACK is some 30 heap objects pinned for the 8 s, most of
	// what an ACKed call keeps, for the collector to mark.
	wire     []byte
	wireTo   netip.AddrPort
	wireFrom string
	ack      *sipmsg.Request
	// carrier is the address the INVITE went to: a 2xx from another
	// address is no retransmission of the call's. Any port of it: a UDP
	// response may leave from another socket than the request reached,
	// and the node takes a carrier's responses by its address alone
	// (screenResponse), the call's first 2xx too.
	carrier netip.Addr
	callID  string
	fk      *forkSet
	exp     time.Time
}

// ackedKey is one entry of the ackedTable's expiry queue.
type ackedKey struct {
	branch string
	call   *ackedCall
}

// maxAcked bounds the calls an ackedTable keeps: 8,192 ACKed calls a
// second for answeredLinger. Beyond, the oldest are forgotten first: a 2xx
// retransmission of one is then a stray, dropped, as after its linger.
const maxAcked = 1 << 16

// ackedTable holds ackedCalls by the branch of the INVITE's Via (the
// node's own, on top of every answer of the carrier's), each until its
// exp, the oldest forgotten first when full. Safe for concurrent use.
type ackedTable struct {
	mu sync.Mutex
	m  map[string]*ackedCall
	q  fifo.Queue[ackedKey]
}

// add keeps a under branch; entries past their expiry (or beyond
// maxAcked, oldest first) are forgotten.
func (t *ackedTable) add(branch string, a *ackedCall, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]*ackedCall)
	}
	for {
		k, ok := t.q.Front()
		if !ok || (k.call.exp.After(now) && t.q.Len() < maxAcked) {
			break
		}
		t.q.Pop()
		if t.m[k.branch] == k.call {
			delete(t.m, k.branch)
		}
	}
	t.m[branch] = a
	t.q.Push(ackedKey{branch: branch, call: a})
}

// get returns the call kept under branch, nil when none is, or it expired.
func (t *ackedTable) get(branch string, now time.Time) *ackedCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.m[branch]
	if a == nil || !a.exp.After(now) {
		return nil
	}
	return a
}

// len returns the number of calls kept (tests).
func (t *ackedTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// invite builds the part of the INVITE sent to the carrier that the
// node's own ACK and BYE of a fork's 2xx take from it (hangUp).
func (a *ackedCall) invite() *sipmsg.Request {
	r := sipmsg.NewRequest(sipmsg.INVITE, *a.ruri.Clone())
	if a.from != nil {
		r.AppendHeader(sipmsg.HeaderClone(a.from))
	}
	cid := sipmsg.CallIDHeader(a.callID)
	r.AppendHeader(&cid)
	r.AppendHeader(&sipmsg.CSeqHeader{SeqNo: a.seq, MethodName: sipmsg.INVITE})
	r.SetTransport(a.tp)
	r.SetDestination(a.dest)
	r.Laddr = a.laddr
	return r
}

// holdAnswered runs when an answered call's handler returns: it leaves
// the call's transactions for its caller's ACK to end, or ends them now
// when that ACK came while the handler ran. Only a call whose answer
// reached the caller (c.ackLeg is its leg then) is held; any other keeps
// its transactions for the linger.
func (p *Proxy) holdAnswered(c *call) {
	lc := c.lc
	if lc == nil {
		return
	}
	txs := answeredOf(c)
	lc.mu.Lock()
	ack := lc.ackFirst
	lc.ackFirst = nil
	if txs == nil || ack != nil {
		// No ACK is waited for from now on.
		lc.ackDone = true
	} else {
		lc.txs = txs
	}
	lc.mu.Unlock()
	switch {
	case txs == nil:
	case ack != nil:
		p.endAnswered(txs, ack)
	case !txs.client.OnTerminate(func(string, error) { lc.dropTxs(txs) }):
		// Ended already (Timer M, shutdown). Told only once they are on
		// the call: a transaction that ends between the two would leave
		// them there for the call's whole life.
		lc.dropTxs(txs)
	}
}

// answeredOf returns what the caller's ACK ends for the answered call c;
// nil when c is not to be held (holdAnswered).
func answeredOf(c *call) *answeredTxs {
	l := c.ackLeg
	if l == nil || l.tx == nil || l.fk == nil || c.tx == nil {
		return nil
	}
	branch := ""
	if v := l.out.Via(); v != nil {
		branch, _ = v.Params.Get("branch")
	}
	carrier, err := netip.ParseAddrPort(l.out.Destination())
	if branch == "" || err != nil {
		return nil
	}
	cs := l.out.CSeq()
	if cs == nil {
		return nil
	}
	// Kept for the linger and beyond the INVITE: copies, not parts of the
	// INVITE (wire.Parser puts its headers in one allocation and its
	// text in one string).
	return &answeredTxs{server: c.tx, client: l.tx, branch: branch, call: &ackedCall{
		ruri: msgpart.DetachedURI(l.out.Recipient), from: msgpart.DetachedFrom(l.out.From()), seq: cs.SeqNo,
		tp: l.out.Transport(), dest: l.out.Destination(), laddr: l.out.Laddr,
		carrier: carrier.Addr().Unmap(),
		callID:  c.callID, fk: l.fk,
		exp: c.answeredAt.Add(answeredLinger),
	}}
}

// dropTxs forgets txs, the call's transactions, once they ended (their
// linger, or the caller's ACK): a call up keeps none of its messages.
func (lc *liveCall) dropTxs(txs *answeredTxs) {
	lc.mu.Lock()
	if lc.txs == txs {
		lc.txs, lc.ackDone = nil, true
	}
	lc.mu.Unlock()
}

// ackPassed is told that out, the ACK of a call's dialog from its caller,
// was relayed to the carrier (screenAck over UDP, onAck over TCP or TLS,
// or with a leg of either). When it acknowledges
// the call's answer (the INVITE's CSeq, the answer's To tag), the call's
// transactions end (endAnswered); when the call's handler has not
// returned yet, it is left for it (holdAnswered).
func (p *Proxy) ackPassed(hop *inDialogHop, out *sipmsg.Request) {
	if hop.dir != fromPeer || !hop.token.own || hop.callee == "" {
		return
	}
	for _, f := range hop.liveCalls(p) {
		lc, ok := f.Data.(*liveCall)
		if !ok || lc == nil {
			continue
		}
		lc.mu.Lock()
		if lc.token != hop.token.id || !lc.answered {
			lc.mu.Unlock()
			continue
		}
		txs := lc.txs
		if txs == nil {
			if lc.ackFirst == nil && !lc.ackDone {
				lc.ackFirst = out
			}
			lc.mu.Unlock()
			return
		}
		if !acknowledges(out, txs.call) {
			lc.mu.Unlock()
			return
		}
		lc.txs, lc.ackDone = nil, true
		lc.mu.Unlock()
		p.endAnswered(txs, out)
		return
	}
}

// acknowledges reports whether ack is the ACK of a's answer: its CSeq is
// the INVITE's and its To tag the answer's.
func acknowledges(ack *sipmsg.Request, a *ackedCall) bool {
	cs, to := ack.CSeq(), ack.To()
	return cs != nil && to != nil && cs.SeqNo == a.seq && msgpart.Tag(to.Params) == a.fk.first()
}

// endAnswered ends an answered call's INVITE transactions at its caller's
// ACK, keeping what outlives them (ackedTable). An ACK that does not
// acknowledge the answer (another CSeq or To tag) ends nothing.
func (p *Proxy) endAnswered(txs *answeredTxs, ack *sipmsg.Request) {
	if !acknowledges(ack, txs.call) {
		return
	}
	txs.call.keepAck(ack)
	// Kept before the client transaction ends: a retransmission that
	// comes right after finds it.
	p.acked.add(txs.branch, txs.call, time.Now())
	txs.client.Terminate()
	txs.server.Terminate()
	sipgohook.EndLinger(txs.client)
	sipgohook.EndLinger(txs.server)
}

// ackedAnswer handles a 2xx of an INVITE that matched no client
// transaction (sipgo's stray): one of a call whose transactions ended at
// its caller's ACK, from its carrier, gets the caller's ACK again (the
// ACK did not reach the carrier) or, with another To tag, the node's own
// ACK and BYE (a fork, forkSet). It reports whether res was one.
func (p *Proxy) ackedAnswer(res *sipmsg.Response) bool {
	cs, v := res.CSeq(), res.Via()
	if !res.IsSuccess() || cs == nil || cs.MethodName != sipmsg.INVITE || v == nil {
		return false
	}
	branch, _ := v.Params.Get("branch")
	a := p.acked.get(branch, time.Now())
	if a == nil {
		return false
	}
	src, err := netip.ParseAddrPort(res.Source())
	if err != nil || src.Addr().Unmap() != a.carrier || msgpart.CallID(res) != a.callID {
		return false
	}
	if to := res.To(); to != nil && msgpart.Tag(to.Params) == a.fk.first() {
		p.ackAgain(a)
		return true
	}
	a.fk.hangUp(p, a.invite(), res, nil)
	return true
}

// keepAck keeps ack, the caller's ACK as the node relayed it (ackedCall):
// over UDP from a listener's address, as the bytes it was sent as.
func (a *ackedCall) keepAck(ack *sipmsg.Request) {
	if ack.Transport() == "UDP" && ack.Laddr.IP != nil && ack.Laddr.Port > 0 {
		if to, err := netip.ParseAddrPort(ack.Destination()); err == nil {
			var buf [1024]byte
			if b, ok := wire.Append(buf[:0], ack); ok {
				a.wire = bytes.Clone(b)
				a.wireTo, a.wireFrom = to, ack.Laddr.String()
				return
			}
		}
	}
	a.ack = ack
}

// ackAgain sends the caller's ACK of a's answer to the carrier again, as
// it was relayed: over UDP its bytes from the listener it left
// (ackWireAgain); over TLS on a connection whose certificate names the
// carrier (tlspolicy.Policy.CheckHop: the one the ACK went on, unless it
// was closed since), a connection opened again within connectTimeout
// (writeRequest).
func (p *Proxy) ackAgain(a *ackedCall) {
	if a.wire != nil {
		if err := p.ackWireAgain(a); err != nil {
			p.log.Debug("ACK sent again failed", "call_id", clip(a.callID), "error", err)
		}
		return
	}
	if err := p.sendAck(a.ack, nil); err != nil {
		p.log.Debug("ACK sent again failed", "call_id", clip(a.callID), "error", err)
	}
}

// ackWireAgain sends a's ACK bytes again from the UDP listener the ACK
// left (sipgo's pool holds it under its address, where WriteMsg found it;
// else the listener of the carrier's address family, as sendUDP).
func (p *Proxy) ackWireAgain(a *ackedCall) error {
	var conn sipmsg.Connection
	if c, err := p.tp.GetConnection("udp", a.wireFrom); err == nil && c != nil {
		conn = c
		defer func() { _, _ = c.TryClose() }()
	} else {
		conn = p.udpListenerFor(a.wireTo.String())
	}
	uc, ok := conn.(*sipmsg.UDPConnection)
	if !ok {
		return fmt.Errorf("sip: no UDP listener to send to %s from (%T)", a.wireTo, conn)
	}
	_, err := uc.WriteTo(a.wire, net.UDPAddrFromAddrPort(a.wireTo))
	return err
}

// sendAck sends ack outside any transaction within connectTimeout: over
// TLS on a connection whose certificate carries names (nil: the names of
// its address; tlspolicy.Policy.CheckHop), a missing TCP or TLS one
// opened within that time (writeRequest). Every ACK the node sends again
// goes through it: a connection closed since the first would otherwise be
// opened again unchecked.
func (p *Proxy) sendAck(ack *sipmsg.Request, names []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := p.tls.CheckHop(ctx, ack, names); err != nil {
		return err
	}
	return p.writeRequest(ctx, ack)
}

// writeRequest sends req outside any transaction, as sipgo's WriteMsg
// does, on the connection sipgo would use, but opens a missing TCP or TLS
// one within ctx: WriteMsg dials under no deadline but its dialer's
// minute, so a carrier that drops SYNs would hold the goroutine that long
// (and a fork's ACK sent again, forkSet.hangUp, its lock). Every ACK the
// node sends outside a transaction goes through it, and so do the
// stateless UDP relays (screenAck, screenInDialog: over UDP it never
// dials, and writes with the node's own writer, writeMsg).
func (p *Proxy) writeRequest(ctx context.Context, req *sipmsg.Request) error {
	c, err := p.tp.ClientRequestConnection(ctx, req)
	if err != nil {
		return err
	}
	defer func() { _, _ = c.TryClose() }()
	return writeMsg(c, req)
}
