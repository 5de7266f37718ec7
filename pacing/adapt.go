package pacing

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/cpsguard/cpsguard/lua"
)

// AIMD says how an adaptive carrier's effective rate moves: an overload
// answer multiplies it by Decrease (at most once per Hold, never below
// Min); it climbs back by Increase per second, never above Max.
type AIMD struct {
	// Max is the carrier's configured cps (> 0).
	Max float64
	// Min is the floor (0 < Min <= Max).
	Min float64
	// Decrease is the factor of one decrease (0 < Decrease < 1).
	Decrease float64
	// Increase is the cps added per second (> 0).
	Increase float64
	// Hold is the least time between two decreases: the answers to calls
	// sent at the old rate arrive together and must cut it once.
	Hold time.Duration
}

// DefaultHold is the Hold the proxy uses: about one setup time of a
// carrier, so one burst of overload answers is one decrease.
const DefaultHold = time.Second

// Rate is an adaptive carrier's effective rate, as the store decided it.
type Rate struct {
	// CPS is the effective rate now (Min..Max).
	CPS float64
	// Cut reports that this call decreased it.
	Cut bool
	// CutAt is the store's time of the last decrease (zero: none
	// remembered): a slot reserved before it (Slot.At) was spaced for a
	// higher rate.
	CutAt time.Time
}

// milli is the integer form of an AIMD both stores compute with, so that
// Redis and the in-process store decide alike to the milli-cps.
func (a AIMD) milli(overload bool) (lua.RateArgs, error) {
	if !(a.Max > 0) || !(a.Min > 0) || a.Min > a.Max || !(a.Decrease > 0 && a.Decrease < 1) || !(a.Increase > 0) || a.Hold < 0 ||
		math.IsInf(a.Max, 0) || math.IsInf(a.Increase, 0) {
		return lua.RateArgs{}, fmt.Errorf("pacing: invalid AIMD %+v", a)
	}
	r := lua.RateArgs{
		MaxM:             max(int64(math.Floor(a.Max*1000)), 1),
		MinM:             max(int64(math.Ceil(a.Min*1000)), 1),
		DecreasePermille: min(max(int64(math.Round(a.Decrease*1000)), 1), 999),
		IncreaseM:        max(int64(math.Round(a.Increase*1000)), 1),
		HoldUS:           lua.Micros(a.Hold),
		Overload:         overload,
	}
	r.MinM = min(r.MinM, r.MaxM)
	return r, nil
}

// Adapt returns the effective rate of the adaptive carrier c (its slot set
// key names it), first decreasing it when overload: the carrier answered a
// call with an overload answer. Pool-wide on Redis; an error means the
// store failed.
// A decrease makes this node's calls holding slots reserved before it take
// a slot again at the new rate before they send (Acquire).
func (p *Pacer) Adapt(ctx context.Context, c Carrier, a AIMD, overload bool) (Rate, error) {
	r, err := p.store.Adapt(ctx, c.Key, a, overload)
	if err != nil {
		return r, err
	}
	p.views.cut(c.Key, r)
	return r, nil
}
