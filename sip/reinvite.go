package sip

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
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
)

// awaitCarrier waits until a send to car may go: it reserves the carrier's
// next pacing slot within max_wait, waits for it, then passes the send
// gate for the carrier and for keys (the call's admission limits), the
// whole wait within max_wait. On carrierReady the returned ticket is
// stamped once the request has left; err is set with carrierStoreFailed.
// wait is the slot's wait: granted, or the one refused as too long.
// It updates the pacing metrics; log gets a debug line for a full carrier.
func (p *Proxy) awaitCarrier(ctx context.Context, log *slog.Logger, cfg *config.Config, car *config.Carrier, member string, keys []gateKey) (ticket gateTicket, state carrierState, wait time.Duration, err error) {
	pc := p.pacingCarrier(cfg, car)
	start := time.Now()
	var slot pacing.Slot
	for late := 0; ; late++ {
		// No deadline here: the Pacer shortens max_wait to a context's
		// deadline. The store bounds its own round trip
		// (store.redis.timeout). A slot taken again after a late wake
		// must still fit in what is left of max_wait.
		try := pc
		try.MaxWait = max(pc.MaxWait-time.Since(start), 0)
		slot, err = p.pacer.Reserve(ctx, try, member)
		decided(ctx) // what remains is a timer and a send: no longer in flight
		if err != nil {
			if ctx.Err() != nil {
				return gateTicket{}, carrierStopped, 0, nil
			}
			return gateTicket{}, carrierStoreFailed, 0, err
		}
		if !slot.OK {
			p.m.Pacing.WithLabelValues(car.Name, metrics.PacingFull).Inc()
			log.Debug("carrier full", "carrier", car.Name, "wait", slot.Wait, "max_wait", car.MaxWait)
			return gateTicket{}, carrierFull, slot.Wait, nil
		}
		p.m.Pacing.WithLabelValues(car.Name, metrics.PacingPaced).Inc()
		p.m.PacingWait.WithLabelValues(car.Name).Observe(slot.Wait.Seconds())

		queued := p.m.Queued.WithLabelValues(car.Name)
		queued.Inc()
		err = p.pacer.Wait(ctx, slot)
		queued.Dec()
		if err == nil && ctx.Err() != nil {
			// Cancelled as the slot came due: give the slot back, do not send.
			err = ctx.Err()
			p.release(slot)
		}
		if err != nil {
			return gateTicket{}, carrierStopped, slot.Wait, nil
		}
		// Slots are spaced so that a send up to pacing.MaxLate after its
		// slot keeps the carrier within its cps in every rolling second; a
		// node that woke later (a starved scheduler) would break that
		// promise for the whole pool. The slot is missed: give it back and
		// take the next one, a few times at most, then the carrier counts
		// as full for this call.
		if time.Since(slot.Due()) <= pacing.MaxLate {
			break
		}
		p.release(slot)
		p.m.Pacing.WithLabelValues(car.Name, metrics.PacingLate).Inc()
		log.Debug("woke too late for the slot: taking the next", "carrier", car.Name, "late", time.Since(slot.Due()))
		if late == maxLateWakes-1 {
			return gateTicket{}, carrierFull, slot.Wait, nil
		}
	}
	// The whole wait (slots, then gate) stays within max_wait.
	deadline := start.Add(car.MaxWait)
	ticket, err = p.gate.wait(ctx, append(keys, gateKey{metrics.ScopeCarrier + ":" + car.Name, p.carrierCPS(car)}), deadline)
	switch {
	case errors.Is(err, errGateFull):
		// This node already sent the carrier's limit within the window:
		// treat it as full and give the slot back.
		p.release(slot)
		return gateTicket{}, carrierFull, slot.Wait, nil
	case err != nil:
		return gateTicket{}, carrierStopped, slot.Wait, nil
	}
	return ticket, carrierReady, slot.Wait, nil
}

// maxLateWakes bounds the slots one call may miss by waking too late
// before it gives up on the carrier.
const maxLateWakes = 3

// release gives back a slot that will not be used, bounded by storeBudget
// whatever the call's context.
func (p *Proxy) release(slot pacing.Slot) {
	ctx, cancel := context.WithTimeout(context.Background(), storeBudget)
	_ = p.pacer.Release(ctx, slot)
	cancel()
}
