package ingress

import (
	"context"
	"errors"
	"hash/maphash"
	"math/bits"
	"net"
	"net/netip"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Drop reasons, as Options.Drop receives them.
const (
	DropOversized = "oversized"       // over Options.MaxSize (or cut short by the socket)
	DropParams    = "params"          // Bounds: too many parameters
	DropHeaders   = "headers"         // Bounds: too many header fields
	DropFull      = "read_queue_full" // no room in its lane or the byte budgets
	DropEmpty     = "empty"           // only NULs or CRLF keepalives (not counted as an error)
)

// Options configure an Ingress. Handle is required.
type Options struct {
	// Workers is the number of worker goroutines (shards); 0:
	// GOMAXPROCS.
	Workers int
	// MaxSize is the largest datagram taken (larger ones are dropped
	// DropOversized); 0: 16 KiB.
	MaxSize int
	// Bounds are checked on every datagram before it is queued; the zero
	// value means DefaultBounds.
	Bounds *Bounds
	// Budget bounds the queues; nil means DefaultBudget.
	Budget *Budget
	// SlowShare, when set, is one party's share of LaneSlow now (it may
	// follow the configuration); 0 or nil: the budget's.
	SlowShare func() int
	// FastRun is how many fast datagrams a worker takes in a row while
	// another lane has one ready; 0: 16.
	FastRun int

	// Party names who a datagram from src counts against, and whether src
	// is a known party at all. Called by readers; it must be cheap and
	// safe for concurrent use.
	Party func(src netip.Addr) (Party, bool)
	// Early, when set, is asked by the reader, before a datagram is
	// queued, whether it is dropped at once (e.g. a stranger's when
	// unknown_source is drop; counting it is Early's business).
	Early func(d *Datagram) bool
	// Handle is the datagram's turn, on a worker. d and d.Data are valid
	// until it returns.
	Handle func(d *Datagram)
	// Shed answers, on a worker, a known party's INVITE that found no
	// room in LaneSlow; false: it could not (counted DropFull).
	Shed func(d *Datagram) bool
	// Hold, when set, is asked by a worker whose LaneSlow head is an
	// INVITE how much longer it waits before it is handled (0 or less: go
	// now). Wake is then signalled to re-ask early.
	Hold func(d *Datagram, now time.Time) time.Duration
	// Drop counts a datagram dropped by the ingress itself.
	Drop func(reason string)
	// Congested, when set, is told (by a reader) that a datagram found
	// lane l full for everyone, not only its party's share of it: the
	// workers are behind.
	Congested func(l Lane)
	// Panic reports a panic recovered in a handler or a reader's
	// classification (the datagram is dropped).
	Panic func(where string, v any)
}

// Ingress reads UDP sockets and hands their datagrams to a fixed set of
// workers, by a hash of their Call-ID.
type Ingress struct {
	o      Options
	bounds Bounds
	budget Budget
	shards []*shard
	seed   maphash.Seed

	t totals

	acctMu sync.RWMutex
	accts  map[Party]*account

	wg      sync.WaitGroup // workers
	readers sync.WaitGroup
	stop    chan struct{}
	stopped atomic.Bool
}

// New builds an Ingress and starts its workers; Read feeds it.
func New(o Options) (*Ingress, error) {
	if o.Handle == nil {
		return nil, errors.New("ingress: Options.Handle is required")
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.MaxSize <= 0 {
		o.MaxSize = 16 << 10
	}
	if o.FastRun <= 0 {
		o.FastRun = 16
	}
	if o.Party == nil {
		o.Party = func(netip.Addr) (Party, bool) { return Stranger, false }
	}
	if o.Drop == nil {
		o.Drop = func(string) {}
	}
	if o.Panic == nil {
		o.Panic = func(string, any) {}
	}
	g := &Ingress{o: o, bounds: DefaultBounds, budget: DefaultBudget, seed: maphash.MakeSeed(),
		accts: make(map[Party]*account), stop: make(chan struct{})}
	if o.Bounds != nil {
		g.bounds = *o.Bounds
	}
	if o.Budget != nil {
		g.budget = *o.Budget
	}
	g.shards = make([]*shard, o.Workers)
	for i := range g.shards {
		s := &shard{g: g, id: i, wake: make(chan struct{}, 1)}
		g.shards[i] = s
	}
	for _, s := range g.shards {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			pprof.Do(context.Background(), pprof.Labels("stage", "ingress.worker"), func(context.Context) { s.run() })
		}()
	}
	go g.pruneLoop()
	return g, nil
}

// WakeHeld makes every worker holding an INVITE back (Hold said wait) ask
// Hold again; the others are left asleep. Call it after whatever Hold
// reads changed (a unit of the inflight bound given back): a worker that
// is about to ask Hold either sees the change or is woken (held is set
// before Hold is asked, and the caller changed Hold's input before
// calling WakeHeld). Never blocks.
func (g *Ingress) WakeHeld() {
	for _, s := range g.shards {
		if s.held.Load() {
			s.signal()
		}
	}
}

// Workers is the number of workers.
func (g *Ingress) Workers() int { return len(g.shards) }

// Queued returns the datagrams waiting in lane l now.
func (g *Ingress) Queued(l Lane) int { return int(g.t.n[l].Load()) }

// QueuedBytes returns the bytes the queues hold now.
func (g *Ingress) QueuedBytes() int64 { return g.t.bytes.Load() }

// Parties returns the number of parties with an account now (tests: it
// must not grow with the number of sources).
func (g *Ingress) Parties() int {
	g.acctMu.RLock()
	defer g.acctMu.RUnlock()
	return len(g.accts)
}

// Close stops the workers; what is still queued is dropped. The sockets
// are the caller's: close them to end Read.
func (g *Ingress) Close() {
	if g.stopped.Swap(true) {
		return
	}
	close(g.stop)
	for _, s := range g.shards {
		s.signal()
	}
	g.wg.Wait()
	for _, s := range g.shards {
		s.drain()
	}
}

func (g *Ingress) pruneLoop() {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.prune()
		}
	}
}

