package sip

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// PeerUnknown is the peer label of calls from a source no peer owns.
const PeerUnknown = "unknown"

// call is one initial INVITE on its way through the proxy. It lives in the
// goroutine sipgo runs the INVITE handler in and ends when that returns.
type call struct {
	p    *Proxy
	cfg  *config.Config
	req  *sipmsg.Request
	tx   sipmsg.ServerTransaction
	ctx  context.Context
	log  *slog.Logger
	peer string // metric label
	// oc: the peer's INVITE asks for overload control (oc.go); its
	// answers, the node's and the carrier's, carry the node's values.
	oc bool
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
	// callsFull: a carrier was skipped because its max_calls was full.
	callsFull bool

	// For the call's event line (events.go): the customer, the carrier
	// tried last (or taken), why the call was refused or rerouted and the
	// carriers it went past, the final code the caller got, and the slot
	// wait (granted, or the one refused as too long).
	customer, carrier string
	reason, detail    string
	code              int
	wait              time.Duration
	waited            bool
}

// onInvite handles every INVITE: initial ones go through admission and
// pacing, in-dialog ones (re-INVITE, To tag set) are only forwarded.
func (p *Proxy) onInvite(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
	if to := req.To(); to != nil && to.Params.Has("tag") {
		p.forwardInDialog(req, tx)
		return
	}
	p.active.Add(1)
	defer p.active.Add(-1)

	ctx, cancel := context.WithCancelCause(p.base)
	defer cancel(nil)
	// A CANCEL from the INVITE's own source is answered 200 by the screen,
	// which then tells the call through its entry.
	entry, done := p.invites.claim(req)
	ctx = withDeciding(ctx, entry)
	entry.onCancel(func() { cancel(errCallCanceled) })
	tx.OnTerminate(func(string, error) { cancel(errTxTerminated) })

	c := &call{p: p, cfg: p.cfg(), req: req, tx: tx, ctx: ctx, log: p.log}
	// A forwarded call's transaction outlives the handler (send never
	// ends it): its copies go to sipgo, which absorbs them.
	defer func() { done(c.forwarded) }()
	c.run()
	c.endCall()
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
	src, ok := sourceAddr(req)
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
	c.peer = peer.Name
	c.oc = ocAsked(req.Via())
	c.respond(sipmsg.StatusTrying, "Trying")
	if c.log.Enabled(c.ctx, slog.LevelDebug) {
		c.log = c.log.With("call_id", callID(req), "peer", peer.Name)
	}

	if req.From() == nil || req.To() == nil || req.CallID() == nil {
		p.m.SIPErrors.WithLabelValues("malformed").Inc()
		c.reason = reasonMalformed
		c.respond(sipmsg.StatusBadRequest, "Bad Request")
		return
	}
	if mf := req.MaxForwards(); mf != nil && mf.Val() == 0 {
		c.reason = reasonTooManyHops
		c.respond(sipmsg.StatusTooManyHops, "Too Many Hops")
		return
	}
	if p.draining.Load() {
		c.refuse(metrics.OutcomeRejectedDrain, reasonDraining)
		c.respond(sipmsg.StatusServiceUnavailable, "Service Unavailable")
		return
	}

	// Customer: the header, if this peer may name it; else the peer's default.
	var cu *config.Customer
	if name := headerValue(req, cfg.CustomerHeader); name != "" {
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
	c.member = callID(req) + "/" + branch + "/" + req.Source() + "/" + req.Transport()

	route := cfg.Routes[cfg.RouteFor(peer, cu)]
	if p.routeDown(cfg, route) {
		// Refused before admission: the call costs its peer and customer
		// nothing, and never waits for a carrier known to be down.
		c.refuse(metrics.OutcomeRejectedDown, reasonRouteDown)
		c.detail = "route " + cfg.RouteFor(peer, cu)
		c.log.Debug("every carrier of the route is down", "route", cfg.RouteFor(peer, cu))
		c.respond(sipmsg.StatusServiceUnavailable, "No Carrier Available")
		return
	}
	if !c.admit(peer, cu) {
		return
	}
	if !c.occupyCalls(peer, cu) {
		return
	}
	c.route(route)
}

// admit runs the one admission store call for the peer and customer
// buckets. It answers the call and returns false when the call must stop.
func (c *call) admit(peer *config.Peer, cu *config.Customer) bool {
	p, cfg := c.p, c.cfg
	type scoped struct{ scope, name string }
	var buckets []admission.Bucket
	var names []scoped
	var owner []int // owner[i]: index in names of buckets[i]'s scope
	var gates []pacing.GateKey
	// scope is the metrics label (and limit override scope) of s.
	add := func(scope string, s *policy.Scoped) {
		cps, burst := p.limitsOf(scope, s.Name, s.CPS, s.Burst) // a live override wins
		if cps <= 0 {
			return // no limit configured for this scope
		}
		// With a burst, a token bucket replaces the 1 s window, and the
		// send gate (which holds sends to cps per rolling second) lets the
		// burst through: the scope promises burst then cps, not cps per
		// second. Extra windows follow the first bucket.
		bs := s.Buckets(cps, burst)
		buckets = append(buckets, bs...)
		if burst <= 0 {
			gates = append(gates, pacing.GateKey{Key: s.ID, CPS: cps})
		}
		for range bs {
			owner = append(owner, len(names))
		}
		names = append(names, scoped{scope, s.Name})
	}
	pol := policy.Of(cfg)
	add(metrics.ScopePeer, pol.Peer(peer))
	if cu != nil {
		add(metrics.ScopeCustomer, pol.Customer(cu))
	}
	if len(buckets) == 0 {
		return true
	}

	sctx, cancel := c.storeCtx()
	dec, err := p.adm.Admit(sctx, c.member, buckets)
	cancel()
	if err != nil {
		c.storeFailed("admission", err)
		return false
	}
	if dec.Duplicate {
		c.absorbDuplicate()
		return false
	}
	if dec.Admit {
		// Not when the store let the call through uncounted (fail-open):
		// holding it to limits nothing counted would turn the held calls
		// into 503s at the gate's deadline.
		if !cfg.Shadow && dec.Mode != admission.ModeOpen {
			c.gateKeys = gates
		}
		for _, n := range names {
			p.m.Admission.WithLabelValues(n.scope, n.name, metrics.ResultAdmitted).Inc()
		}
		return true
	}
	result := metrics.ResultRejected
	if cfg.Shadow {
		result = metrics.ResultShadowRejected
	}
	c.reason = reasonPeerCPS
	if dec.Refused >= 0 && dec.Refused < len(buckets) {
		n := names[owner[dec.Refused]]
		p.m.Admission.WithLabelValues(n.scope, n.name, result).Inc()
		if n.scope == metrics.ScopeCustomer {
			c.reason = reasonCustomerCPS
		}
		if b := buckets[dec.Refused]; b.RateMicros > 0 {
			c.detail = n.scope + " " + n.name + ": token bucket of " + strconv.Itoa(b.Limit) + " empty"
		} else {
			calls := " calls in "
			if b.Limit == 1 {
				calls = " call in "
			}
			c.detail = n.scope + " " + n.name + ": " + strconv.Itoa(b.Limit) + calls + b.Window.String()
		}
		if c.log.Enabled(c.ctx, slog.LevelDebug) {
			count := -1
			if dec.Refused < len(dec.Counts) {
				count = dec.Counts[dec.Refused]
			}
			b := buckets[dec.Refused]
			c.log.Debug("over cps limit", "scope", n.scope, "name", n.name, "bucket", b.Key,
				"limit", b.Limit, "window", b.Window,
				"count", count, "retry_after", dec.RetryAfter, "shadow", cfg.Shadow)
		}
	}
	if cfg.Shadow {
		c.reason, c.detail = "", ""
		return true
	}
	c.outcome = metrics.OutcomeRejectedCPS
	rej := cfg.SIP.Reject
	code, reason := rej.Code, rej.Reason
	if code < 300 || code > 699 {
		code = sipmsg.StatusServiceUnavailable
	}
	if reason == "" {
		reason = "CPS Limit Exceeded"
	}
	res := sipmsg.NewResponseFromRequest(c.req, code, reason, nil)
	if rej.RetryAfter > 0 {
		secs := int(math.Ceil(rej.RetryAfter.Seconds()))
		res.AppendHeader(sipmsg.NewHeader("Retry-After", strconv.Itoa(secs)))
	}
	c.send(res)
	return false
}

// route tries the carriers of the call's route in order: reserve a slot
// within max_wait, wait for it, forward; a full carrier or one failing
// before any provisional response above 100 passes the call to the next.
func (c *call) route(carriers []string) {
	p, cfg := c.p, c.cfg
	var lastFail *sipmsg.Response
	for i, name := range carriers {
		car := cfg.Carrier(name)
		if car == nil {
			continue
		}
		c.carrier = name
		if !p.health.Up(name) {
			// Down on this node: its slots are not taken.
			p.m.Reroutes.WithLabelValues(name, metrics.RerouteDown).Inc()
			c.skipped(name, "down")
			continue
		}
		if !c.occupyCarrier(car) {
			c.callsFull = true
			p.m.Reroutes.WithLabelValues(name, metrics.RerouteCallsFull).Inc()
			c.skipped(name, "max_calls full")
			continue
		}
		ticket, state, wait, err := p.awaitCarrier(c.ctx, c.log, cfg, car, c.member+"#"+strconv.Itoa(i), c.gateKeys)
		c.wait, c.waited = wait, true
		if state != carrierReady {
			c.releaseCarrier(car)
		}
		switch state {
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
		res, retry := c.forward(car, ticket)
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
	c.log.Debug("no carrier of the route could take the call in time", "carriers", len(carriers))
	c.respond(sipmsg.StatusServiceUnavailable, "No Carrier Available")
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

// send answers the INVITE. A final answer of the proxy's own to a call
// never forwarded ends the transaction at once (sent once, no
// retransmissions to a source that may be spoofed, no state kept); a
// retransmitted INVITE is then decided again.
func (c *call) send(res *sipmsg.Response) {
	if c.upstream == "" {
		c.upstream = res.Destination()
	}
	if res.StatusCode >= 300 && c.code == 0 {
		c.code = res.StatusCode
	}
	c.p.ocMark(c.oc, res.Via())
	if err := c.tx.Respond(res); err != nil {
		c.log.Debug("respond failed", "status", res.StatusCode, "error", err)
	}
	if res.StatusCode >= 300 && !c.forwarded {
		c.tx.Terminate()
	}
}

// relay passes a carrier's response upstream without the proxy's Via
// (res itself is changed, see relayResponse). An error means the caller
// could not be reached (e.g. its TCP connection is gone).
func (c *call) relay(res *sipmsg.Response) error {
	if c.upstream == "" {
		c.upstream = upstreamOf(c.req)
	}
	status := res.StatusCode
	out := relayResponse(res, c.upstream, c.req.Transport())
	c.p.ocRelay(c.oc, out.Via())
	err := c.tx.Respond(out)
	if err != nil {
		c.log.Debug("relay failed", "status", status, "error", err)
	}
	return err
}

// forward sends the INVITE to one carrier and relays its responses. retry
// reports that the carrier failed before any provisional response above 100
// (5xx, 408, timeout, transport error) and the next carrier may be tried;
// res is then the failure response, if any.
func (c *call) forward(car *config.Carrier, ticket pacing.Ticket) (res *sipmsg.Response, retry bool) {
	p := c.p
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
			peer:    leg{addr: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), tcp: c.req.Transport() == "TCP"},
			carrier: leg{addr: dest, tcp: target.transport == "TCP"},
		}
		// The current snapshot, not the call's: a call admitted before a
		// reload that changed sip.dialog_secret must not turn the keys back.
		token = p.keys.mint(p.cfg(), legs, callID(c.req), tagOf(c.req.From().Params))
	}
	target.host, target.hp = dest.Addr().String(), dest.String()
	if c.placed {
		// Bound before the INVITE leaves: a BYE that races the 2xx (the
		// carrier's, or a caller's right after it) finds the call.
		src, _ := netip.ParseAddrPort(c.req.Source())
		peerLeg := netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		p.calls.Bind(c.member, dialogID(callID(c.req), tagOf(c.req.From().Params), peerLeg))
	}
	// The carrier has car.Setup() to answer with a provisional response
	// above 100 (a 100 Trying alone does not count: a carrier that takes
	// calls and never rings them is as good as down), then the ring timer.
	hooks := &carrierHooks{c: c, car: car}
	l := &relayLeg{p: p, up: c, out: p.outboundInvite(c.cfg, c.req, target, token), ctx: c.ctx,
		setup: car.Setup(), ring: ringTimeout, carrier: hooks}
	if err := l.send(target); err != nil {
		c.log.Debug("forward failed", "carrier", car.Name, "error", err)
		if target.transport == "TCP" {
			// The carrier refused or did not take the connection. A UDP
			// send error is this node's (an INVITE too large for a
			// datagram, say): the peer's INVITE, not the carrier's health.
			p.calledCarrier(car.Name, false, "send: "+err.Error())
		}
		return nil, true
	}
	hooks.sentAt = time.Now()
	ticket.Sent(hooks.sentAt)
	if !c.forwarded {
		c.forwarded = true
		c.outcome = metrics.OutcomeForwarded
	}
	if c.log.Enabled(c.ctx, slog.LevelDebug) {
		c.log.With("carrier", car.Name).Debug("call forwarded")
	}
	return l.run()
}

// carrierHooks is what the leg of an initial INVITE to car tells its call
// (legCarrier).
type carrierHooks struct {
	c         *call
	car       *config.Carrier
	sentAt    time.Time
	setupSeen bool
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
		p.m.CarrierSetup.WithLabelValues(h.car.Name).Observe(time.Since(h.sentAt).Seconds())
	}
}

