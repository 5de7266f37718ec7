package sip

import (
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// recordingConn is a sipgo connection that keeps what is written to it:
// a response's status code, 0 for a request.
type recordingConn struct {
	mu    sync.Mutex
	wrote []int
}

func (c *recordingConn) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5060}
}

func (c *recordingConn) WriteMsg(m sipmsg.Message) error {
	code := 0
	if r, ok := m.(*sipmsg.Response); ok {
		code = r.StatusCode
	}
	c.mu.Lock()
	c.wrote = append(c.wrote, code)
	c.mu.Unlock()
	return nil
}

func (c *recordingConn) Ref(int) int            { return 1 }
func (c *recordingConn) TryClose() (int, error) { return 1, nil }
func (c *recordingConn) Close() error           { return nil }

func (c *recordingConn) written() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.wrote)
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestStaleTimersClientTx: a client INVITE transaction's Timers A and B
// are taken at its start, and run once its final answer came they do
// nothing: no INVITE sent again, no timeout (the transaction stays
// Accepted until it is ended). Whether they are then swept at once is
// the runtime's to show, and TestAckedStreamCallEndsItsTransactions's:
// here, on one goroutine, any timer this goroutine resets sweeps them
// anyway. A server transaction's timers are never taken.
func TestStaleTimersClientTx(t *testing.T) {
	if err := checkTxTimers(); err != nil {
		t.Fatal(err)
	}
	var none staleTimers
	none.take(sipmsg.NewServerTx("key", legRequest(sipmsg.INVITE, "127.0.0.1:5070", 0), &recordingConn{}, discardLog()))
	if none != (staleTimers{}) {
		t.Fatal("timers taken from a server transaction")
	}
	conn := &recordingConn{}
	func() {
		req := legRequest(sipmsg.INVITE, "127.0.0.1:5070", 1)
		tx := sipmsg.NewClientTx("key", req, conn, discardLog())
		if err := tx.Init(); err != nil {
			t.Fatal(err)
		}
		var s staleTimers
		s.take(tx)
		if s[0] == nil || s[1] == nil {
			t.Fatalf("Timers A and B taken: %v, %v; want both", s[0] != nil, s[1] != nil)
		}
		ok := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
		go tx.Receive(ok)
		select {
		case r := <-tx.Responses():
			if r.StatusCode != 200 {
				t.Fatalf("passed up %d, want 200", r.StatusCode)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("the 200 was not passed up")
		}
		s.fire()
		time.Sleep(50 * time.Millisecond)
		select {
		case <-tx.Done():
			t.Fatalf("Timer B run after the answer ended the transaction: %v", tx.Err())
		default:
		}
		tx.Terminate()
		stopTxTimer(tx, clientTxTimerM)
	}()
	if got := conn.written(); !slices.Equal(got, []int{0}) {
		t.Errorf("the transaction wrote %v, want only its INVITE (its Timer A sent nothing again)", got)
	}
}
