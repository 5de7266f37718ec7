package sip

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/load"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// Overload: the node sheds its own excess before it reaches the store.
// A priority call (priority.go) is never shed: it takes its unit even
// beyond the bound.
//
// At saturation sipgo starts one goroutine per received message; when the
// node cannot keep up, thousands of them are runnable at once, a Redis
// reply waits behind them, store calls miss store.redis.timeout and the
// node believes Redis is down. So the screen bounds the new calls being
// decided (sip.max_inflight, config.SIP.Inflight): an initial INVITE from
// a peer takes one unit when it arrives, before sipgo creates anything
// for it, and gives it back once its decision is made: refused, answered,
// or its first pacing slot reserved (decided). Beyond the bound it gets
// 503, statelessly (no transaction, no goroutine; outcome
// rejected_overload): over UDP after waiting at most sip.inflight_wait in
// its lane of the read path for a unit to come free (ingress.go), at once
// when that queue is full or over TCP.
//
// What counts is what costs CPU and store round trips now: identification,
// admission and the pacing reservation. A call waiting out its slot is a
// timer, and the number of such calls is already bounded by the carriers'
// cps times max_wait; a forwarded call and in-dialog requests (ACK, BYE,
// re-INVITE, CANCEL) are never counted nor shed, so calls already admitted
// keep priority. Retransmissions of an INVITE being handled find its entry
// in the invite table and pass without taking a unit.
//
// The unit lives in the INVITE's invites.Entry: the handler that claims the
// entry releases it; an entry no handler claims (sipgo absorbed the INVITE
// as a retransmission of a transaction whose handler had ended) gives it
// back when the sweep finds it older than inflightOrphan (5 s). The count
// and its bound are package sip/internal/load's (p.inflight, load.Limit).
//
// The node counts as behind (p.behind, load.Behind) for load.Memory after
// a datagram of its read path's fast lane (carriers' and peers' answers
// and in-dialog requests) waited more than load.Lag before a worker took
// it, or found that lane full for everyone, not one party's share of it
// (ingress.go). While it is, carrier timeouts (a call not rung in time, a
// probe not answered) are not held against the carrier (invite.go,
// probe.go): the answer may be waiting in the node's own queue, as store
// timeouts measure the node as much as the store (store.Failover). Sheds
// do not count (noteShed): one peer overrunning its share of the read
// path, or its burst finding the inflight bound taken, says nothing of how
// fast the node reads the carriers' answers, and must not keep a dead
// carrier up.

// shedTag prefixes the To tag of the proxy's stateless overload answers,
// so the screen can drop the ACKs they draw without handing them to sipgo.
const shedTag = "cgshed."

// Inflight returns the number of new calls being decided now (tests,
// status).
func (p *Proxy) Inflight() int64 { return p.inflight.Load() }

// screenInvite registers an INVITE in the invite table; a new initial
// INVITE from a peer takes a unit of the inflight bound first, and is
// shed (stateless 503, false) when there is none.
//
// An initial INVITE that is let in is answered 100 Trying here, at once
// and statelessly: a handler's 100 would come when sipgo runs it, which
// under load is later than the callers' first retransmission (Timer A,
// 500 ms), and every retransmission costs the node a goroutine. Its
// handler then sends none (invites.Entry.Trying): one 100 per INVITE, as a
// caller that matches responses to transactions (SIPp's response_txn)
// takes a second for a retransmission. For the same reason a
// retransmission of an initial INVITE still being handled gets its 100
// here and goes no further (sipgo would only absorb it). A peer's copy of
// an INVITE the proxy refused gets that refusal again and goes no further
// (refused.go); a shed INVITE's 503 is remembered as such a refusal.
func (p *Proxy) screenInvite(cfg *config.Config, req *sipmsg.Request, src netip.Addr) bool {
	var acquire func() bool
	peer := ""
	initial := !p.inDialog(req)
	if initial {
		if pe := cfg.PeerByAddr(src); pe != nil {
			peer = pe.Name
			if p.answerRefusedCopy(req, peer) {
				// A copy of an INVITE the proxy refused: its answer
				// again, and no new decision (refused.go).
				return false
			}
			limit := load.Limit(cfg)
			acquire = func() bool {
				if !p.inflight.TryTake(limit) {
					if !isPriority(cfg, pe, req) {
						return false
					}
					// Never shed (priority.go): it takes its unit beyond
					// the bound, so it still counts in flight.
					p.inflight.Take()
				}
				p.ocMeters.Of(peer).AddTaken()
				return true
			}
		}
	}
	// A peer's answers carry the overload-control values it asks for
	// (oc.go); a stranger learns nothing of the node's load.
	answer := func(res *sipmsg.Response) {
		p.ocMarkOwn(peer, res)
		p.writeStateless(res)
	}
	switch p.invites.Register(req, acquire, &p.inflight) {
	case invites.RegNew:
		if acquire != nil {
			answer(sipmsg.NewResponseFromRequest(req, sipmsg.StatusTrying, "Trying", nil))
		}
		return true
	case invites.RegLive:
		if initial {
			answer(sipmsg.NewResponseFromRequest(req, sipmsg.StatusTrying, "Trying", nil))
			return false
		}
		return true
	case invites.RegAnswered:
		return true
	case invites.RegAbsorbed:
		return false
	}
	p.m.Calls.WithLabelValues(peer, metrics.OutcomeRejectedOverload).Inc()
	p.noteShed(peer, time.Now(), true)
	res := shedResponse(req, shedTag+strconv.FormatUint(rand.Uint64(), 36))
	p.rememberRefusal(req, res, false) // its copies get this answer again (only a peer's INVITE is shed here)
	answer(res)
	return false
}

// shedResponse is the stateless 503 a shed INVITE gets, with To tag tag
// (the read filter writes the same from raw bytes: rawshed.go).
func shedResponse(req *sipmsg.Request, tag string) *sipmsg.Response {
	res := sipmsg.NewResponseFromRequest(req, sipmsg.StatusServiceUnavailable, "Overloaded", nil)
	if to := res.To(); to != nil {
		to.Params.Add("tag", tag)
	}
	return res
}

// shedAck reports an ACK of the proxy's own stateless overload answer: it
// ends there (an ACK of a non-2xx is hop by hop) and costs nothing more.
func shedAck(req *sipmsg.Request) bool {
	to := req.To()
	return to != nil && strings.HasPrefix(msgpart.Tag(to.Params), shedTag)
}

// decidingKey carries a call's invites.Entry in its context, so the pacing
// code can say when the decision is made (decided).
type decidingKey struct{}

func withDeciding(ctx context.Context, e *invites.Entry) context.Context {
	return context.WithValue(ctx, decidingKey{}, e)
}

// decided gives back the call's unit of the inflight bound, if it holds
// one: its first pacing slot is reserved (or refused), and what remains is
// a timer and a forward. Safe to call more than once.
func decided(ctx context.Context) {
	if e, _ := ctx.Value(decidingKey{}).(*invites.Entry); e != nil {
		e.ReleaseInflight()
	}
}

// noteShed records a call of peer shed for overload at now. A shed at the
// inflight bound (bound) counts toward the reduction peer is asked for when
// it asks for overload control (oc.go), which is recomputed here when its
// period is over so that it follows the shedding even while no such client
// sends anything. A shed only because the caller's own share of the read
// path's new-call lane is full (ingress.go) does not: that is one party's
// overrun of its own share, not the node's overload. No shed makes the node
// count as behind (p.behind).
func (p *Proxy) noteShed(peer string, now time.Time, bound bool) {
	if bound && peer != "" {
		p.ocMeters.Of(peer).AddShed(now)
	}
}
