// Package calls owns concurrent-call places (max_calls): how many calls of a
// peer, a customer or a carrier are set up and not yet ended, counted for a
// whole pool.
//
// A Place is one limited scope (a sorted set of live calls scored by their
// expiry). A Store takes a call's places all-or-none (Occupy), gives them
// back (Free), extends them while the call lives (Refresh) and counts them
// (Count). Two stores decide the same way and pass one contract suite:
//
//   - RedisStore shares the places of a pool through Redis, one
//     calls_occupy.lua call per decision on Redis's clock; places in
//     different Cluster slots are taken place by place and the ones already
//     taken are freed again when a later one is full, so no place ever holds
//     more than its limit;
//   - LocalStore keeps them in process (one node, or the fallback while
//     Redis is down), on an injected clock.
//
// Tracker is the per-node side: it remembers the calls this node set up
// (and only those; each entry is removed when its call ends), frees a
// call's places at its end (BYE through the dialog token, final non-2xx,
// CANCEL), and refreshes the places of its live calls in batches, so that
// the places of a node that died expire by themselves within the refresh
// TTL, and no call outlives its maximum duration. A refresh adds back the
// places of its live calls that the store lost (taken in a fallback, or
// with the store's data): the limit counts every call that exists.
//
// RedisEnded is the pool's record of the dialogs that ended (a BYE
// answered, or timed out): each node records the ends it saw and reads the
// others' in one dialogs_ended.lua call a second, so a dialog token dies on
// every node (sip.DialogEnds). It is bounded (a TTL, MaxEnded entries).
//
// The Tracker also knows every call this node forwarded, places or not
// (Track): it ends an answered call on its BYE, at its maximum duration or
// at the node's shutdown and tells its owner (SetOnEnd: the call's record
// is written then), finds a call by Call-ID to be ended by hand (Find,
// through an index of the listed calls by Call-ID, not a walk of every
// call under the lock their setups take; EndAs), and lists its calls for the pool in a Registry: a hash of live
// calls in Redis (RedisRegistry, live.lua, with a queue per node of calls
// another node was asked to end) or in process (LocalRegistry), one
// contract suite for both. Listings are written in batches every 200 ms
// off the call path (a call shorter than that is never written), put again
// at every refresh and expire with the TTL, so a dead node's calls vanish
// from the list within it.
//
// Failure: a full place is a Decision with Admit false, never an error; an
// error means the store failed and nothing is known about the decision.
// A failed Free or Refresh is not retried: the place then expires by
// itself within the TTL. A failed Registry write is not retried either: a
// listing is put again at the next refresh, a removal that failed leaves
// the entry to expire.
//
// Everything here is safe for concurrent use.
package calls