// prune forgets the parties that hold nothing (a reload may have renamed
// them); an account a reader still holds just ends its life unlisted.
func (g *Ingress) prune() {
	g.acctMu.Lock()
	defer g.acctMu.Unlock()
	for p, a := range g.accts {
		if a.idle() {
			delete(g.accts, p)
		}
	}
}

func (g *Ingress) account(p Party) *account {
	g.acctMu.RLock()
	a := g.accts[p]
	g.acctMu.RUnlock()
	if a != nil {
		return a
	}
	g.acctMu.Lock()
	defer g.acctMu.Unlock()
	if a = g.accts[p]; a == nil {
		a = &account{worker: make([]laneCounts, len(g.shards))}
		g.accts[p] = a
	}
	return a
}

// take classifies one datagram a reader read from conn and queues a copy
// of it, or drops it.
func (g *Ingress) take(conn *net.UDPConn, data []byte, from netip.AddrPort, at time.Time) {
	g.takeInto(new(Datagram), conn, data, from, at)
}

// takeInto is take with the reader's scratch Datagram (a Datagram whose
// address the hooks see would otherwise cost a heap allocation per
// datagram); what is queued is a copy of it.
func (g *Ingress) takeInto(d *Datagram, conn *net.UDPConn, data []byte, from netip.AddrPort, at time.Time) {
	defer func() {
		if v := recover(); v != nil {
			g.o.Panic("ingress.take", v)
		}
	}()
	if len(data) > g.o.MaxSize {
		g.o.Drop(DropOversized)
		return
	}
	if blank(data) {
		return
	}
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	ip := from.Addr().WithZone("")
	*d = Datagram{From: from, Conn: conn, At: at, Data: data}
	d.Party, d.Known = g.o.Party(ip)
	if !d.Known {
		d.Party = Stranger
	}
	// Only what queueing needs (the kind, the Call-ID); the bounds are
	// checked on the worker, before anything parses the datagram.
	info := Classify(data)
	d.Info = info
	if g.o.Early != nil && g.o.Early(d) {
		return
	}
	switch {
	case !d.Known:
		d.Lane = LaneStrange
	case info.Kind.Fast():
		d.Lane = LaneFast
	default:
		d.Lane = LaneSlow
	}
	a := g.account(d.Party)
	share := 0
	if d.Lane == LaneSlow && g.o.SlowShare != nil {
		share = g.o.SlowShare()
	}
	cost := costOf(len(data))
	s := g.shardOf(d)
	if !g.budget.room(&g.t, a, d.Lane, cost, share, s.id) {
		if g.o.Congested != nil && g.budget.congested(&g.t, d.Lane, cost) {
			g.o.Congested(d.Lane)
		}
		if d.Lane != LaneSlow || info.Kind != KindInvite || g.o.Shed == nil || !g.budget.room(&g.t, a, LaneShed, cost, 0, s.id) {
			g.o.Drop(DropFull)
			return
		}
		d.Lane = LaneShed
	}
	d.fill(data)
	// The scan's slices point into the socket's buffer: point them into
	// the copy.
	if info.CallID != nil {
		off := offsetIn(data, info.CallID)
		d.Info.CallID = d.Data[off : off+len(info.CallID)]
	}
	d.acct = a
	d.Worker = s.id
	if d.Lane == LaneSlow {
		// A copy of a datagram still waiting from the same source (a
		// retransmission) is not queued again: its original will be
		// handled.
		d.sum = maphash.Bytes(g.seed, d.Data) ^ bits.RotateLeft64(maphash.Comparable(g.seed, d.From), 1)
	}
	g.t.add(a, d.Lane, d.cost, s.id)
	if !s.push(*d) {
		g.t.sub(a, d.Lane, d.cost, s.id)
		d.release()
	}
}

