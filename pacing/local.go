package pacing

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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
// goroutine). LocalSlots is safe for concurrent use.
type LocalSlots struct {
	mu        sync.Mutex
	clock     monoclock.Clock // read under mu
	nextSweep time.Duration
	sets      map[string]*slotSet
	rates     map[string]*rateState
}

// rateState is one adaptive carrier's effective rate (rate.lua's hash),
// in integer milli-cps and microseconds of the local clock.
type rateState struct {
	rateM   int64
	since   int64 // the increase is counted up to here
	lastCut int64 // of the last decrease
}

// longAgo is "no decrease yet": rate.lua's 0 on Redis's clock, which is
// decades before its now.
const longAgo = -1 << 62

var _ SlotStore = (*LocalSlots)(nil)

// NewLocalSlots returns an empty LocalSlots on clock (nil = time.Now).
// Clock readings that go backwards are treated as the latest reading.
func NewLocalSlots(clock func() time.Time) *LocalSlots {
	return &LocalSlots{clock: monoclock.New(clock), sets: make(map[string]*slotSet), rates: make(map[string]*rateState)}
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
}

func keepFor(interval time.Duration) time.Duration { return max(interval, time.Second) }

// Reserve takes the next slot like pace.lua.
func (l *LocalSlots) Reserve(_ context.Context, key, member string, interval, maxWait time.Duration) (Slot, error) {
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

	s := l.sets[key]
	if s == nil {
		s = &slotSet{members: make(map[string]time.Duration)}
		l.sets[key] = s
	}
	s.trim(now, keep)
	if at, ok := s.members[member]; ok {
		slot.OK, slot.Wait = true, max(at-now, 0)
		return slot, nil
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
	return slot, nil
}

// Block reserves a blocking span like block.lua: no slot of key before
// now + span (a span that ends before the last slot changes nothing).
func (l *LocalSlots) Block(_ context.Context, key string, span time.Duration) error {
	if span <= 0 {
		return fmt.Errorf("pacing: block span %v must be > 0", span)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	until := now + span
	s := l.sets[key]
	if s == nil {
		s = &slotSet{members: make(map[string]time.Duration)}
		l.sets[key] = s
	}
	if n := len(s.slots); n > 0 && s.slots[n-1].at >= until {
		return nil
	}
	if at, ok := s.members[blockMember]; ok {
		// The old span is the last entry (spans only grow): drop it.
		if n := len(s.slots); n > 0 && s.slots[n-1].at == at && s.slots[n-1].member == blockMember {
			s.slots = s.slots[:n-1]
		}
	}
	s.slots = append(s.slots, slotEntry{at: until, member: blockMember})
	s.members[blockMember] = until
	s.keep = max(s.keep, time.Second)
	return nil
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
	now := l.now().Microseconds()
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
		st.lastCut, st.since, cut = now, now, true
	}
	if st.rateM >= args.MaxM && now-st.lastCut >= args.HoldUS {
		delete(l.rates, key)
		return Rate{CPS: float64(args.MaxM) / 1000, Cut: cut}, nil
	}
	l.rates[key] = &st
	return Rate{CPS: float64(st.rateM) / 1000, Cut: cut}, nil
}

// blockMember is the member of a blocking span (lua.BlockMember).
const blockMember = "retry-after"

// Release removes member's slot; an unknown member is a no-op.
func (l *LocalSlots) Release(_ context.Context, key, member string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sets[key]
	if s == nil {
		return nil
	}
	at, ok := s.members[member]
	if !ok {
		return nil
	}
	delete(s.members, member)
	// Slots are strictly increasing in time, so at finds the one slot.
	if i, found := slices.BinarySearchFunc(s.slots, at, func(e slotEntry, t time.Duration) int {
		return cmp.Compare(e.at, t)
	}); found && s.slots[i].member == member {
		s.slots = slices.Delete(s.slots, i, i+1)
	}
	return nil
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
	s := l.sets[key]
	if s == nil || len(s.slots) == 0 {
		return QueueState{}, nil
	}
	var q QueueState
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
