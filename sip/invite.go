package sip

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/storescope"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/oc"
)

// PeerUnknown is the peer label of calls from a source no peer owns.
const PeerUnknown = "unknown"

// call is one initial INVITE on its way through the proxy. It lives in the
// goroutine sipgo runs the INVITE handler in and ends when that returns.
type call struct {
	p   *Proxy
	cfg *config.Config
	req *sipmsg.Request
	// callID is req's Call-ID, a copy of its own: what the call keeps
	// for its life (its record, its dialog, the Tracker's entry, what its
	// ACK ends) shares it rather than the INVITE's text, which wire.Parser
	// keeps in one string per message.
	callID string
	tx     sipmsg.ServerTransaction
	ctx    context.Context
	log    *slog.Logger
	peer   string // metric label
	// fromPeer: the INVITE came from a peer's source (c.peer names it).
	fromPeer bool
	// oc: the peer's INVITE asks for overload control (oc.go); its
	// answers, the node's and the carrier's, carry the node's values.
	oc bool
	// trying: the screen answered the INVITE 100 Trying (screenInvite);
	// the handler sends no second one.
	trying bool
	// member identifies the call attempt in stores: Call-ID, top Via
	// branch, and the packet source and transport (two INVITEs differing in
	// any of them are two sipgo transactions, so two calls).
	member string
	// upstream is where responses to the caller go.
	upstream string
	outcome  string
	// gateKeys are the admission limits the send gate enforces on this
	// node's own sends (none in shadow mode or when over a limit).
	gateKeys []pacing.GateKey
	// forwarded is set once an INVITE actually left for a carrier.
	forwarded bool
	// placed: the call holds max_calls places (freed by endCall unless
	// answered, then by its BYE).
	placed bool
	// answered: a carrier's 2xx reached the caller; the call lives on.
	answered bool
	// tokens are the IDs of the dialog tokens minted for the call's
	// forwards, each carried by an INVITE to a carrier: the attempt the
	// call moves on from, and every one of a call that ends unanswered,
	// has its token refused pool-wide (tokensOver).
	tokens []tokenID
	// callsFull: a carrier was skipped because its max_calls was full.
	callsFull bool
	// priority is the call's kind of priority (metrics.PriorityNumber,
	// metrics.PriorityResource) or "": a priority call is refused by no
	// limit (priority.go).
	priority string
	// refusedClaim: the INVITE claims priority with a Resource-Priority
	// namespace of priority.resource_priority that its peer may not claim
	// (allow_resource_priority false; counted refused_claim): the header
	// is not forwarded. A namespace the configuration does not name is no
	// claim, and its header passes as any other.
	refusedClaim bool
	// order is the route's carriers, worked out before the admission
	// when ordered is set (first.go); ask the first slot reservation to
	// make with the admission, on carrier askCarrier, and first the one
	// made, until an attempt takes it (first.go).
	order      []string
	ordered    bool
	ask        *pacing.Ask
	askCarrier string
	first      *pacing.First
	// askPacing and askGate are askCarrier's pacing as firstAsk worked
	// it out (pacingOf), for its first attempt (pacingFor).
	askPacing pacing.Carrier
	askGate   pacing.GateKey

	// For the call's event line (events.go): the customer, the carrier
	// tried last (or taken), why the call was refused or rerouted and the
	// carriers it went past, the final code the caller got, and the slot
	// wait (granted, or the one refused as too long).
	customer, carrier string
	reason, detail    string
	code              int
	wait              time.Duration
	waited            bool

	// For the call's record (records.go): when the INVITE arrived, the
	// time the admission and max_calls store calls and the pacing waits
	// took, the carriers the INVITE was sent to, the last one's setup
	// time (setupSeen: it answered something above 100), whether the
	// final answer was the callee's (byCallee) or the proxy hung up an
	// answer the caller never got (hungUp). lc is the call as the
	// Tracker holds it once forwarded; bound: bound to its dialog.
	cancel                    context.CancelCauseFunc
	started                   time.Time
	admissionWait, pacingWait time.Duration
	tried                     []string
	setup                     time.Duration
	setupSeen                 bool
	byCallee, hungUp          bool
	answeredAt                time.Time
	lc                        *liveCall
	bound                     bool
	// ackLeg is the leg whose 2xx reached the caller: its transactions
	// end at the caller's ACK (holdAnswered).
	ackLeg *relayLeg
	// key is the call's dialog id (peerCallKey), dialog its text (the
	// Tracker's name for it), both set before admission.
	key    callKey
	dialog string
}