// reached marks the carrier healthy.
func (h *carrierHooks) reached() {
	p := h.c.p
	p.calledCarrier(h.car.Name, true, "")
	p.overloads.answered(h.car.Name, h.c.peer, false, time.Now())
}

// failed decides whether a failure before setup passes the call on: an
// overload answer (back-pressure), a 408 or a 5xx (the carrier failed).
func (h *carrierHooks) failed(r *sipmsg.Response) bool {
	c, car, p := h.c, h.car, h.c.p
	over := car.Adaptive && overloadAnswer(car, r)
	span, paused := retryAfter(r)
	if over || paused {
		// Back-pressure, not failure: health is untouched, the call tries
		// the next carrier. The pool slows down (an adaptive carrier's
		// AIMD cut) or pauses (Retry-After) only on evidence one peer
		// cannot make up by dialling numbers the carrier refuses
		// (evidence.go).
		if p.overloads.answered(car.Name, c.peer, true, time.Now()) {
			if over {
				p.pushBack(c.cfg, car, r.StatusCode)
			}
			if paused {
				p.blockCarrier(c.cfg, car, span)
			}
		}
		return true
	}
	if r.StatusCode == 408 || (r.StatusCode >= 500 && r.StatusCode < 600) {
		p.overloads.answered(car.Name, c.peer, false, time.Now())
		p.calledCarrier(car.Name, false, strconv.Itoa(r.StatusCode)+" "+phrase(r.Reason))
		return true
	}
	return false
}

