package sip

import (
	"sync"

	sipmsg "github.com/emiago/sipgo/sip"
)

// A next hop's responses to one client transaction of the node's, handed
// to it in the order they were read.
//
// sipgo's transaction layer runs each response it is handed on a
// goroutine of its own, and a goroutine per response races the next one
// into the transaction: a carrier's 180 sent right before its 200 reached
// the INVITE's transaction after the 200 (which had moved it on) and was
// dropped, in half of h67's runs with no gap between them; or 183 came
// before 180. The read path keeps a dialog's datagrams in order up to that
// hand-off (ingress.go), so the node keeps the transactions it opened
// itself (openTx) and gives each its responses through a queue of its
// own, drained by one goroutine at a time: in order, and without holding
// up the worker, since a transaction may block handing a response to its
// leg. A response to a transaction the node does not know (not yet
// registered, ended, or sipgo's own) takes sipgo's way, as before.

// txQueueMax bounds the responses waiting for one transaction; more are
// dropped (a next hop sends them again, or they are copies).
const txQueueMax = 32

// txOrder is the node's open client transactions by key. Safe for
// concurrent use.
type txOrder struct {
	mu sync.Mutex
	m  map[string]*txQueue
}

// txQueue is one transaction's responses waiting to be handed to it.
type txQueue struct {
	tx *sipmsg.ClientTx

	mu      sync.Mutex
	q       []*sipmsg.Response
	running bool // a goroutine is draining q
	// first backs q while it is short (a call's answers: no allocation).
	first [4]*sipmsg.Response
}

// add registers tx until it terminates.
func (o *txOrder) add(tx *sipmsg.ClientTx) {
	key := tx.Key()
	q := &txQueue{tx: tx}
	o.mu.Lock()
	if o.m == nil {
		o.m = make(map[string]*txQueue)
	}
	o.m[key] = q
	o.mu.Unlock()
	// sipgo calls this with the transaction's state settled; it only
	// takes o.mu.
	if !tx.OnTerminate(func(string, error) { o.remove(key, q) }) {
		o.remove(key, q) // ended already
	}
}

func (o *txOrder) remove(key string, q *txQueue) {
	o.mu.Lock()
	if o.m[key] == q {
		delete(o.m, key)
	}
	o.mu.Unlock()
}

// size is the number of registered transactions (tests).
func (o *txOrder) size() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// deliver hands res to its transaction, after those read before it, and
// reports whether the transaction is one of the node's (false: res is
// for sipgo's transaction layer).
func (o *txOrder) deliver(res *sipmsg.Response) bool {
	key, err := sipmsg.ClientTxKeyMake(res)
	if err != nil {
		return false
	}
	o.mu.Lock()
	q := o.m[key]
	o.mu.Unlock()
	if q == nil {
		return false
	}
	q.mu.Lock()
	if len(q.q) >= txQueueMax {
		q.mu.Unlock()
		return true
	}
	if q.q == nil {
		q.q = q.first[:0]
	}
	q.q = append(q.q, res)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.drain()
	}
	return true
}

// drain hands the queued responses to the transaction, one after the
// other, until none is left.
func (q *txQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.q) == 0 {
			q.running = false
			q.q = nil
			q.first = [4]*sipmsg.Response{}
			q.mu.Unlock()
			return
		}
		res := q.q[0]
		q.q[0] = nil
		q.q = q.q[1:]
		q.mu.Unlock()
		q.tx.Receive(res)
	}
}

// toTxLayer hands a message the screen let through to the transaction
// layer: a response to one of the node's own client transactions through
// its queue (in order), anything else to sipgo's handlers.
func (p *Proxy) toTxLayer(m sipmsg.Message) {
	if res, ok := m.(*sipmsg.Response); ok && p.txOrder.deliver(res) {
		return
	}
	for _, h := range p.txLayer {
		h(m)
	}
}
