package pacing

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/internal/monoclock"
)

// sweepEvery is how often, on the store's clock, idle slot sets are looked for.
const sweepEvery = time.Second

// LocalSlots is the in-process SlotStore of a single node, or the fallback
// while Redis is down. It decides exactly like pace.lua, on the local
// monotonic clock.
//
// Memory is bounded: slots older than max(1 s, interval) are trimmed, so a
// carrier holds at most about (max_wait + 1 s) / interval slots, and a slot
// set with nothing left is evicted lazily by later calls (no background
// goroutine); a carrier's pause is forgotten pauseKeep after its span, and
// its evidence holds one entry per peer within its windows. LocalSlots is
// safe for concurrent use.
type LocalSlots struct {
	mu        sync.Mutex
	clock     monoclock.Clock // read under mu
	nextSweep time.Duration
	sets      map[string]*slotSet
	rates     map[string]*rateState
	pauses    map[string]*pauseState
	evidence  map[string]*evidenceSets
	fair      map[string]*fairState
}

// pauseState is one carrier's pause (pause.lua's hash), on the local clock.
type pauseState struct {
	until, since time.Duration
	reason       string
	holder       string        // the half-open probe's member, "" = none
	claimEnd     time.Duration // when the holder's claim ends
	expires      time.Duration // when the record is forgotten
}

// evidenceSets are one carrier's callers and overloaded peers
// (evidence.lua's sorted sets): peer -> last time.
type evidenceSets struct {
	callers, overloaded map[string]time.Duration
	w                   EvidenceWindows // of the last call, for the sweep
}

func (e *evidenceSets) trim(now time.Duration) {
	for p, at := range e.callers {
		if at < now-e.w.Callers {
			delete(e.callers, p)
		}
	}
	for p, at := range e.overloaded {
		if at < now-e.w.Overload {
			delete(e.overloaded, p)
		}
	}
}

// rateState is one adaptive carrier's effective rate (rate.lua's hash),
// in integer milli-cps and microseconds of the local clock.
type rateState struct {
	rateM   int64
	since   int64 // the increase is counted up to here
	lastCut int64 // of the last decrease
	// cutAt is lastCut to the nanosecond (Rate.CutAt).
	cutAt time.Duration
}

// longAgo is "no decrease yet": rate.lua's 0 on Redis's clock, which is
// decades before its now.
const longAgo = -1 << 62

var _ SlotStore = (*LocalSlots)(nil)

// NewLocalSlots returns an empty LocalSlots on clock (nil = time.Now).
// Clock readings that go backwards are treated as the latest reading.
func NewLocalSlots(clock func() time.Time) *LocalSlots {
	return &LocalSlots{clock: monoclock.New(clock), sets: make(map[string]*slotSet), rates: make(map[string]*rateState),
		pauses: make(map[string]*pauseState), evidence: make(map[string]*evidenceSets), fair: make(map[string]*fairState)}
}

type slotEntry struct {
	at     time.Duration // since epoch
	member string
}

// slotSet holds the reserved slots of one carrier in time order.
type slotSet struct {
	slots   []slotEntry
	members map[string]time.Duration
	keep    time.Duration // trim horizon of the last reservation
}

func (s *slotSet) trim(now, keep time.Duration) {
	i := 0
	for i < len(s.slots) && s.slots[i].at <= now-keep {
		delete(s.members, s.slots[i].member)
		s.slots[i] = slotEntry{}
		i++
	}
	if i == 0 {
		return
	}
	s.slots = s.slots[i:]
	// Reslicing drops the head in O(1); the array is reclaimed when append
	// reallocates, or compacted here once the live part is small.
	if len(s.slots) == 0 {
		s.slots = nil
	} else if cap(s.slots) > 64 && len(s.slots) < cap(s.slots)/4 {
		s.slots = append(make([]slotEntry, 0, 2*len(s.slots)), s.slots...)
	}
}

func (l *LocalSlots) now() time.Duration { return l.clock.Now() }

