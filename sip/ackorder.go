package sip

import "github.com/cpsguard/cpsguard/sip/internal/sendorder"

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
// go (Begin, in the order the dialog's messages arrive: one worker or read
// loop per Call-ID), ackToStream ends the note once it has sent or dropped
// it (End: every note is ended once), and a request of the same call and
// direction that reaches forwardInDialog meanwhile waits for that first
// (Wait), at most connectTimeout (the bound of the ACK's own send when it
// has to open a connection, writeRequest).
//
// The table is package sendorder's, keyed by call and direction: it keeps
// nothing past the send (at most sendorder.Max notes), and a note older
// than connectTimeout (a send that outlasted it) holds nothing back.
type ackOrder = sendorder.Table[ackOrderKey]

// ackOrderKey is a call and the direction of its ACK.
type ackOrderKey struct {
	key callKey
	dir direction
}
