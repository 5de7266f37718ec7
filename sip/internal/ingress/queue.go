package ingress

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Datagram is one datagram waiting for, or being handled by, a worker.
type Datagram struct {
	// Data is the datagram's bytes: valid until the handler returns (its
	// buffer is reused then).
	Data []byte
	// From is the packet's source address.
	From netip.AddrPort
	// Conn is the socket it arrived on: answers leave from it.
	Conn *net.UDPConn
	// At is when the reader took it from the socket.
	At time.Time
	// Info is what the scan read; Info.CallID points into Data.
	Info Info
	// Party is who it counts against; Known is false for a stranger.
	Party Party
	Known bool
	// Lane is the lane it waited in; Worker the worker (0..Workers-1)
	// that handles it.
	Lane   Lane
	Worker int

	acct *account
	cost int
	buf  *[]byte
	sum  uint64 // LaneSlow: hash of Data and From
}

// bufTiers are the sizes of the pooled buffers datagrams are copied into;
// a datagram takes the smallest that holds it and counts its size.
var bufTiers = [...]int{1024, 2048, 4096, 8192, 16384, 65536}

var bufPools [len(bufTiers)]sync.Pool

func init() {
	for i, n := range bufTiers {
		bufPools[i].New = func() any { b := make([]byte, n); return &b }
	}
}

// tierOf returns the index of the smallest tier holding n bytes, or -1.
func tierOf(n int) int {
	for i, t := range bufTiers {
		if n <= t {
			return i
		}
	}
	return -1
}

// costOf is what a datagram of n bytes counts against the byte budgets.
func costOf(n int) int {
	if i := tierOf(n); i >= 0 {
		return bufTiers[i]
	}
	return n
}

// fill copies data into a pooled buffer.
func (d *Datagram) fill(data []byte) {
	i := tierOf(len(data))
	if i < 0 {
		d.Data = append([]byte(nil), data...)
		d.cost = len(data)
		return
	}
	d.buf = bufPools[i].Get().(*[]byte)
	d.Data = (*d.buf)[:copy(*d.buf, data)]
	d.cost = bufTiers[i]
}

// release gives the buffer back.
func (d *Datagram) release() {
	if d.buf != nil {
		if i := tierOf(cap(*d.buf)); i >= 0 && bufTiers[i] == cap(*d.buf) {
			bufPools[i].Put(d.buf)
		}
	}
	*d = Datagram{}
}

// fifo is a growable ring of datagrams; the budgets bound what it holds.
type fifo struct {
	buf        []Datagram
	head, size int
}

func (q *fifo) push(d Datagram) {
	if q.size == len(q.buf) {
		n := max(16, 2*len(q.buf))
		nb := make([]Datagram, n)
		for i := range q.size {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = d
	q.size++
}

func (q *fifo) peek() *Datagram { return &q.buf[q.head] }

func (q *fifo) pop() Datagram {
	d := q.buf[q.head]
	q.buf[q.head] = Datagram{}
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	if q.size == 0 && len(q.buf) > 1024 {
		// Give a flood's memory back once the lane is empty.
		q.buf, q.head = nil, 0
	}
	return d
}
