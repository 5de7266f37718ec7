// Package e2e holds the system-level tests of issue 6: a pool of real
// cpsguard processes that survives faults, proven end to end.
//
// TestMain builds ./cmd/cpsguard once (without -race) into a temporary
// directory; every test starts the nodes it needs as processes on generated
// configurations with free loopback ports, private redis-servers
// (internal/redistest), SIPp as the dialer and a raw-UDP carrier owned by
// this package that stamps every INVITE with the kernel's receive time
// (SO_TIMESTAMPNS). Nodes are stopped with SIGTERM and must exit 0.
//
// What is covered: one limit for a pool of three nodes (peer limit and carrier
// pacing measured at the carrier in every sliding second), Redis killed,
// hung (SIGSTOP) and failed over by Sentinel during a SIPp load,
// store.on_error reject and admit, graceful shutdown with queued and
// in-flight calls, the RFC 4475 torture messages of testdata/torture over UDP
// and TCP, a flood of garbage and of INVITEs from unknown sources, an INVITE
// larger than 1300 bytes over UDP, the bearer token of the write API, and a
// live limit override set on one node that another node applies within a
// second and drops on DELETE and at its TTL (override_test.go); a
// carrier's cps lowered by a reload or a live override while calls wait for
// its slots (queue full or half full; one node, and a pool of two that
// reload one after the other): from the change on the carrier gets the new
// rate in every rolling second, not the old one for up to max_wait, and is
// not starved (respace_test.go); and real
// clients around a node: Kamailio (testdata/kamailio/kamailio.cfg) in front
// of it, a transaction-aware SIPp caller behind Kamailio and a SIPp carrier
// that copies Vias with [last_Via:] (interop_test.go); and baresip, a
// softphone that keeps real dialog state, calling through a node to a
// second baresip as its carrier (baresip_test.go): calls hung up by either
// end; held and resumed by either end (re-INVITEs both ways); cancelled
// while ringing; refused busy; refused over the peer's CPS; transferred
// (REFER and NOTIFY through the node, the carrier's INVITE of the transfer
// refused 403); ended by an operator through the API (the node's own BYEs
// answered 200 by both phones); over TCP and over TLS on both sides;
// behind Kamailio (both proxies in the phones' route sets); and a TLS
// carrier whose certificate names another address getting nothing; and a
// rolling upgrade (upgrade_test.go): while a node of an older release
// beats in the pool's Redis, a node writes base64url dialog tokens, then
// opaque text once it is gone, SIPp's calls completing with both.
// Each is checked in the node's call records and in both phones' SIP
// traces. baresip 1.0 opens its SIP sockets only when the host has an
// IPv4 address besides loopback, and sends its media (a generated tone, a
// few seconds) there; the kernel keeps them on the box. Without such an
// address the baresip tests skip, except under CI=true, where they fail.
//
// The tests need redis-server, redis-cli, sipp, kamailio and baresip;
// without them they skip, except under CI=true, where they fail. Linux only (/proc, SO_TIMESTAMPNS).
// Every load is bounded in calls and time and uses 127.0.0.0/8 only; the
// package runs in about a minute and a half.
//
//	go test -race ./e2e/
package e2e