// onInvite handles every INVITE: initial ones go through admission and
// pacing, in-dialog ones (re-INVITE, To tag set) are only forwarded.
func (p *Proxy) onInvite(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	if p.inDialog(req) {
		p.forwardInDialog(req, tx)
		return
	}
	p.active.Add(1)
	defer p.active.Add(-1)
	started := time.Now()

	ctx, cancel := context.WithCancelCause(p.base)
	defer cancel(nil)
	// The call meets at most one store timeout: once Redis failed it, its
	// other store operations go to the fallback (package storescope).
	ctx = storescope.New(ctx)
	// A CANCEL from the INVITE's own source is answered 200 by the screen,
	// which then tells the call through its entry.
	entry, done := p.invites.Claim(req)
	ctx = withDeciding(ctx, entry)
	entry.OnCancel(func() { cancel(errCallCanceled) })
	tx.OnTerminate(func(string, error) { cancel(errTxTerminated) })

	c := &call{p: p, cfg: p.cfg(), req: req, callID: strings.Clone(msgpart.CallID(req)), tx: tx, ctx: ctx, log: p.log,
		trying: entry.Trying, cancel: cancel, started: started}
	// A forwarded call's transaction outlives the handler (send never
	// ends it), for answeredLinger after a 2xx: its tombstone absorbs an
	// answered call's copies for 32 s; a refused one's are answered from
	// the refused table (refused.go).
	defer func() { done(c.forwarded, c.answered) }()
	// Also when the call's path panics (guarded recovers): an ACK the
	// call holds for this handler is let go then.
	defer func() {
		if c.answered {
			p.holdAnswered(c)
		}
	}()
	c.run()
	// The context ends when this handler returns: a live call's list entry
	// no longer needs its cancel (nor keeps the context for the call's
	// whole life).
	defer c.lc.dropCancel()
	if !c.answered {
		// Before the places are given back (store I/O): the caller has
		// its final answer already. Each token went to a carrier in its
		// INVITE, and maybe to the caller in a response.
		p.tokensOver(c.tokens)
	}
	c.endCall()
	if !c.answered {
		// An answered call's record is written when it ends (callEnded).
		c.writeRecord()
	}
	c.event()
	if c.outcome != "" {
		p.m.Calls.WithLabelValues(c.peer, c.outcome).Inc()
	}
}

func (c *call) run() {
	p, cfg, req := c.p, c.cfg, c.req
	c.peer = PeerUnknown
	if cfg == nil {
		c.respond(sipmsg.StatusServiceUnavailable, "Service Unavailable")
		return
	}
	src, ok := msgpart.SourceAddr(req)
	if !ok {
		p.m.SIPErrors.WithLabelValues("source").Inc()
		return
	}
	peer := cfg.PeerByAddr(src)
	if peer == nil {
		c.refuse(metrics.OutcomeRejectedForbidden, reasonUnknownSource)
		if cfg.SIP.UnknownSource == "drop" {
			return
		}
		c.code = sipmsg.StatusForbidden
		p.answerOnce(req, c.tx, sipmsg.StatusForbidden, "Forbidden")
		return
	}
	c.peer, c.fromPeer = peer.Name, true
	c.oc = oc.Asked(req.Via())
	if !c.trying {
		// Not answered 100 by the screen (a copy of an INVITE whose
		// handler ended, let in again): one 100 per transaction.
		c.respond(sipmsg.StatusTrying, "Trying")
	}
	if c.log.Enabled(c.ctx, slog.LevelDebug) {
		c.log = c.log.With("call_id", msgpart.CallID(req), "peer", peer.Name)
	}

	if req.From() == nil || req.To() == nil || req.CallID() == nil {
		p.m.SIPErrors.WithLabelValues("malformed").Inc()
		c.reason = reasonMalformed
		c.respond(sipmsg.StatusBadRequest, "Bad Request")
		return
	}
	if mf := req.MaxForwards(); mf != nil && mf.Val() == 0 {
		// No hop left (RFC 3261 16.3): a loop ends here. One left is
		// forwarded with 0, which a carrier's B2BUA (a UAS) accepts and
		// an edge proxy answers 483 itself.
		p.m.SIPErrors.WithLabelValues("too_many_hops").Inc()
		c.reason = reasonTooManyHops
		c.respond(sipmsg.StatusTooManyHops, "Too Many Hops")
		return
	}
	c.key = peerCallKey(req)
	c.dialog = c.key.String()
	if p.calls.DialogCalls(c.dialog) >= maxCallsPerDialog {
		// RFC 3261 8.2.2.2's merged requests: the same Call-ID and From
		// tag from the same peer leg, another branch each. Each is a call
		// of its own, and every in-dialog request and end of any of them
		// looks at all of them under the lock every call's setup takes:
		// a peer could make that walk as long as its admission allows.
		p.m.SIPErrors.WithLabelValues("merged_request").Inc()
		c.reason = reasonMergedRequest
		c.respond(sipmsg.StatusLoopDetected, "Loop Detected")
		return
	}
	if p.draining.Load() {
		c.refuse(metrics.OutcomeRejectedDrain, reasonDraining)
		c.respond(sipmsg.StatusServiceUnavailable, "Service Unavailable")
		return
	}

	// Customer: the header, if this peer may name it; else the peer's default.
	var cu *config.Customer
	if name := msgpart.HeaderValue(req, cfg.CustomerHeader); name != "" {
		if !peer.MayUseCustomer(name) {
			c.refuse(metrics.OutcomeRejectedForbidden, reasonCustomerNotAllow)
			c.detail = "customer header names " + strconv.Quote(clip(name))
			c.respond(sipmsg.StatusForbidden, "Forbidden")
			return
		}
		if cu = cfg.Customer(name); cu == nil {
			c.refuse(metrics.OutcomeRejectedForbidden, reasonUnknownCustomer)
			c.respond(sipmsg.StatusForbidden, "Forbidden")
			return
		}
	} else if peer.Customer != "" {
		cu = cfg.Customer(peer.Customer)
	}
	if cu != nil {
		c.customer = cu.Name
		if c.log.Enabled(c.ctx, slog.LevelDebug) {
			c.log = c.log.With("customer", cu.Name)
		}
	}

	branch, _ := req.Via().Params.Get("branch")
	c.member = c.callID + "/" + branch + "/" + req.Source() + "/" + req.Transport()

	// The called number: its priority, destination and repeat_dial bucket.
	pol := policy.Of(cfg)
	number := calledNumber(req)
	kind, refused := priorityOf(pol, peer, number, req)
	c.notePriority(kind, refused)
	c.refusedClaim = refused
	if kind != "" {
		c.priority = kind
		c.ctx = pacing.WithPriority(c.ctx) // to the front of the carrier's queue
	}
	dest := pol.Destination(number)
	route := cfg.RouteFor(peer, cu)
	if dest != nil && dest.Route != "" {
		route = dest.Route // a destination's route comes first
	}
	if p.carriers.RouteDown(cfg, route) {
		// Refused before admission: the call costs its peer and customer
		// nothing, and never waits for a carrier known to be down.
		c.refuse(metrics.OutcomeRejectedDown, reasonRouteDown)
		c.detail = "route " + route
		c.log.Debug("every carrier of the route is down", "route", route)
		c.respond(sipmsg.StatusServiceUnavailable, "No Carrier Available")
		return
	}
	c.firstAsk(route)
	defer c.dropFirst() // a first slot no attempt took
	if !c.admit(peer, cu, dest, number) {
		return
	}
	if !c.occupyCalls(peer, cu, dest) {
		return
	}
	c.route(route)
}

