package sip

import (
	"bytes"
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
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
//     ("SIP/2.0 ") or a request of a method other than INVITE and CANCEL,
//     spelt exactly (ACK, BYE and every other in-dialog request);
//  2. the slow queue: the rest of what they send: INVITE and CANCEL (a
//     CANCEL stays behind its INVITE), and anything the reader does not
//     recognise at a glance (sipgo accepts "invite", a leading tab…), so
//     no spelling of an INVITE overtakes the others;
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
// (config.SIP.InflightWait, 100 ms by default), and
// only then handed on (where the read filter or the screen sheds it if the
// bound is still taken). So a burst the node decides within a fraction of
// a second, a GC cycle, or the node descheduled on a shared box, is
// decided rather than shed, while a flood fills the queue and is shed at
// its door. Nothing is held but the datagram: no transaction, no
// goroutine, no store call.
//
// The slow queue is shared fairly: one source IP holds at most
// slowQueueLen datagrams of it (4 per unit of the inflight bound, at least
// 64), all sources together readQueueSlowMax, and a datagram identical to
// one already waiting (a retransmission) is not queued again: its original
// will be answered. A datagram that finds no room is, if it is a plain new
// INVITE from a peer, shed at once with the screen's 503 (rawshed.go,
// whatever the inflight bound) rather than left for the kernel to drop
// without an answer; anything else (a CANCEL, a re-INVITE, an INVITE of a
// form the raw path leaves to sipgo) is dropped as the socket would have
// dropped it, and its sender retransmits it. So a source flooding CANCELs,
// re-INVITEs or odd spellings fills only its own share, and sheds only its
// own calls. A datagram that finds the fast or the strangers' queue full,
// or all queues at readQueueBytes, is dropped too. Every such drop is
// counted in cpsguard_sip_errors_total{reason="read_queue_full"}.
//
// The reader also drops what the read filter would drop before any other
// work (datagrams over MaxMessageSize, strangers' with unknown_source
// drop, the ACKs of shed answers), so none of it takes a place in a queue.

const (
	// readQueueFast bounds the fast queue (datagrams).
	readQueueFast = 8192
	// readQueueBytes bounds the bytes held in all queues of a listener
	// (datagrams are at most MaxMessageSize).
	readQueueBytes = 16 << 20
	// readQueueStrange bounds the strangers' queue.
	readQueueStrange = 256
	// readQueueSlowPerUnit sizes one source's share of the slow queue from
	// the inflight bound: a few INVITEs per unit keep the loop busy
	// between two decisions without letting one wait long (each costs the
	// loop 4–25 µs), within [readQueueSlowMin, readQueueSlowMax], which
	// also bounds the queue as a whole.
	readQueueSlowPerUnit = 4
	readQueueSlowMin     = 64
	readQueueSlowMax     = 4096
)

// datagram is one queued UDP datagram.
type datagram struct {
	data []byte
	from netip.AddrPort
	at   time.Time // when the reader took it
	buf  *[]byte   // data's pooled buffer, or nil
	sum  uint64    // slow queue: the hash of data
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

// readQueue is the net.PacketConn sipgo serves for one UDP listener:
// writes and addresses are the socket's, reads come from the queues its
// reader fills.
type readQueue struct {
	*net.UDPConn
	p *Proxy

	mu      sync.Mutex
	fast    fifo
	slow    fifo
	strange fifo
	bytes   int // held in the three queues
	// The slow queue's datagrams by hash of their bytes and by source IP.
	slowSums map[uint64]int
	slowBy   map[netip.Addr]int
	seed     maphash.Seed
	err      error // the socket's read error, once the reader ended
	// wake holds one token: something was queued, a unit of the inflight
	// bound was given back, or err was set.
	wake  chan struct{}
	timer *time.Timer // ReadFrom's, for an INVITE held back
}

// newReadQueue wraps a UDP listener; run must be started for reads to
// return anything.
func newReadQueue(p *Proxy, c *net.UDPConn) *readQueue {
	q := &readQueue{
		UDPConn: c, p: p,
		fast: newFifo(readQueueFast), slow: newFifo(readQueueSlowMax), strange: newFifo(readQueueStrange),
		wake: make(chan struct{}, 1), timer: time.NewTimer(time.Hour),
		slowSums: make(map[uint64]int), slowBy: make(map[netip.Addr]int),
		seed: maphash.MakeSeed(),
	}
	q.timer.Stop()
	p.inflight.watch(q.wake)
	return q
}

// slowQueueLen is one source's share of the slow queue for the current
// inflight bound.
func (p *Proxy) slowQueueLen() int {
	cfg := p.cfg()
	if cfg == nil {
		return readQueueSlowMin
	}
	return min(readQueueSlowMax, max(readQueueSlowMin, int(inflightLimit(cfg))*readQueueSlowPerUnit))
}

// fastStarts are how the datagrams of the fast queue begin: a response, or
// a request of a method other than INVITE and CANCEL, spelt as RFC 3261
// spells it.
var fastStarts = [][]byte{
	[]byte("SIP/2.0 "), []byte("ACK "), []byte("BYE "), []byte("OPTIONS "),
	[]byte("INFO "), []byte("UPDATE "), []byte("PRACK "), []byte("NOTIFY "),
	[]byte("MESSAGE "), []byte("REFER "), []byte("SUBSCRIBE "), []byte("REGISTER "),
	[]byte("PUBLISH "),
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
	defer q.p.panics.Recover("sip.read_queue", func(error) { q.push(&q.strange, readQueueStrange, data, from) })
	if len(bytes.Trim(data, "\x00")) == 0 || q.p.dropEarly(data, from) {
		return
	}
	if !q.p.knownSource(q.p.cfg(), from.Addr().WithZone("").Unmap()) {
		q.push(&q.strange, readQueueStrange, data, from)
		return
	}
	if isFast(data) {
		q.push(&q.fast, readQueueFast, data, from)
		return
	}
	if q.pushSlow(data, from) || q.p.shedRawFrom(q.UDPConn, from, data, true) {
		return
	}
	q.p.m.SIPErrors.WithLabelValues("read_queue_full").Inc()
}

// push queues a copy of data on f unless f holds limit datagrams already
// or the queues hold readQueueBytes; a datagram with no room is dropped
// and counted.
func (q *readQueue) push(f *fifo, limit int, data []byte, from netip.AddrPort) {
	q.mu.Lock()
	ok := f.size < limit && q.bytes+len(data) <= readQueueBytes
	if ok {
		f.push(newDatagram(data, from))
		q.bytes += len(data)
	}
	q.mu.Unlock()
	if !ok {
		q.p.m.SIPErrors.WithLabelValues("read_queue_full").Inc()
		return
	}
	q.signal()
}

// pushSlow queues a copy of data on the slow queue if its source's share
// and the queue have room; it reports true too, queueing nothing, when an
// identical datagram is already waiting there.
func (q *readQueue) pushSlow(data []byte, from netip.AddrPort) bool {
	src := from.Addr()
	share := q.p.slowQueueLen()
	sum := maphash.Bytes(q.seed, data)
	q.mu.Lock()
	if q.slowSums[sum] > 0 {
		q.mu.Unlock()
		return true
	}
	ok := q.slowBy[src] < share && q.slow.size < readQueueSlowMax && q.bytes+len(data) <= readQueueBytes
	if ok {
		d := newDatagram(data, from)
		d.sum = sum
		q.slow.push(d)
		q.bytes += len(data)
		q.slowSums[sum]++
		q.slowBy[src]++
	}
	q.mu.Unlock()
	if ok {
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
	src := d.from.Addr()
	if q.slowBy[src]--; q.slowBy[src] <= 0 {
		delete(q.slowBy, src)
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
// fast queue first; then from the slow queue once the inflight bound has a
// free unit (a new call can be decided now) or its head has waited
// sip.inflight_wait, or at once when its head is not an INVITE; then from
// the strangers' queue. After the
// socket is closed it returns the socket's error once the queues are
// empty.
func (q *readQueue) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		var d datagram
		ok := false
		hold := time.Duration(0)
		q.mu.Lock()
		if q.fast.size > 0 {
			d, ok = q.fast.pop(), true
		} else if q.slow.size > 0 {
			if hold = q.holdBack(q.slow.peek()); hold <= 0 {
				d, ok = q.popSlow(), true
			}
		}
		if !ok && q.strange.size > 0 {
			d, ok = q.strange.pop(), true
		}
		if ok {
			q.bytes -= len(d.data)
		}
		err := q.err
		q.mu.Unlock()
		switch {
		case ok:
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

// holdBack is how much longer the slow queue's head waits for a unit of
// the inflight bound: 0 when it goes on now.
func (q *readQueue) holdBack(d *datagram) time.Duration {
	if !bytes.HasPrefix(d.data, inviteStart) {
		return 0
	}
	cfg := q.p.cfg()
	if cfg == nil || q.p.inflight.Load() < inflightLimit(cfg) {
		return 0
	}
	return max(0, cfg.SIP.InflightWait-time.Since(d.at))
}
