package sipgohook

import (
	"net"
	"reflect"
	"testing"
	"time"
	"unsafe"

	sipmsg "github.com/emiago/sipgo/sip"
)

// TestStopTxTimerFires: the linger timers (Timers L and M) EndLinger ends
// are fired, not stopped. The sip package's txsFreed has the runtime sweep
// stopped timers from its heaps before it looks, so a Stop there would
// free the transactions in its tests and hold them for the whole linger
// on a quiet node; this is the check that tells the two apart.
func TestStopTxTimerFires(t *testing.T) {
	if err := CheckTimers(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		tx    any
		index []int
	}{
		{"server tx, timer L", &sipmsg.ServerTx{}, serverTxTimerL},
		{"client tx, timer M", &sipmsg.ClientTx{}, clientTxTimerM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fired := make(chan struct{})
			tm := time.AfterFunc(time.Hour, func() { close(fired) })
			defer tm.Stop()
			f := reflect.ValueOf(tc.tx).Elem().FieldByIndex(tc.index)
			reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(tm))
			EndLinger(tc.tx)
			select {
			case <-fired:
			case <-time.After(10 * time.Second):
				t.Fatal("the linger timer did not fire within 10 s of EndLinger")
			}
		})
	}
}

// TestScreen: the screen runs in front of the transport layer's handlers,
// which it returns: a message reaches the handler installed in their place
// and passes only when the screen says so.
func TestScreen(t *testing.T) {
	tp := sipmsg.NewTransportLayer(net.DefaultResolver, sipmsg.NewParser(), nil)
	if _, err := Screen(tp, nil, nil); err == nil {
		t.Fatal("a layer without handlers screened")
	}
	tp.OnMessage(func(sipmsg.Message) {})
	allow, passed := false, 0
	next, err := Screen(tp, func(sipmsg.Message) bool { return allow }, func(sipmsg.Message) { passed++ })
	if err != nil || len(next) != 1 {
		t.Fatalf("Screen = %d handlers, %v; want the layer's one", len(next), err)
	}
	// Screening again returns the handler the first Screen installed.
	installed, err := Screen(tp, func(sipmsg.Message) bool { return true }, func(sipmsg.Message) {})
	if err != nil || len(installed) != 1 {
		t.Fatalf("Screen again = %d handlers, %v", len(installed), err)
	}
	req := sipmsg.NewRequest(sipmsg.OPTIONS, sipmsg.Uri{Scheme: "sip", Host: "192.0.2.1"})
	installed[0](req)
	allow = true
	installed[0](req)
	if passed != 1 {
		t.Fatalf("passed %d messages, want the one the screen let through", passed)
	}
}

// TestWrapClientTxConn: the connection sipgo's client transaction writes
// on is the wrapper's; a nil wrapper leaves it.
func TestWrapClientTxConn(t *testing.T) {
	if err := CheckClientTxConn(); err != nil {
		t.Fatal(err)
	}
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", Host: "192.0.2.1"})
	if err := WrapClientTxConn(sipmsg.NewClientTx("k", req, nil, nil), nil); err != ErrNoTxConn {
		t.Fatalf("a transaction without a connection: %v, want ErrNoTxConn", err)
	}
	inner := &stubConn{}
	tx := sipmsg.NewClientTx("k", req, inner, nil)
	if err := WrapClientTxConn(tx, func(sipmsg.Connection) sipmsg.Connection { return nil }); err != nil {
		t.Fatal(err)
	}
	outer := &stubConn{}
	if err := WrapClientTxConn(tx, func(c sipmsg.Connection) sipmsg.Connection {
		if c != inner {
			t.Errorf("wrapped %v, want the transaction's connection", c)
		}
		outer.Connection = c
		return outer
	}); err != nil {
		t.Fatal(err)
	}
	f := reflect.ValueOf(tx).Elem().FieldByIndex(clientTxConn)
	if got := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface(); got != sipmsg.Connection(outer) {
		t.Fatalf("the transaction's connection is %v, want the wrapper", got)
	}
}

// stubConn is a sipgo connection for WrapClientTxConn to wrap.
type stubConn struct{ sipmsg.Connection }
