// Package load keeps the two measures of the node's own load that the sip
// package decides on:
//
//   - Inflight: the new calls being decided now, against the bound of
//     sip.max_inflight (Limit). The sip package's screen takes a unit for a
//     peer's initial INVITE when it arrives (TryTake; a priority call Take,
//     beyond the bound) and the INVITE's invites.Entry gives it back once
//     its decision is made (Release, the invites.Bound). The read path's
//     workers hold new INVITEs back while the bound is taken, and are
//     woken by each unit given back (OnRelease).
//   - Behind: when the node was last seen behind reading its own queues (a
//     datagram of the read path's fast lane waited more than Lag, or found
//     that lane full for everyone), remembered for Memory. While it is
//     (Recent), carrier timeouts are not held against the carrier.
//
// It knows nothing of calls, peers or carriers: the sip package says what
// takes a unit and what counts as behind (sip/overload.go).
//
// # Failure
//
// Nothing fails. TryTake never lets the count go over its limit, not
// even for an instant (a take that overshot and gave its unit back
// without a wake would leave a worker holding an INVITE until
// sip.inflight_wait); Take goes beyond it, and only a Release gives a
// unit back, so a unit taken and never released stays taken (the sip
// package's invites table gives back the units of INVITEs no handler
// claimed). A zero Behind was never behind.
//
// # Concurrency
//
// Inflight and Behind are safe for concurrent use, lock-free (atomics);
// their zero values are ready. OnRelease may be set at any time; the hook
// runs on the goroutine that calls Release and must not block.
package load
