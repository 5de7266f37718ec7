package pacing

import (
	"context"
	"sync"
	"time"
)

// carrierView is what one Pacer knows of one carrier's pause and of its
// adaptive rate's last decrease, from every store reply it has seen:
// Acquire reads it, with no I/O, to skip a paused carrier at once and to
// check a slot again just before the send.
type carrierView struct {
	// pause is the pause in force as last learned (Until and Since on the
	// Pacer's clock); Paused false: none known.
	pause Pause
	// stamp is when the operation that taught pause started: a reply to an
	// older one does not undo what a newer one taught.
	stamp time.Time
	// cutAt is the store's time of the last removal of the carrier's
	// future slots (an adaptive decrease, or a respace for a lowered
	// limit; zero: none); rate is the rate in force since (the effective
	// rate an adaptive read or decrease left, or the limit of the last
	// respace; 0: unknown).
	cutAt time.Time
	rate  float64
}

// views holds the carrierViews of a Pacer by slot-set key. It holds one
// entry per carrier key the Pacer has been asked about (configured
// carriers), never more.
type views struct {
	mu sync.RWMutex
	m  map[string]*carrierView
}

func (v *views) get(key string) *carrierView {
	if v.m == nil {
		v.m = map[string]*carrierView{}
	}
	cv := v.m[key]
	if cv == nil {
		cv = &carrierView{}
		v.m[key] = cv
	}
	return cv
}

// learn records st, the outcome of an operation on key's pause started at
// stamp, unless a newer one was learned already.
func (v *views) learn(key string, st Pause, stamp time.Time) {
	if !st.Paused {
		// The common case, every reservation of a carrier never paused:
		// nothing to forget, no write.
		v.mu.RLock()
		cv := v.m[key]
		idle := cv == nil || !cv.pause.Paused
		v.mu.RUnlock()
		if idle {
			return
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	cv := v.get(key)
	if stamp.Before(cv.stamp) {
		return
	}
	cv.stamp = stamp
	if !st.Paused {
		cv.pause = Pause{}
		return
	}
	if st.Reason == "" && cv.pause.Paused {
		// A reservation refused as paused says how long, not why.
		st.Reason, st.Since = cv.pause.Reason, cv.pause.Since
	}
	st.Changed = false
	cv.pause = st
}

// cut records a's outcome on key's rate.
func (v *views) cut(key string, r Rate) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cv := v.get(key)
	if r.CutAt.After(cv.cutAt) {
		cv.cutAt = r.CutAt
	}
	cv.rate = r.CPS
}

// of returns a copy of key's view.
func (v *views) of(key string) carrierView {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if cv := v.m[key]; cv != nil {
		return *cv
	}
	return carrierView{}
}

// onClock sets st's Until and Since on the Pacer's clock from its Left
// and Age.
func (p *Pacer) onClock(st Pause) Pause {
	if st.Paused || st.Changed {
		now := p.clock.Now()
		st.Until, st.Since = now.Add(st.Left), now.Add(-st.Age)
	}
	return st
}

// pauseOp runs one operation on c's pause and learns its outcome.
func (p *Pacer) pauseOp(c Carrier, op func() (Pause, error)) (Pause, error) {
	start := p.clock.Now()
	st, err := op()
	if err != nil {
		return Pause{}, err
	}
	st = p.onClock(st)
	p.views.learn(c.Key, st, start)
	return st, nil
}

// Pause stops every node of the pool from getting a slot of carrier c for
// span from now (its 503 with Retry-After; see SlotStore.Pause): calls go
// to the next carrier of their route at once, and this node's calls
// already holding a slot of c do not send (Acquire). reason says why, for
// operators.
func (p *Pacer) Pause(ctx context.Context, c Carrier, span time.Duration, reason string) (Pause, error) {
	return p.pauseOp(c, func() (Pause, error) { return p.store.Pause(ctx, c.Key, span, reason) })
}

// Paused reads carrier c's pause from the store (and teaches this node).
func (p *Pacer) Paused(ctx context.Context, c Carrier) (Pause, error) {
	return p.pauseOp(c, func() (Pause, error) { return p.store.Paused(ctx, c.Key) })
}

// ProbeDone ends the half-open probe of member (a Ticket with Probe set):
// ok, the carrier answered the call, ends c's pause for the pool; not ok
// lets the next call try.
func (p *Pacer) ProbeDone(ctx context.Context, c Carrier, member string, ok bool) (Pause, error) {
	return p.pauseOp(c, func() (Pause, error) { return p.store.ProbeDone(ctx, c.Key, member, ok) })
}

// OpenPause ends the span of c's pause, if it is at least minAge old, so
// that one call tries the carrier (its OPTIONS probe, sent minAge ago, was
// answered).
func (p *Pacer) OpenPause(ctx context.Context, c Carrier, minAge time.Duration) (Pause, error) {
	return p.pauseOp(c, func() (Pause, error) { return p.store.OpenPause(ctx, c.Key, minAge) })
}

// Unpause ends c's pause for the pool (an operator's request); the Pause
// returned is the one that ended (Changed false: there was none).
func (p *Pacer) Unpause(ctx context.Context, c Carrier) (Pause, error) {
	return p.pauseOp(c, func() (Pause, error) { return p.store.Unpause(ctx, c.Key) })
}

// LocalPause is what this node knows of c's pause, without I/O: learned
// from the store's replies to its own calls and from Paused.
func (p *Pacer) LocalPause(c Carrier) Pause {
	return p.views.of(c.Key).pause
}

// Evidence records that peer called carrier c (overload: and got an
// overload answer) and returns how many peers of the pool did within w.
func (p *Pacer) Evidence(ctx context.Context, c Carrier, peer string, overload bool, w EvidenceWindows) (Evidence, error) {
	return p.store.Evidence(ctx, c.Key, peer, overload, w)
}
