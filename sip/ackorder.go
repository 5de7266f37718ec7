package sip

import (
	"sync"
	"time"
)

// ACKs to a stream leg, and the requests of their dialog right behind them.
//
// An ACK whose next hop is over TCP or TLS is not relayed by the screen
// itself (a stream write may wait, and the screen runs in a UDP worker or
// a connection's read loop): it is sent from a goroutine (ackToStream). A
// BYE (or any request of the dialog) the same caller sends right behind
// it goes to sipgo, which runs forwardInDialog in a goroutine of its own,
// and was written to the carrier's connection first in up to 12 of 30
// calls (TestAckBeforeByeToStreamCarrier): a UAS still waiting for its
// ACK then fails the call. So the screen notes such an ACK as it lets it
// go (begin, in the order the dialog's messages arrive: one worker or read
// loop per Call-ID), ackToStream ends the note once it has sent or dropped
// it (end: every note is ended once), and a request of the same call and
// direction that reaches forwardInDialog meanwhile waits for that first
// (wait), at most connectTimeout (the bound of the ACK's own send when it
// has to open a connection, writeRequest).
//
// It keeps nothing past the send: at most ackOrderMax notes, one per call
// and direction with an ACK in flight. A note older than connectTimeout
// (a send that outlasted it) holds nothing back; the next ACK of its call
// replaces it, and a full table sweeps such notes out, at most once per
// ackOrderSweep. A note that finds the table full of live ones is not
// taken, and its dialog's requests are then not held back.
type ackOrder struct {
	// limit is how long a note holds requests back; 0: connectTimeout.
	limit time.Duration

	mu    sync.Mutex
	m     map[ackOrderKey]*ackFlight
	swept time.Time
}

// ackOrderKey is a call and the direction of its ACK.
type ackOrderKey struct {
	key callKey
	dir direction
}

// ackFlight is the ACKs of one call and direction in flight: n of them,
// done closed when the last is sent.
type ackFlight struct {
	n    int
	at   time.Time
	done chan struct{}
}

const (
	// ackOrderMax bounds the calls with an ACK in flight the table notes.
	ackOrderMax = 4096
	// ackOrderSweep spaces a full table's sweeps (each walks it all, under
	// the lock the screen takes).
	ackOrderSweep = 100 * time.Millisecond
)

// bound is how long a note holds requests back.
func (o *ackOrder) bound() time.Duration {
	if o.limit > 0 {
		return o.limit
	}
	return connectTimeout
}

// begin notes an ACK of key's call, in direction dir, on its way to
// ackToStream.
func (o *ackOrder) begin(key callKey, dir direction, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := ackOrderKey{key, dir}
	if f := o.m[k]; f != nil {
		if now.Sub(f.at) <= o.bound() {
			f.n++
			return
		}
		delete(o.m, k) // stale: holds nothing back; replaced below
		close(f.done)
	}
	if o.m == nil {
		o.m = make(map[ackOrderKey]*ackFlight)
	}
	if len(o.m) >= ackOrderMax {
		if now.Sub(o.swept) < ackOrderSweep {
			return
		}
		o.swept = now
		for k, f := range o.m {
			if now.Sub(f.at) > o.bound() {
				delete(o.m, k)
				close(f.done)
			}
		}
		if len(o.m) >= ackOrderMax {
			return
		}
	}
	o.m[k] = &ackFlight{n: 1, at: now, done: make(chan struct{})}
}

// end says an ACK of key's call in direction dir was sent or dropped.
func (o *ackOrder) end(key callKey, dir direction) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := ackOrderKey{key, dir}
	f := o.m[k]
	if f == nil {
		return
	}
	if f.n--; f.n <= 0 {
		delete(o.m, k)
		close(f.done)
	}
}

// wait returns once the ACKs of key's call in direction dir in flight are
// sent, or the note's bound after the first was noted.
func (o *ackOrder) wait(key callKey, dir direction) {
	o.mu.Lock()
	f := o.m[ackOrderKey{key, dir}]
	o.mu.Unlock()
	if f == nil {
		return
	}
	left := o.bound() - time.Since(f.at)
	if left <= 0 {
		return
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-f.done:
	case <-t.C:
	}
}

// len is the number of calls with an ACK noted in flight.
func (o *ackOrder) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}
