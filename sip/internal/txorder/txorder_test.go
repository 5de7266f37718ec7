package txorder

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// conn is a connection that writes nowhere.
type conn struct{}

func (conn) LocalAddr() net.Addr           { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5060} }
func (conn) WriteMsg(sipmsg.Message) error { return nil }
func (conn) Ref(int) int                   { return 1 }
func (conn) TryClose() (int, error)        { return 0, nil }
func (conn) Close() error                  { return nil }

// openTx starts a client transaction of an INVITE over TCP (no
// retransmissions) and the responses to it with code.
func openTx(t *testing.T) (*sipmsg.ClientTx, func(code int) *sipmsg.Response) {
	t.Helper()
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{User: "100", Host: "127.0.0.1", Port: 5070})
	via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "TCP",
		Host: "127.0.0.1", Port: 5060, Params: sipmsg.NewParams()}
	via.Params.Add("branch", "z9hG4bK-txorder")
	req.AppendHeader(via)
	from := &sipmsg.FromHeader{Address: sipmsg.Uri{User: "a", Host: "127.0.0.1"}, Params: sipmsg.NewParams()}
	from.Params.Add("tag", "f")
	req.AppendHeader(from)
	req.AppendHeader(&sipmsg.ToHeader{Address: sipmsg.Uri{User: "100", Host: "127.0.0.1"}, Params: sipmsg.NewParams()})
	cid := sipmsg.CallIDHeader("txorder-1")
	req.AppendHeader(&cid)
	req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.INVITE})
	req.SetTransport("TCP")
	key, err := sipmsg.ClientTxKeyMake(req)
	if err != nil {
		t.Fatal(err)
	}
	tx := sipmsg.NewClientTx(key, req, conn{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := tx.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Terminate)
	return tx, func(code int) *sipmsg.Response {
		return sipmsg.NewResponseFromRequest(req, code, "", nil)
	}
}

// next returns the next response tx hands its user.
func next(t *testing.T, tx *sipmsg.ClientTx) *sipmsg.Response {
	t.Helper()
	select {
	case r := <-tx.Responses():
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no response handed to the transaction")
		return nil
	}
}

// TestDeliverKeepsTheOrder: responses delivered back to back reach their
// transaction in the order they were delivered, though the transaction
// blocks handing each to its user.
func TestDeliverKeepsTheOrder(t *testing.T) {
	var tab Table
	tx, res := openTx(t)
	tab.Add(tx)
	if tab.Len() != 1 {
		t.Fatalf("Len %d after Add, want 1", tab.Len())
	}
	codes := []int{180, 183, 181, 182, 200}
	for _, c := range codes {
		if !tab.Deliver(res(c)) {
			t.Fatalf("a %d of the table's transaction was not delivered", c)
		}
	}
	for _, want := range codes {
		if got := next(t, tx).StatusCode; got != want {
			t.Fatalf("the transaction got %d, want %d (order %v)", got, want, codes)
		}
	}
}

// TestQueueBound: at most QueueMax responses wait for one transaction;
// more are dropped, and still count as delivered (not sipgo's).
func TestQueueBound(t *testing.T) {
	var tab Table
	tx, res := openTx(t)
	tab.Add(tx)
	if !tab.Deliver(res(180)) {
		t.Fatal("not delivered")
	}
	// The drain goroutine holds the 180 until it is read: the rest queue.
	tab.mu.Lock()
	q := tab.m[tx.Key()]
	tab.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		taken := q.running && len(q.q) == 0
		q.mu.Unlock()
		if taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the 180 was not taken from the queue")
		}
	}
	for range QueueMax + 5 {
		if !tab.Deliver(res(183)) {
			t.Fatal("a response beyond the bound went to sipgo's layer")
		}
	}
	n := 0
	for {
		select {
		case <-tx.Responses():
			n++
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	if want := 1 + QueueMax; n != want {
		t.Fatalf("the transaction got %d responses, want %d (the first and a full queue)", n, want)
	}
}

// TestHandle: a response to a transaction of the table goes to it, not to
// Next; a request, a response to a transaction the table does not know
// and one to a transaction that ended go to Next.
func TestHandle(t *testing.T) {
	var tab Table
	var passed []sipmsg.Message
	tab.Next = []sipmsg.MessageHandler{func(m sipmsg.Message) { passed = append(passed, m) }}
	tx, res := openTx(t)

	stray := res(180)
	tab.Handle(stray) // not added yet
	tab.Add(tx)
	tab.Handle(res(183))
	if got := next(t, tx).StatusCode; got != 183 {
		t.Fatalf("the transaction got %d, want 183", got)
	}
	req := sipmsg.NewRequest(sipmsg.OPTIONS, sipmsg.Uri{Host: "127.0.0.1"})
	tab.Handle(req)
	tx.Terminate()
	if tab.Len() != 0 {
		t.Fatalf("Len %d once the transaction ended, want 0", tab.Len())
	}
	ended := res(200)
	tab.Handle(ended)
	if len(passed) != 3 || passed[0] != stray || passed[1] != req || passed[2] != ended {
		t.Fatalf("Next got %v, want the stray 180, the request and the ended transaction's 200", passed)
	}

	// A transaction that ended before Add is not kept.
	tx2, _ := openTx(t)
	tx2.Terminate()
	tab.Add(tx2)
	if tab.Len() != 0 {
		t.Fatalf("Len %d after adding an ended transaction, want 0", tab.Len())
	}
}