// limitRef is one limit of a call as the proxy answers and counts it: its
// metrics scope and name, whether it is shadowed, its own answer (nil:
// the default), and the outcome and event reason of a refusal.
type limitRef struct {
	scope, name     string
	shadow          bool
	reject          *config.Reject
	outcome, reason string
}

// limitOf describes a peer's, customer's or destination's limits.
func limitOf(scope string, s *policy.Scoped) limitRef {
	l := limitRef{scope: scope, name: s.Name, shadow: s.Shadow, reject: s.Reject, outcome: metrics.OutcomeRejectedCPS}
	switch scope {
	case metrics.ScopePeer:
		l.reason = reasonPeerCPS
	case metrics.ScopeCustomer:
		l.reason = reasonCustomerCPS
	case metrics.ScopeDestination:
		l.outcome, l.reason = metrics.OutcomeRejectedDestination, reasonDestinationCPS
	}
	return l
}

// admit runs the one admission store call for the call's buckets: its
// peer's and customer's, its destination's and its called number's
// (repeat_dial). A shadowed limit lets the call through (counted
// shadow_rejected when over); a priority call is counted past every limit.
// It answers the call and returns false when the call must stop.
func (c *call) admit(peer *config.Peer, cu *config.Customer, dest *policy.Destination, number string) bool {
	p, cfg := c.p, c.cfg
	// Sized for the usual call (a few limits of a bucket or two each), so
	// that each list is allocated once at most: limits and owner stay on
	// the stack; buckets goes to the store and gates to the pacer, and
	// gates has room for the carrier's own key (awaitCarrier).
	var buckets []admission.Bucket
	var limitsBuf [4]limitRef
	limits := limitsBuf[:0]
	var ownerBuf [8]int
	owner := ownerBuf[:0] // owner[i]: index in limits of buckets[i]'s limit
	var gates []pacing.GateKey
	add := func(l limitRef, bs []admission.Bucket) {
		if len(bs) == 0 {
			return
		}
		if buckets == nil {
			buckets = make([]admission.Bucket, 0, len(bs)+4)
		}
		buckets = append(buckets, bs...)
		for range bs {
			owner = append(owner, len(limits))
		}
		limits = append(limits, l)
	}
	// scoped adds a peer's or customer's limits (a live override wins) or
	// a destination's. With a burst, a token bucket replaces the 1 s
	// window, and the send gate (which holds sends to cps per rolling
	// second) lets the burst through: the scope promises burst then cps,
	// not cps per second. Extra windows follow the first bucket.
	scoped := func(scope string, s *policy.Scoped, override bool) {
		cps, burst := s.CPS, s.Burst
		if override {
			if cps, burst = p.limitsOf(scope, s.Name, s.CPS, s.Burst); cps <= 0 {
				return // no limit configured for this scope
			}
		}
		bs := s.Buckets(cps, burst)
		if burst <= 0 && cps > 0 && !s.Shadow {
			if gates == nil {
				gates = make([]pacing.GateKey, 0, 4)
			}
			gates = append(gates, pacing.GateKey{Key: s.ID, CPS: cps})
		}
		add(limitOf(scope, s), bs)
	}
	pol := policy.Of(cfg)
	scoped(metrics.ScopePeer, pol.Peer(peer), true)
	if cu != nil {
		scoped(metrics.ScopeCustomer, pol.Customer(cu), true)
	}
	if dest != nil {
		scoped(metrics.ScopeDestination, &dest.Scoped, false)
	}
	if b, ok := pol.RepeatDial(number); ok {
		r := cfg.RepeatDial
		add(limitRef{scope: metrics.ScopeRepeatDial, shadow: b.Over == admission.OverShadow, reject: &r.Reject,
			outcome: metrics.OutcomeRejectedRepeat, reason: reasonRepeatDial}, []admission.Bucket{b})
	}
	if len(buckets) == 0 {
		return true
	}
	if c.priority != "" {
		// Counted past every limit, never refused (priority.go). The
		// buckets derived at load are shared: a copy.
		buckets = slices.Clone(buckets)
		for i := range buckets {
			buckets[i].Over = admission.OverCount
		}
		gates = nil // never held by the send gate either
	}

	sctx, cancel := c.storeCtx()
	t0 := time.Now()
	dec, err := c.admitStore(sctx, buckets)
	c.admissionWait += time.Since(t0)
	cancel()
	if err != nil {
		c.storeFailed("admission", err)
		return false
	}
	if dec.Duplicate {
		c.absorbDuplicate()
		return false
	}
	var overBuf [len(limitsBuf)]bool
	over := overBuf[:0]
	over = append(over, make([]bool, len(limits))...)
	for i, o := range dec.Over {
		if o && i < len(owner) {
			over[owner[i]] = true
		}
	}
	for i, l := range limits {
		result := metrics.ResultAdmitted
		switch {
		case !dec.Admit && dec.Refused >= 0 && dec.Refused < len(owner) && owner[dec.Refused] == i:
			result = metrics.ResultRejected
		case over[i] && l.shadow && c.priority == "":
			result = metrics.ResultShadowRejected
		case !dec.Admit:
			continue // not reached: the call was refused by another limit
		}
		p.m.Admission.WithLabelValues(l.scope, l.name, result).Inc()
	}
	if dec.Admit {
		if c.priority != "" && slices.Contains(over, true) && c.log.Enabled(c.ctx, slog.LevelDebug) {
			c.log.Debug("priority call admitted over its limits", "counts", dec.Counts)
		}
		// Not when the store let the call through uncounted (fail-open):
		// holding it to limits nothing counted would turn the held calls
		// into 503s at the gate's deadline.
		if dec.Mode != admission.ModeOpen {
			c.gateKeys = gates
		}
		return true
	}
	l := limits[0]
	if dec.Refused >= 0 && dec.Refused < len(buckets) {
		l = limits[owner[dec.Refused]]
		b := buckets[dec.Refused]
		name := l.scope + " " + l.name
		if l.scope == metrics.ScopeRepeatDial {
			name = "repeat_dial (the called number)"
		}
		if b.RateMicros > 0 {
			c.detail = name + ": token bucket of " + strconv.Itoa(b.Limit) + " empty"
		} else {
			calls := " calls in "
			if b.Limit == 1 {
				calls = " call in "
			}
			c.detail = name + ": " + strconv.Itoa(b.Limit) + calls + b.Window.String()
		}
		if c.log.Enabled(c.ctx, slog.LevelDebug) {
			count := -1
			if dec.Refused < len(dec.Counts) {
				count = dec.Counts[dec.Refused]
			}
			c.log.Debug("over a limit", "scope", l.scope, "name", l.name, "bucket", b.Key,
				"limit", b.Limit, "window", b.Window,
				"count", count, "retry_after", dec.RetryAfter)
		}
	}
	c.refuse(l.outcome, l.reason)
	c.sendReject(l.reject, cfg.SIP.Reject, "CPS Limit Exceeded")
	return false
}

