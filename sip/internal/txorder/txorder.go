package txorder

import (
	"sync"

	sipmsg "github.com/emiago/sipgo/sip"
)

// QueueMax bounds the responses waiting for one transaction; more are
// dropped (a next hop sends them again, or they are copies).
const QueueMax = 32

// Table is the node's open client transactions by key, and the handlers
// the messages for none of them go to.
type Table struct {
	// Next are the handlers a message Handle does not deliver goes to
	// (sipgo's transaction layer's). Set before the first Handle.
	Next []sipmsg.MessageHandler

	mu sync.Mutex
	m  map[string]*queue
}

// queue is one transaction's responses waiting to be handed to it.
type queue struct {
	tx *sipmsg.ClientTx

	mu      sync.Mutex
	q       []*sipmsg.Response
	running bool // a goroutine is draining q
	// first backs q while it is short (a call's answers: no allocation).
	first [4]*sipmsg.Response
}

// Add registers tx until it terminates.
func (t *Table) Add(tx *sipmsg.ClientTx) {
	key := tx.Key()
	q := &queue{tx: tx}
	t.mu.Lock()
	if t.m == nil {
		t.m = make(map[string]*queue)
	}
	t.m[key] = q
	t.mu.Unlock()
	// sipgo calls this with the transaction's state settled; it only
	// takes t.mu.
	if !tx.OnTerminate(func(string, error) { t.remove(key, q) }) {
		t.remove(key, q) // ended already
	}
}

func (t *Table) remove(key string, q *queue) {
	t.mu.Lock()
	if t.m[key] == q {
		delete(t.m, key)
	}
	t.mu.Unlock()
}

// Len returns the number of registered transactions.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Handle hands m to the transaction layer: a response to one of the
// Table's transactions through its queue (in order, Deliver), anything
// else to Next.
func (t *Table) Handle(m sipmsg.Message) {
	if res, ok := m.(*sipmsg.Response); ok && t.Deliver(res) {
		return
	}
	for _, h := range t.Next {
		h(m)
	}
}

// Deliver hands res to its transaction, after those read before it, and
// reports whether the transaction is one of the Table's (false: res is
// for sipgo's transaction layer).
func (t *Table) Deliver(res *sipmsg.Response) bool {
	key, err := sipmsg.ClientTxKeyMake(res)
	if err != nil {
		return false
	}
	t.mu.Lock()
	q := t.m[key]
	t.mu.Unlock()
	if q == nil {
		return false
	}
	q.mu.Lock()
	if len(q.q) >= QueueMax {
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
func (q *queue) drain() {
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