func (l *LocalSlots) sweep(now time.Duration) {
	if now < l.nextSweep {
		return
	}
	l.nextSweep = now + sweepEvery
	for k, s := range l.sets {
		s.trim(now, s.keep)
		if len(s.slots) == 0 {
			delete(l.sets, k)
		}
	}
	for k, p := range l.pauses {
		if p.expires <= now {
			delete(l.pauses, k)
		}
	}
	for k, e := range l.evidence {
		e.trim(now)
		if len(e.callers) == 0 && len(e.overloaded) == 0 {
			delete(l.evidence, k)
		}
	}
	for k, f := range l.fair {
		if f.expires <= us(now) {
			delete(l.fair, k)
		}
	}
}

// dropFuture removes the slots after now (their holders must not send,
// or take one again at a new rate).
func (s *slotSet) dropFuture(now time.Duration) {
	i, _ := slices.BinarySearchFunc(s.slots, now, func(e slotEntry, t time.Duration) int {
		if e.at <= t {
			return -1
		}
		return 1
	})
	for _, e := range s.slots[i:] {
		delete(s.members, e.member)
	}
	clear(s.slots[i:])
	s.slots = s.slots[:i]
}

func keepFor(interval time.Duration) time.Duration { return max(interval, time.Second) }

// Reserve takes the next slot like pace.lua: none while key's carrier is
// paused, and the probe claim once its span is over; with a share, shared
// fairly like pace.lua's fair path (fair.go).
func (l *LocalSlots) Reserve(_ context.Context, key, member string, share Share, interval, maxWait time.Duration) (Slot, error) {
	if interval <= 0 {
		return Slot{}, errInterval(key, interval)
	}
	maxWait = max(maxWait, 0)
	keep := keepFor(interval)

	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	slot := Slot{At: l.clock.Time(now), Key: key, Member: member, Reserved: l.clock.Time(now)}

	pz := l.livePause(key, now)
	if pz != nil {
		if now < pz.until {
			slot.Paused, slot.Wait = true, pz.until-now
			return slot, nil
		}
		if pz.holder != "" && pz.holder != member && pz.claimEnd > now {
			slot.Paused = true
			return slot, nil
		}
	}
	claim := func() {
		if pz == nil {
			return
		}
		pz.holder, pz.claimEnd = member, now+maxWait+ProbeClaim
		pz.expires = max(pz.expires, pz.claimEnd+pauseKeep)
		slot.Probe = true
	}

	s := l.sets[key]
	if s == nil {
		s = &slotSet{members: make(map[string]time.Duration)}
		l.sets[key] = s
	}
	s.trim(now, keep)
	if at, ok := s.members[member]; ok {
		slot.OK, slot.Wait = true, max(at-now, 0)
		claim()
		return slot, nil
	}
	if share.Name != "" && pz != nil {
		// Half-open: the probe goes first come, first served.
		if f := l.liveFair(key, us(now), false); f != nil {
			if rec := f.recs[member]; rec != nil {
				f.forget(member, rec, true)
			}
		}
		share = Share{}
	}
	if share.Name != "" {
		return l.reserveFair(key, member, share, s, now, interval, maxWait, keep, slot), nil
	}
	at := now
	if n := len(s.slots); n > 0 {
		at = max(at, s.slots[n-1].at+interval)
	}
	slot.Wait = at - now
	if slot.Wait > maxWait {
		return slot, nil
	}
	s.slots = append(s.slots, slotEntry{at: at, member: member})
	s.members[member] = at
	s.keep = max(s.keep, keep)
	slot.OK = true
	claim()
	return slot, nil
}

// pauseKeep is how long a pause's record outlives its span: a half-open
// carrier that no call tries is forgotten after it (and runs free).
const pauseKeep = 10 * time.Minute

// pauseOf describes p at now (nil: no pause).
func pauseOf(p *pauseState, now time.Duration) Pause {
	if p == nil {
		return Pause{}
	}
	return Pause{
		Paused: true, Left: max(p.until-now, 0), Age: max(now-p.since, 0), Reason: p.reason,
		Probing: p.holder != "" && p.claimEnd > now,
	}
}

