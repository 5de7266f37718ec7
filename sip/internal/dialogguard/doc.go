// Package dialogguard holds what a node remembers of the dialogs it
// relays: which dialogs, calls and call attempts are over, and how fast
// each dialog's sides may still send (the sip package decides what
// becomes of a request, and shares the ends with the pool).
//
// A dialog token dies with its dialog: at max_call_duration, or when the
// call ended (a BYE answered 2xx or 481, the carrier's answered at all but
// with a challenge, or not answered in time). The second needs state: the
// dialogs that ended, each kept until its token would have expired
// anyway, in a table bounded by MaxEndedDialogs (the oldest forgotten
// first), and the ends of call attempts' tokens in one of their own
// (MaxEndedTokens), so that a storm of reroutes never pushes a dialog's or
// a call's end out. Every in-dialog request is checked against them
// (Admit, AdmitToken): a request of an ended dialog is Ended, except a
// copy of the BYE that ended it, from the same side, within the copy
// window End was given and at most MaxByeCopies times (a UAC whose answer
// was lost retransmits its BYE that long: RFC 3261 17.1.2.2; past that
// bound a copy, whose headers and body are its sender's choice, would be
// a relay that outlives its call). An end recorded with AnyBye (the far
// leg refused that side's BYE) lets up to MaxByeCopies new BYEs of that
// side pass within the window too, each with up to MaxByeCopies copies:
// sent again, they must reach the far leg for its side to end. An ended dialog is named by its call
// key and the callee's tag (DialogOf): a BYE naming a made-up callee tag
// ends nothing. A whole call's end (CallEnd) refuses every request of a
// token minted until then, whatever callee tag it names; a later call
// that reuses the Call-ID and tag has a token of its own. A call
// attempt's end (EndToken) refuses its token's requests, whatever the
// tags.
//
// Ends a node saw are queued for the pool (TakePending, Requeue; at most
// MaxPending, the oldest dropped first), as "t"+hex for a token's end and
// hex for the others (an AnyBye end adds "a", its side, ":" and hex); the
// ends of the pool's other nodes come back in through Learn. No call of the package does I/O: the sip package's
// stateless relay checks requests from its read loop.
//
// In-dialog requests are also bounded per dialog and direction: a token
// bucket of the burst New was given, refilled at its rate a second (a
// rate a real user agent never reaches). Past it a request is OverRate.
// The buckets of dialogs idle long enough to have refilled are swept
// (Sweep), so the table holds the dialogs active in the last few seconds,
// at most MaxRates (past that, new dialogs pass unbounded until the
// sweep).
//
// Times are wall-clock Unix nanoseconds, as the tokens' mint times: a
// wall clock that steps back refills a bucket from the step on, and the
// sweep takes what it queued after the step as used at the step.
//
// Failure: none of it fails. At its bounds the guard forgets the oldest
// ends (a token minted by the node itself is still refused when its call
// is no longer live: the sip package's ownTokenGone) and stops bounding
// new dialogs' rates until the sweep; Learn ignores a key it cannot read.
// A Guard is safe for concurrent use.
package dialogguard
