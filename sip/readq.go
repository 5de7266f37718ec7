package sip

import (
	"bytes"
	"net"
	"net/netip"
	"sync"

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
// that only drains the socket, with the socket's read buffer, into two
// bounded queues in memory, and sipgo's loop reads from those
// (readQueue.ReadFrom) instead of the socket:
//
//   - the slow queue holds requests that start or cancel a call attempt
//     (INVITE and CANCEL: a CANCEL stays behind its INVITE);
//   - the fast queue holds the rest (responses, ACK, BYE and every other
//     in-dialog request), and sipgo's loop always takes from it first.
//
// Within a queue the order is the socket's, and no message of a transaction
// is moved ahead of the request that opened it. When the slow queue is full
// a plain new INVITE from a peer is shed at once with the screen's 503
// (rawshed.go, whatever the inflight bound) rather than left for the kernel
// to drop without an answer; anything else that finds it full goes to the
// fast queue, so an in-dialog re-INVITE or a CANCEL is never lost to the
// bound. A fast queue that is full drops the datagram, as the socket would
// have, counted in cpsguard_sip_errors_total{reason="read_queue_full"}.
//
// The reader also drops what the read filter would drop before any other
// work (oversized datagrams, strangers' with unknown_source drop, the ACKs
// of shed answers), so none of it takes a place in a queue.

const (
	// readQueueFast bounds the fast queue (datagrams; at ~1 KB each, a
	// few MB at most).
	readQueueFast = 8192
	// readQueueSlowPerUnit sizes the slow queue from the inflight bound:
	// a few INVITEs per unit keep the loop busy between two decisions
	// without letting one wait long (each costs the loop 4–25 µs), within
	// [readQueueSlowMin, readQueueSlowMax].
	readQueueSlowPerUnit = 4
	readQueueSlowMin     = 64
	readQueueSlowMax     = 4096
)

// datagram is one queued UDP datagram.
type datagram struct {
	data []byte
	from netip.AddrPort
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

	mu   sync.Mutex
	fast fifo
	slow fifo
	err  error         // the socket's read error, once the reader ended
	wake chan struct{} // one token: something was queued, or err set
}

// newReadQueue wraps a UDP listener; run must be started for reads to
// return anything.
func newReadQueue(p *Proxy, c *net.UDPConn) *readQueue {
	return &readQueue{
		UDPConn: c, p: p,
		fast: newFifo(readQueueFast), slow: newFifo(readQueueSlowMax),
		wake: make(chan struct{}, 1),
	}
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
// classified passes that datagram on to the fast queue (it is counted in
// cpsguard_panics_total{where="sip.read_queue"}).
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
	defer q.p.panics.Recover("sip.read_queue", func(error) { q.enqueue(data, from) })
	if len(bytes.Trim(data, "\x00")) == 0 {
		return
	}
	if q.p.dropEarly(data, from) {
		return
	}
	if isSlow(data) {
		limit := q.p.slowQueueLen()
		q.mu.Lock()
		full := q.slow.size >= limit
		if !full {
			q.slow.push(datagram{data: bytes.Clone(data), from: from})
		}
		q.mu.Unlock()
		if !full {
			q.signal()
			return
		}
		if q.p.shedRawFrom(q.UDPConn, from, data, true) {
			return
		}
	}
	q.enqueue(data, from)
}

// enqueue puts a copy of data on the fast queue, or drops it when that is
// full.
func (q *readQueue) enqueue(data []byte, from netip.AddrPort) {
	q.mu.Lock()
	full := q.fast.full()
	if !full {
		q.fast.push(datagram{data: bytes.Clone(data), from: from})
	}
	q.mu.Unlock()
	if full {
		q.p.m.SIPErrors.WithLabelValues("read_queue_full").Inc()
		return
	}
	q.signal()
}

func (q *readQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// ReadFrom returns the next queued datagram, fast queue first, waiting
// for one; after the socket is closed, its error once the queues are
// empty.
func (q *readQueue) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		q.mu.Lock()
		var d datagram
		ok := true
		switch {
		case q.fast.size > 0:
			d = q.fast.pop()
		case q.slow.size > 0:
			d = q.slow.pop()
		default:
			ok = false
		}
		err := q.err
		q.mu.Unlock()
		if ok {
			n := copy(b, d.data)
			return n, net.UDPAddrFromAddrPort(d.from), nil
		}
		if err != nil {
			return 0, nil, err
		}
		<-q.wake
	}
}
