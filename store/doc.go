// Package store chooses and guards the store that admission and pacing decide
// on: it builds the go-redis client for the configured topology (standalone,
// Sentinel, Cluster), announces this node in Redis with a heartbeat so the
// pool knows its size (and a node knows when another process uses its
// node_id), and wraps the Redis stores in a Failover that moves to
// the in-process stores (store.on_error: local), admits (admit) or refuses
// (reject) when Redis fails, and moves back when a background probe sees Redis
// answer. CallsFailover does the same for the max_calls places (package
// calls), following the Failover's mode.
//
// Failover.AdmitReserve is Admit that, on Redis, also makes the call's
// first carrier slot reservation in the same script when it admits the
// call (lua's admit_pace: one round trip instead of two); in the fallback,
// in process, or on a Cluster with the keys in different slots it is
// Admit, and the caller reserves through the Pacer.
//
// Failure: a Redis error or timeout never reaches the SIP call path as a lost
// call; the call that met the error is decided by the fallback at once, and
// so are that call's later operations (package internal/storescope: a call
// made with a scope meets at most one Redis failure). Under
// on_error reject, ErrStoreDown is returned and the proxy refuses the call.
// The timeout measures Redis, not this node: the round trip counts from when
// the command is sent (lua.WithTimeout), and a timeout while Redis answered
// another call lately (Options.Quiet, 5 × the timeout, at least 250 ms) is
// that call's alone, never a switch, so a CPU-saturated node that reads some
// replies late stays on Redis; without such an answer (a node with few
// calls) the node probes Redis once and switches only if that probe fails
// too. A connection lost under a command (an idle close) counts as a
// timeout; such a call (and a carrier slot taken the same way) is counted
// in Redis afterwards (recount.go). For one window of each limit up to
// 10 s after the node comes back from the fallback, or after Redis
// answers NOSCRIPT (it restarted and may have lost the last window), a
// call is admitted only when Redis and this node's fallback share both
// allow it, the Pacer puts its waiting calls' slots back and its send
// gate keeps this node to its share of each carrier's cps (careful.go). Work no call waits for (the heartbeat, the probe, the
// background reads) is bounded by BackgroundTimeout instead, its socket
// reads too.
//
// Everything here is safe for concurrent use.
package store
