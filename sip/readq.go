package sip

import (
	"bytes"
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
//  1. the fast queue: what peers and carriers send other than INVITE and
//     CANCEL (responses, ACK, BYE and every other in-dialog request);
//  2. the slow queue: their requests that start or cancel a call attempt
//     (INVITE and CANCEL, so a CANCEL stays behind its INVITE);
//  3. the strangers' queue: whatever comes from a source the configuration
//     does not know (with unknown_source reject; with drop it never gets
//     this far), so a stranger's flood waits behind every peer and carrier.
//
// Within a queue the order is the socket's, and no message of a transaction
// is moved ahead of the request that opened it.
//
// The slow queue is also where a burst of new calls waits for the inflight
// bound (overload.go): while every unit is taken, an INVITE at its head is
// held back until a unit is given back, for at most inviteQueueWait, and
// only then handed on (where the read filter or the screen sheds it if the
// bound is still taken). So a burst the node decides within a fraction of
// a second, a GC cycle, or the node descheduled on a shared box, is
// decided rather than shed, while a flood fills the queue and is shed at
// its door. Nothing is held but the datagram: no transaction, no
// goroutine, no store call. When the slow queue is full a plain new INVITE
// from a peer is shed at once with the screen's 503 (rawshed.go, whatever
// the inflight bound) rather than left for the kernel to drop without an
// answer; anything else that finds it full (a CANCEL, a re-INVITE, an
// INVITE of a form the raw path leaves to sipgo) goes to the fast queue,
// so it is never lost to the bound. A datagram that finds the fast or the
// strangers' queue full is dropped, as the socket would have dropped it,
// counted in cpsguard_sip_errors_total{reason="read_queue_full"}.
//
// The reader also drops what the read filter would drop before any other
// work (oversized datagrams, strangers' with unknown_source drop, the ACKs
// of shed answers), so none of it takes a place in a queue.

const (
	// readQueueFast bounds the fast queue (datagrams; at ~1 KB each, a
	// few MB at most).
	readQueueFast = 8192
	// readQueueStrange bounds the strangers' queue.
	readQueueStrange = 256
	// readQueueSlowPerUnit sizes the slow queue from the inflight bound:
	// a few INVITEs per unit keep the loop busy between two decisions
	// without letting one wait long (each costs the loop 4–25 µs), within
	// [readQueueSlowMin, readQueueSlowMax].
	readQueueSlowPerUnit = 4
	readQueueSlowMin     = 64
	readQueueSlowMax     = 4096
	// inviteQueueWait is how long an INVITE at the head of the slow queue
	// waits for a unit of the inflight bound before it is handed on
	// anyway (and shed there): long enough to ride out a burst, a GC
	// cycle or the node descheduled, well inside the caller's first
	// retransmission (Timer A, 500 ms).
	inviteQueueWait = 100 * time.Millisecond
)

// datagram is one queued UDP datagram.
type datagram struct {
	data []byte
	from netip.AddrPort
	at   time.Time // when the reader took it
	buf  *[]byte   // data's pooled buffer, or nil
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

func (q *fifo) full() bool { return q.size == len(q.buf) }

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
	err     error // the socket's read error, once the reader ended
	// wake holds one token: something was queued, a unit of the inflight
	// bound was given back, or err was set.
	wake  chan struct{}
	timer *time.Timer   // ReadFrom's, for an INVITE held back
	wait  time.Duration // inviteQueueWait (tests change it)
}

// newReadQueue wraps a UDP listener; run must be started for reads to
// return anything.
func newReadQueue(p *Proxy, c *net.UDPConn) *readQueue {
	q := &readQueue{
		UDPConn: c, p: p,
		fast: newFifo(readQueueFast), slow: newFifo(readQueueSlowMax), strange: newFifo(readQueueStrange),
		wake: make(chan struct{}, 1), timer: time.NewTimer(time.Hour),
		wait: inviteQueueWait,
	}
	q.timer.Stop()
	p.inflight.watch(q.wake)
	return q
}

// slowQueueLen is the slow queue's bound for the current inflight bound.
func (p *Proxy) slowQueueLen() int {
	cfg := p.cfg()
	if cfg == nil {
		return readQueueSlowMin
	}
	return min(readQueueSlowMax, max(readQueueSlowMin, int(inflightLimit(cfg))*readQueueSlowPerUnit))
}

// isSlow reports a datagram of the slow queue: a request starting or
// cancelling a call attempt.
func isSlow(data []byte) bool {
	return bytes.HasPrefix(data, inviteStart) || bytes.HasPrefix(data, cancelStart)
}

var cancelStart = []byte("CANCEL ")

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
	if isSlow(data) {
		if q.push(&q.slow, q.p.slowQueueLen(), data, from) || q.p.shedRawFrom(q.UDPConn, from, data, true) {
			return
		}
	}
	q.push(&q.fast, readQueueFast, data, from)
}

// push queues a copy of data on f unless f holds limit datagrams already;
// a datagram the fast or the strangers' queue has no room for is dropped
// and counted. It reports whether data was queued.
func (q *readQueue) push(f *fifo, limit int, data []byte, from netip.AddrPort) bool {
	q.mu.Lock()
	ok := f.size < limit
	if ok {
		f.push(newDatagram(data, from))
	}
	q.mu.Unlock()
	if ok {
		q.signal()
	} else if f != &q.slow {
		q.p.m.SIPErrors.WithLabelValues("read_queue_full").Inc()
	}
	return ok
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
// inviteQueueWait, or at once when its head is not an INVITE; then from
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
				d, ok = q.slow.pop(), true
			}
		}
		if !ok && q.strange.size > 0 {
			d, ok = q.strange.pop(), true
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
	if !bytes.HasPrefix(d.data, inviteStart) || q.p.unitFree() {
		return 0
	}
	return max(0, q.wait-time.Since(d.at))
}
