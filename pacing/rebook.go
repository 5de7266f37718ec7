package pacing

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// Rebooker is a SlotStore that can lose a carrier's schedule and take back
// the slots this node's waiting calls hold in it (store.Failover): a Redis
// restarted empty, or a switch between Redis and the in-process slots.
// The calls waiting for slots of the lost schedule still go at their
// times; put back, the slots given after them come after them.
type Rebooker interface {
	// Lost is when the store last lost a schedule (zero: never).
	Lost() time.Time
	// Rebook puts slots (member and due time: Slot.Due) back into key's
	// schedule in use; a member already there keeps its slot.
	Rebook(ctx context.Context, key string, slots []Waiting) error
}

// Waiting is a slot a call of this node waits for: its member and when it
// is due (local time).
type Waiting struct {
	Member string
	Due    time.Time
	// Keep is how long the slot set must outlive it: keepFor(interval).
	Keep time.Duration
}

// waitingSet is the slots this node's calls are waiting for, by carrier
// key (Pacer.awaitSlot), for Rebook, and the losses acted on. Safe for
// concurrent use.
type waitingSet struct {
	mu   sync.Mutex
	keys map[string]map[string]Waiting
	// rebooking is held while a loss's slots are put back, so a call
	// that finds the loss waits until they are (Pacer.rebook).
	rebooking sync.Mutex
	// done is the Rebooker's Lost last acted on, once its slots were put
	// back (Unix nanoseconds).
	done atomic.Int64
}

func (w *waitingSet) add(key string, s Waiting) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys == nil {
		w.keys = map[string]map[string]Waiting{}
	}
	m := w.keys[key]
	if m == nil {
		m = map[string]Waiting{}
		w.keys[key] = m
	}
	m[s.Member] = s
}

func (w *waitingSet) remove(key, member string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A carrier's map stays when empty (one per carrier key): made again
	// for every call of a carrier whose calls do not overlap, it cost an
	// allocation per call.
	delete(w.keys[key], member)
}

// snapshot returns the waiting slots by key, ordered by due time.
func (w *waitingSet) snapshot() map[string][]Waiting {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]Waiting, len(w.keys))
	for k, m := range w.keys {
		if len(m) == 0 {
			continue
		}
		s := make([]Waiting, 0, len(m))
		for _, x := range m {
			s = append(s, x)
		}
		slices.SortFunc(s, func(a, b Waiting) int { return a.Due.Compare(b.Due) })
		out[k] = s
	}
	return out
}

// rebookTimeout bounds one loss's rebooking, all carriers together.
const rebookTimeout = time.Second

// rebook puts this node's waiting slots back when the store lost a
// schedule since the last time (once per loss, by the first call that
// sees it; the calls that see it meanwhile wait until the slots are back,
// so the slots they take come after them), and returns the store's Lost
// (zero without a Rebooker). A store that fails it leaves the calls as
// they are; the send gate still holds this node to its share (Careful).
func (p *Pacer) rebook(ctx context.Context) time.Time {
	rb, ok := p.store.(Rebooker)
	if !ok {
		return time.Time{}
	}
	lost := rb.Lost()
	if lost.IsZero() || lost.UnixNano() <= p.waiting.done.Load() {
		return lost // the fast path of every call
	}
	p.waiting.rebooking.Lock()
	defer p.waiting.rebooking.Unlock()
	if lost.UnixNano() <= p.waiting.done.Load() {
		return lost // put back meanwhile, by another call
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rebookTimeout)
	defer cancel()
	for key, slots := range p.waiting.snapshot() {
		_ = rb.Rebook(ctx, key, slots)
	}
	p.waiting.done.Store(lost.UnixNano())
	return lost
}

// Rebook implements Rebooker's Rebook for the shared slots (rebook.lua).
func (s *RedisSlots) Rebook(ctx context.Context, key string, slots []Waiting) error {
	if len(slots) == 0 {
		return nil
	}
	now := time.Now()
	ws := make([]lua.Waiting, len(slots))
	keep := time.Second
	for i, x := range slots {
		ws[i] = lua.Waiting{Member: x.Member, In: x.Due.Sub(now)}
		keep = max(keep, x.Keep)
	}
	err := s.run.Run(ctx, lua.ScriptRebook, func(ctx context.Context, sc redis.Scripter) error {
		_, err := lua.Rebook(ctx, sc, key, keep, ws)
		return err
	})
	if err != nil {
		return fmt.Errorf("pacing: slot set %q: %w", key, err)
	}
	return nil
}

// Rebook implements Rebooker's Rebook for the in-process slots: each slot
// goes into key's set in time order; a member already there keeps its.
func (l *LocalSlots) Rebook(_ context.Context, key string, slots []Waiting) error {
	if len(slots) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	wall := time.Now()
	s := l.sets[key]
	if s == nil {
		s = &slotSet{members: make(map[string]time.Duration)}
		l.sets[key] = s
	}
	for _, x := range slots {
		if _, ok := s.members[x.Member]; ok {
			continue
		}
		at := now + max(x.Due.Sub(wall), 0)
		i, _ := slices.BinarySearchFunc(s.slots, at, func(e slotEntry, t time.Duration) int {
			if e.at <= t {
				return -1
			}
			return 1
		})
		s.slots = slices.Insert(s.slots, i, slotEntry{at: at, member: x.Member})
		s.members[x.Member] = at
		s.keep = max(s.keep, keepFor(x.Keep))
	}
	return nil
}
