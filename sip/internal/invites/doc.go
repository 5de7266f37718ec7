// Package invites holds the INVITEs the proxy is handling, by their
// server transaction's Key (top Via branch and sent-by, as sipgo keys the
// transaction and as a CANCEL names it), and the tombstones of those that
// finished: the screen Registers each new INVITE as it arrives, so a
// CANCEL right behind it finds it (Lookup) and a retransmission is known
// as one; its handler Claims the entry, learns of a CANCEL through
// OnCancel, and finishes it. The sip package owns the policy around it:
// what to do with each Register result, when a call is decided, the
// inflight bound itself.
//
// Each new initial INVITE may hold one unit of the sip package's inflight
// bound, taken by the acquire function given to Register and given back
// through the Bound (ReleaseInflight: once, when its handler finishes, its
// call is decided, or the sweep finds it unclaimed after inflightOrphan,
// 5 s). An INVITE on such an orphan's key takes a unit again, a copy as
// much as another attempt: sipgo may now make a transaction of it, whose
// handler claims the entry.
//
// A tombstone answers for its own attempt only (the INVITE's Call-ID,
// From tag and CSeq, hashed): a copy of an answered INVITE is absorbed
// (RegAbsorbed: sipgo's transaction lasts 8 s, the tombstone 32 s), a
// copy of a forwarded one passes to sipgo (RegAnswered), and another
// attempt reusing the transaction key is a new INVITE, with its unit.
// A tombstone keeps no string and no pointer (its key's keyed 128-bit
// hash, its time, its attempt and two flags): the collector never walks
// the hundred thousand a node keeps at 3,000 CPS.
//
// # Failure
//
// Nothing here fails or blocks. The table is bounded by time, not count:
// an entry no handler claims is dropped after unclaimedTTL (32 s), a
// tombstone after TombstoneTTL (2 s), or keptTTL (32 s) when sipgo's
// transaction lives on (a forwarded call). Sweep walks the INVITEs in
// progress only; tombstones leave from FIFO queues in expiry order.
// Nothing panics on any input.
//
// # Concurrency
//
// A Table and its Entries are safe for concurrent use; Bound.Release may
// be called from any goroutine.
package invites
