package sip

import (
	"context"
	"math"
	"strconv"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/policy"
)

// CallPlaces holds the max_calls places of the calls this node sets up.
// *callplaces.Tracker satisfies it.
type CallPlaces interface {
	// Occupy takes member's places, all or none; places may be added to
	// a call that holds some.
	Occupy(ctx context.Context, member string, places []callplaces.Place) (callplaces.Decision, error)
	// Release frees some of member's places (a carrier left for the next).
	Release(ctx context.Context, member string, keys []string)
	// Bind binds member to its dialog, for EndDialog. The proxy names a
	// dialog by its call key (ends.go: a hash of the Call-ID, the caller's
	// From tag and the peer leg, all covered by the dialog token), so one
	// peer's BYE cannot end another call that reuses its Call-ID and tag;
	// the callee's tag, which only the answer gives, is matched by the
	// tracker (Answer, EndDialog).
	Bind(member, dialog string)
	// End frees every place of member.
	End(ctx context.Context, member string)
	// Answer records the callee's tag of member's answer; true when an
	// earlier BYE naming it ended the call now.
	Answer(ctx context.Context, member, calleeTag string) bool
	// EndDialog ends the call of dialog answered with calleeTag (by says
	// who sent the BYE); false when none (a BYE naming another tag frees
	// nothing).
	EndDialog(ctx context.Context, dialog, calleeTag, by string) bool
	// Track remembers a forwarded call (places or not) with its listing
	// for the pool and the proxy's data.
	Track(member string, info callplaces.Live, data any)
	// Find returns the live calls of a Call-ID; FindDialog those bound to
	// a dialog.
	Find(callID string) []callplaces.Found
	FindDialog(dialog string) []callplaces.Found
	// EndAs ends a call on the node's own account (an operator's end).
	EndAs(ctx context.Context, member, reason, by string) bool
	// SetOnEnd sets who is told of the calls ended by a BYE, the maximum
	// duration, EndAs or Shutdown.
	SetOnEnd(f func(callplaces.Ended))
	// Shutdown ends every call (the node stops supervising them).
	Shutdown(ctx context.Context)
}

// occupyCalls takes the call's peer and customer places (max_calls). It
// answers the call and returns false when the call must stop.
func (c *call) occupyCalls(peer *config.Peer, cu *config.Customer) bool {
	p, cfg := c.p, c.cfg
	var places []callplaces.Place
	var reasons []string
	if peer.MaxCalls > 0 {
		places = append(places, callplaces.Place{Key: policy.Of(cfg).Peer(peer).CallsKey, Limit: peer.MaxCalls})
		reasons = append(reasons, reasonPeerCalls)
	}
	if cu != nil && cu.MaxCalls > 0 {
		places = append(places, callplaces.Place{Key: policy.Of(cfg).Customer(cu).CallsKey, Limit: cu.MaxCalls})
		reasons = append(reasons, reasonCustomerCalls)
	}
	if len(places) == 0 {
		return true
	}
	sctx, cancel := c.storeCtx()
	t0 := time.Now()
	d, err := p.calls.Occupy(sctx, c.member, places)
	c.admissionWait += time.Since(t0)
	cancel()
	if err != nil {
		c.storeFailed("max_calls", err)
		return false
	}
	if d.Duplicate {
		// Another transaction of the same call attempt holds the places.
		c.absorbDuplicate()
		return false
	}
	if d.Admit {
		c.placed = true
		return true
	}
	reason := reasonPeerCalls
	if d.Refused >= 0 && d.Refused < len(reasons) {
		reason = reasons[d.Refused]
	}
	c.log.Debug("over max_calls", "reason", reason, "shadow", cfg.Shadow)
	if cfg.Shadow {
		return true
	}
	c.rejectCalls(reason)
	return false
}

// occupyCarrier takes the carrier's max_calls place before the call waits
// for the carrier's send slot: a carrier at its limit is skipped at once,
// like a full pacing queue, and two nodes never send it more than its
// limit together. It reports false when the carrier is full; a store
// failure lets the call through (the places of peers and customers were
// taken; a carrier's limit is its own to enforce too).
func (c *call) occupyCarrier(car *config.Carrier) bool {
	if car.MaxCalls <= 0 || c.cfg.Shadow {
		return true
	}
	sctx, cancel := c.storeCtx()
	d, err := c.p.calls.Occupy(sctx, c.member, []callplaces.Place{{Key: policy.Of(c.cfg).Carrier(car).CallsKey, Limit: car.MaxCalls}})
	cancel()
	if err != nil {
		c.log.Debug("max_calls store failed for a carrier", "carrier", car.Name, "error", err)
		return true
	}
	if d.Admit {
		c.placed = true
		return true
	}
	return false
}

// releaseCarrier frees the carrier's place of a call leaving it for the
// next carrier.
func (c *call) releaseCarrier(car *config.Carrier) {
	if car.MaxCalls <= 0 || !c.placed {
		return
	}
	c.p.calls.Release(c.ctx, c.member, []string{policy.Of(c.cfg).Carrier(car).CallsKey})
}

// rejectCalls answers a call refused by max_calls with sip.reject_calls.
func (c *call) rejectCalls(reason string) {
	c.refuse(metrics.OutcomeRejectedCalls, reason)
	rej := c.cfg.SIP.RejectCalls
	code, reason := rej.Code, rej.Reason
	if code < 300 || code > 699 {
		code = sipmsg.StatusServiceUnavailable
	}
	if reason == "" {
		reason = "Call Limit Exceeded"
	}
	res := sipmsg.NewResponseFromRequest(c.req, code, reason, nil)
	if rej.RetryAfter > 0 {
		res.AppendHeader(sipmsg.NewHeader("Retry-After", strconv.Itoa(int(math.Ceil(rej.RetryAfter.Seconds())))))
	}
	c.send(res)
}

// endCall ends a call that was not answered (refused, cancelled, failed,
// or hung up by the proxy): its places are freed and it is listed no
// more. An answered call lives on until its BYE, its max duration, an
// operator's end or the node's shutdown.
func (c *call) endCall() {
	if (c.placed || c.lc != nil) && !c.answered {
		c.p.calls.End(c.ctx, c.member)
	}
}
