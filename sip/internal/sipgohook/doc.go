// Package sipgohook owns the node's reach into sipgo's unexported fields
// (github.com/emiago/sipgo v1.7.2), where sipgo offers no hook of its own:
//
//   - Screen: the transport layer's handler list (TransportLayer.handlers),
//     wrapped so that the sip package's screen decides what sipgo's
//     transaction layer sees;
//   - WrapClientTxConn: a client transaction's connection (ClientTx.conn),
//     wrapped before the transaction starts (the sip package's ackConn
//     writes sipgo's ACK of a non-2xx answer with one Via, and bounds a
//     blocked stream write);
//   - EndLinger: the timer of an INVITE transaction's Accepted state
//     (ServerTx.timer_l, ClientTx.timer_m), which sipgo's Terminate leaves
//     armed, holding the transaction and every message of its call until
//     it fires.
//
// Each is found by reflection, by name and type, once, when the package
// is loaded; it is read and set through unsafe, as sipgo's own code would.
// It knows nothing of calls; the sip package says what to wrap and when to
// end a linger.
//
// # Failure
//
// Fails loudly, never silently: if a sipgo upgrade renames or retypes a
// field, CheckClientTxConn or CheckTimers returns an error and Screen
// fails (the sip package's New then fails with it), and so do the tests
// here and in package sip. WrapClientTxConn returns ErrNoTxConn for a
// transaction without a connection. EndLinger leaves alone what is not
// one of sipgo's INVITE transactions, or holds no timer.
//
// # Concurrency
//
// Screen runs once, before any listener is served (nothing reads the
// handler list meanwhile). WrapClientTxConn runs before the transaction
// starts (Init), EndLinger once the goroutine that calls it has
// terminated the transaction: both touch a field that only sipgo's
// transaction, under its lock, reads otherwise.
package sipgohook
