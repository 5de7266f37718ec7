// Package txorder hands the messages the sip package's screen let through
// to sipgo's transaction layer, and a next hop's responses to one of the
// node's own client transactions to that transaction in the order they
// were read.
//
// sipgo's transaction layer runs each response it is handed on a
// goroutine of its own, and a goroutine per response races the next one
// into the transaction: a carrier's 180 sent right before its 200 reached
// the INVITE's transaction after the 200 (which had moved it on) and was
// dropped, in half of h67's runs with no gap between them; or 183 came
// before 180. The sip package's read path keeps a dialog's datagrams in
// order up to that hand-off, so a Table keeps the client transactions the
// node opened itself (Add) and gives each its responses through a queue of
// its own, drained by one goroutine at a time: in order, and without
// holding up the caller (a read path worker), since a transaction may
// block handing a response to its leg. Handle is the hand-off: a response
// to a transaction of the Table's through its queue (Deliver), anything
// else (requests, a response to a transaction the Table does not know:
// not yet added, ended, or sipgo's own) to the Table's Next handlers,
// sipgo's, as before.
//
// It knows nothing of calls: only sipgo's client transactions, by their
// key (sipgo's ClientTxKeyMake).
//
// # Failure
//
// A Table keeps a transaction from Add until it terminates (sipgo's
// OnTerminate; one that ended already is not kept). At most QueueMax
// responses wait for one transaction; more are dropped (Deliver still
// reports true: a next hop sends them again, or they are copies). A
// response sipgo cannot key goes to Next. Nothing panics.
//
// # Concurrency
//
// A Table is safe for concurrent use; its zero value is ready, with Next
// set before the first Handle (and not changed after). Add, Deliver and
// Handle never block on a transaction: each queue is drained by a
// goroutine of its own while it holds responses.
package txorder
