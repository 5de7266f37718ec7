package sip

import (
	"context"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/sipgohook"
)

// The ACK of a non-2xx answer to a forwarded INVITE.
//
// sipgo v1.7.2's client transaction builds that ACK itself, from the
// INVITE it sent, copying every Via of it (newAckRequestNon2xx in
// https://github.com/emiago/sipgo/blob/v1.7.2/sip/request.go calls
// CopyHeaders("Via", …)), and writes it on the transaction's connection;
// RFC 3261 17.1.1.3 wants exactly one Via there, the INVITE's top one (the
// proxy's). The forwarded INVITE itself must carry every upstream Via as a
// plain Via line: a carrier that copies the lines named "Via" into its
// answers (SIPp's [last_Via:]) would otherwise answer with the proxy's Via
// alone, and the proxy would relay a response with no Via at all.
//
// So the INVITE goes out as it should, and the transaction's connection is
// wrapped (ackConn) before the transaction starts: every ACK written on it
// keeps only its top Via. sipgo offers no hook for that; openInviteTx sets
// the transaction's unexported connection field by reflection
// (sipgohook.WrapClientTxConn), as the screen does for the handler list.
// If a sipgo upgrade renames the field, New fails with an error (and
// TestClientTxConnHook fails), never silently.

// openTx opens a client transaction for req on the proxy's transaction
// layer: an INVITE's through openInviteTx, anything else as sipgo's
// Request does.
func (p *Proxy) openTx(ctx context.Context, req *sipmsg.Request) (sipmsg.ClientTransaction, error) {
	if !req.IsInvite() {
		tx, err := p.tl.Request(ctx, req)
		if err == nil {
			p.txOrder.Add(tx) // an answer faster than this takes sipgo's way
		}
		return tx, err
	}
	return openInviteTx(ctx, p.tl, req, p.onWriteBlocked, p.txOrder.Add)
}

// writeBlocked is told of a TCP or TLS connection to a next hop closed
// because a write to it blocked past streamWriteBound: logged (once per
// connection) and counted (sip_errors_total{reason="write_blocked"}), since
// its calls show only as reroutes "failed".
func (p *Proxy) writeBlocked(remote string) {
	p.m.SIPErrors.WithLabelValues("write_blocked").Inc()
	p.log.Warn("a next hop stopped reading: its connection is closed after a write blocked past the bound, and its calls move on",
		"remote", remote, "bound", streamWriteBound.String())
}

// openInviteTx is sipgo's TransactionLayer.Request for an INVITE (create
// the transaction, then start it: the INVITE is written and its timers
// run), with the transaction's connection wrapped in between, before
// anything is written on it or read from it, so that its ACK of a non-2xx
// answer carries one Via.
func openInviteTx(ctx context.Context, tl *sipmsg.TransactionLayer, req *sipmsg.Request, blocked func(remote string), opened func(*sipmsg.ClientTx)) (*sipmsg.ClientTx, error) {
	tx, err := tl.NewClientTransaction(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := wrapTxConn(tx, blocked); err != nil {
		tx.Terminate()
		return nil, err
	}
	if opened != nil {
		opened(tx) // before the INVITE is written: its first answer too
	}
	if err := tx.Init(); err != nil {
		tx.Terminate()
		return nil, err
	}
	return tx, nil
}

// wrapTxConn replaces tx's connection by an ackConn around it, which tells
// blocked of a connection it closed.
func wrapTxConn(tx *sipmsg.ClientTx, blocked func(remote string)) error {
	return sipgohook.WrapClientTxConn(tx, func(conn sipmsg.Connection) sipmsg.Connection {
		if _, done := conn.(ackConn); done {
			return nil
		}
		return ackConn{Connection: conn, blocked: blocked}
	})
}

// ackConn is a transaction's connection that writes every ACK with its
// top Via only; everything else passes unchanged.
type ackConn struct {
	sipmsg.Connection
	// blocked is told of a connection closed for a blocked write, with
	// its remote address (nil: not).
	blocked func(remote string)
}

// WriteMsg writes m; an ACK loses every Via but its first. The ACK is the
// transaction's own, built for this write (sipgo builds a new one for each
// retransmitted final answer), so it is changed in place.
//
// Over TCP or TLS a write that has not finished within streamWriteBound
// closes the connection: the next hop does not read (its socket is full),
// and sipgo's write deadline never ends such a write while others queue
// behind it (each sets the socket's deadline again), so calls waited for
// the connection to die, a minute and more, with no setup timeout and no
// next carrier (h46). Closed, the writes fail at once, the calls move on,
// and the next INVITE dials a new connection.
func (c ackConn) WriteMsg(m sipmsg.Message) error {
	if r, ok := m.(*sipmsg.Request); ok && r.IsAck() {
		msgpart.KeepTopVia(r)
	}
	if conn, stream := c.Connection.(*sipmsg.TCPConnection); stream {
		// TCP and TLS alike (sipgo's TLS connection is a TCPConnection);
		// never a UDP listener, whose close would end the node's reads.
		blocked := c.blocked
		t := time.AfterFunc(streamWriteBound, func() {
			_ = conn.Close()
			if blocked != nil {
				// Once per connection closed: its calls show as reroutes
				// "failed" (no answer), this says why.
				blocked(conn.RemoteAddr().String())
			}
		})
		defer t.Stop()
	}
	return writeMsg(c.Connection, m)
}

// streamWriteBound is how long a write of an INVITE's transaction over TCP
// or TLS may block before its connection is closed (a var for tests).
var streamWriteBound = 4 * time.Second