// timedOut counts a carrier that did not ring within its setup timeout.
func (h *carrierHooks) timedOut() {
	h.c.p.m.CarrierResponses.WithLabelValues(h.car.Name, metrics.ClassTimeout).Inc()
	h.c.p.carrierTimedOut(h.car.Name, "no ringing within "+h.car.Setup().String())
}

// answering sets the call up: its places stay until its BYE (seen through
// Record-Route; the call was bound to its dialog when forwarded, and a BYE
// must name the callee's tag of this answer), its max duration or its
// expiry.
func (h *carrierHooks) answering(r *sipmsg.Response) {
	c := h.c
	if !c.placed {
		return
	}
	c.answered = true
	if to := r.To(); to != nil {
		c.p.calls.Answer(c.ctx, c.member, tagOf(to.Params))
	}
}

// lost undoes answering: the 2xx never reached the caller and the leg hung
// it up, so endCall frees the call's places.
func (h *carrierHooks) lost() { h.c.answered = false }

// maxRetryAfter caps the span a carrier's Retry-After blocks it for.
const maxRetryAfter = time.Hour

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

// blockCarrier stops the whole pool from sending car new calls for span
// (its overload answer's Retry-After): a blocking span in its slot set,
// which every node's next Reserve sees. It runs in the background, bounded
// by storeBudget; the call itself moves on to the next carrier at once.
func (p *Proxy) blockCarrier(cfg *config.Config, car *config.Carrier, span time.Duration) {
	pc := p.pacingCarrier(cfg, car)
	name := car.Name
	if !p.storeCalls.start("block:" + name) {
		return // one at a time per carrier: a flood of 503s is one block
	}
	go func() {
		defer p.storeCalls.done("block:" + name)
		defer p.panics.Recover("sip.block_carrier", nil)
		ctx, cancel := context.WithTimeout(p.base, storeBudget)
		defer cancel()
		if err := p.pacer.Block(ctx, pc, span); err != nil {
			p.log.Warn("carrier asked the pool to wait, but the store failed", "carrier", name, "retry_after", span.String(), "error", err)
			return
		}
		p.log.Info("carrier asked the pool to wait: no new calls to it until the span ends", "carrier", name, "retry_after", span.String())
	}()
}

