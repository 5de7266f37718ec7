// Package storescope remembers, for one call, that the shared store
// (Redis) has already failed it: the call's later store operations then go
// to the fallback at once instead of waiting out the timeout again.
//
// A call's setup asks the store several times (admission, the carrier
// slot, the max_calls places, a pause or a queue read): with Redis hung
// and the node not yet switched to its fallback (store.Failover switches
// only when Redis answered nothing for 5 × store.redis.timeout), each of
// those waited for the timeout in turn, and a call was held twice the
// timeout or more. With a scope on the call's context, the first failure
// marks it, and package store decides the call's remaining operations on
// the fallback: a call meets at most one Redis timeout.
//
// # Failure
//
// Nothing here fails. A context without a scope (one that New did not
// make: an operator's read, a background refresh) is never marked, and
// its operations behave as before. A marked scope only moves that call's
// operations to the fallback, which is what the node does for every call
// once it has switched.
//
// # Concurrency
//
// A scope is safe for concurrent use: the mark is an atomic.
package storescope
