package sip

import (
	"context"
	"log/slog"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// carrierState is how waiting for a carrier ended (awaitCarrier).
type carrierState int

const (
	// carrierReady: the slot is due and the gate let the send through.
	carrierReady carrierState = iota
	// carrierFull: no slot within max_wait, or the gate would hold the send
	// past it (the slot is given back).
	carrierFull
	// carrierStopped: ctx ended first (the slot, if any, is given back).
	carrierStopped
	// carrierStoreFailed: the pacing store failed.
	carrierStoreFailed
	// carrierPaused: the carrier is paused (its Retry-After): no slot, or
	// the slot given back just before the send.
	carrierPaused
)

// awaitCarrier waits until a send to car may go (pacing.Pacer.Acquire: the
// carrier's slot within max_wait, on pc, car's slots as the call draws on
// them (pacingOf: the share of its peer or customer), then the send gate
// for the carrier, gate, and for keys, the call's admission limits); a paused carrier is
// carrierPaused, at once or when it paused while the call waited. On
// carrierReady the returned ticket is stamped once the request has left;
// err is set with carrierStoreFailed. wait is the slot's wait: granted, or
// the one refused as too long. It updates the pacing metrics (names and
// labels are sip's, from the Trace); log gets a debug line for a full or
// paused carrier and for a late wake.
func (p *Proxy) awaitCarrier(ctx context.Context, log *slog.Logger, car *config.Carrier, pc pacing.Carrier, gate pacing.GateKey, member string, keys []pacing.GateKey, first *pacing.First) (ticket pacing.Ticket, state carrierState, wait time.Duration, err error) {
	trace := &paceTrace{ctx: ctx, log: log, p: p, car: car}
	keys = append(keys, gate)
	pc.First = first
	ticket, err = p.pacer.Acquire(ctx, pc, member, trace, keys...)
	switch {
	case err != nil && ctx.Err() != nil:
		// Not the store: the caller cancelled, the transaction ended or
		// the proxy is shutting down.
		return ticket, carrierStopped, ticket.Wait, nil
	case err != nil:
		return ticket, carrierStoreFailed, ticket.Wait, err
	case ticket.Paused:
		return ticket, carrierPaused, ticket.Wait, nil
	case !ticket.OK:
		return ticket, carrierFull, ticket.Wait, nil
	}
	return ticket, carrierReady, ticket.Wait, nil
}

// pacingOf is car's slot set as a call of peer and customer draws on it
// (its share), and its send gate key.
func (p *Proxy) pacingOf(cfg *config.Config, car *config.Carrier, peer, customer string) (pacing.Carrier, pacing.GateKey) {
	pc, gate := p.carriers.Pacing(cfg, car)
	pc.Share = shareOf(cfg, car, peer, customer)
	return pc, gate
}

// shareOf is the share of car's slots a call of peer (and of customer, ""
// for none) draws on, by the carrier's share_by: the customer's, or the
// peer's (share_by peer, or a call without a customer), or none
// (share_by none: first come, first served). Shares are named by the
// policy's scope IDs ("customer:acme").
func shareOf(cfg *config.Config, car *config.Carrier, peer, customer string) pacing.Share {
	by := car.Sharing()
	if by == config.ShareByNone {
		return pacing.Share{}
	}
	pol := policy.Of(cfg)
	if by == config.ShareByCustomer && customer != "" {
		if cu := cfg.Customer(customer); cu != nil {
			return pacing.Share{Name: pol.Customer(cu).ID, Weight: cu.ShareWeight()}
		}
	}
	if pe := cfg.Peer(peer); pe != nil {
		return pacing.Share{Name: pol.Peer(pe).ID, Weight: pe.ShareWeight()}
	}
	return pacing.Share{}
}

// paceTrace counts and logs one Acquire for awaitCarrier (the pacing
// metrics, by carrier). One value per call attempt: a pacing.Trace of
// closures cost five allocations.
type paceTrace struct {
	ctx context.Context
	log *slog.Logger
	p   *Proxy
	car *config.Carrier
}

var _ pacing.Tracer = (*paceTrace)(nil)

func (t *paceTrace) TraceReserved(slot pacing.Slot, failed error) {
	p, car := t.p, t.car
	decided(t.ctx) // what remains is a timer and a send: no longer in flight
	switch {
	case failed != nil:
	case slot.Paused:
		p.m.Pacing.WithLabelValues(car.Name, metrics.PacingPaused).Inc()
		t.log.Debug("carrier paused", "carrier", car.Name, "left", slot.Wait)
	case !slot.OK:
		p.m.Pacing.WithLabelValues(car.Name, metrics.PacingFull).Inc()
		t.log.Debug("carrier full", "carrier", car.Name, "wait", slot.Wait, "max_wait", car.MaxWait)
	default:
		p.m.Pacing.WithLabelValues(car.Name, metrics.PacingPaced).Inc()
		p.m.PacingWait.WithLabelValues(car.Name).Observe(slot.Wait.Seconds())
	}
}

func (t *paceTrace) TraceQueued(delta int) {
	t.p.m.Queued.WithLabelValues(t.car.Name).Add(float64(delta))
}

func (t *paceTrace) TraceLate(_ pacing.Slot, late time.Duration) {
	t.p.m.Pacing.WithLabelValues(t.car.Name, metrics.PacingLate).Inc()
	t.log.Debug("woke too late for the slot: taking the next", "carrier", t.car.Name, "late", late)
}

func (t *paceTrace) TracePaused(pacing.Slot) {
	t.p.m.Pacing.WithLabelValues(t.car.Name, metrics.PacingPaused).Inc()
	t.log.Debug("carrier paused while the call waited: slot given back", "carrier", t.car.Name)
}
