package pacing

import (
	"context"
	"sync"
	"time"
)

// Respace tells the pacer that carrier c is held to a new limit from now
// on (a reload, a live override): c.CPS is the rate its calls are paced
// at, gate the carrier's send-gate key at its new limit. Every call of
// this node reserves at c.CPS from then on, whatever rate it started with,
// and passes the gate at gate.CPS. When lowered, the slots this node's
// waiting calls hold in the future are removed from the store (theirs
// only, SlotStore.Respace), and those calls take a slot again at c.CPS
// before they send (Acquire), so the carrier does not see the old rate
// for up to max_wait. A raise makes no store call. An error means the
// store failed: the calls keep their slots, and the caller tries again.
func (p *Pacer) Respace(ctx context.Context, c Carrier, gate GateKey, lowered bool) error {
	if Interval(c.CPS) <= 0 {
		return errInterval(c.Key, Interval(c.CPS))
	}
	// First the rate and the gate, so that a reservation made while the
	// store removes the slots is spaced for the new limit already.
	p.views.setRate(c.Key, c.CPS)
	p.gate.setLimit(gate)
	if !lowered {
		return nil
	}
	at, err := p.store.Respace(ctx, c.Key, p.waiting.members(c.Key))
	if err != nil {
		return err
	}
	p.views.cutAt(c.Key, at)
	return nil
}

// setRate records cps as key's rate in force.
func (v *views) setRate(key string, cps float64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.get(key).rate = cps
}

// cutAt records at as the store's time of a removal of key's future slots
// (slots decided before it were spaced for a higher rate).
func (v *views) cutAt(key string, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cv := v.get(key); at.After(cv.cutAt) {
		cv.cutAt = at
	}
}

// waitingCalls holds, per carrier slot-set key, the members of this node's
// calls inside Acquire (reserving, or waiting for a slot or the gate):
// the slots a respace of this node removes. Keys are configured carriers';
// a key's set holds the calls waiting at once.
type waitingCalls struct {
	mu sync.Mutex
	m  map[string]map[string]struct{}
}

// add records member as waiting for key's carrier.
func (w *waitingCalls) add(key, member string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]map[string]struct{}{}
	}
	set := w.m[key]
	if set == nil {
		set = map[string]struct{}{}
		w.m[key] = set
	}
	set[member] = struct{}{}
}

// remove forgets member. Its key's set stays, empty, for the next call
// (one per carrier ever asked for).
func (w *waitingCalls) remove(key, member string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m[key], member)
}

// members returns the members waiting for key's carrier now.
func (w *waitingCalls) members(key string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.m[key]))
	for m := range w.m[key] {
		out = append(out, m)
	}
	return out
}