// sendReject answers a call refused by a limit with the limit's own answer
// (rej) or def, the default of its kind (sip.reject, sip.reject_calls);
// fallback is the reason phrase when the answer has none.
func (c *call) sendReject(rej *config.Reject, def config.Reject, fallback string) {
	if rej == nil {
		rej = &def
	}
	code, reason := rej.Code, rej.Reason
	if code < 300 || code > 699 {
		code = sipmsg.StatusServiceUnavailable
	}
	if reason == "" {
		reason = fallback
	}
	res := sipmsg.NewResponseFromRequest(c.req, code, reason, nil)
	if rej.RetryAfter > 0 {
		res.AppendHeader(sipmsg.NewHeader("Retry-After", strconv.Itoa(int(math.Ceil(rej.RetryAfter.Seconds())))))
	}
	c.send(res)
}

// route tries the carriers of the call's route in the order its policy
// gives (Carriers.Order): reserve a slot within max_wait, wait for it,
// forward; a full carrier or one failing before any provisional response
// above 100 passes the call to the next.
func (c *call) route(route string) {
	p, cfg := c.p, c.cfg
	var lastFail *sipmsg.Response
	order := c.order
	if !c.ordered {
		order = p.carriers.Order(c.ctx, cfg, route)
	}
	for i, name := range order {
		if i > 0 {
			c.dropFirst() // the first attempt did not take it: give it back now
		}
		car := cfg.Carrier(name)
		if car == nil {
			continue
		}
		c.carrier = name
		switch skip := p.carriers.Usable(cfg, car); skip {
		case "":
		case carriers.SkipPaused:
			// Paused (its Retry-After) and the span still runs: skipped
			// at once, no place nor slot taken.
			p.m.Pacing.WithLabelValues(name, metrics.PacingPaused).Inc()
			c.pausedSkip(name)
			continue
		default:
			// Down on this node (or out of service): its slots are not
			// taken.
			p.m.Reroutes.WithLabelValues(name, string(skip)).Inc()
			c.skipped(name, strings.ReplaceAll(string(skip), "_", " "))
			continue
		}
		if !c.occupyCarrier(car) {
			c.callsFull = true
			p.m.Reroutes.WithLabelValues(name, metrics.RerouteCallsFull).Inc()
			c.skipped(name, "max_calls full")
			continue
		}
		member := p.memberOf(c.member, i)
		t0 := time.Now()
		pc, gate := c.pacingFor(i, car)
		ticket, state, wait, err := p.awaitCarrier(c.ctx, c.log, car, pc, gate, member, c.gateKeys, c.takeFirst(i, name))
		if state != carrierPaused { // a pause's span is no slot wait
			c.wait, c.waited = wait, true
			c.pacingWait += time.Since(t0)
		}
		if state != carrierReady {
			c.releaseCarrier(car)
		}
		switch state {
		case carrierPaused:
			c.pausedSkip(name)
			continue
		case carrierFull:
			p.m.Reroutes.WithLabelValues(name, metrics.RerouteFull).Inc()
			c.skipped(name, "full (wait "+wait.Round(time.Millisecond).String()+" over max_wait "+car.MaxWait.String()+")")
			continue
		case carrierStopped:
			// Not the store: the caller cancelled, the transaction ended or
			// the proxy is shutting down.
			c.stopped(c.forwarded)
			return
		case carrierStoreFailed:
			c.log.Debug("pacing store failed", "carrier", name, "error", err)
			if !c.forwarded {
				c.refuse(metrics.OutcomeRejectedStore, reasonStore)
			}
			c.respond(sipmsg.StatusServiceUnavailable, "Service Unavailable")
			return
		}
		probe := ""
		if ticket.Probe {
			probe = member
		}
		minted := len(c.tokens)
		res, retry := c.forward(car, ticket, probe)
		if retry {
			// The call moves on: the carrier got the INVITE, and in it
			// the Record-Route's token, but is no leg of the call. This
			// node refuses the token as not the call's current one
			// (ownTokenGone); the pool's other nodes learn its end.
			p.tokensOver(c.tokens[minted:])
		}
		if !retry && res != nil && c.code == 0 {
			// The callee's final answer, relayed (the proxy's own would
			// have set the code already).
			c.code, c.byCallee = res.StatusCode, !c.hungUp
		}
		if !retry {
			if c.detail != "" && c.reason == "" {
				c.reason = reasonRerouted // taken, past the carriers in detail
			}
			return
		}
		c.releaseCarrier(car)
		p.m.Reroutes.WithLabelValues(name, metrics.RerouteFailed).Inc()
		if res != nil {
			lastFail = res
			c.skipped(name, "failed ("+strconv.Itoa(res.StatusCode)+" "+phrase(res.Reason)+")")
		} else {
			c.skipped(name, "failed (no answer)")
		}
		if c.log.Enabled(c.ctx, slog.LevelDebug) {
			status := 0
			if res != nil {
				status = res.StatusCode
			}
			c.log.Debug("carrier failed, trying the next", "carrier", name, "status", status)
		}
	}
	if c.canceled() {
		return
	}
	if c.forwarded {
		c.reason = reasonCarrierFailed
		if lastFail != nil {
			c.code = lastFail.StatusCode
			c.relay(lastFail)
		} else {
			c.respond(sipmsg.StatusRequestTimeout, "Request Timeout")
		}
		return
	}
	if c.callsFull {
		c.log.Debug("no carrier of the route had a free max_calls place")
		c.rejectCalls(reasonCarrierCalls)
		return
	}
	c.refuse(metrics.OutcomeRejectedQueue, reasonNoCarrier)
	c.log.Debug("no carrier of the route could take the call in time", "carriers", len(order))
	c.respond(sipmsg.StatusServiceUnavailable, "No Carrier Available")
}

