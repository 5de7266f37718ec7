// Package carriers owns what a node knows of its carriers and decides
// about them: whether each is alive (OPTIONS probes and the outcome of
// the calls it forwards), the rate each is paced at (an adaptive
// carrier's AIMD rate, pool-wide), its Retry-After pause and the pool's
// evidence of its overload (both kept by the pacing store, read through
// pacing), where its calls go (its URI's address, or its host name
// resolved through SRV, A and AAAA), and which carriers a call on a
// route tries, in what order.
//
// A Set is built by cmd/cpsguard on the pool's pacing store and handed
// to sip (through a small interface of sip's) and to httpapi (status,
// pauses). sip reports every call attempt's Outcome to it and sends its
// OPTIONS probes for it (Prober): the probe loops are the Set's, the
// sending is the SIP stack's. Run keeps it fresh: the probe loops, the
// pool's pauses and adaptive rates read every RefreshEvery, the host
// names resolved every 30 s.
//
// # Health
//
// What one node believes of each carrier's health: up or down, and why.
// It is fed two kinds of evidence — the answers to the node's own SIP
// OPTIONS probes and the outcome of the calls it forwards (passive
// detection) — and turns them into a state per carrier with the
// dispatcher rules operators know from Kamailio: down after down_after
// failed probes in a row, up again after up_after good ones. down_after
// failed calls in a row ask for a probe at once, and its failure marks the
// carrier down: calls are evidence a peer can shape, a probe is not.
//
// The health state is per node and in memory: each node probes for
// itself, so a carrier unreachable from one node is skipped by that node
// only. A carrier the node does not judge (probing off) is up.
//
// # Failure
//
// A store read that fails (a pause, a rate) keeps the last one read; a
// store write started by a carrier's answer (evidence, a pause, a cut)
// that fails is logged and dropped: the call has moved on already. A
// host name that does not resolve leaves its carrier unusable until it
// does; the last good answer is kept while a refresh fails.
//
// # Concurrency
//
// A Set is safe for concurrent use. Usable, on every call's path, reads
// atomics and maps under read locks; Report starts its store calls in the
// background, one per carrier and peer at a time.
package carriers
