package sip

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// legUpstream is where a leg's answers go: the server transaction its
// request came in on.
type legUpstream interface {
	// relay passes a response of the next hop upstream, without the
	// proxy's Via (msgpart.RelayResponse changes res itself). An error means the
	// request's sender could not be reached, or errNoVia: res had no Via
	// left for it (RFC 3261 16.7 step 3), was counted and not relayed.
	relay(res *sipmsg.Response) error
	// respond answers upstream with a final response of the proxy's own.
	respond(code int, reason string)
}

// legCarrier is what the leg of an initial INVITE tells its call about the
// carrier (health, metrics, max_calls places) and asks of it (whether a
// failure passes the call to the next carrier). In-dialog legs have none.
type legCarrier interface {
	// response observes each response of the carrier.
	response(code int)
	// reached observes the carrier's first sign of life: its first
	// provisional response above 100, or a final one taken as its answer.
	reached()
	// failed is asked about a failure (a final response other than 2xx) that
	// came before any provisional response above 100 and before any CANCEL:
	// true takes it as the carrier's failure, and the leg ends with it,
	// unrelayed, for the call to try the next carrier.
	failed(res *sipmsg.Response) bool
	// timedOut observes the carrier ending its transaction, or missing its
	// setup timeout, before any provisional response above 100.
	timedOut()
	// answering is told of a 2xx about to be relayed; lost, after that,
	// that the relay failed (nobody upstream will ACK it, and the leg has
	// hung the carrier's call up); relayed, that it went upstream.
	answering(res *sipmsg.Response)
	lost()
	relayed()
}

// relayLeg is one request the proxy sends to a next hop over a sipgo client
// transaction, relaying the answers upstream: provisional responses above
// 100 and the final one, 2xx retransmissions included (for an initial
// INVITE, those of its first 2xx's To tag: another tag's is hung up, fork).
// It is the one relay
// loop of initial INVITEs (call.forward) and in-dialog requests
// (forwardInDialog) alike.
//
// The sender's CANCEL is passed on at once when the next hop has answered,
// else at its first provisional response (RFC 3261 9.1); the next hop then
// has cancelTimeout for its final answer (487, or a 2xx that crossed the
// CANCEL), which is relayed.
//
// The leg of an initial INVITE (carrier set) owns its call: before any
// provisional response above 100, a failure or a timeout ends the leg with
// retry, for the next carrier; a carrier that rings past ring (Timer C) is
// cancelled and the caller gets 408; on shutdown the caller gets 503 and
// the carrier a CANCEL; a 2xx the caller will never ACK (it has the
// proxy's own final answer, or cannot be reached) is hung up here. An
// in-dialog leg only relays: when its timer expires or the proxy shuts
// down, it answers upstream and leaves the transaction to end on its own.
//
// A leg is used by one goroutine (run); only its retransmission hook runs
// on sipgo's.
type relayLeg struct {
	p   *Proxy
	up  legUpstream
	out *sipmsg.Request // the request sent (never the received one)
	tx  sipmsg.ClientTransaction

	// ctx is an initial INVITE's call: it ends when the caller cancels
	// the call (cause errCallCanceled) or the proxy stops waiting for the
	// caller (shutdown, its server transaction ended). An in-dialog leg
	// has context.Background() and is told of its sender's CANCEL by
	// cancelled (nil but for an INVITE), of the proxy's shutdown by
	// shutdown.
	ctx                 context.Context
	cancelled, shutdown <-chan struct{}
	// setup bounds the wait for the first provisional response above 100
	// (0: no bound of the leg's own; the transaction's Timer B or F ends
	// it); ring, when set, re-arms the bound at each such response.
	// cancelWait, when set, replaces cancelTimeout as the time the next
	// hop has to answer a CANCEL (tests).
	setup, ring, cancelWait time.Duration
	carrier                 legCarrier
	// tlsNames are the names the next hop's certificate must carry when
	// out goes over TLS (the carrier's URI host); nil: the names of its
	// address (tlspolicy.Policy.CheckHop).
	tlsNames []string

	timer *time.Timer
	// gotAny: a response came; ringing: one above 100 did.
	gotAny, ringing           bool
	cancelPending, cancelSent bool
	// answered: the proxy gave the sender a final answer of its own (503
	// on shutdown, 408 after ringing too long); the next hop's final
	// answer is then not relayed, and a 2xx is hung up here.
	answered bool
	// hungUp is the proxy's ACK of a 2xx it hung up, sent again for each
	// retransmission of the 2xx; abandoned: the leg was cancelled for the
	// next carrier, its 2xx is never relayed.
	hungUp    atomic.Pointer[sipmsg.Request]
	abandoned atomic.Bool

	// fk is an initial INVITE's leg's one dialog (nil for an in-dialog
	// leg): its first 2xx's To tag, and the other tags it hung up (fork).
	// Apart from the leg, so that what an answered call keeps once its
	// transactions ended (acked.go) shares it without the leg.
	fk *forkSet
}