// pausedSkip records that the call went past carrier name because it is
// paused (its Retry-After).
func (c *call) pausedSkip(name string) {
	c.p.m.Reroutes.WithLabelValues(name, metrics.ReroutePaused).Inc()
	c.skipped(name, "paused")
}

// storeFailed ends a call whose store call (what: admission, max_calls)
// failed: 503 and outcome rejected_store, unless the call itself was
// cancelled, its transaction ended or the proxy is shutting down.
func (c *call) storeFailed(what string, err error) {
	if c.ctx.Err() != nil {
		c.stopped(false)
		return
	}
	c.log.Debug(what+" store failed", "error", err)
	c.refuse(metrics.OutcomeRejectedStore, reasonStore)
	c.respond(sipmsg.StatusServiceUnavailable, "Service Unavailable")
}

// absorbDuplicate ends a call attempt the store has counted already: this
// INVITE is the same attempt as one being handled (a second sipgo
// transaction for it, e.g. the same branch with another Via sent-by).
// Absorbed like a retransmission: no answer, no forward, no state.
func (c *call) absorbDuplicate() {
	c.p.m.SIPErrors.WithLabelValues("duplicate").Inc()
	c.log.Debug("duplicate call attempt absorbed", "member", c.member)
	c.tx.Terminate()
}

// stopped ends a call whose wait for a slot was interrupted: by the
// caller's CANCEL (487; the screen answered the CANCEL 200) or by shutdown
// (503).
func (c *call) stopped(forwarded bool) {
	if c.canceled() {
		if !forwarded {
			c.outcome = metrics.OutcomeCanceled
			c.respond(sipmsg.StatusRequestTerminated, "Request Terminated")
		}
		return
	}
	if !forwarded {
		c.refuse(metrics.OutcomeRejectedDrain, reasonDraining)
	}
	c.respond(sipmsg.StatusServiceUnavailable, "Service Unavailable")
}

// canceled reports whether the caller cancelled the call.
func (c *call) canceled() bool {
	return errors.Is(context.Cause(c.ctx), errCallCanceled)
}

// storeCtx is a safety bound on one admission call. The store bounds its
// own Redis round trip by store.redis.timeout and falls back when it
// expires; this deadline must stay well behind that one, or a Redis
// timeout would look like the caller giving up and reject the call.
func (c *call) storeCtx() (context.Context, context.CancelFunc) {
	d := storeBudget
	if r := c.cfg.Store.Redis; r != nil && 4*r.Timeout > d {
		d = 4 * r.Timeout
	}
	return context.WithTimeout(c.ctx, d)
}

