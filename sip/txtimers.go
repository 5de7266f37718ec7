package sip

import (
	"errors"
	"reflect"
	"sync"
	"time"
	"unsafe"

	sipmsg "github.com/emiago/sipgo/sip"
)

// sipgo's transactions arm timers whose functions hold the transaction,
// and through it every message of the call. Two kinds outlive it.
//
// Timers sipgo leaves armed: Terminate removes a transaction from
// sipgo's tables, but leaves the Accepted state's timer armed (v1.7.2:
// ServerTx.delete stops every timer but timer_l, ClientTx.delete every
// one but timer_m), and that timer's function holds the transaction, and
// so every message of the call, until it fires at the end of the linger:
// ending a transaction early would free nothing. endAnswered stops the
// two timers itself (they fire at once: a stopped one would hold the
// transaction as long), through their unexported fields (stopTxTimer), as
// ack.go wraps a transaction's connection.
//
// Timers sipgo stopped: a stopped timer stays in its P's timer heap, its
// function with it, until the runtime sweeps it (Go 1.23 on,
// runtime/time.go): when its old deadline reaches the heap's head, when
// another timer of that heap was moved earlier, or when stopped timers
// are a quarter of the heap, whichever comes first. sipgo stops a client
// transaction's Timers A and B at its final answer (B was set for 32 s),
// and each kept the transaction reachable until the sweep, and through
// its end callback (holdAnswered) the call's server transaction too: an
// ACKed call's transactions were freed seconds late, at random (a heap
// dump: allp → a P's timer heap → Timer B's function → the ClientTx).
// staleTimers takes them when the transaction is made and, at its final
// answer, moves them to now: the runtime runs them at once and takes
// them out. They do nothing then: a client transaction's Timers A and B
// are ignored in the Accepted and Completed states.
//
// A server INVITE transaction's 1xx timer (set for a day, noAutoTrying,
// stopped at its first answer) is left to the sweep: running it answers
// 100, which a Completed transaction would send again in place of its
// final answer, and which fails (an Error log of sipgo's) once it ended;
// run after the end it cost ~50 µs of CPU and 17 allocations per call
// (BenchmarkCall, the whole test's CPU). With the client transactions run, nothing else holds
// the server transaction, and the sweep came in time in 400 runs of
// TestAckedStreamCallEndsItsTransactions's cases.
//
// If a sipgo upgrade renames or retypes any of these fields, New fails
// (checkTxTimers) and TestAckedCallFreesItsTransactions fails, never
// silently.

// The index paths of sipgo's transaction fields used here (nil when
// missing): the linger timers (ServerTx.timer_l, ClientTx.timer_m), the
// stopped ones (ClientTx.timer_a and timer_b), and the lock those are
// set under (baseTx.mu).
var (
	serverTxTimerL = txTimerField(reflect.TypeFor[sipmsg.ServerTx](), "timer_l")
	clientTxTimerM = txTimerField(reflect.TypeFor[sipmsg.ClientTx](), "timer_m")
	clientTxTimerA = txTimerField(reflect.TypeFor[sipmsg.ClientTx](), "timer_a")
	clientTxTimerB = txTimerField(reflect.TypeFor[sipmsg.ClientTx](), "timer_b")
	clientTxMu     = txMutexField(reflect.TypeFor[sipmsg.ClientTx]())
)

// txTimerField returns the index path of t's *time.Timer field name.
func txTimerField(t reflect.Type, name string) []int {
	f, ok := t.FieldByName(name)
	if !ok || f.Type != reflect.TypeFor[*time.Timer]() {
		return nil
	}
	return f.Index
}

// txMutexField returns the index path of t's sync.Mutex field mu.
func txMutexField(t reflect.Type) []int {
	f, ok := t.FieldByName("mu")
	if !ok || f.Type != reflect.TypeFor[sync.Mutex]() {
		return nil
	}
	return f.Index
}

// errNoTxTimers: sipgo's transactions lack a timer field this file uses.
var errNoTxTimers = errors.New("sip: sipgo's transactions have no timer_l, timer_m, timer_a, timer_b or mu to reach (sipgo changed?)")

// checkTxTimers reports whether every field used here is there (New
// fails otherwise).
func checkTxTimers() error {
	for _, index := range [][]int{serverTxTimerL, clientTxTimerM, clientTxTimerA, clientTxTimerB, clientTxMu} {
		if index == nil {
			return errNoTxTimers
		}
	}
	return nil
}

// txField returns the field at index of tx, a *sipmsg.ServerTx or
// *sipmsg.ClientTx, settable; ok is false for any other type.
func txField(tx any, index []int) (f reflect.Value, ok bool) {
	switch tx := tx.(type) {
	case *sipmsg.ServerTx:
		ok = tx != nil
	case *sipmsg.ClientTx:
		ok = tx != nil
	}
	if !ok || index == nil {
		return reflect.Value{}, false
	}
	f = reflect.ValueOf(tx).Elem().FieldByIndex(index)
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), true
}

// txTimer returns tx's timer at index (nil when none).
func txTimer(tx any, index []int) *time.Timer {
	f, ok := txField(tx, index)
	if !ok {
		return nil
	}
	t, _ := f.Interface().(*time.Timer)
	return t
}

// stopTxTimer ends the linger of the timer at index in tx, a
// *sipmsg.ServerTx or *sipmsg.ClientTx that was terminated by this
// goroutine (its Terminate took the transaction's lock, after the timer
// was set under it); other types are left alone. The timer fires at once
// rather than being stopped (a stopped timer would hold the transaction
// until the runtime sweeps it, above): fired, it is taken out, and its
// function finds the transaction terminated (sipgo's delete of a
// terminated transaction does nothing).
func stopTxTimer(tx any, index []int) {
	if t := txTimer(tx, index); t != nil {
		t.Reset(0)
	}
}

// staleTimers are a client transaction's Timers A and B, which sipgo
// stops rather than fires at its final answer (above).
type staleTimers [2]*time.Timer

// take takes tx's Timers A and B, those not taken yet (nothing for
// another type than *sipmsg.ClientTx). Read under the transaction's
// lock: sipgo's reader may be handling its answer meanwhile.
func (s *staleTimers) take(tx any) {
	if _, client := tx.(*sipmsg.ClientTx); !client {
		return
	}
	f, ok := txField(tx, clientTxMu)
	if !ok {
		return
	}
	l := f.Addr().Interface().(*sync.Mutex)
	l.Lock()
	defer l.Unlock()
	for i, index := range [2][]int{clientTxTimerA, clientTxTimerB} {
		if s[i] == nil {
			s[i] = txTimer(tx, index)
		}
	}
}

// fire moves the timers taken to now, once the transaction has its final
// answer (above): the runtime runs them and takes them out of its heap.
// They are forgotten (their functions hold the transaction).
func (s *staleTimers) fire() {
	for i, t := range s {
		if t != nil {
			t.Reset(0)
			s[i] = nil
		}
	}
}
