package pacing

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"time"
)

// Respace tells the pacer that carrier c is held to a new limit from now
// on (a reload, a live override): c.CPS is the rate its calls are paced
// at, gate the carrier's send-gate key at its new limit. Every call of
// this node reserves at c.CPS from then on, whatever rate it started with,
// and passes the gate at gate.CPS. When lowered, the slots this Pacer's
// members (MemberOf) hold in the future are removed from the store
// (theirs only, SlotStore.Respace): its calls waiting for one take a slot
// again at c.CPS before they send (Acquire), so the carrier does not see
// the old rate for up to max_wait, and a slot reserved with a call's
// admission, or a priority call's place, no longer holds the old queue's
// tail for the calls that come next. A raise makes no store call. An
// error means the store failed (the rate and the gate are the new ones
// already, the calls waiting keep their slots, and the caller tries
// again), or c.CPS is not positive (nothing changed).
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
	at, err := p.store.Respace(ctx, c.Key, p.tag)
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

// MemberOf is the store member of a call's attempt-th carrier attempt
// (call: unique per call on this node): the call's, behind this Pacer's
// own prefix, so that a respace removes this process's slots only.
func (p *Pacer) MemberOf(call string, attempt int) string {
	return p.tag + call + "#" + strconv.Itoa(attempt)
}

// newTag returns a Pacer's member prefix: random, so that two processes
// (a restart, two nodes under one node id) never share one.
func newTag() string {
	return "p" + rand.Text()[:12] + "~"
}

// CallOfMember returns the call a member MemberOf made names (the call
// argument), or member itself when it has no Pacer's prefix.
func CallOfMember(member string) string {
	if len(member) > tagLen && member[0] == 'p' && member[tagLen-1] == '~' {
		member = member[tagLen:]
	}
	if i := strings.LastIndexByte(member, '#'); i >= 0 {
		member = member[:i]
	}
	return member
}

// tagLen is the length of newTag's prefix.
const tagLen = 14