// respond answers the INVITE with a response of the proxy's own.
func (c *call) respond(code int, reason string) {
	c.send(sipmsg.NewResponseFromRequest(c.req, code, reason, nil))
}

// maxCallsPerDialog bounds the live calls of one dialog id (Call-ID,
// From tag, peer leg): an upstream proxy that forks one call to the node
// over several branches sends a few; more are answered 482.
const maxCallsPerDialog = 16

// send answers the INVITE. A final answer of the proxy's own to a call
// never forwarded ends the transaction at once (sent once, no
// retransmissions to a source that may be spoofed, no timers); a peer's
// refused attempt is remembered for 32 s (refused.go), so a copy of the
// INVITE gets this answer again from the screen and is never decided.
func (c *call) send(res *sipmsg.Response) {
	if c.upstream == "" {
		c.upstream = res.Destination()
	}
	if res.StatusCode >= 300 && c.code == 0 {
		c.code = res.StatusCode
	}
	c.p.ocMark(ocPeer(c.peer, c.oc), res.Via())
	if res.StatusCode >= 300 && c.fromPeer {
		// Before it is sent: a copy the caller sends once it has the
		// answer finds it remembered. A forwarded call's too: sipgo's
		// transaction absorbs copies only until the ACK and Timer I.
		c.p.rememberRefusal(c.req, res, false)
	}
	if err := c.tx.Respond(res); err != nil {
		c.log.Debug("respond failed", "status", res.StatusCode, "error", err)
	}
	if res.StatusCode >= 300 && !c.forwarded {
		c.tx.Terminate()
	}
}

// relay passes a carrier's response upstream without the proxy's Via
// (res itself is changed, see msgpart.RelayResponse). An error means the caller
// could not be reached (e.g. its TCP connection is gone), or errNoVia: the
// response had no Via left for the caller and was not relayed.
func (c *call) relay(res *sipmsg.Response) error {
	if c.upstream == "" {
		c.upstream = msgpart.UpstreamOf(c.req)
	}
	status := res.StatusCode
	out := msgpart.RelayResponse(res, c.upstream, c.req.Transport())
	if out.Via() == nil {
		return c.p.noVia(out)
	}
	c.p.ocRelay(ocPeer(c.peer, c.oc), out.Via())
	if status >= 300 && c.fromPeer {
		// The carrier's refusal ends the call: copies of the INVITE get
		// it again from the screen (refused.go), also after sipgo's
		// transaction has ended (the caller's ACK and Timer I, 5 s),
		// never a second decision.
		c.p.rememberRefusal(c.req, out, true)
	}
	err := c.tx.Respond(out)
	if err != nil {
		c.log.Debug("relay failed", "status", status, "error", err)
	}
	return err
}

// forward sends the INVITE to one carrier and relays its responses. retry
// reports that the carrier failed before any provisional response above 100
// (5xx, 408, timeout, transport error) and the next carrier may be tried;
// res is then the failure response, if any. probe, when not empty, is the
// slot member of a call that is the half-open probe of the carrier's pause:
// its outcome ends the pause or lets the next call try (probeDone).
func (c *call) forward(car *config.Carrier, ticket pacing.Ticket, probe string) (res *sipmsg.Response, retry bool) {
	p := c.p
	hooks := &carrierHooks{c: c, car: car, probe: probe}
	defer func() { hooks.done(res) }() // the verdict, if none was reported
	target, err := carrierTargetOf(c.cfg, car)
	if err != nil {
		c.log.Debug("bad carrier uri", "carrier", car.Name, "error", err)
		return nil, true
	}
	dest, err := p.carrierAddrPort(target)
	if err != nil {
		c.log.Debug("carrier address", "carrier", car.Name, "error", err)
		return nil, true
	}
	token := ""
	if c.cfg.SIP.RecordRoute {
		src, _ := netip.ParseAddrPort(c.req.Source())
		legs := dialogLegs{
			Peer:    leg{Addr: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), Proto: legTransportOf(c.req.Transport())},
			Carrier: leg{Addr: dest, Proto: legTransportOf(target.transport)},
		}
		// The current snapshot, not the call's: a call admitted before a
		// reload that changed sip.dialog_secret must not turn the keys back.
		var err error
		if token, err = p.keys.mint(p.cfg(), legs, msgpart.CallID(c.req), msgpart.Tag(c.req.From().Params)); err != nil {
			c.log.Debug("dialog token", "error", err)
			return nil, true
		}
		if id, ok := tokenIDOf(token); ok {
			c.tokens = append(c.tokens, id)
		}
	}
	uriHost := strings.Trim(target.host, "[]")
	target.host, target.hp = dest.Addr().String(), dest.String()
	// Tracked and bound before the INVITE leaves: a BYE that races the
	// 2xx (the carrier's, or a caller's right after it) finds the call.
	c.track(car.Name)
	if id, ok := tokenIDOf(token); ok {
		// From now on only this attempt's token is the call's.
		c.lc.mu.Lock()
		c.lc.token = id
		c.lc.mu.Unlock()
	}
	hooks.dest = leg{Addr: dest, Proto: legTransportOf(target.transport)}
	// The carrier has car.Setup() to answer with a provisional response
	// above 100 (a 100 Trying alone does not count: a carrier that takes
	// calls and never rings them is as good as down), then the ring timer.
	out := p.outboundInvite(c.cfg, c.req, target, token)
	if c.refusedClaim {
		// The peer may not claim priority: a carrier that honours the
		// header must not learn the claim either (h46).
		msgpart.RemoveHeaders(out, "Resource-Priority")
	}
	l := &relayLeg{p: p, up: c, out: out, ctx: c.ctx,
		setup: car.Setup(), ring: ringTimeout, carrier: hooks, fk: &forkSet{}}
	if target.transport == "TLS" {
		// RFC 5922: the certificate names the URI's host (or address).
		l.tlsNames = []string{uriHost}
	}
	if err := l.send(target); err != nil {
		c.log.Debug("forward failed", "carrier", car.Name, "error", err)
		if target.transport != "UDP" {
			// The carrier refused or did not take the connection (or its
			// TLS certificate did not verify). A UDP send error is this
			// node's (an INVITE too large for a datagram, say): the
			// peer's INVITE, not the carrier's health.
			hooks.settle(carriers.Outcome{Result: carriers.Failed, Detail: sendReason(err)})
		}
		return nil, true
	}
	hooks.sentAt = time.Now()
	ticket.Sent(hooks.sentAt)
	c.tried = append(c.tried, car.Name)
	c.setupSeen = false
	if !c.forwarded {
		c.forwarded = true
		c.outcome = metrics.OutcomeForwarded
	}
	if c.log.Enabled(c.ctx, slog.LevelDebug) {
		c.log.With("carrier", car.Name).Debug("call forwarded")
	}
	res, retry = l.run()
	if hooks.relayedOK && c.answered {
		c.ackLeg = l
	}
	return res, retry
}