// outboundInvite builds the INVITE forwarded to a carrier at target (an
// address) from the received req, which stays unchanged. A peer cannot
// steer it: every Route header goes (a carrier that loose-routes would
// otherwise send the call, trusted as cpsguard's, wherever the peer chose),
// so do the Request-URI's maddr and URI headers, and the headers of
// sip.strip_headers (by default the customer header: a carrier need not
// learn the operator's customers). The Request-URI is pointed at the
// carrier, Max-Forwards decremented, the upstream Vias folded (foldVias),
// and the proxy's Via and Record-Route (when sip.record_route, carrying
// the dialog token when token is not empty) added.
func (p *Proxy) outboundInvite(cfg *config.Config, req *sipmsg.Request, target target, token string) *sipmsg.Request {
	out := forwardCopy(req)
	for out.RemoveHeader("Route") {
	}
	for _, name := range stripHeaders(cfg) {
		for out.RemoveHeader(name) {
		}
	}
	out.Recipient.Host = target.host
	out.Recipient.Port = target.port
	out.Recipient.Headers = nil
	if out.Recipient.UriParams != nil {
		out.Recipient.UriParams.Remove("transport")
		out.Recipient.UriParams.Remove("maddr")
	}
	if target.transport == "TCP" {
		if out.Recipient.UriParams == nil {
			out.Recipient.UriParams = sipmsg.NewParams()
		}
		out.Recipient.UriParams.Add("transport", "tcp")
	}
	decMaxForwards(out)
	var buf [3]sipmsg.Header
	below := buf[:0]
	if v := foldVias(p, out); v != nil {
		below = append(below, v)
	}
	if cfg.SIP.RecordRoute {
		below = recordRoutes(below, p, req.Transport(), target.transport, token)
	}
	lo := prependVia(p, out, target.transport, below)
	out.SetTransport(target.transport)
	out.SetDestination(target.hostPort())
	out.Laddr = lo.laddr
	return out
}

// sourceAddr is the packet source of a request, never a header.
func sourceAddr(req *sipmsg.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(req.MessageData.Source())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// headerValue returns the trimmed value of the first header called name.
func headerValue(req *sipmsg.Request, name string) string {
	if name == "" {
		return ""
	}
	h := req.GetHeader(name)
	if h == nil {
		return ""
	}
	return strings.TrimSpace(h.Value())
}
