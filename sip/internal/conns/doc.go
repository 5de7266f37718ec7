// Package conns owns what cpsguard bounds on SIP over TCP and TLS
// connections: which accepted connections are served, and the parameter
// and header bounds on every connection's stream. It knows nothing of
// SIP's calls; the sip package builds its Limits from the configuration,
// says whose party a source is, and counts what is refused.
//
//   - GuardedListener (guard.go) closes at accept a connection over
//     Limits: over sip.tcp.max_connections in all, over
//     max_connections_per_source from one source (an IPv4 address, an
//     IPv6 /64), a stranger's beyond StrangerMax (a quarter of the total),
//     a known party's beyond its share of the rest (twice its even part,
//     the last places kept for parties holding little), or a stranger's
//     TLS connection without a token of its HandshakeBucket
//     (sip.tls.stranger_handshakes_per_second). A connection counts
//     against the party it had at accept until it closes.
//   - ScanListener (scan.go) wraps each accepted connection so that every
//     read goes through an ingress.StreamScanner before sipgo sees it;
//     StreamScans.Filter does the same, in sipgo's read filter, for the
//     connections the node dials itself (at most 4,096 at once).
//
// # Failure
//
// A connection refused at accept is closed before anyone reads a byte of
// it, and its reason (tcp_limit, tls_handshake_rate, unknown_source,
// accept for a failed accept) is told to the listener's refused callback;
// an accept error other than a closed listener is retried after a pause
// (5 ms doubling to 1 s), never returned. A stream over the bounds, or
// one that cannot be framed, closes its connection (reasons params,
// headers, stream; tcp_limit for a dialled connection past the bound on
// scanned ones): an accepted one reads io.EOF, a dialled one's filter
// returns the error that makes sipgo close it. A write that fails (its
// deadline passed: the party does not read) closes an accepted
// connection. Nothing panics on any input.
//
// # Concurrency
//
// GuardedListener, HandshakeBucket, StreamScans and ScanListener are safe
// for concurrent use; a connection's scanner is its one reader's.
package conns
