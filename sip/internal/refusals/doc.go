// Package refusals remembers the proxy's final refusals of INVITEs, so
// that a copy of a refused INVITE (the same transaction and attempt) gets
// the same answer again instead of a new decision: the Completed state of
// RFC 3261 17.2.1, kept without a transaction or a timer. The sip package
// says what is remembered and answers the copies (sip/refused.go); this
// package owns the table.
//
// A Table is keyed by two 64-bit hashes of the caller's choosing: the
// transaction (TxHash, TxHashString: the same hash of the same key bytes)
// and the attempt (AttemptHash: Call-ID, From tag, CSeq number, source
// and transport), hashed with a random seed per process, so a sender cannot
// make two of its attempts collide on purpose. It holds each Refusal (code,
// reason, To tag, Retry-After) for its ttl (TTL, Timer H) in one of 16
// independently locked stripes, each a map and a FIFO ring of its
// refusals in the order they came.
//
// # Failure
//
// The table is bounded: at most its size (Max in the proxy, rounded up to
// a multiple of the stripes), the oldest of a full stripe forgotten
// first, a refusal older than the ttl never returned and dropped at the
// next Remember on its stripe or at Sweep (which also gives an idle
// stripe's memory back). A forgotten refusal only means its copy is
// decided again; a chance collision of both hashes could only answer an
// attempt with another's refusal, never admit one. Remember allocates
// nothing in the steady state (sip's BenchmarkRefusedRemember); nothing
// panics.
//
// # Concurrency
//
// A Table is safe for concurrent use.
package refusals