// carrierHooks is what the leg of an initial INVITE to car tells its call
// (legCarrier), and what the call reports to the carriers (Report): a
// Reached at most once, then one verdict at most once (settle), else
// Undecided when the attempt ends (done).
type carrierHooks struct {
	c         *call
	car       *config.Carrier
	dest      leg // where the INVITE went
	sentAt    time.Time
	setupSeen bool
	// probe is the member of the half-open probe slot the call holds ("":
	// none, or its outcome told already).
	probe string
	// settled: a verdict on this attempt was reported.
	settled bool
	// endedEarly: the answer's dialog had a BYE answered before it (the
	// Tracker ended the call at the answer: Answer); relayed ends it on
	// both legs.
	endedEarly bool
	// relayedOK: the 2xx reached the caller.
	relayedOK bool
}

// report tells the carriers o, with the call's peer and, the first time
// a report can end it, the call's half-open probe slot.
func (h *carrierHooks) report(o carriers.Outcome) {
	o.Peer, o.Probe = h.c.peer, h.probe
	h.probe = ""
	h.c.p.carriers.Report(h.c.cfg, h.car, o)
}

// settle reports the attempt's verdict, once.
func (h *carrierHooks) settle(o carriers.Outcome) {
	if h.settled {
		return
	}
	h.settled = true
	h.report(o)
}

// done reports the end of the attempt: the final answer res the caller
// got (nil: none) when no verdict was reported yet; an attempt the caller
// cancelled, or that ended without an answer, is Undecided.
func (h *carrierHooks) done(res *sipmsg.Response) {
	if h.settled {
		return
	}
	if res != nil && res.StatusCode >= 300 && !h.c.canceled() {
		h.settle(carriers.Outcome{Result: carriers.Unanswered, Code: res.StatusCode})
		return
	}
	h.settle(carriers.Outcome{Result: carriers.Undecided})
}

// response counts the carrier's answer by class, and observes the setup
// time at its first provisional answer above 100 or its final one.
func (h *carrierHooks) response(code int) {
	p := h.c.p
	if class := metrics.ResponseClass(code); class != "" {
		p.m.CarrierResponses.WithLabelValues(h.car.Name, class).Inc()
	}
	if !h.setupSeen && code > 100 {
		h.setupSeen = true
		d := time.Since(h.sentAt)
		p.m.CarrierSetup.WithLabelValues(h.car.Name).Observe(d.Seconds())
		h.c.setup, h.c.setupSeen = d, true
	}
}

// reached marks the carrier healthy (and, for the half-open probe of its
// pause, ends the pause).
func (h *carrierHooks) reached() {
	h.report(carriers.Outcome{Result: carriers.Reached})
}

// failed decides whether a failure before setup passes the call on: an
// overload answer (back-pressure), a 408 or a 5xx (the carrier failed).
func (h *carrierHooks) failed(r *sipmsg.Response) bool {
	car := h.car
	over := car.Adaptive && carriers.OverloadAnswer(car, r.StatusCode, r.Reason)
	span, paused := retryAfter(r)
	if over || paused {
		// Back-pressure, not failure: the call tries the next carrier.
		h.settle(carriers.Outcome{Result: carriers.Overloaded, Code: r.StatusCode, Cut: over, RetryAfter: span})
		return true
	}
	if r.StatusCode == 408 || (r.StatusCode >= 500 && r.StatusCode < 600) {
		h.settle(carriers.Outcome{Result: carriers.Failed, Code: r.StatusCode, Detail: answered(r.StatusCode)})
		return true
	}
	return false
}

// timedOut counts a carrier that did not ring within its setup timeout.
// While this node is behind (p.behind) it is no verdict on the carrier:
// its answer may be waiting in the node's own queue.
func (h *carrierHooks) timedOut() {
	h.c.p.m.CarrierResponses.WithLabelValues(h.car.Name, metrics.ClassTimeout).Inc()
	if h.c.p.behind.Recent() {
		h.settle(carriers.Outcome{Result: carriers.Undecided})
		return
	}
	h.settle(carriers.Outcome{Result: carriers.TimedOut, Detail: "no ringing within " + h.car.Setup().String()})
}

