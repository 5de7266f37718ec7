// Package admission owns inbound admission: the limits of each peer and
// customer. A Bucket is a rolling window ("never more than the limit in any
// rolling window": the 1 s window of cps, and sustained windows such as 600
// per minute, WindowBucket) or a token bucket (rate cps, capacity burst,
// TokenBucket), which replaces the 1 s window of a scope with a burst.
//
// A Store decides for all buckets of a call at once: it admits only when
// every bucket is under its limit, and then counts the call in every bucket;
// a refused call is counted nowhere. A bucket may instead let a call over
// its limit through (Bucket.Over): uncounted there (OverShadow, a limit in
// shadow mode, which fills as if enforced), or counted anyway (OverCount, a
// call no limit may refuse: a window then holds more than its limit, a
// token bucket gives a token when it has one and never goes into debt);
// Decision.Over says which buckets were over. Two stores decide the same
// way:
//
//   - RedisStore shares the windows of a whole pool through Redis
//     (standalone, Sentinel or Cluster), one admit.lua call per decision on
//     Redis's clock; buckets in different Cluster slots are decided slot by
//     slot, undone (token given back) when a later slot refuses, and never
//     over-admit;
//   - LocalStore keeps them in process (one node, or the fallback while Redis
//     is down), on the local monotonic clock, with memory bounded by the
//     limits and idle buckets evicted.
//
// Failure: over the limit is a Decision with Admit false, never an error. An
// error means the store failed (Redis down, timeout, bad reply) and nothing
// is known about the decision; the caller applies the failure policy
// (store.on_error). RedisStore bounds every call by RedisOptions.Timeout.
//
// With RedisOptions.Pipeline (a lua.Pipeliner, as store.Open builds it) the
// admit.lua calls of concurrent decisions share round trips: each is still
// one atomic script run, so decisions are unchanged, and each caller still
// fails by its own timeout when Redis hangs. The store does not own the
// Pipeliner; its builder closes it after the last call.
//
// Both stores are safe for concurrent use.
package admission
