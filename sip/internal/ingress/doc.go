// Package ingress owns cpsguard's UDP read path: the listening sockets'
// reads, the first look at every datagram, the budgets that keep one party
// from crowding out the others, and the workers that hand datagrams on.
// It knows nothing of SIP beyond the raw bytes; the sip package parses and
// decides in the workers' Handle.
//
// # Why it exists
//
// sipgo reads each UDP socket in one goroutine that parses every datagram
// and finds its transaction: issue 23 measured a node at ~9,000 CPS at
// most however many cores it had, that goroutine at 0.8 of a core, and one
// hostile datagram (5,000 Via parameters: 25 ms of parsing) delaying
// every party's answers. Several sockets on one port (SO_REUSEPORT) only
// spread different sources over cores; one busy peer would still be one
// core's work. So:
//
//   - Read (one goroutine per socket, the one serial stage) takes up to 32
//     datagrams per system call (recvmmsg on Linux; one at a time
//     elsewhere) and does only what is cheap and must come first: the
//     size bound, the party of the source (Options.Party), Classify (the
//     kind, and the first Call-ID: it stops there, ~80 ns for an INVITE),
//     Options.Early, the budget, a copy into a pooled buffer.
//   - Each datagram goes to one of Options.Workers workers (GOMAXPROCS by
//     default) by a hash of its Call-ID (of its source when it has none):
//     a dialog's messages stay in order on one worker, different calls are
//     parsed and decided on different cores.
//   - A worker takes, in turn: the fast lane (answers and in-dialog
//     requests of known parties: the calls already let in), but one of
//     the others after every FastRun of those while they have one ready;
//     the shed and slow lanes alternately (new INVITEs, CANCELs, OPTIONS,
//     anything unrecognised; a slow head INVITE waits while Options.Hold
//     says so: the node's inflight bound, and WakeHeld wakes only the
//     workers so held when it may have changed); strangers' datagrams
//     last. It
//     Scans each datagram's header section against the Bounds (parameters
//     per header element and per message, header fields, the elements of
//     a list sipgo splits at commas counted) before the
//     handler sees it: sipgo parses a parameter list in quadratic time.
//     The scan reads lines as sipgo's parser does (only CRLF ends one), the
//     start line's separators count (the Request-URI's parameters), and
//     an escaped separator inside quotes counts (sipgo's parsers know no
//     escapes): nothing sipgo parses escapes the count.
//
// # Budgets
//
// Budget bounds each lane in datagrams, in all and per party (Party: a
// peer by name, a carrier by address, every stranger together), and the
// queued bytes (buffers counted whole) in all and per party; the last
// places of each, counted in datagrams and in bytes, are kept for parties
// that hold little, so however many parties flood, a quiet one still finds
// room. On one worker of several a party holds at most twice its even part
// of a lane's share (the lane's Least at least): a party sending all its
// datagrams under one Call-ID cannot pile its whole share on the one
// worker they go to, ahead of the other parties' calls there. A known
// party's INVITE that finds no room in the slow lane goes to
// the shed lane, where a worker answers it at once (Options.Shed, a
// stateless 503 from its raw bytes), rather than leave it to the kernel to
// drop without an answer and its sender to retransmit into a full queue.
// Everything else that finds no room is dropped and counted. A copy of a
// slow datagram still waiting from the same source (a retransmission) is
// not queued twice. Nothing is kept per source address: strangers are one
// party, and parties are pruned when idle.
//
// # Failure
//
// A datagram over MaxSize (or cut short by the socket), over the Bounds or
// with no room is dropped and counted through Options.Drop (DropOversized,
// DropParams, DropHeaders, DropFull); blank keepalives are ignored. A
// panic while a datagram is classified or handled is recovered, reported
// through Options.Panic, and costs that datagram only. Read returns the
// socket's error (net.ErrClosed once its owner closed it); Close stops the
// workers and drops what is still queued.
//
// # Concurrency
//
// An Ingress is safe for concurrent use: any number of Read loops feed it,
// its workers run Handle concurrently (for different Call-IDs), and its
// counters are atomic. Readers alone add to the budgets, so their room
// checks overshoot by at most one datagram per concurrent reader.
package ingress