// answering sets the call up: it lives on, with its places, until its BYE
// (seen through Record-Route; the call was bound to its dialog when
// forwarded, and a BYE must name the callee's tag of this answer), its max
// duration, an operator's end or the node's shutdown; its record is
// written then.
func (h *carrierHooks) answering(r *sipmsg.Response) {
	c := h.c
	h.settle(carriers.Outcome{Result: carriers.Answered})
	c.answeredAt = time.Now()
	if !c.cfg.SIP.RecordRoute {
		// Not in the dialog's path: the node never sees the BYE. The call
		// ends here for the node (record: end_reason unsupervised).
		return
	}
	c.answered = true
	if c.lc != nil {
		c.keepAnswered(r, h.dest)
	}
	if to := r.To(); to != nil {
		h.endedEarly = c.p.calls.Answer(c.ctx, c.member, msgpart.Tag(to.Params)) && c.lc != nil
	}
}

// relayed is told that the 2xx reached upstream. A call the Tracker ended
// at its answer (a BYE of its dialog that ended it came first: a
// carrier's BYE racing its own 2xx, or one a carrier sent before it
// answered) is over on the node's books, its places free and its record
// written, while the caller has just been told it is up: the node ends it
// on both legs with its own BYEs, as an operator's end does, so that no
// call goes on without its places.
func (h *carrierHooks) relayed() {
	h.relayedOK = true
	if !h.endedEarly {
		return
	}
	h.endedEarly = false
	lc := h.c.lc
	lc.mu.Lock()
	d := lc.dialog()
	lc.mu.Unlock()
	h.c.p.byeLeg(d, true, byeReasonEnded)
	h.c.p.byeLeg(d, false, byeReasonEnded)
}

// lost undoes answering: the 2xx never reached the caller and the leg hung
// it up, so endCall ends the call and its own record is written.
func (h *carrierHooks) lost() {
	c := h.c
	c.answered, c.hungUp, c.answeredAt = false, true, time.Time{}
	if c.lc != nil {
		c.lc.unanswered()
	}
}

// maxRetryAfter caps the span read from a carrier's Retry-After (the pause
// is capped further by its retry_after_max).
const maxRetryAfter = config.MaxRetryAfterMax

// retryAfter returns the span of an overload answer's Retry-After (RFC 3261
// 20.33: delta-seconds, then an optional comment and parameters): for a 503
// or a 500 only (a 486 with Retry-After is one busy callee, and a reason
// phrase a far end chose must not pause a carrier), at least a second and
// at most maxRetryAfter.
func retryAfter(r *sipmsg.Response) (time.Duration, bool) {
	if r.StatusCode != sipmsg.StatusServiceUnavailable && r.StatusCode != sipmsg.StatusInternalServerError {
		return 0, false
	}
	h := r.GetHeader("Retry-After")
	if h == nil {
		return 0, false
	}
	v := strings.TrimSpace(h.Value())
	end := 0
	for end < len(v) && end < 10 && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(v[:end])
	if err != nil || n <= 0 {
		return 0, false
	}
	// Clamped before the multiplication: 10 digits of seconds overflow a
	// time.Duration into a negative span.
	return time.Duration(min(n, int(maxRetryAfter/time.Second))) * time.Second, true
}

// outboundInvite builds the INVITE forwarded to a carrier at target (an
// address) from the received req, which stays unchanged. A peer cannot
// steer it: every Route header goes (a carrier that loose-routes would
// otherwise send the call, trusted as cpsguard's, wherever the peer chose),
// so do the Request-URI's maddr and URI headers, and the headers of
// sip.strip_headers (by default the customer header: a carrier need not
// learn the operator's customers). The Request-URI is pointed at the
// carrier, Max-Forwards decremented, and the proxy's Via and Record-Route
// (when sip.record_route, carrying the dialog token when token is not
// empty) added above the upstream Vias, each kept a plain Via line (the
// ACK of a non-2xx answer still carries one Via: ack.go).
func (p *Proxy) outboundInvite(cfg *config.Config, req *sipmsg.Request, target target, token string) *sipmsg.Request {
	out := msgpart.ForwardCopy(req)
	for out.RemoveHeader("Route") {
	}
	for _, name := range stripHeaders(cfg) {
		msgpart.RemoveHeaders(out, name)
	}
	out.Recipient.Host = target.host
	out.Recipient.Port = target.port
	out.Recipient.Headers = nil
	if out.Recipient.UriParams != nil {
		out.Recipient.UriParams.Remove("transport")
		out.Recipient.UriParams.Remove("maddr")
	}
	if target.transport != "UDP" {
		if out.Recipient.UriParams == nil {
			out.Recipient.UriParams = sipmsg.NewParams()
		}
		out.Recipient.UriParams.Add("transport", msgpart.LowerTransport(target.transport))
	}
	msgpart.DecMaxForwards(out)
	var buf [2]sipmsg.Header
	below := buf[:0]
	if cfg.SIP.RecordRoute {
		src, _ := msgpart.SourceAddr(req)
		below = recordRoutes(below, p, legSide{req.Transport(), src}, legSide{target.transport, msgpart.HostAddr(target.host)}, token)
	}
	lo := prependVia(p, out, target.transport, msgpart.HostAddr(target.host), below)
	out.SetTransport(target.transport)
	out.SetDestination(target.hostPort())
	out.Laddr = lo.laddr
	return out
}