// offsetIn is where sub starts in data (sub is a sub-slice of it).
func offsetIn(data, sub []byte) int {
	if len(sub) == 0 {
		return 0
	}
	return cap(data) - cap(sub)
}

// blank reports a datagram of NULs, CR and LF only (keepalives).
func blank(data []byte) bool {
	for _, c := range data {
		if c != 0 && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// shardOf picks the worker of a datagram: by its Call-ID, so a dialog's
// messages stay in order on one worker, or by its source when it has
// none.
func (g *Ingress) shardOf(d *Datagram) *shard {
	if len(g.shards) == 1 {
		return g.shards[0]
	}
	var h uint64
	if d.Info.CallID != nil {
		h = maphash.Bytes(g.seed, d.Info.CallID)
	} else {
		h = maphash.Comparable(g.seed, d.From)
	}
	return g.shards[h%uint64(len(g.shards))]
}

// shard is one worker and its lanes.
type shard struct {
	g  *Ingress
	id int

	mu      sync.Mutex
	lanes   [numLanes]fifo
	fastRun int
	// slowTurn alternates LaneSlow and LaneShed while both have work.
	slowTurn bool
	// sums counts the slow lane's datagrams by hash of bytes and source.
	sums map[uint64]int
	wake chan struct{}
	// held is set while the slow lane's head INVITE is held back by Hold
	// (and just before Hold is asked): WakeHeld wakes only such workers.
	held atomic.Bool
}

// push queues d; false when it is a copy of a slow datagram still
// waiting (nothing queued).
func (s *shard) push(d Datagram) bool {
	s.mu.Lock()
	if d.Lane == LaneSlow {
		if s.sums[d.sum] > 0 {
			s.mu.Unlock()
			return false
		}
		if s.sums == nil {
			s.sums = make(map[uint64]int)
		}
		s.sums[d.sum]++
	}
	s.lanes[d.Lane].push(d)
	s.mu.Unlock()
	s.signal()
	return true
}

// popSlow takes the slow lane's head (s.mu held).
func (s *shard) popSlow() Datagram {
	d := s.lanes[LaneSlow].pop()
	if s.sums[d.sum]--; s.sums[d.sum] <= 0 {
		delete(s.sums, d.sum)
	}
	return d
}

func (s *shard) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// drain drops what is queued (after the worker ended).
func (s *shard) drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.lanes {
		for s.lanes[l].size > 0 {
			var d Datagram
			if Lane(l) == LaneSlow {
				d = s.popSlow()
			} else {
				d = s.lanes[l].pop()
			}
			s.g.t.sub(d.acct, d.Lane, d.cost, s.id)
			d.release()
		}
	}
}

// next takes the datagram whose turn it is: the fast lane first (but,
// while another lane has one ready, one of those after every FastRun),
// then the shed and slow lanes in turn (the slow lane's head INVITE only
// once Hold lets it go), then strangers'. When nothing is ready it
// returns how long to wait at most (0: until woken).
func (s *shard) next(now time.Time) (d Datagram, ok bool, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fast, slow, shed, strange := &s.lanes[LaneFast], &s.lanes[LaneSlow], &s.lanes[LaneShed], &s.lanes[LaneStrange]
	if fast.size > 0 && s.fastRun < s.g.o.FastRun {
		s.fastRun++
		return fast.pop(), true, 0
	}
	slowReady := slow.size > 0 && s.release(slow.peek(), now, &wait)
	switch {
	case shed.size > 0 && (!slowReady || !s.slowTurn):
		s.fastRun, s.slowTurn = 0, true
		return shed.pop(), true, 0
	case slowReady:
		s.fastRun, s.slowTurn = 0, false
		return s.popSlow(), true, 0
	case fast.size > 0:
		s.fastRun++
		return fast.pop(), true, 0
	case strange.size > 0:
		return strange.pop(), true, 0
	}
	return Datagram{}, false, wait
}

// release reports whether the slow lane's head goes on now; if not, it
// sets *wait to how much longer it is held (s.mu held).
func (s *shard) release(d *Datagram, now time.Time, wait *time.Duration) bool {
	if s.g.o.Hold == nil || d.Info.Kind != KindInvite {
		s.held.Store(false)
		return true
	}
	s.held.Store(true)
	h := s.g.o.Hold(d, now)
	if h <= 0 {
		s.held.Store(false)
		return true
	}
	*wait = h
	return false
}

func (s *shard) run() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// One Datagram for the worker's life: the handler gets a pointer to
	// it (valid until it returns), which would otherwise cost a heap
	// allocation per datagram.
	d := new(Datagram)
	for {
		if s.g.stopped.Load() {
			return
		}
		var ok bool
		var wait time.Duration
		*d, ok, wait = s.next(time.Now())
		if ok {
			s.handle(d)
			continue
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-s.wake:
			case <-timer.C:
			case <-s.g.stop:
			}
			timer.Stop()
			continue
		}
		select {
		case <-s.wake:
		case <-s.g.stop:
		}
	}
}

// handle is one datagram's turn; its buffer and its place in the budgets
// are given back after.
func (s *shard) handle(d *Datagram) {
	defer func() {
		s.g.t.sub(d.acct, d.Lane, d.cost, s.id)
		d.release()
	}()
	defer func() {
		if v := recover(); v != nil {
			s.g.o.Panic("ingress.handle", v)
		}
	}()
	info, err := Scan(d.Data, s.g.bounds)
	switch {
	case errors.Is(err, ErrParams):
		s.g.o.Drop(DropParams)
		return
	case errors.Is(err, ErrHeaders):
		s.g.o.Drop(DropHeaders)
		return
	}
	info.CallID = d.Info.CallID
	d.Info = info
	if d.Lane == LaneShed {
		if !s.g.o.Shed(d) {
			s.g.o.Drop(DropFull)
		}
		return
	}
	s.g.o.Handle(d)
}
