package sip

import (
	"context"
	"errors"
	"strings"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
)

// carrierAt returns the carrier of cfg whose URI names t's host (the one
// with t's port too when several share the host), or nil when t is no
// carrier's address.
func carrierAt(cfg *config.Config, t target) *config.Carrier {
	var byHost *config.Carrier
	for i, ct := range carrierTargets(cfg) {
		if ct.err != nil || !strings.EqualFold(ct.t.host, t.host) {
			continue
		}
		if ct.t.port == t.port {
			return &cfg.Carriers[i]
		}
		if byHost == nil {
			byHost = &cfg.Carriers[i]
		}
	}
	return byHost
}

// paceInDialog holds a re-INVITE bound for carrier car until the carrier
// has room: a pacing slot within its max_wait and the send gate, as for a
// new call. A carrier counts its CPS on every INVITE it receives, so a
// re-INVITE takes a slot like any call; without this, re-INVITEs of
// answered calls (a valid dialog token can be reused for its Call-ID) could
// reach a carrier beyond its cps. ok false means the request must not be
// sent (carrier full or store failed) and is answered 503 by the caller;
// otherwise the returned ticket is stamped once the request has left.
func (p *Proxy) paceInDialog(cfg *config.Config, car *config.Carrier, req *sipmsg.Request) (gateTicket, bool) {
	if car.CPS <= 0 {
		return gateTicket{}, true
	}
	ctx, cancel := context.WithTimeout(p.base, car.MaxWait+storeBudget)
	defer cancel()
	branch := ""
	if v := req.Via(); v != nil && v.Params != nil {
		branch, _ = v.Params.Get("branch")
	}
	pc := pacing.Carrier{Key: lua.Key(cfg.Store.KeyPrefix, metrics.ScopeCarrier, car.Name), CPS: car.CPS, MaxWait: car.MaxWait}
	slot, err := p.pacer.Reserve(ctx, pc, "reinvite:"+callID(req)+":"+branch)
	if err != nil {
		p.log.Debug("pacing store failed for a re-INVITE", "carrier", car.Name, "call_id", callID(req), "error", err)
		return gateTicket{}, false
	}
	if !slot.OK {
		p.m.Pacing.WithLabelValues(car.Name, metrics.PacingFull).Inc()
		return gateTicket{}, false
	}
	p.m.Pacing.WithLabelValues(car.Name, metrics.PacingPaced).Inc()
	p.m.PacingWait.WithLabelValues(car.Name).Observe(slot.Wait.Seconds())
	queued := p.m.Queued.WithLabelValues(car.Name)
	queued.Inc()
	err = p.pacer.Wait(ctx, slot)
	queued.Dec()
	if err != nil {
		return gateTicket{}, false
	}
	deadline := slot.Due().Add(max(car.MaxWait-slot.Wait, 0))
	ticket, err := p.gate.wait(ctx, []gateKey{{metrics.ScopeCarrier + ":" + car.Name, car.CPS}}, deadline)
	if err != nil {
		if errors.Is(err, errGateFull) {
			rctx, rcancel := context.WithTimeout(context.Background(), storeBudget)
			_ = p.pacer.Release(rctx, slot)
			rcancel()
		}
		return gateTicket{}, false
	}
	return ticket, true
}

// sentAt stamps a gate ticket with the time its request left.
func (p *Proxy) sentAt(t gateTicket) { p.gate.sent(t, time.Now()) }
