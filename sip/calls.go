package sip

import (
	"context"
	"slices"
	"time"

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
	// DialogCalls counts the live calls bound to dialog.
	DialogCalls(dialog string) int
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

// occupyCalls takes the call's peer, customer and destination places
// (max_calls), all or none. A shadowed limit's full place is left out (the
// call goes on without it, logged at Debug); a priority call takes every
// place past its limit (priorityPlace). It answers the call and returns
// false when the call must stop.
func (c *call) occupyCalls(peer *config.Peer, cu *config.Customer, dest *policy.Destination) bool {
	p, pol := c.p, policy.Of(c.cfg)
	var places []callplaces.Place
	var limits []limitRef
	add := func(l limitRef, s *policy.Scoped) {
		if s.MaxCalls <= 0 {
			return
		}
		limit := s.MaxCalls
		if c.priority != "" {
			limit = priorityPlace
		}
		places = append(places, callplaces.Place{Key: s.CallsKey, Limit: limit})
		limits = append(limits, l)
	}
	add(limitRef{scope: metrics.ScopePeer, name: peer.Name, shadow: pol.Peer(peer).Shadow, reject: peer.Reject,
		outcome: metrics.OutcomeRejectedCalls, reason: reasonPeerCalls}, pol.Peer(peer))
	if cu != nil {
		s := pol.Customer(cu)
		add(limitRef{scope: metrics.ScopeCustomer, name: cu.Name, shadow: s.Shadow, reject: cu.Reject,
			outcome: metrics.OutcomeRejectedCalls, reason: reasonCustomerCalls}, s)
	}
	if dest != nil {
		add(limitRef{scope: metrics.ScopeDestination, name: dest.Name, shadow: dest.Shadow, reject: dest.Reject,
			outcome: metrics.OutcomeRejectedDestination, reason: reasonDestinationCalls}, &dest.Scoped)
	}
	// Each round either takes every place left or drops a shadowed full
	// one: at most one round per place, and one more.
	for len(places) > 0 {
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
		i := d.Refused
		if i < 0 || i >= len(limits) {
			i = 0
		}
		l := limits[i]
		c.log.Debug("over max_calls", "reason", l.reason, "shadow", l.shadow)
		if l.shadow {
			// A would-be refusal of the scope, as its windows count theirs.
			p.m.Admission.WithLabelValues(l.scope, l.name, metrics.ResultShadowRejected).Inc()
		} else {
			c.refuse(l.outcome, l.reason)
			c.sendReject(l.reject, c.cfg.SIP.RejectCalls, "Call Limit Exceeded")
			return false
		}
		places = slices.Delete(places, i, i+1)
		limits = slices.Delete(limits, i, i+1)
	}
	return true
}

// occupyCarrier takes the carrier's max_calls place before the call waits
// for the carrier's send slot: a carrier at its limit is skipped at once,
// like a full pacing queue, and two nodes never send it more than its
// limit together. It reports false when the carrier is full; a store
// failure lets the call through (the places of peers and customers were
// taken; a carrier's limit is its own to enforce too). A priority call
// takes its place past the limit.
func (c *call) occupyCarrier(car *config.Carrier) bool {
	if car.MaxCalls <= 0 || c.cfg.Shadow {
		return true
	}
	limit := car.MaxCalls
	if c.priority != "" {
		limit = priorityPlace
	}
	sctx, cancel := c.storeCtx()
	d, err := c.p.calls.Occupy(sctx, c.member, []callplaces.Place{{Key: policy.Of(c.cfg).Carrier(car).CallsKey, Limit: limit}})
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

// rejectCalls answers a call refused by a carrier's max_calls (every
// carrier of its route full) with sip.reject_calls.
func (c *call) rejectCalls(reason string) {
	c.refuse(metrics.OutcomeRejectedCalls, reason)
	c.sendReject(nil, c.cfg.SIP.RejectCalls, "Call Limit Exceeded")
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