// ended describes p, just ended (ProbeDone ok, Unpause).
func ended(p *pauseState, now time.Duration) Pause {
	st := pauseOf(p, now)
	st.Paused, st.Probing, st.Changed = false, false, true
	return st
}

// livePause returns key's pause at now, forgetting one past its expiry
// (l.mu held).
func (l *LocalSlots) livePause(key string, now time.Duration) *pauseState {
	p := l.pauses[key]
	if p != nil && p.expires <= now {
		delete(l.pauses, key)
		return nil
	}
	return p
}

// Pause pauses key's carrier like pause.lua's set.
func (l *LocalSlots) Pause(_ context.Context, key string, span time.Duration, reason string) (Pause, error) {
	if span <= 0 {
		return Pause{}, fmt.Errorf("pacing: pause span %v must be > 0", span)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if s := l.sets[key]; s != nil {
		s.dropFuture(now)
	}
	until := now + span
	p := l.livePause(key, now)
	if p != nil && p.until >= until {
		return pauseOf(p, now), nil
	}
	since := now
	if p != nil {
		since = p.since
	}
	p = &pauseState{until: until, since: since, reason: reason, expires: until + pauseKeep}
	l.pauses[key] = p
	st := pauseOf(p, now)
	st.Changed = true
	return st, nil
}

// Paused reads key's pause.
func (l *LocalSlots) Paused(_ context.Context, key string) (Pause, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	return pauseOf(l.livePause(key, now), now), nil
}

// ProbeDone ends member's half-open probe like pause.lua's done.
func (l *LocalSlots) ProbeDone(_ context.Context, key, member string, ok bool) (Pause, error) {
	if member == "" {
		return Pause{}, fmt.Errorf("pacing: pause %q: probe done without a member", key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	p := l.livePause(key, now)
	if p == nil || p.holder == "" || p.holder != member {
		return pauseOf(p, now), nil
	}
	if ok {
		delete(l.pauses, key)
		return ended(p, now), nil
	}
	p.holder, p.claimEnd = "", 0
	st := pauseOf(p, now)
	st.Changed = true
	return st, nil
}

// OpenPause ends the span of a pause at least minAge old, like pause.lua's
// open.
func (l *LocalSlots) OpenPause(_ context.Context, key string, minAge time.Duration) (Pause, error) {
	if minAge < 0 {
		return Pause{}, fmt.Errorf("pacing: pause %q: min age %v must be >= 0", key, minAge)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	p := l.livePause(key, now)
	if p == nil || now >= p.until || now-p.since < minAge {
		return pauseOf(p, now), nil
	}
	p.until = now
	st := pauseOf(p, now)
	st.Changed = true
	return st, nil
}

// Unpause ends key's pause like pause.lua's lift.
func (l *LocalSlots) Unpause(_ context.Context, key string) (Pause, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	p := l.livePause(key, now)
	if p == nil {
		return Pause{}, nil
	}
	delete(l.pauses, key)
	return ended(p, now), nil
}

// Evidence records peer's call like evidence.lua and counts the peers
// within w.
func (l *LocalSlots) Evidence(_ context.Context, key, peer string, overload bool, w EvidenceWindows) (Evidence, error) {
	if peer == "" || w.Callers <= 0 || w.Overload <= 0 {
		return Evidence{}, fmt.Errorf("pacing: evidence %q: need a peer (got %q) and windows > 0 (got %+v)", key, peer, w)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.evidence[key]
	if e == nil {
		e = &evidenceSets{callers: map[string]time.Duration{}, overloaded: map[string]time.Duration{}}
		l.evidence[key] = e
	}
	e.w = w
	e.callers[peer] = now
	if overload {
		e.overloaded[peer] = now
	}
	e.trim(now)
	return Evidence{Callers: len(e.callers), Overloaded: len(e.overloaded)}, nil
}

// Adapt moves the effective rate of key's carrier like rate.lua, on the
// local clock, in the same integer milli-cps and microseconds.
func (l *LocalSlots) Adapt(_ context.Context, key string, a AIMD, overload bool) (Rate, error) {
	args, err := a.milli(overload)
	if err != nil {
		return Rate{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	nowD := l.now()
	now := nowD.Microseconds()
	st := rateState{rateM: args.MaxM, since: now, lastCut: longAgo}
	if old := l.rates[key]; old != nil {
		st = *old
	}
	if st.rateM < args.MaxM {
		if gained := args.IncreaseM * (now - st.since) / 1_000_000; gained > 0 {
			st.rateM += gained
			st.since += gained * 1_000_000 / args.IncreaseM
		}
	}
	if st.rateM >= args.MaxM {
		st.rateM, st.since = args.MaxM, now
	}
	st.rateM = max(st.rateM, args.MinM)
	cut := false
	if overload && now-st.lastCut >= args.HoldUS {
		st.rateM = max(st.rateM*args.DecreasePermille/1000, args.MinM)
		st.lastCut, st.since, st.cutAt, cut = now, now, nowD, true
		if s := l.sets[key]; s != nil {
			s.dropFuture(nowD)
		}
	}
	r := Rate{CPS: float64(st.rateM) / 1000, Cut: cut}
	if st.lastCut != longAgo {
		r.CutAt = l.clock.Time(st.cutAt)
	}
	if st.rateM >= args.MaxM && now-st.lastCut >= args.HoldUS {
		delete(l.rates, key)
		r.CPS = float64(args.MaxM) / 1000
		return r, nil
	}
	l.rates[key] = &st
	return r, nil
}

// Respace removes the slots still in the future whose members start with
// prefix, like respace.lua.
func (l *LocalSlots) Respace(_ context.Context, key, prefix string) (time.Time, error) {
	if prefix == "" {
		return time.Time{}, fmt.Errorf("pacing: slot set %q: an empty member prefix would remove every slot", key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if s := l.sets[key]; s != nil {
		kept := s.slots[:0]
		for _, e := range s.slots {
			if e.at > now && strings.HasPrefix(e.member, prefix) {
				delete(s.members, e.member)
				continue
			}
			kept = append(kept, e)
		}
		clear(s.slots[len(kept):])
		s.slots = kept
	}
	return l.clock.Time(now), nil
}

// Release removes member's slot or booking, giving its share the turn
// back like release.lua; an unknown member is a no-op.
func (l *LocalSlots) Release(_ context.Context, key, member string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseFair(key, member)
	s := l.sets[key]
	if s == nil {
		return nil
	}
	if at, ok := s.members[member]; ok {
		s.remove(member, at)
	}
	return nil
}

// remove removes member's slot, at at.
func (s *slotSet) remove(member string, at time.Duration) {
	delete(s.members, member)
	// Slots are strictly increasing in time, so at finds the one slot.
	if i, found := slices.BinarySearchFunc(s.slots, at, func(e slotEntry, t time.Duration) int {
		return cmp.Compare(e.at, t)
	}); found && s.slots[i].member == member {
		s.slots = slices.Delete(s.slots, i, i+1)
	}
}

// Queue reports the slots still in the future, those of the last second, and
// the least wait of a call reserving now.
func (l *LocalSlots) Queue(_ context.Context, key string, interval time.Duration) (QueueState, error) {
	if interval <= 0 {
		return QueueState{}, errInterval(key, interval)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	q := QueueState{Queued: l.booked(key, now)}
	s := l.sets[key]
	if s == nil || len(s.slots) == 0 {
		return q, nil
	}
	i := len(s.slots) - 1
	for ; i >= 0 && s.slots[i].at > now; i-- {
		q.Queued++
	}
	for ; i >= 0 && s.slots[i].at > now-time.Second; i-- {
		q.Sent++
	}
	q.Wait = max(s.slots[len(s.slots)-1].at+interval-now, 0)
	return q, nil
}

// Len returns the number of slot sets held, after evicting empty ones.
func (l *LocalSlots) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.nextSweep = 0
	l.sweep(now)
	return len(l.sets)
}
