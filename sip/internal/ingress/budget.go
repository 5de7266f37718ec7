package ingress

import (
	"net/netip"
	"sync/atomic"
)

// Lane is one of the queues a datagram waits in for a worker.
type Lane uint8

const (
	// LaneFast holds answers and in-dialog requests of known parties:
	// the calls already let in.
	LaneFast Lane = iota
	// LaneSlow holds the rest of what known parties send: new INVITEs,
	// CANCELs (behind their INVITEs), OPTIONS, anything unrecognised.
	LaneSlow
	// LaneShed holds known parties' INVITEs that found no room in
	// LaneSlow: a worker answers each at once from its bytes
	// (Options.Shed) instead of leaving it to be retransmitted.
	LaneShed
	// LaneStrange holds what unknown sources send (they are one party).
	LaneStrange
	numLanes
)

// String names the lane (metrics, tests).
func (l Lane) String() string {
	switch l {
	case LaneFast:
		return "fast"
	case LaneSlow:
		return "slow"
	case LaneShed:
		return "shed"
	case LaneStrange:
		return "strange"
	}
	return "unknown"
}

// LaneBudget bounds one lane across every worker.
type LaneBudget struct {
	// Total bounds the datagrams waiting in the lane, all parties.
	Total int
	// Share bounds one party's datagrams in it (0: Total).
	Share int
	// Least and Reserve: once no more than Reserve places of Total are
	// left, only a party holding fewer than Least datagrams may queue
	// (the reserve is for quiet parties, however many others flood).
	Least, Reserve int
}

// Budget bounds what waits in the queues, per lane and in bytes, in all
// and per party. Bytes count each datagram's buffer whole.
type Budget struct {
	Lanes [numLanes]LaneBudget
	// Bytes bounds every queued datagram together; PartyBytes one party's.
	Bytes, PartyBytes int
	// QuietBytes and ReserveBytes: once no more than ReserveBytes of Bytes
	// are left, only a party holding less than QuietBytes may queue.
	QuietBytes, ReserveBytes int
}

// DefaultBudget is sized for a node deciding up to a few tens of
// thousands of calls a second: a second's worth of answers, a few hundred
// ms of new calls, and 32 MiB in all, of which one party holds a quarter.
var DefaultBudget = Budget{
	Lanes: [numLanes]LaneBudget{
		LaneFast:    {Total: 16384, Share: 4096, Least: 256, Reserve: 4096},
		LaneSlow:    {Total: 4096, Share: 1024, Least: 64, Reserve: 1024},
		LaneShed:    {Total: 4096, Share: 2048, Least: 64, Reserve: 1024},
		LaneStrange: {Total: 512},
	},
	Bytes:        32 << 20,
	PartyBytes:   8 << 20,
	QuietBytes:   512 << 10,
	ReserveBytes: 8 << 20,
}

// Party is who a datagram counts against: a peer by name (all its source
// addresses together), a carrier by address. Every unknown source is the
// one party Stranger.
type Party struct {
	Name string
	Addr netip.Addr
}

// Stranger is the party of every datagram from an unknown source.
var Stranger = Party{Name: "\x00stranger"}

// account is one party's share of the queues. The reader alone adds to
// it (so its room checks cannot overshoot); workers take away.
type account struct {
	n     [numLanes]atomic.Int32
	bytes atomic.Int64
	// worker is what it holds on each worker (its lanes there).
	worker []laneCounts
}

type laneCounts [numLanes]atomic.Int32

func (a *account) idle() bool {
	for i := range a.n {
		if a.n[i].Load() != 0 {
			return false
		}
	}
	return a.bytes.Load() == 0
}

// totals is what every party holds together.
type totals struct {
	n     [numLanes]atomic.Int32
	bytes atomic.Int64
}

// room reports whether a party holding a may queue a datagram of cost
// bytes on lane l of worker w. share overrides the lane's Share when > 0.
// On one worker of several a party holds at most twice its even part of
// its share (Least at least): all of a Call-ID's datagrams go to one
// worker, and a party sending under one Call-ID would otherwise pile its
// whole share there, ahead of the other parties' calls that worker takes.
func (b *Budget) room(t *totals, a *account, l Lane, cost int, share int, w int) bool {
	lb := &b.Lanes[l]
	if share <= 0 {
		share = lb.Share
	}
	if share <= 0 {
		share = lb.Total
	}
	total, held := int(t.n[l].Load()), int(a.n[l].Load())
	if total >= lb.Total || held >= share || (held >= lb.Least && total >= lb.Total-lb.Reserve) {
		return false
	}
	if n := len(a.worker); n > 1 && int(a.worker[w][l].Load()) >= max(lb.Least, 2*share/n, 1) {
		return false
	}
	tb, hb := t.bytes.Load(), a.bytes.Load()
	c := int64(cost)
	if tb+c > int64(b.Bytes) || (b.PartyBytes > 0 && hb+c > int64(b.PartyBytes)) {
		return false
	}
	return hb < int64(b.QuietBytes) || tb+c <= int64(b.Bytes-b.ReserveBytes)
}

func (t *totals) add(a *account, l Lane, cost int, w int) {
	a.worker[w][l].Add(1)
	a.n[l].Add(1)
	a.bytes.Add(int64(cost))
	t.n[l].Add(1)
	t.bytes.Add(int64(cost))
}

func (t *totals) sub(a *account, l Lane, cost int, w int) {
	a.worker[w][l].Add(-1)
	a.n[l].Add(-1)
	a.bytes.Add(-int64(cost))
	t.n[l].Add(-1)
	t.bytes.Add(-int64(cost))
}

// congested reports whether lane l (or the byte budget) has no room left
// for any party but the quietest: the shared part of it is full, whatever
// one party holds.
func (b *Budget) congested(t *totals, l Lane, cost int) bool {
	lb := &b.Lanes[l]
	if int(t.n[l].Load()) >= lb.Total-lb.Reserve {
		return true
	}
	return t.bytes.Load()+int64(cost) > int64(b.Bytes-b.ReserveBytes)
}
