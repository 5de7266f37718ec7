// Package lua holds the Redis Lua scripts of cpsguard, embedded, with one
// typed Go wrapper per script. It is the only package that builds KEYS/ARGV
// or decodes script replies.
//
// Scripts (each .lua file starts with a header listing KEYS, ARGV and reply):
//
//   - admit.lua: admission over N buckets in one atomic step, all or
//     nothing; a bucket is a rolling window (sorted set) or a token bucket
//     (hash of level and time, micro-tokens on Redis TIME);
//   - counts.lua: calls in each window, tokens in use in each token bucket
//     (read-only);
//   - refund.lua: undo an admission (the cross-slot path): the member leaves
//     the sorted sets, token buckets get the token back;
//   - pace.lua: reserve the next send slot of a carrier (leaky bucket);
//     none while it is paused, one (the half-open probe) after the span;
//     with a share, the carrier's slots shared by weight among the shares
//     waiting (their turns and the fair calls' records in a hash and a
//     sorted set of expiries beside the slot set, FairKeys): a call within
//     its share's part takes a slot at once, one beyond it books its
//     share's turn and asks again then;
//   - admit_pace (admit_pace.go): admit.lua, then pace.lua for a call it
//     admitted, in one script built from the two files (each runs as a
//     local function with its own KEYS and ARGV): a call's admission and
//     its first carrier slot in one round trip (AdmitPace), exactly as the
//     two scripts one after the other;
//   - release.lua: give a reserved slot or a booked turn back (the share
//     gets the turn back);
//   - queue.lua: calls waiting for a carrier (slots ahead and turns
//     booked) and the least wait (read-only);
//   - pause.lua: a carrier's Retry-After pause, pool-wide (set, get, done,
//     open, lift), a hash beside its slot set; setting one removes the
//     slots still in the future;
//   - evidence.lua: the peers that called a carrier, and those it gave
//     overload answers, lately (two sorted sets beside its slot set);
//   - rate.lua: an adaptive carrier's effective rate (AIMD), in milli-cps;
//     a decrease removes the slots still in the future;
//   - respace.lua: a carrier's limit lowered on a node (reload, live
//     override): the slots that node's process holds in the future are
//     removed, found by its member prefix (its own only: the other nodes
//     do not know);
//   - rebook.lua: put the slots of one node's waiting calls back into a
//     carrier's slot set that lost them (a Redis restarted empty, a node
//     back from its fallback), at their due times (rebook.go);
//   - heartbeat.lua: node liveness, to count the live pool, the live
//     nodes of a release that cannot read dialog tokens in opaque text,
//     and other processes beating under the same node id (heartbeat.go);
//   - calls_occupy.lua, calls_free.lua, calls_refresh.lua, calls_count.lua:
//     concurrent-call places (max_calls), sorted sets of live calls scored
//     by their expiry, taken all-or-none, freed, refreshed in batches and
//     counted (calls.go).
//   - overrides.lua: the pool's live limit overrides (set, del, list), one
//     hash and one expiry set that expire with the latest override, so none
//     outlives its TTL (overrides.go; times in integer ms of Redis TIME).
//
// The clock is always Redis TIME, in integer microseconds; scores are integer
// microseconds and every fraction travels as an integer of microseconds (or
// of micro-tokens, milli-cps), never as a Lua float; products stay below 2^53
// so Lua's doubles hold them exactly. A time written into a string goes
// through string.format('%d'): Lua's tostring keeps 14 digits; admit.lua
// and pace.lua hand every number to redis.call that way too, as Redis 7.0
// formats a Lua number with %.17g at several times the cost. Keys carry a
// Redis Cluster hash tag (Key); a script call must only name keys of one
// slot (HashSlot). Each node loads its own variant of every script
// (SetVariant), so a Redis that lost them answers NOSCRIPT to every node.
//
// Failure: a wrapper returns the go-redis error as is (network, timeout,
// script error) and a reply of the wrong shape as an error wrapping ErrReply;
// decoders never panic. Load loads every script at start, so a script Redis
// rejects fails there; Run falls back from EVALSHA to EVAL when a server has
// lost its script cache.
//
// Pipeliner (pipeline.go) is a redis.Scripter that sends the script calls of
// concurrent callers as one pipeline per round trip; a lone caller sends its
// call itself. It has flusher goroutines and must be closed; a caller waits
// for its reply no longer than its context, so failures reach callers as
// before (the go-redis error, or the context's error).
//
// Everything here is safe for concurrent use; everything but Pipeliner is
// stateless.
package lua