// forkSet is the one dialog an initial INVITE's leg keeps: its first
// 2xx's. A 2xx with another To tag (a forking carrier) is hung up, never
// relayed. mu guards okTag (the first 2xx's To tag, once okKnown), early
// (2xx copies the retransmission hook saw before the first 2xx was read
// from Responses, handled once it was) and acks (the ACK of each other
// tag's 2xx the node hung up, sent again for its copies).
type forkSet struct {
	mu      sync.Mutex
	okKnown bool
	okTag   string
	early   []*sipmsg.Response
	acks    map[string]*sipmsg.Request
}

// first returns the first 2xx's To tag ("" while none was read).
func (f *forkSet) first() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.okTag
}

// hangUp ACKs and BYEs r, a 2xx of inv with another To tag than the
// first's, once per tag (at most maxForks tags); a copy of one gets its
// ACK again. The call, its admission and its places are the first
// dialog's, and a second dialog through them would be a call the node
// does not count (nor end: its BYE would be refused once the first
// ended). Held across the hang-up, so a copy that comes meanwhile
// (sipgo passes copies up concurrently) finds its ACK.
func (f *forkSet) hangUp(p *Proxy, inv *sipmsg.Request, r *sipmsg.Response, names []string) {
	tag := ""
	if to := r.To(); to != nil {
		tag = msgpart.Tag(to.Params)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ack, seen := f.acks[tag]; seen {
		_ = p.sendAck(ack, names)
		return
	}
	if len(f.acks) >= maxForks {
		return
	}
	p.log.Debug("a second answer with another To tag hung up", "call_id", msgpart.CallID(inv))
	if f.acks == nil {
		f.acks = make(map[string]*sipmsg.Request)
	}
	f.acks[strings.Clone(tag)] = p.hangUp(inv, r, names)
}

// maxForks bounds the 2xx copies a leg holds until its first 2xx is read,
// and the other To tags it hangs up: beyond, copies are dropped.
const maxForks = 16

// send opens the leg's client transaction: out to t.
func (l *relayLeg) send(t target) error {
	cctx, cancel := requestCtx(t)
	if err := l.p.tls.CheckHop(cctx, l.out, l.tlsNames); err != nil {
		cancel()
		return err
	}
	tx, err := l.p.openTx(cctx, l.out)
	cancel()
	if err != nil {
		return err
	}
	l.attach(tx)
	return nil
}

// attach makes tx, the client transaction that sent l.out, the leg's. An
// INVITE's 2xx retransmissions bypass Responses(); they are relayed too,
// or the proxy's own ACK repeated when it hung the call up.
func (l *relayLeg) attach(tx sipmsg.ClientTransaction) {
	l.tx = tx
	if !l.out.IsInvite() {
		return
	}
	where := "sip.indialog_retransmission"
	if l.carrier != nil {
		where = "sip.invite_retransmission"
	}
	tx.OnRetransmission(func(r *sipmsg.Response) {
		defer l.p.panics.Recover(where, nil)
		if !r.IsSuccess() {
			return
		}
		if l.carrier != nil {
			f := l.fk
			f.mu.Lock()
			if !f.okKnown {
				// The first 2xx is still on its way through Responses():
				// this copy is handled once it was.
				if len(f.early) < maxForks {
					f.early = append(f.early, r)
				}
				f.mu.Unlock()
				return
			}
			f.mu.Unlock()
		}
		l.again(r)
	})
}

// again handles a copy of a 2xx of the leg's INVITE after the first: a
// retransmission is relayed (or ACKed again when the leg hung the call
// up, dropped when it abandoned it); for an initial INVITE, a 2xx with
// another To tag than the first's is hung up (fork).
func (l *relayLeg) again(r *sipmsg.Response) {
	if l.carrier != nil {
		if to := r.To(); to == nil || msgpart.Tag(to.Params) != l.fk.first() {
			l.fk.hangUp(l.p, l.out, r, l.tlsNames)
			return
		}
	}
	if ack := l.hungUp.Load(); ack != nil {
		_ = l.p.sendAck(ack, l.tlsNames)
		return
	}
	if !l.abandoned.Load() {
		if l.carrier != nil && r.IsSuccess() {
			l.p.mendRecordRoute(l.out, r) // a copy of the 2xx the caller took its route set from
		}
		_ = l.up.relay(r)
	}
}

// answeredWith records the To tag of the first 2xx of an initial
// INVITE's leg and handles the copies that came before it was read.
func (l *relayLeg) answeredWith(r *sipmsg.Response) {
	tag := ""
	if to := r.To(); to != nil {
		tag = msgpart.Tag(to.Params)
	}
	f := l.fk
	f.mu.Lock()
	if f.okKnown {
		f.mu.Unlock()
		return
	}
	// Kept until the linger ends (ackedCall.fk): a copy, not a part of
	// the 2xx's text (wire.Parser's one string per message; h73).
	f.okKnown, f.okTag = true, strings.Clone(tag)
	early := f.early
	f.early = nil
	f.mu.Unlock()
	for _, e := range early {
		l.again(e)
	}
}

// run relays the next hop's answers until the leg ends. It returns the
// final response, if any, and whether the leg of an initial INVITE failed
// before setup, so that the call may try the next carrier (res is then the
// failure response, unrelayed, or nil for a timeout).
func (l *relayLeg) run() (res *sipmsg.Response, retry bool) {
	if l.setup > 0 {
		l.arm(l.setup)
	}
	defer func() {
		if l.timer != nil {
			l.timer.Stop()
		}
	}()
	done, cancelled := l.ctx.Done(), l.cancelled
	for {
		var expired <-chan time.Time
		if l.timer != nil {
			expired = l.timer.C
		}
		select {
		case r := <-l.tx.Responses():
			if res, retry, end := l.response(r); end {
				return res, retry
			}
		case <-l.tx.Done():
			return l.ended()
		case <-expired:
			if retry, end := l.expired(); end {
				return nil, retry
			}
		case <-done:
			done = nil
			if errors.Is(context.Cause(l.ctx), errCallCanceled) {
				l.cancel()
				continue
			}
			// An initial INVITE's call stopped otherwise (shutdown, or
			// the caller's transaction ended): the caller gets 503, the
			// carrier a CANCEL.
			l.answered = true
			l.up.respond(sipmsg.StatusServiceUnavailable, "Service Unavailable")
			l.cancel()
		case <-cancelled:
			cancelled = nil
			l.cancel()
		case <-l.shutdown:
			// An in-dialog leg on shutdown: stop waiting; the transaction
			// ends on its own timers.
			l.up.respond(sipmsg.StatusServiceUnavailable, "Service Unavailable")
			return nil, false
		}
	}
}

// response handles one response of the next hop; end reports that the
// leg is over.
func (l *relayLeg) response(r *sipmsg.Response) (res *sipmsg.Response, retry, end bool) {
	l.gotAny = true
	if l.carrier != nil {
		l.carrier.response(r.StatusCode)
	}
	// A held CANCEL goes with the first provisional response; an initial
	// INVITE's also with a final one (a no-op at the carrier, kept as it
	// was when the two loops were apart).
	if l.cancelPending && !l.cancelSent && (r.IsProvisional() || l.carrier != nil) {
		l.sendCancel()
	}
	if r.IsProvisional() {
		if r.StatusCode > 100 {
			if !l.ringing && l.carrier != nil {
				l.carrier.reached()
			}
			l.ringing = true
			if l.ring > 0 && !l.cancelSent {
				l.arm(l.ring)
			}
			if !l.answered {
				_ = l.up.relay(r)
			}
		}
		return nil, false, false
	}
	if l.carrier != nil && r.IsSuccess() {
		// After the answer is relayed (or hung up): the copies held till
		// now follow it.
		defer l.answeredWith(r)
	}
	if l.carrier != nil {
		if !r.IsSuccess() && !l.ringing && !l.cancelSent && !l.cancelPending && l.carrier.failed(r) {
			return r, true, true
		}
		if !l.ringing {
			l.carrier.reached()
		}
	}
	if l.answered {
		if r.IsSuccess() {
			// The sender already has the proxy's final answer and will
			// not ACK this one: end the next hop's call here.
			l.hungUp.Store(l.p.hangUp(l.out, r, l.tlsNames))
		}
		return r, false, true
	}
	if r.IsSuccess() && l.carrier != nil && !msgpart.ToTagged(r) {
		// A UAS tags the To of its 2xx (RFC 3261 8.2.6.2); without the
		// tag no dialog can be formed, so the caller could neither ACK
		// nor end the call, and it would hold its places until
		// max_call_duration (h46). The caller gets 502, as for an answer
		// that names nobody upstream; the carrier's call is hung up here.
		l.p.m.SIPErrors.WithLabelValues("malformed").Inc()
		l.hungUp.Store(l.p.hangUp(l.out, r, l.tlsNames))
		l.answered = true
		l.up.respond(sipmsg.StatusBadGateway, "Bad Gateway")
		return r, false, true
	}
	// Relayed, also after the sender's CANCEL: the next hop's 487 (RFC
	// 3261 16.7, 16.10), or a 2xx that crossed the CANCEL, which the
	// sender must then ACK (and, for a call, BYE).
	if r.IsSuccess() && l.carrier != nil {
		if l.p.mendRecordRoute(l.out, r) {
			l.p.log.Debug("a carrier's 2xx did not keep the node's Record-Route at the end of its list: mended",
				"call_id", msgpart.CallID(r), "next_hop", l.out.Destination())
		}
		l.carrier.answering(r)
	}
	err := l.up.relay(r)
	if errors.Is(err, errNoVia) {
		// The next hop's final answer names nobody upstream (it kept no
		// Via below the proxy's: a 487 built from the CANCEL, say). The
		// sender gets the proxy's own answer instead, so its transaction
		// ends: the same verdict for a failure, 502 for a 2xx (hung up
		// below, its body cannot be passed on).
		code, reason := r.StatusCode, r.Reason
		if r.IsSuccess() {
			code, reason = sipmsg.StatusBadGateway, "Bad Gateway"
		}
		l.up.respond(code, reason)
	}
	if err != nil && r.IsSuccess() && l.carrier != nil {
		// The caller is unreachable (a TCP caller that hung up while its
		// call waited for a slot), or the answer could not be relayed:
		// nobody upstream will ACK it, so end the carrier's call here too.
		l.hungUp.Store(l.p.hangUp(l.out, r, l.tlsNames))
		l.carrier.lost()
	} else if err == nil && r.IsSuccess() && l.carrier != nil {
		l.carrier.relayed()
	}
	return r, false, true
}

// ended handles the client transaction ending without a final response
// (Timer B or F, or the transport failed).
func (l *relayLeg) ended() (res *sipmsg.Response, retry bool) {
	if l.cancelSent || l.cancelPending {
		if l.carrier == nil {
			// In-dialog: 408 as for any failed transaction (a call's
			// caller gets 487; kept as it was when the loops were apart).
			l.up.respond(sipmsg.StatusRequestTimeout, "Request Timeout")
		} else if !l.answered {
			l.up.respond(sipmsg.StatusRequestTerminated, "Request Terminated")
		}
		return nil, false
	}
	if l.carrier != nil && !l.ringing {
		l.carrier.timedOut()
		return nil, true
	}
	l.up.respond(sipmsg.StatusRequestTimeout, "Request Timeout")
	return nil, false
}

// expired handles the leg's timer; end reports that the leg is over.
func (l *relayLeg) expired() (retry, end bool) {
	if l.cancelSent || l.cancelPending {
		// The next hop did not answer the CANCEL in time.
		l.tx.Terminate()
		if !l.answered {
			l.up.respond(sipmsg.StatusRequestTerminated, "Request Terminated")
		}
		return false, true
	}
	if l.carrier == nil {
		l.tx.Terminate()
		l.up.respond(sipmsg.StatusRequestTimeout, "Request Timeout")
		return false, true
	}
	if !l.ringing {
		l.carrier.timedOut()
	}
	if !l.gotAny {
		// Silent carrier: no CANCEL without a provisional response (RFC
		// 3261 9.1). Move on, and leave the transaction to cancel the
		// INVITE at its first provisional response, and to hang up a 2xx:
		// a carrier that answers late must not ring a callee nobody waits
		// for, nor bill a call nobody ends.
		l.abandon(false)
		return true, true
	}
	if !l.ringing {
		// A 100 Trying but no ringing within setup_timeout: cancel this
		// carrier's INVITE and move on; a 2xx that crosses the CANCEL is
		// hung up, never relayed.
		l.abandon(true)
		return true, true
	}
	// Rang too long (Timer C): cancel downstream, 408 upstream.
	l.sendCancel()
	l.answered = true
	l.up.respond(sipmsg.StatusRequestTimeout, "Request Timeout")
	return false, false
}

// cancel passes the sender's CANCEL (or the proxy's own, on shutdown) on:
// at once after a response, else at the first provisional one (RFC 3261
// 9.1); the next hop has cancelTimeout to answer.
func (l *relayLeg) cancel() {
	if l.gotAny {
		l.sendCancel()
		return
	}
	l.cancelPending = true
	l.arm(l.cancelBound())
}

// sendCancel sends the CANCEL of the leg's INVITE and gives the next hop
// cancelTimeout to answer it.
func (l *relayLeg) sendCancel() {
	l.cancelSent = true
	l.p.cancelUpstream(l.out)
	l.arm(l.cancelBound())
}

// cancelBound is the time the next hop has to answer a CANCEL.
func (l *relayLeg) cancelBound() time.Duration {
	if l.cancelWait > 0 {
		return l.cancelWait
	}
	return cancelTimeout
}

// arm (re)starts the leg's timer.
func (l *relayLeg) arm(d time.Duration) {
	if l.timer == nil {
		l.timer = time.NewTimer(d)
		return
	}
	l.timer.Reset(d)
}

// abandon gives up the leg's INVITE, which its call no longer waits for
// (the next carrier of the route is tried): it cancels the INVITE, at once
// when the next hop has answered (now), else at its first provisional
// response (RFC 3261 9.1: never before one). In the background it hangs
// up a 2xx that crosses the CANCEL or comes late (ACK and BYE); the
// transaction is then left to end, within the CANCEL's bound once one was
// sent, else by its own Timer B (the INVITE's retransmissions go on until
// then, as any UAC's do).
func (l *relayLeg) abandon(now bool) {
	l.abandoned.Store(true)
	p, tx, inv := l.p, l.tx, l.out
	if now {
		p.cancelUpstream(inv)
	}
	go func() {
		defer p.panics.Recover("sip.abandon", nil)
		var expired <-chan time.Time
		if now {
			t := time.NewTimer(l.cancelBound())
			defer t.Stop()
			expired = t.C
		}
		cancelled := now
		for {
			select {
			case r := <-tx.Responses():
				if r.IsSuccess() {
					l.hungUp.Store(p.hangUp(inv, r, l.tlsNames))
					l.answeredWith(r)
					return
				}
				if !r.IsProvisional() {
					return
				}
				if !cancelled {
					cancelled = true
					p.cancelUpstream(inv)
					t := time.NewTimer(l.cancelBound())
					defer t.Stop()
					expired = t.C
				}
			case <-tx.Done():
				return
			case <-expired:
				tx.Terminate()
				return
			}
		}
	}()
}

// hangUp ends a call the carrier answered after the caller had gone: ACK
// for the 2xx, then BYE (RFC 3261 15: a UAC receiving a 2xx after CANCEL
// must ACK it and send BYE), with the 2xx's Contact as Request-URI but
// sent where the INVITE went, over its transport, as every in-dialog
// request of the carrier's leg is: the carrier chose the Contact, and the
// node sends nothing to an address the config did not grant. names are
// the names a TLS next hop's certificate must carry (nil: its address's).
// It returns the ACK so 2xx retransmissions can be ACKed again.
func (p *Proxy) hangUp(inv *sipmsg.Request, ok *sipmsg.Response, names []string) *sipmsg.Request {
	ruri := *inv.Recipient.Clone()
	if ct := ok.Contact(); ct != nil && ct.Address.Host != "" {
		ruri = *ct.Address.Clone()
	}
	tp, dest := inv.Transport(), inv.Destination()
	var to netip.Addr
	if ap, err := netip.ParseAddrPort(dest); err == nil {
		to = ap.Addr()
	}
	build := func(method sipmsg.RequestMethod, seq uint32) *sipmsg.Request {
		r := msgpart.RequestOf(inv, method, *ruri.Clone(), false, ok.To(), seq)
		lo := addVia(p, r, tp, to)
		r.SetTransport(tp)
		r.SetDestination(dest)
		r.Laddr = lo.laddr
		return r
	}
	seq := inv.CSeq().SeqNo
	ack := build(sipmsg.ACK, seq)
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	if err := p.tls.CheckHop(ctx, ack, names); err != nil {
		p.log.Debug("ACK of a crossing 2xx failed", "call_id", msgpart.CallID(inv), "error", err)
		return ack
	}
	if err := p.writeRequest(ctx, ack); err != nil {
		p.log.Debug("ACK of a crossing 2xx failed", "call_id", msgpart.CallID(inv), "error", err)
	}
	bye := build(sipmsg.BYE, seq+1)
	tx, err := p.tl.Request(ctx, bye)
	if err != nil {
		p.log.Debug("BYE of a crossing 2xx failed", "call_id", msgpart.CallID(inv), "error", err)
		return ack
	}
	go drain(tx)
	return ack
}

// drain reads a non-INVITE client transaction until its final response
// (or its end), so sipgo never blocks passing a response up.
func drain(tx sipmsg.ClientTransaction) {
	defer tx.Terminate()
	t := time.NewTimer(cancelTimeout)
	defer t.Stop()
	for {
		select {
		case r := <-tx.Responses():
			if !r.IsProvisional() {
				return
			}
		case <-tx.Done():
			return
		case <-t.C:
			return
		}
	}
}

// cancelUpstream sends a CANCEL for a forwarded INVITE (RFC 3261 9.1) and
// drains its transaction in the background until it ends.
func (p *Proxy) cancelUpstream(inv *sipmsg.Request) {
	cr := msgpart.RequestOf(inv, sipmsg.CANCEL, *inv.Recipient.Clone(), true, inv.To(), inv.CSeq().SeqNo)
	// The INVITE's own Via, branch included (RFC 3261 9.1), on top.
	cr.PrependHeader(inv.Via().Clone())
	cr.SetTransport(inv.Transport())
	cr.SetDestination(inv.Destination())
	cr.Laddr = inv.Laddr

	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	if err := p.tls.CheckHop(ctx, cr, nil); err != nil {
		p.log.Debug("send CANCEL failed", "call_id", msgpart.CallID(inv), "error", err)
		return
	}
	tx, err := p.tl.Request(ctx, cr)
	if err != nil {
		p.log.Debug("send CANCEL failed", "call_id", msgpart.CallID(inv), "error", err)
		return
	}
	go drain(tx)
}
