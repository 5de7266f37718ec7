package oc

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// Period is how often a Meter's reduction follows the node's shedding.
	Period = 500 * time.Millisecond
	// Validity is the oc-validity of every value, in ms: two periods, so
	// a value is refreshed before it lapses while responses flow.
	Validity = 1000
	// Algo is the oc-algo the node selects: loss, which RFC 7339 makes
	// mandatory for every client that asks.
	Algo = `"loss"`
)

// Meters are the clients' meters, by name. Safe for concurrent use; the
// zero value is ready.
type Meters struct{ m sync.Map }

// Of returns name's Meter, created on first use.
func (ms *Meters) Of(name string) *Meter {
	if m, ok := ms.m.Load(name); ok {
		return m.(*Meter)
	}
	m, _ := ms.m.LoadOrStore(name, new(Meter))
	return m.(*Meter)
}

// ShedTotal returns the sheds counted by every Meter.
func (ms *Meters) ShedTotal() uint64 {
	var n uint64
	ms.m.Range(func(_, m any) bool { n += m.(*Meter).shed.Load(); return true })
	return n
}

// Meter computes the reduction asked of one overload-control client. The
// zero value is ready and asks for no reduction.
type Meter struct {
	taken atomic.Uint64 // initial INVITEs let in
	shed  atomic.Uint64 // initial INVITEs shed for overload

	due atomic.Int64 // clock ns at which the value is next recomputed
	cur atomic.Pointer[Value]

	mu        sync.Mutex
	at        time.Time // when the value was last computed
	prevTaken uint64
	prevShed  uint64
	seqMS     int64 // the last oc-seq, in Unix ms
}

// AddTaken counts one initial INVITE of the client's let in.
func (m *Meter) AddTaken() { m.taken.Add(1) }

// AddShed counts one initial INVITE of the client's shed for overload at
// now. It recomputes the value first: once a period is over, this shed
// belongs to the next one, not to the period (or quiet gap) that ended.
func (m *Meter) AddShed(now time.Time) {
	m.Current(now)
	m.shed.Add(1)
}

// epoch anchors clock.
var epoch = time.Now()

// clock is t on the monotonic clock (ns since epoch), so that a wall
// clock stepped back cannot keep a stale value in force.
func clock(t time.Time) int64 { return int64(t.Sub(epoch)) }

// Value is one published reduction with its oc-seq.
type Value struct {
	// Percent is the share of its new requests the client is asked to
	// drop, 0 to 100.
	Percent int
	oc      string // strconv.Itoa(Percent)
	seq     string // "<Unix s>.<ms>"
}

// Seq is the value's oc-seq, "<Unix s>.<ms>".
func (v *Value) Seq() string { return v.seq }

// Current returns the reduction in force at now, recomputing it first
// when a period has passed.
func (m *Meter) Current(now time.Time) *Value {
	if v := m.cur.Load(); v != nil && clock(now) < m.due.Load() {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v := m.cur.Load(); v != nil && clock(now) < m.due.Load() {
		return v // another caller recomputed it meanwhile
	}
	m.update(now)
	return m.cur.Load()
}

// update recomputes the value (m.mu held). The first call starts the
// history at now with no reduction.
func (m *Meter) update(now time.Time) {
	taken, shed := m.taken.Load(), m.shed.Load()
	value := 0
	if cur := m.cur.Load(); cur != nil && !m.at.IsZero() {
		value = cur.Percent
		a, s := taken-m.prevTaken, shed-m.prevShed
		if s > 0 {
			// 1-v' = (1-v)·A/(A+S), rounded toward more reduction.
			keep := (uint64(100-value) * a) / (a + s)
			value = 100 - int(keep)
		} else {
			value /= 2
		}
		// A gap of several periods since the last update: the sheds
		// above are its first period's (AddShed recomputes before it
		// counts once a period is over; AddTaken does not, which only
		// lowers the value), and each period after that had no shed
		// and halves the value.
		if gaps := now.Sub(m.at)/Period - 1; gaps > 0 {
			value >>= min(int(gaps), 7)
		}
	}
	m.at, m.prevTaken, m.prevShed = now, taken, shed
	ms := now.UnixMilli()
	if ms <= m.seqMS {
		ms = m.seqMS + 1 // strictly increasing even if the clock steps back
	}
	m.seqMS = ms
	m.cur.Store(&Value{
		Percent: value,
		oc:      strconv.Itoa(value),
		seq:     fmt.Sprintf("%d.%03d", ms/1000, ms%1000),
	})
	m.due.Store(clock(now.Add(Period)))
}
