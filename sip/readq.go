package sip

import (
	"bytes"
	"hash/maphash"
	"math/bits"
	"net"
	"net/netip"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// The UDP read queue: calls already admitted are read first.
//
// sipgo reads a UDP socket in one loop that takes a datagram, parses it and
// hands it on, in the order the kernel queued them. Under an INVITE flood
// that order is the problem: the socket buffer fills with new INVITEs, and
// the responses, ACKs and BYEs of the calls the node already let in wait
// behind seconds of them, or are dropped by the kernel with them when the
// buffer is full. Their senders retransmit, the calls time out, and the
// flood's lost INVITEs come back as retransmissions into the next second
// (BENCHMARKS.md, issue 15).
//
// So each UDP listener is read by a goroutine of its own (readQueue.run)
// that only drains the socket, with the socket's read buffer, into three
// bounded queues in memory, and sipgo's loop reads from those
// (readQueue.ReadFrom) instead of the socket, in this order:
//
//  1. the fast queue: what peers and carriers send that is a response
//     ("SIP/2.0 ") or a request of a mostly in-dialog method, spelt
//     exactly (ACK, BYE, INFO, UPDATE, PRACK, NOTIFY, MESSAGE, REFER,
//     SUBSCRIBE);
//  2. the slow queue: the rest of what they send: INVITE and CANCEL (a
//     CANCEL stays behind its INVITE), OPTIONS, REGISTER, PUBLISH, and
//     anything the reader does not recognise at a glance (sipgo accepts
//     "invite", a leading tab…), so no spelling of an INVITE overtakes the
//     others;
//  3. the strangers' queue: whatever comes from a source the configuration
//     does not know (with unknown_source reject; with drop it never gets
//     this far), so a stranger's flood waits behind every peer and carrier.
//
// Within a queue the order is the socket's, and no message of a
// transaction is moved to another queue than the request that opened it.
//
// The slow queue is also where a burst of new calls waits for the inflight
// bound (overload.go): while every unit is taken, an INVITE at its head is
// held back until a unit is given back, for at most sip.inflight_wait
// (config.SIP.InflightWait, 100 ms by default), and only then handed on
// (where the read filter or the screen sheds it if the bound is still
// taken). So a burst the node decides within a fraction of
// a second, a GC cycle, or the node descheduled on a shared box, is
// decided rather than shed, while a flood fills the queue and is shed at
// its door. Nothing is held but the datagram: no transaction, no
// goroutine, no store call.
//
// The fast and slow queues are shared fairly between parties (a carrier
// address; a peer, by name, whatever its source address): one party holds
// at most readQueueFastShare datagrams of the fast queue and slowShare of
// the slow one (4 per unit of the inflight bound, at least 64, at most a
// quarter of readQueueSlowMax, the bound of the whole queue), and the last
// quarter of each queue is kept for parties that hold little of it
// (readQueueFastMin, readQueueSlowMin), so however many parties flood, a
// quiet one still finds room. A datagram identical to one already waiting
// in the slow queue from the same source (a retransmission) is not queued
// again: its original will be answered. While the slow queue has a
// datagram ready, sipgo's loop takes one after every readQueueFastRun fast
// ones, so a flood of in-dialog traffic slows new calls down but cannot
// stop them. A datagram that finds no room in the slow queue is, if it is
// a plain new INVITE from a peer, shed at once with the screen's 503
// (rawshed.go, whatever the inflight bound) rather than left for the
// kernel to drop without an answer; anything else (a CANCEL, a re-INVITE,
// an OPTIONS keepalive, an INVITE of a form the raw path leaves to sipgo)
// is dropped as the socket would have dropped it, and its sender
// retransmits it. So a party flooding CANCELs, re-INVITEs, OPTIONS or odd
// spellings fills only its own share, and sheds only its own calls. A
// datagram that finds no room in the fast or the strangers' queue (which
// has no shares), or the queues at readQueueBytes, is dropped too. Every
// such drop is counted in
// cpsguard_sip_errors_total{reason="read_queue_full"}.
//
// OPTIONS, REGISTER and PUBLISH wait with INVITEs: behind an INVITE held
// for a unit (up to sip.inflight_wait), and one in every readQueueFastRun
// reads while the fast queue is busy.
//
// The reader also drops what the read filter would drop before any other
// work (datagrams over MaxMessageSize, strangers' with unknown_source
// drop, the ACKs of shed answers), so none of it takes a place in a queue.

const (
	// readQueueFast bounds the fast queue (datagrams), and
	// readQueueFastShare one party's part of it.
	readQueueFast      = 8192
	readQueueFastShare = readQueueFast / 4
	// readQueueFastMin is what a party may always queue while the last
	// readQueueFastReserve places of the fast queue are left: however
	// many parties flood, a quiet one still finds room.
	readQueueFastMin     = 256
	readQueueFastReserve = readQueueFast / 4
	// readQueueFastRun is how many fast datagrams sipgo's loop takes in a
	// row while a slow one is ready: however busy the fast queue, new
	// calls still move.
	readQueueFastRun = 16
	// readQueueBytes bounds the memory the queues of a listener hold
	// (pooled buffers counted whole).
	readQueueBytes = 32 << 20
	// readQueueStrange bounds the strangers' queue.
	readQueueStrange = 256
	// readQueueSlowPerUnit sizes one party's share of the slow queue from
	// the inflight bound: a few INVITEs per unit keep the loop busy
	// between two decisions without letting one wait long (each costs the
	// loop 4–25 µs), at least readQueueSlowMin and at most a quarter of
	// readQueueSlowMax, which bounds the queue as a whole.
	readQueueSlowPerUnit = 4
	readQueueSlowMin     = 64
	readQueueSlowMax     = 4096
	// readQueueSlowReserve are the slow queue's last places, kept for
	// parties holding fewer than readQueueSlowMin datagrams.
	readQueueSlowReserve = readQueueSlowMax / 4
)

// party is who a datagram counts against in a queue's shares: a carrier
// by address (checked first, even inside a peer's prefix), a peer by name
// (all its source addresses together).
type party struct {
	peer string
	ip   netip.Addr
}

// datagram is one queued UDP datagram.
type datagram struct {
	data []byte
	from netip.AddrPort
	at   time.Time // when the reader took it
	buf  *[]byte   // data's pooled buffer, or nil
	who  party     // fast and slow queues: whose share it takes
	sum  uint64    // slow queue: the hash of data and from
}

// cost is what the datagram counts against readQueueBytes.
func (d *datagram) cost() int { return costOf(len(d.data)) }

// costOf is what a datagram of n bytes counts against readQueueBytes: its
// buffer (a pooled one whole).
func costOf(n int) int {
	if n <= datagramBufSize {
		return datagramBufSize
	}
	return n
}

// datagramBufSize is the size of the pooled buffers queued datagrams are
// copied into (most SIP datagrams are well under it; larger ones get a
// buffer of their own).
const datagramBufSize = 2048

var datagramBufs = sync.Pool{New: func() any { b := make([]byte, datagramBufSize); return &b }}

// newDatagram copies data into a pooled buffer.
func newDatagram(data []byte, from netip.AddrPort) datagram {
	d := datagram{from: from, at: time.Now()}
	if len(data) > datagramBufSize {
		d.data = bytes.Clone(data)
		return d
	}
	d.buf = datagramBufs.Get().(*[]byte)
	d.data = (*d.buf)[:copy(*d.buf, data)]
	return d
}

// free gives the datagram's buffer back to the pool.
func (d *datagram) free() {
	if d.buf != nil {
		datagramBufs.Put(d.buf)
		d.buf, d.data = nil, nil
	}
}

// fifo is a queue of datagrams with a capacity.
type fifo struct {
	buf        []datagram
	head, size int
}

func newFifo(n int) fifo { return fifo{buf: make([]datagram, n)} }

func (q *fifo) push(d datagram) {
	q.buf[(q.head+q.size)%len(q.buf)] = d
	q.size++
}

func (q *fifo) peek() *datagram { return &q.buf[q.head] }

func (q *fifo) pop() datagram {
	d := q.buf[q.head]
	q.buf[q.head] = datagram{}
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return d
}

// lane is a fifo shared between parties: by counts each party's
// datagrams in it, and room applies its limits.
type lane struct {
	fifo
	by map[party]int
	// least and reserve: once only reserve places are left, a party may
	// still queue while it holds fewer than least (the reserve is for
	// quiet parties).
	least, reserve int
}

func newLane(capacity, least, reserve int) lane {
	return lane{fifo: newFifo(capacity), by: make(map[party]int), least: least, reserve: reserve}
}

// room reports whether who may queue one more datagram on l, holding at
// most share of it.
func (l *lane) room(who party, share int) bool {
	held, capacity := l.by[who], len(l.buf)
	return l.size < capacity && held < share && (held < l.least || l.size < capacity-l.reserve)
}

func (l *lane) push(d datagram) {
	l.fifo.push(d)
	l.by[d.who]++
}

func (l *lane) pop() datagram {
	d := l.fifo.pop()
	if l.by[d.who]--; l.by[d.who] <= 0 {
		delete(l.by, d.who)
	}
	return d
}

// readQueue is the net.PacketConn sipgo serves for one UDP listener:
// writes and addresses are the socket's, reads come from the queues its
// reader fills.
type readQueue struct {
	*net.UDPConn
	p *Proxy

	mu      sync.Mutex
	fast    lane
	slow    lane
	strange lane // one party: strangers are not told apart
	bytes   int  // held in the three queues (datagram.cost)
	// slowSums counts the slow queue's datagrams by hash of their bytes
	// and source.
	slowSums map[uint64]int
	seed     maphash.Seed
	fastRun  int   // fast datagrams handed on since the last slow one
	err      error // the socket's read error, once the reader ended
	// wake holds one token: something was queued, a unit of the inflight
	// bound was given back, or err was set.
	wake  chan struct{}
	timer *time.Timer // ReadFrom's, for an INVITE held back
	// parsed bounds the INVITEs the reader parses to shed them when the
	// queue is full (rawshed.go: shedParsed); the reader's alone.
	parsed parseBudget
}

// newReadQueue wraps a UDP listener; run must be started for reads to
// return anything.
func newReadQueue(p *Proxy, c *net.UDPConn) *readQueue {
	q := &readQueue{
		UDPConn: c, p: p,
		fast:    newLane(readQueueFast, readQueueFastMin, readQueueFastReserve),
		slow:    newLane(readQueueSlowMax, readQueueSlowMin, readQueueSlowReserve),
		strange: newLane(readQueueStrange, 0, 0),
		wake:    make(chan struct{}, 1), timer: time.NewTimer(time.Hour),
		slowSums: make(map[uint64]int), seed: maphash.MakeSeed(),
	}
	q.timer.Stop()
	p.inflight.watch(q.wake)
	return q
}

// slowShare is one party's share of the slow queue for the inflight bound
// of cfg.
func slowShare(cfg *config.Config) int {
	if cfg == nil {
		return readQueueSlowMin
	}
	return min(readQueueSlowMax/4, max(readQueueSlowMin, int(inflightLimit(cfg))*readQueueSlowPerUnit))
}

// fastStarts are how the datagrams of the fast queue begin: a response, or
// a request of a method that is mostly in-dialog, spelt as RFC 3261 spells
// it (OPTIONS, REGISTER and PUBLISH, mostly out of dialog, are no more
// urgent than a new call and wait with INVITEs).
var fastStarts = [][]byte{
	[]byte("SIP/2.0 "), []byte("ACK "), []byte("BYE "), []byte("INFO "),
	[]byte("UPDATE "), []byte("PRACK "), []byte("NOTIFY "), []byte("MESSAGE "),
	[]byte("REFER "), []byte("SUBSCRIBE "),
}

// isFast reports a datagram of the fast queue.
func isFast(data []byte) bool {
	for _, s := range fastStarts {
		if bytes.HasPrefix(data, s) {
			return true
		}
	}
	return false
}

// run drains the socket until it is closed. A panic while a datagram is
// classified passes that datagram on to the strangers' queue (it is
// counted in cpsguard_panics_total{where="sip.read_queue"}).
func (q *readQueue) run() {
	buf := make([]byte, sipmsg.TransportBufferReadSize)
	for {
		n, from, err := q.UDPConn.ReadFromUDPAddrPort(buf)
		if err != nil {
			q.mu.Lock()
			q.err = err
			q.mu.Unlock()
			q.signal()
			return
		}
		q.take(buf[:n], from)
	}
}

// take classifies one datagram read from the socket and queues a copy of
// it, sheds it, or drops it.
func (q *readQueue) take(data []byte, from netip.AddrPort) {
	defer q.p.panics.Recover("sip.read_queue", func(error) {
		if !q.push(&q.strange, party{}, readQueueStrange, data, from) {
			q.p.m.SIPErrors.WithLabelValues("read_queue_full").Inc()
		}
	})
	if len(bytes.Trim(data, "\x00")) == 0 || q.p.dropEarly(data, from) {
		return
	}
	cfg := q.p.cfg()
	who, known := q.p.partyOf(cfg, from.Addr().WithZone("").Unmap())
	switch {
	case !known:
		if q.push(&q.strange, party{}, readQueueStrange, data, from) {
			return
		}
	case isFast(data):
		if q.push(&q.fast, who, readQueueFastShare, data, from) {
			return
		}
	case q.push(&q.slow, who, slowShare(cfg), data, from) || q.p.shedRawFrom(q.UDPConn, from, data, true, &q.parsed):
		return
	}
	q.p.m.SIPErrors.WithLabelValues("read_queue_full").Inc()
}

// partyOf is the party a datagram from ip counts against, and whether ip
// is a peer's or a carrier's at all.
func (p *Proxy) partyOf(cfg *config.Config, ip netip.Addr) (party, bool) {
	if cfg == nil {
		return party{}, false
	}
	if p.isCarrierAddr(cfg, ip) {
		// Before the peers: a carrier's address is a single host, however
		// wide a peer's prefix around it.
		return party{ip: ip}, true
	}
	if pe := cfg.PeerByAddr(ip); pe != nil {
		return party{peer: pe.Name}, true
	}
	return party{}, false
}

// push queues a copy of data on l as who's (holding at most share of l),
// unless l has no room for it or the queues hold readQueueBytes. On the
// slow lane a datagram already waiting there from the same source is not
// queued again, and counts as queued.
func (q *readQueue) push(l *lane, who party, share int, data []byte, from netip.AddrPort) bool {
	dedupe := l == &q.slow
	var sum uint64
	if dedupe {
		sum = maphash.Bytes(q.seed, data) ^ bits.RotateLeft64(maphash.Comparable(q.seed, from), 1)
	}
	queued, ok := func() (bool, bool) {
		q.mu.Lock()
		defer q.mu.Unlock()
		if dedupe && q.slowSums[sum] > 0 {
			return false, true
		}
		if !l.room(who, share) || q.bytes+costOf(len(data)) > readQueueBytes {
			if l == &q.fast && l.size >= len(l.buf)-l.reserve {
				// The fast lane is full for everyone, not only for one
				// party's share: the node is behind on answers.
				q.p.noteBehind(time.Now())
			}
			return false, false
		}
		d := newDatagram(data, from)
		d.who, d.sum = who, sum
		l.push(d)
		q.bytes += d.cost()
		if dedupe {
			q.slowSums[sum]++
		}
		return true, true
	}()
	if queued {
		q.signal()
	}
	return ok
}

// popSlow takes the slow queue's head (q.mu held).
func (q *readQueue) popSlow() datagram {
	d := q.slow.pop()
	if q.slowSums[d.sum]--; q.slowSums[d.sum] <= 0 {
		delete(q.slowSums, d.sum)
	}
	return d
}

func (q *readQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// ReadFrom returns the next queued datagram, waiting for one: from the
// fast queue first (but one from the slow queue, when it has one ready,
// after every readQueueFastRun); then from the slow queue once the
// inflight bound has a free unit (a new call can be decided now) or its
// head has waited sip.inflight_wait, or at once when its head is not an
// INVITE; then from the strangers' queue. After the
// socket is closed it returns the socket's error once the queues are
// empty.
func (q *readQueue) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		var d datagram
		ok := false
		hold := time.Duration(0)
		q.mu.Lock()
		fast := false
		switch {
		case q.fast.size > 0 && q.fastRun < readQueueFastRun:
			d, ok, fast = q.fast.pop(), true, true
			q.fastRun++
		case q.slow.size > 0 && q.holdOff(&hold):
			d, ok = q.popSlow(), true
			q.fastRun = 0
		case q.fast.size > 0:
			d, ok, fast = q.fast.pop(), true, true
			q.fastRun++
		case q.strange.size > 0:
			d, ok = q.strange.pop(), true
		}
		if ok {
			q.bytes -= d.cost()
		}
		err := q.err
		q.mu.Unlock()
		switch {
		case ok:
			if fast {
				if now := time.Now(); now.Sub(d.at) > behindLag {
					// An answer waited this long in the node's own queue.
					q.p.noteBehind(now)
				}
			}
			n := copy(b, d.data)
			d.free()
			return n, net.UDPAddrFromAddrPort(d.from), nil
		case err != nil:
			return 0, nil, err
		case hold > 0:
			q.timer.Reset(hold)
			select {
			case <-q.wake:
			case <-q.timer.C:
			}
			q.timer.Stop()
		default:
			<-q.wake
		}
	}
}

// holdOff reports whether the slow queue's head goes on now; if not, it
// sets *hold to how much longer the head waits for a unit of the inflight
// bound (q.mu held).
func (q *readQueue) holdOff(hold *time.Duration) bool {
	d := q.slow.peek()
	if !bytes.HasPrefix(d.data, inviteStart) {
		return true
	}
	cfg := q.p.cfg()
	if cfg == nil || q.p.inflight.Load() < inflightLimit(cfg) {
		return true
	}
	*hold = cfg.SIP.InflightWait - time.Since(d.at)
	return *hold <= 0
}
