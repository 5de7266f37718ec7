// Package policy derives, once per configuration snapshot, what the call
// path needs of the configured peers, customers, destinations and carriers:
// their Redis keys, admission buckets (shadowed ones let a call over them
// through, admission.OverShadow), pacing keys and parsed carrier URIs; the
// destination of a called number (longest prefix, '+' ignored), whether it
// is an emergency number or a Resource-Priority value names a priority
// namespace, and its repeat_dial bucket (keyed by a hash of the number). It is the
// one owner of the key layout: every key scope is a typed constant here
// (Scope), never a metrics label, and keys are built only by Key,
// CallsKey, DialogKey, RepeatKey, NodesKey and OverridesKey (which format through
// lua.Key). keys_test.go pins the exact key of every scope, so a rename
// cannot silently move a running pool's windows, slots and places.
//
// A Policy is built by New from a validated *config.Config and never
// changes; Of (or a Cache of one's own) hands out the Policy of the
// snapshot in force and derives the next one when the snapshot pointer
// changes (a reload builds a new Config, so the pointer names the
// contents).
//
// Live values stay per call: a limit override or an adaptive carrier's
// effective rate is applied by the caller (Scoped.Buckets takes the cps and
// burst in force; Carrier.Pacing the effective cps). The buckets derived at
// load serve the configured values without allocating.
//
// Failure: New does not fail. A carrier URI that does not parse is kept as
// Carrier.Err (config validation rejects such URIs, so this reaches only a
// Config built by hand); the caller treats that carrier as unusable.
// Lookups of a peer, customer or carrier not from the Policy's snapshot
// derive its values afresh, so a stale pointer yields correct keys.
//
// A Policy and a Cache are safe for concurrent use; the slices and
// buckets a Policy returns are shared and must not be modified.
package policy
