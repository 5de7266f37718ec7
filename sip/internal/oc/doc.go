// Package oc is SIP overload control toward the clients that ask for it
// (RFC 7339, the mandatory loss-based algorithm): the reduction the node
// asks of each peer, and the Via parameters that carry it.
//
// A client that supports it puts a valueless "oc" parameter in the top
// Via of its requests (Asked). The node then answers with its current
// reduction in that Via of every response it sends or relays back (Mark):
//
//	Via: SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK..;oc=40;oc-validity=1000;oc-seq=1764013000.123;oc-algo="loss"
//
// asking the client to drop 40 % of the new requests it would send here,
// for oc-validity ms; oc-seq orders the values (a client ignores one older
// than the last it saw, so a late relayed response cannot undo a newer
// value). oc=0 says there is nothing to drop. Clients that do not ask get
// no oc values: none is added to their responses, and any a party
// downstream wrote into their Via is removed (Strip).
//
// The reduction follows the node's own shedding, one Meter per peer (RFC
// 7339 5.3 lets a server ask each client for its own): every Period, with
// A of the peer's initial INVITEs let in (Meter.AddTaken) and S of them
// shed for overload (Meter.AddShed) in that period, the peer's reduction
// v becomes 100 - (100-v)·A/(A+S): the share of its offered calls the
// node could take, applied on top of the reduction it already makes. A
// period without a shed halves it. So one party's flood asks that party
// to back off, not every compliant peer (a single node-wide value went
// 0 → 90 → 100 in 1.3 s under one non-compliant peer's flood: issue 22,
// C9). What counts as a shed is the caller's to say (package sip: the
// inflight bound, not a peer's or customer's CPS limit).
//
// # sipgo's Via parameters
//
// sipgo's Via parser (v1.7.2) splits a header at the comma inside a
// quoted oc-algo list, so a request whose top Via lists several
// algorithms (oc-algo="loss,rate") fails to parse and never reaches this
// package; a single algorithm (oc-algo="loss") parses into mangled
// parameters, which Mark and Strip repair. A repair never puts a value in
// front of a parameter sipgo parsed exactly, and Strip never adds a
// branch, received, rport or maddr a stateless relay's MAC saw absent.
//
// # Failure
//
// Nothing here fails or panics: a nil Via is left alone, a Meter's first
// use starts its history with no reduction, and oc-seq strictly increases
// even when the wall clock steps back (the period runs on the monotonic
// clock). Meters holds one Meter per name it is given: the caller bounds
// the names (package sip passes configured peers only).
//
// # Concurrency
//
// Meters and Meter are safe for concurrent use: the counts are atomics
// (the paths that bump them are the hot ones), the value is recomputed
// at most once per Period by whichever caller finds the period over and
// published for lock-free reads. Mark and Strip change the Via they are
// given, which the caller owns.
package oc
