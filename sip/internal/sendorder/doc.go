// Package sendorder keeps a message's followers behind it while it is
// being sent from another goroutine: a Table of sends in flight, by a key
// of the caller's (package sip: a call and a direction, for an ACK on its
// way to a TCP or TLS leg and the requests of its dialog right behind it).
//
// The sender notes each send before it hands it off (Begin, in the order
// the messages arrived) and ends the note once it has sent or dropped it
// (End: every note is ended once); a follower of the same key calls Wait,
// which returns once every send noted for the key is over, or once the
// Table's Limit has passed since the first of them was noted.
//
// # Failure
//
// A Table keeps nothing past the sends: at most Max notes, one per key
// with a send in flight. A note older than Limit (a send that outlasted
// it) holds nothing back; the key's next Begin replaces it, and a full
// table sweeps such notes out, at most once per Sweep. A Begin that finds
// the table full of live notes takes none, and that key's followers are
// then not held back: order is given up before memory or time. A zero
// Limit holds nothing back. Nothing panics; an End without a note is
// nothing.
//
// # Concurrency
//
// A Table is safe for concurrent use; its zero value (with Limit set
// before first use) is ready. Begin and End take one lock for O(1) work
// (a sweep walks the table, at most once per Sweep); Wait blocks only
// outside it.
package sendorder
