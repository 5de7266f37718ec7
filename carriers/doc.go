// Package carriers owns what a node knows of its carriers and decides
// about them: whether each is alive (OPTIONS probes and the outcome of
// the calls it forwards), in service (by hand, pool-wide; by its
// answer-seizure ratio, per node), the rate each is paced at (an adaptive
// carrier's AIMD rate, pool-wide), its Retry-After pause and the pool's
// evidence of its overload (both kept by the pacing store, read through
// pacing), where its calls go (its URI's address, or its host name
// resolved through SRV, A and AAAA), and which carriers a call on a route
// tries, in what order.
//
// A Set is built by cmd/cpsguard on the pool's pacing store (and the
// pool's Redis for the carriers out of service) and handed to sip
// (through a small interface of sip's: Order, Usable, Pacing, Report,
// Addr, …) and to httpapi (State, TakeOut, PutBack, CarrierPause,
// Unpause). sip reports every call attempt's Outcome to it (Report: at
// most one Reached, then one verdict) and sends its OPTIONS probes for it
// (Prober): the probe loops are the Set's, the sending is the SIP
// stack's, which knows the node's listeners. Run keeps it fresh: the
// probe loops, the pool's pauses, adaptive rates and carriers out of
// service read every RefreshEvery (250 ms), the host names resolved every
// 30 s.
//
// # Routes
//
// A route is a list of carriers and a policy that chooses the first a
// call tries (Order); the others follow in the route's order, each
// skipped when it is not usable now (Usable: out of service, below its
// min_asr, down, paused) or full. ordered: the list's first. weighted:
// among the usable carriers, one at random in proportion to its weight
// (the weights of the others go to those left). least_wait: among the
// usable carriers, the one whose next free pacing slot is soonest,
// pool-wide (pacing's queue read, one store call per carrier, in
// parallel), so a call never waits on one carrier while another is idle.
// A route whose carriers are all down or out of service refuses its calls
// before admission (RouteDown).
//
// # Health
//
// What one node believes of each carrier's health, with the dispatcher
// rules operators know from Kamailio: down after down_after failed OPTIONS
// probes in a row, up again after up_after good ones (any answer but a
// 5xx or 408 is good). down_after failed calls in a row (setup timeouts,
// 5xx and 408 that are not back-pressure, refused connections) take the
// carrier down at once and ask for a confirmation: down_after probes go
// out together, and all of them failing confirms it down (within one
// probe timeout, not down_after of them), while one answer, or a call
// already under way that the carrier answers, brings it back at once.
// Calls alone never keep a carrier down: a peer chooses what it dials, so
// it could make a live carrier fail a few calls in a row; that costs the
// others one probe round trip of the carrier, at most once per probe
// interval. A carrier whose calls are answered while its probes fail does
// not answer OPTIONS: its probe failures are ignored until a probe is
// answered. While the node is behind reading its own queues, an
// unanswered probe or a setup timeout is not held against the carrier
// (the answer may wait in the node's queue). The health state is per node
// and in memory: a carrier unreachable from one node is skipped by that
// node only. A carrier whose probing is off is always up.
//
// # Out of service
//
// An operator takes a carrier out of service for the pool and puts it
// back (TakeOut, PutBack; PUT and DELETE /api/v1/carriers/{name}/service,
// `cpsguard carrier out|in`). The mark lives in a ServiceStore
// (RedisService: one hash in the pool's Redis, service.lua; LocalService
// in the process) until it is removed; each node reads it every
// RefreshEvery and applies its own changes at once. Its probes go on.
//
// Answer-seizure ratio (carriers[].min_asr, min_seizures, asr_window):
// each node counts the calls it sent a carrier by their final outcome
// (answered; or another final answer, a failure, a setup timeout; calls
// the caller cancelled and back-pressure answers are none). Once the
// carrier had min_seizures calls within asr_window and answered fewer
// than min_asr percent of them, the node takes it out of service for one
// asr_window; then it is in service again and judged afresh on its next
// calls (a probe window: a carrier that stays bad costs at most
// min_seizures calls per window). A peer dialling numbers nobody answers
// lowers a carrier's ratio too: the rule is off unless configured.
//
// # Pauses, overload evidence, adaptive rates
//
// A carrier's 503 (or 500) with Retry-After pauses it for the whole pool
// (a pause in the pacing store beside its slot set) for that long, at most
// its retry_after_max (1 min by default): a paused carrier is skipped at
// once (reroute reason paused), never waited for; calls already holding
// one of its slots give it back at their wake instead of sending; when the
// span ends one call tries it (half-open) and the others skip it until
// that call is answered (the pause ends), or fails (the next call tries),
// or it pauses again. A good OPTIONS probe sent after the pause began ends
// the span early; an operator ends a pause with Unpause. An adaptive
// carrier's overload answers (overload.codes, overload.reasons) lower its
// effective CPS for the pool through the pacing store (AIMD, rate.lua),
// and each node paces it at that rate, refreshed every RefreshEvery.
// Either happens only on the pool's evidence (evidence.go, in the pacing
// store): two peers given overload answers within 2 s, or the carrier's
// only caller in the pool (then the pause is 5 s at most), so one peer
// dialling numbers a carrier refuses cannot pause or slow it for the
// others. Each node learns its own pauses and cuts at once and the pool's
// every RefreshEvery.
//
// The rate a carrier is held to is limits.InForce's (its cps, or a live
// override's): the pacing interval, the send gate and an adaptive
// carrier's AIMD maximum all read it (LimitCPS, Pacing). When it changes,
// the pacer is told (respace.go): every call of the node is paced and
// gated at the new limit from then on, and when it was lowered the calls
// already waiting take a slot again at it instead of reaching the carrier
// at the old one for up to max_wait. The first call that sees the change
// starts it; otherwise the next refresh does, and one that fails (the
// store down) is tried again at each refresh and logged once.
//
// # Failure
//
// A store read that fails (a pause, a rate, the carriers out of service,
// a least_wait queue) keeps the last one read, or, for least_wait, counts
// that carrier as the busiest; a store write started by a carrier's
// answer (evidence, a pause, a cut) that fails is logged and dropped: the
// call has moved on already. TakeOut and PutBack return the store's error
// and change nothing. A host name that does not resolve leaves its
// carrier unusable until it does; the last good answer is kept while a
// refresh fails.
//
// # Concurrency
//
// A Set is safe for concurrent use. Usable, on every call's path, reads
// atomics and maps under read locks; Order reads a route table derived
// once per configuration snapshot (least_wait adds one store read per
// usable carrier); Report starts its store calls in the background, one
// per carrier and peer at a time.
package carriers
