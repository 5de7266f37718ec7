// Package health owns what one node believes of each carrier's health: up
// or down, and why. It is fed two kinds of evidence — the answers to the
// node's own SIP OPTIONS probes (sip sends them) and the outcome of the
// calls it forwards (passive detection) — and turns them into a state per
// carrier with the dispatcher rules operators know from Kamailio: down
// after DownAfter failed probes in a row, up again after UpAfter good
// ones. DownAfter failed calls in a row ask for a probe at once, and its
// failure marks the carrier down: calls are evidence a peer can shape, a
// probe is not.
//
// The state is per node and in memory: each node probes for itself, so a
// carrier unreachable from one node is skipped by that node only. Nothing
// here does I/O, so nothing here fails; a carrier the Tracker does not know
// (not configured, or probing off) is up.
//
// A Tracker is safe for concurrent use. Up, on every call's path, is a map
// read and an atomic load; the rest take a mutex.
package health
