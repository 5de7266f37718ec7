package sipgohook

import (
	"errors"
	"reflect"
	"slices"
	"time"
	"unsafe"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Screen puts screen in front of the handlers of tp: a message
// reaches them only when screen returns true.
//
// It returns the handlers the screen guards (the transaction layer's), for
// the sip package's UDP workers, which run the screen themselves.
func Screen(tp *sipmsg.TransportLayer, screen func(sipmsg.Message) bool, pass func(sipmsg.Message)) ([]sipmsg.MessageHandler, error) {
	f := reflect.ValueOf(tp).Elem().FieldByName("handlers")
	if !f.IsValid() || f.Type() != reflect.TypeFor[[]sipmsg.MessageHandler]() {
		return nil, errors.New("sip: sipgo's transport layer has no handler list to screen (sipgo changed?)")
	}
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	next := slices.Clone(f.Interface().([]sipmsg.MessageHandler))
	if len(next) == 0 {
		return nil, errors.New("sip: sipgo's transport layer has no handler to screen")
	}
	screened := func(m sipmsg.Message) {
		if screen(m) {
			pass(m)
		}
	}
	f.Set(reflect.ValueOf([]sipmsg.MessageHandler{screened}))
	return next, nil
}

// clientTxConn is the index path of sipgo's ClientTx connection field.
var clientTxConn = func() []int {
	f, ok := reflect.TypeFor[sipmsg.ClientTx]().FieldByName("conn")
	if !ok || f.Type != reflect.TypeFor[sipmsg.Connection]() {
		return nil
	}
	return f.Index
}()

// ErrNoTxConn: sipgo's ClientTx has no connection field to wrap.
var ErrNoTxConn = errors.New("sip: sipgo's client transaction has no connection to wrap (sipgo changed?)")

// CheckClientTxConn reports whether WrapClientTxConn can wrap a
// transaction's connection (the sip package's New fails otherwise).
func CheckClientTxConn() error {
	if clientTxConn == nil {
		return ErrNoTxConn
	}
	return nil
}

// WrapClientTxConn replaces tx's connection conn by wrap(conn); a nil
// wrap(conn) leaves it (a connection wrapped already). It returns
// ErrNoTxConn when tx has no connection field, or no connection in it.
func WrapClientTxConn(tx *sipmsg.ClientTx, wrap func(conn sipmsg.Connection) sipmsg.Connection) error {
	if clientTxConn == nil {
		return ErrNoTxConn
	}
	f := reflect.ValueOf(tx).Elem().FieldByIndex(clientTxConn)
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	conn, _ := f.Interface().(sipmsg.Connection)
	if conn == nil {
		return ErrNoTxConn
	}
	if w := wrap(conn); w != nil {
		f.Set(reflect.ValueOf(w))
	}
	return nil
}

// serverTxTimerL and clientTxTimerM are the index paths of sipgo's
// ServerTx.timer_l and ClientTx.timer_m (nil when missing).
var (
	serverTxTimerL = txTimerField(reflect.TypeFor[sipmsg.ServerTx](), "timer_l")
	clientTxTimerM = txTimerField(reflect.TypeFor[sipmsg.ClientTx](), "timer_m")
)

// txTimerField returns the index path of t's *time.Timer field name.
func txTimerField(t reflect.Type, name string) []int {
	f, ok := t.FieldByName(name)
	if !ok || f.Type != reflect.TypeFor[*time.Timer]() {
		return nil
	}
	return f.Index
}

// errNoTxTimers: sipgo's transactions have no linger timer fields to stop.
var errNoTxTimers = errors.New("sip: sipgo's INVITE transactions have no timer_l / timer_m to stop (sipgo changed?)")

// CheckTimers reports whether EndLinger can end the transactions'
// linger timers (the sip package's New fails otherwise).
func CheckTimers() error {
	if serverTxTimerL == nil || clientTxTimerM == nil {
		return errNoTxTimers
	}
	return nil
}

// EndLinger ends the linger of tx, a *sipmsg.ServerTx (its timer_l) or
// *sipmsg.ClientTx (its timer_m) that was terminated by this goroutine
// (stopTxTimer); other types are left alone.
func EndLinger(tx any) {
	switch tx.(type) {
	case *sipmsg.ServerTx:
		stopTxTimer(tx, serverTxTimerL)
	case *sipmsg.ClientTx:
		stopTxTimer(tx, clientTxTimerM)
	}
}

// stopTxTimer ends the linger of the timer at index in tx, a
// *sipmsg.ServerTx or *sipmsg.ClientTx that was terminated by this
// goroutine (its Terminate took the transaction's lock, after the timer
// was set under it); other types are left alone. The timer fires at once
// rather than being stopped: a stopped timer stays in the runtime's timer
// heap, its function and so the transaction with it, until its deadline
// reaches the heap's head or stopped timers are a quarter of the heap
// (Go 1.23 on), often the whole linger. Fired, it is taken out, and its
// function finds the transaction terminated (sipgo's delete of a
// terminated transaction does nothing). The timers sipgo stopped itself
// (a client transaction's Timers A and B, a server transaction's 1xx
// timer) are left to the runtime, which sweeps a heap once a timer reset
// in it comes due, as these two are (reset to now): at once under load.
// Firing those too cost ~4 % of the node's CPU per call (the sip
// package's tests: sweepTimerHeaps).
func stopTxTimer(tx any, index []int) {
	v := reflect.ValueOf(tx)
	switch tx.(type) {
	case *sipmsg.ServerTx, *sipmsg.ClientTx:
	default:
		return
	}
	if index == nil || v.IsNil() {
		return
	}
	f := v.Elem().FieldByIndex(index)
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	if t, _ := f.Interface().(*time.Timer); t != nil {
		t.Reset(0)
	}
}
