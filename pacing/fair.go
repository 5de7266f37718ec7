package pacing

import (
	"cmp"
	"container/heap"
	"slices"
	"time"

	"github.com/cpsguard/cpsguard/lua"
)

// The fair share of LocalSlots: pace.lua's fair path (see its header), in
// the same integer microseconds, the same order of expiries and the same
// decisions, on the local clock.

// fairShare is one share waiting for a carrier (pace.lua's v:<share>,
// w:<share> and d:<share>); w 0 is a share of which only d is left.
type fairShare struct {
	v, w, d int64 // next turn (µs), weight, slip in all (µs)
}

// fairRecord is one fair call (pace.lua's m:<member>).
type fairRecord struct {
	charge, start, d0 int64 // µs
	booked            bool
	share             string
}

// fairEntry is one expiry (pace.lua's KEYS[4]): "s:"+share or "m:"+member.
type fairEntry struct {
	at   int64
	name string
}

// fairHeap orders expiries like a sorted set: by time, then by name.
type fairHeap []fairEntry

func (h fairHeap) Len() int { return len(h) }
func (h fairHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].name < h[j].name
}
func (h fairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *fairHeap) Push(x any)   { *h = append(*h, x.(fairEntry)) }
func (h *fairHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// fairState is one carrier's fair shares (pace.lua's KEYS[3] and KEYS[4]).
type fairState struct {
	sum, booked int64
	shares      map[string]*fairShare
	recs        map[string]*fairRecord
	// exp is each entry's expiry; heap holds them in order, with stale
	// entries (an expiry moved later, or forgotten) skipped when popped.
	exp  map[string]int64
	heap fairHeap
	// expires is when the whole state goes, as the Redis keys' TTL (µs).
	expires int64
}

func newFairState() *fairState {
	return &fairState{shares: map[string]*fairShare{}, recs: map[string]*fairRecord{}, exp: map[string]int64{}}
}

// expire sets name's expiry to at (ZADD).
func (f *fairState) expire(name string, at int64) {
	f.exp[name] = at
	heap.Push(&f.heap, fairEntry{at: at, name: name})
}

// unexpire removes name's expiry (ZREM).
func (f *fairState) unexpire(name string) { delete(f.exp, name) }

// gcMax is how many expired entries one reservation forgets at most, as
// pace.lua's LIMIT.
const gcMax = 64

// gc forgets what has expired at now (pace.lua's first loop).
func (f *fairState) gc(now int64) {
	for n := 0; n < gcMax && len(f.heap) > 0 && f.heap[0].at <= now; {
		e := heap.Pop(&f.heap).(fairEntry)
		if at, ok := f.exp[e.name]; !ok || at != e.at {
			continue // stale
		}
		n++
		kind, name := e.name[:2], e.name[2:]
		if kind == "s:" {
			if sh := f.shares[name]; sh != nil {
				f.sum -= sh.w
				delete(f.shares, name)
			}
			f.unexpire(e.name)
			continue
		}
		if rec := f.recs[name]; rec != nil {
			f.forget(name, rec, rec.booked)
		} else {
			f.unexpire(e.name)
		}
	}
}

// forget drops member's record, giving its share the turn back when
// refund.
func (f *fairState) forget(member string, rec *fairRecord, refund bool) {
	if refund {
		if sh := f.shares[rec.share]; sh != nil && sh.w != 0 {
			sh.v -= rec.charge
		}
	}
	if rec.booked {
		f.booked--
	}
	delete(f.recs, member)
	f.unexpire("m:" + member)
}

// extend lengthens the state's life to now + ms milliseconds (PEXPIRE
// when the TTL is shorter).
func (f *fairState) extend(now, ms int64) {
	f.expires = max(f.expires, now+ms*1000)
}

// liveFair returns key's fair state at now (µs), forgetting one whose keys
// would have expired (l.mu held).
func (l *LocalSlots) liveFair(key string, now int64, create bool) *fairState {
	f := l.fair[key]
	if f != nil && f.expires <= now {
		delete(l.fair, key)
		f = nil
	}
	if f == nil && create {
		f = newFairState()
		l.fair[key] = f
	}
	return f
}

// firstFree is the first time (µs) from `from` at least interval from
// every slot of s, reading at most 16 slots past from like pace.lua.
func (s *slotSet) firstFree(from, interval int64) int64 {
	c := from
	i, _ := slices.BinarySearchFunc(s.slots, from-interval, func(e slotEntry, t int64) int {
		if us(e.at) <= t {
			return -1
		}
		return 1
	})
	n := 0
	for ; i < len(s.slots) && n < 16; i, n = i+1, n+1 {
		x := us(s.slots[i].at)
		if x > c-interval {
			if x >= c+interval {
				return c
			}
			c = x + interval
		}
	}
	if n == 16 {
		c = max(c, us(s.slots[len(s.slots)-1].at)+interval)
	}
	return c
}

// insert adds member's slot at `at` (µs) in time order.
func (s *slotSet) insert(member string, at int64) {
	d := time.Duration(at) * time.Microsecond
	i, _ := slices.BinarySearchFunc(s.slots, d, func(e slotEntry, t time.Duration) int { return cmp.Compare(e.at, t) })
	s.slots = slices.Insert(s.slots, i, slotEntry{at: d, member: member})
	s.members[member] = d
}

func us(d time.Duration) int64 { return int64(d / time.Microsecond) }

// reserveFair is pace.lua's fair path for member of share on s (the pause
// checks and the held slot are done), at nowD on the local clock (l.mu
// held). slot has At, Key, Member and Reserved set.
func (l *LocalSlots) reserveFair(key, member string, share Share, s *slotSet, nowD, interval, maxWait, keep time.Duration, slot Slot) Slot {
	now := us(nowD)
	slot.At = l.clock.Time(time.Duration(now) * time.Microsecond)
	iv, mw := lua.Micros(interval), lua.MicrosFloor(maxWait)
	lead, rkeep := lua.Micros(shareLead(interval)), lua.Micros(recordKeep)
	weight := share.weight()
	f := l.liveFair(key, now, true)
	wait := func(p int64) time.Duration { return time.Duration(p-now) * time.Microsecond }
	take := func(p int64) {
		s.insert(member, p)
		s.keep = max(s.keep, keep)
	}
	f.gc(now)

	// waiting is pace.lua's waiting(name, till, period).
	waiting := func(name string, till, period int64) {
		if cur, ok := f.exp["s:"+name]; !ok || cur < till {
			f.expire("s:"+name, till)
		}
		f.extend(now, ceilDiv(mw+max(rkeep, 2*period), 1000)+1000)
	}
	// turn is pace.lua's turn(rec).
	turn := func(rec *fairRecord) Slot {
		sh := f.shares[rec.share]
		var d int64
		if sh != nil {
			d = sh.d
		}
		from := rec.start
		if d > rec.d0 {
			from += d - rec.d0
		}
		from = max(from, now)
		slot.OK = true
		if from-now > lead {
			slot.Wait, slot.Booked = wait(from-lead), true
			return slot
		}
		p := s.firstFree(from, iv)
		slot.Wait = wait(p)
		if p-now > mw {
			slot.OK = false
			f.forget(member, rec, true)
			return slot
		}
		if p-from <= lead {
			take(p)
			if rec.booked {
				f.booked--
				rec.booked = false
			}
			return slot
		}
		if p-from <= iv {
			// A neighbour's slot: come back for the next one.
			slot.Wait, slot.Booked = wait(p-lead), true
			return slot
		}
		// The slot at the turn is taken (by calls within their share):
		// the share's turns slip.
		by := p - from
		switch {
		case sh == nil:
			// Its state expired: d:<share> alone is written (w 0 marks
			// such a share, whose v pace.lua reads as none).
			f.shares[rec.share] = &fairShare{d: d + by}
		case sh.w == 0:
			sh.d = d + by
		default:
			sh.d = d + by
			sh.v += by
			waiting(rec.share, sh.v+rec.charge, rec.charge)
		}
		slot.Wait, slot.Booked = wait(p-lead), true
		return slot
	}
	if rec := f.recs[member]; rec != nil {
		return turn(rec)
	}

	sh := f.shares[share.Name]
	if sh == nil || sh.w == 0 {
		if sh == nil {
			sh = &fairShare{}
			f.shares[share.Name] = sh
		}
		sh.w = weight
		f.sum += weight
	} else if sh.w != weight {
		f.sum += weight - sh.w
		sh.w = weight
	}
	sum := min(max(f.sum, weight), maxWeightSum)
	period := iv * sum / weight
	v := sh.v
	start := max(now, v)
	charge := func(booked bool) *fairRecord {
		sh.v = start + period
		rec := &fairRecord{charge: period, start: start, d0: sh.d, booked: booked, share: share.Name}
		f.recs[member] = rec
		f.expire("m:"+member, now+mw+rkeep)
		if booked {
			f.booked++
		}
		waiting(share.Name, sh.v+period, period)
		return rec
	}

	idle := max(v, now) + period
	if start <= now+period {
		// Within its share: the first free slot from now.
		p := s.firstFree(now, iv)
		slot.Wait = wait(p)
		if p-now > mw {
			waiting(share.Name, idle, period)
			return slot
		}
		take(p)
		charge(false)
		slot.OK = true
		return slot
	}
	if s.firstFree(now, iv) == now {
		// Beyond its share, but the carrier is free right now.
		take(now)
		waiting(share.Name, idle, period)
		slot.OK = true
		return slot
	}
	if start+iv-now > mw {
		// Its turn, or a slot an interval after it, beyond max_wait.
		waiting(share.Name, idle, period)
		slot.Wait = wait(start + iv)
		return slot
	}
	rec := charge(true)
	if start-lead <= now {
		return turn(rec)
	}
	slot.OK, slot.Booked, slot.Wait = true, true, wait(start-lead)
	return slot
}

// releaseFair forgets member's fair record, giving its share the turn
// back (release.lua); it reports whether there was one (l.mu held).
func (l *LocalSlots) releaseFair(key, member string) bool {
	f := l.liveFair(key, us(l.now()), false)
	if f == nil {
		return false
	}
	rec := f.recs[member]
	if rec == nil {
		return false
	}
	f.forget(member, rec, true)
	return true
}

// booked returns the bookings outstanding of key's carrier (l.mu held).
func (l *LocalSlots) booked(key string, now time.Duration) int {
	if f := l.liveFair(key, us(now), false); f != nil {
		return int(max(f.booked, 0))
	}
	return 0
}

// fairEntries counts the shares and records of key's fair state at now,
// for tests (an expired state counts none).
func (l *LocalSlots) fairEntries(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.liveFair(key, us(l.now()), false)
	if f == nil {
		return 0
	}
	return len(f.shares) + len(f.recs)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
