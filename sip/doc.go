// Package sip is cpsguard's SIP front end: it identifies, admits, routes,
// paces and forwards calls. It is a stateful proxy (stateless for
// in-dialog non-INVITE requests between UDP legs) built on sipgo
// (github.com/emiago/sipgo, imported as sipmsg for its message package).
//
// # What it owns
//
// For an initial INVITE, in this order: the peer is the owner of the
// packet's source address (longest-prefix match, never a header); the
// customer is the customer header's value when the peer may name it (else
// 403), otherwise the peer's default; 100 Trying goes out at once; the
// called number (the Request-URI's user, config.NormalizeNumber) gives the
// call's destination (destinations[], longest prefix, '+' ignored) and
// whether it is a priority call (priority.go); one admission store call
// checks the peer's, customer's and destination's windows and the number's
// repeat_dial bucket (refused: the limit's own reject, else sip.reject, or
// repeat_dial.reject, 486 by default; outcomes rejected_cps,
// rejected_destination, rejected_repeat; a shadowed limit, its own shadow
// or the global one, admits and counts shadow_rejected); then the carriers
// of the route (the destination's route, else the customer's, the peer's,
// "default") are tried in the order the route's policy gives (ordered,
// weighted or least_wait: carriers.Set.Order): a pacing slot within the carrier's max_wait is
// reserved and waited for (a timer, cancellable by CANCEL and shutdown), and
// the INVITE is forwarded with a new Via, Record-Route, Max-Forwards minus
// one and the carrier's host, port and transport. Just before the send, a
// local send gate holds the call until this node's own last sends of the
// carrier, peer and customer leave room in the rolling window, so a timer
// woken late never puts limit+1 calls into one second at the carrier; the
// slot and gate waits together stay within the carrier's max_wait (past
// it the carrier counts as full). Both waits are pacing.Pacer.Acquire's;
// this package counts and logs them (pace.go). On the shared Redis store
// the first carrier's slot is reserved in the admission's own script (one
// round trip per call, first.go), and handed to Acquire as its first
// reservation; one no attempt takes is given back at once. A carrier's slots are shared
// by its share_by (pace.go shareOf): the call draws on its customer's share
// (weight), or its peer's (share_by peer, or no customer), or on none
// (share_by none: first come, first served); a call beyond its share may
// wait for its share's turn, within the same max_wait. Responses are relayed
// upstream (but a 2xx whose To tag is not the first 2xx's, a forking
// carrier's second answer: the call, its admission and its places are one
// dialog's, so the node ACKs and BYEs that one at the carrier, once, where
// RFC 3261 16.7 would relay it); a 5xx, 408, timeout or transport error before any provisional
// response above 100 moves the call to the next carrier (paced again). When
// no carrier can take the call it is rejected with 503.
//
// Calls to an emergency number (priority.numbers) and calls whose peer may
// claim priority with a Resource-Priority header of a configured namespace
// (peers[].allow_resource_priority) are refused by no limit and never
// shed (priority.go): the screen lets them past the inflight bound, the
// UDP workers never shed nor hold them back from raw bytes, their
// admission buckets and max_calls places count them past the limits
// (so a flood shows and takes the room of other calls), and pacing sends
// them at once, ahead of the calls waiting for the carrier's slots
// (pacing.WithPriority: the carrier may see its cps plus the priority
// calls in one second, its cps over any longer span). They are counted in
// cpsguard_priority_calls_total{peer,kind}, marked in their records and
// logged at Info (rate-limited); a claim of a peer not allowed to make one
// is ignored and counted (kind refused_claim).
//
// Concurrent calls (calls.go, max_calls) are held through a CallPlaces (a
// calls.Tracker): the peer's, customer's and destination's places right
// after admission, all or none (full: the limit's own reject, else
// sip.reject_calls, outcome rejected_calls, rejected_destination for a
// destination; a shadowed limit's full place is left out), a
// carrier's just before its slot is reserved (full: the next carrier,
// reroute calls_full), given back when the call moves on. An unanswered
// call frees its places when its INVITE handler returns; an answered one
// when the far leg answers a BYE that passed the dialog-token check with a
// 2xx or 481, or gives it no final answer before Timer F (ends.go; either
// direction), or the peer answers the carrier's BYE at all but with a
// challenge, or by the Tracker at max_call_duration or the places'
// expiry. A call whose dialog had such a BYE before its answer (a
// carrier's BYE racing its own 2xx, or sent before it answered) ends at
// its answer: once the 2xx is relayed the node sends its own BYE to both
// legs (Reason "Call ended before its answer"), so no call goes on
// without its places. Options.Calls nil keeps them in process, refreshed by Serve.
//
// Every call that reached a decision leaves one record (records.go,
// Options.Records, package records): a refused, failed or cancelled call's
// is written by its INVITE handler once its final answer has gone; an
// answered call's when it ends: its BYE through the dialog token (ended_by
// caller or callee), max_call_duration, an operator's end or the node's
// shutdown (ended_by node; the call may go on between its ends, no longer
// supervised). Strangers and calls shed by the overload guard before any
// handler runs (rejected_overload, a stateless 503) leave none: they are
// counted in cpsguard_calls_total, and writing them would cost the work
// shedding saves. Every forwarded call is tracked by the CallPlaces (places
// or not) and listed for the pool (GET /api/v1/calls) until it ends;
// EndCalls ends one by hand: an answered call gets a BYE from the node to
// each leg, in its dialog (the CSeq above the highest each side used, seen
// on its verified in-dialog requests; the route set of the proxies on each
// side), a ringing one is stopped as at shutdown (503 up, CANCEL down).
//
// The limits applied are the configured ones unless an operator's live
// override (Options.Overrides, package limits) replaces them:
// limits.InForce is the one place that decides a peer's or customer's cps
// and burst (effective.go) and a carrier's cps (the carriers.Set: the
// pacing interval, the send gate, an adaptive carrier's AIMD maximum);
// the lookup reads an in-memory snapshot, no I/O.
//
// Carriers are living systems, and the carriers.Set's (Options.Carriers,
// package carriers): the proxy asks it which carriers a call on its route
// tries and in what order (Order), whether each is usable now (Usable: a
// carrier down on this node is skipped without taking a slot, a paused
// one at once), what it is paced by (Pacing), and where its calls go
// (Addr); it reports what became of every attempt (Report: reached,
// answered, unanswered, failed, timed out, an overload answer), and sends
// the Set's OPTIONS probes through its own stack (probe.go,
// carriers.Prober). Serve runs the Set. A call whose route is all down
// (or out of service) is refused at once (503, outcome rejected_down)
// before admission; a carrier skipped as down, out of service or below
// its min_asr is counted as a reroute with that reason (down,
// out_of_service, asr). Failed
// calls, probes, Retry-After pauses (half-open, pool-wide), the pool's
// overload evidence and adaptive carriers' AIMD rates are described in
// package carriers. A carrier's 503 (or 500) with Retry-After is
// back-pressure: the call moves on (reroute reason paused for the
// calls that find it paused); calls already holding one of its slots give
// it back at their wake instead of sending; calls holding slots spaced
// for an adaptive carrier's old rate take one again at the new rate
// before they send (pacing.Pacer.Acquire).
//
// Before any of that, the screen (screen.go) sees every parsed message
// ahead of sipgo's transaction layer: strangers (neither a peer's source nor
// a carrier's address) get silence or one stateless 403 and cost no state;
// a message without Via, From, To, Call-ID or CSeq is never used
// (stateless 400; responses dropped), nor is one that sipgo reads
// otherwise than the next hop may: an empty tag, a From or To parameter
// with a quote, backslash, '<', '>', ',' or blank inside it (sipgo finds
// a tag inside a quoted value),
// two of To, From, Call-ID, CSeq, Content-Length or Max-Forwards (sipgo
// reads the last, the next hop may read the first), a CR or LF outside a
// CRLF in the start line or headers (sipgo keeps it in the value, a
// lenient next hop ends the line there; over TCP or TLS the connection is
// closed, counted stream); nor is an initial
// INVITE without a From tag (RFC 3261 8.1.1.3: 400, from the parsed path;
// the raw path leaves it to it); out-of-dialog OPTIONS
// are answered statelessly (503 while draining or while the store cannot
// decide, so dispatchers route around the node), other out-of-dialog
// methods 405; a CANCEL of a call in progress must come from its INVITE's
// source: the screen answers it 200 and the call cancels the carrier's leg
// and relays the carrier's 487 (its own 487 only while still queued). A
// refused call's final answer is sent once and its transaction ended; a
// peer's refused attempt (its answer: code, reason, To tag, Retry-After)
// is remembered for 32 s (refused.go, package sip/internal/refusals: at
// most 65,536, the oldest
// forgotten first), so a copy of the INVITE (same top Via branch and
// sent-by, Call-ID, From tag, CSeq, source and transport) gets that answer again,
// statelessly, from the screen (or the shed lane), and is never decided,
// counted, recorded nor forwarded (counted refused_copy); the overload
// sheds' 503s included, and a forwarded call's final refusal (the
// carrier's, relayed, or the node's own), whose sipgo transaction ends 5 s
// after the caller's ACK.
//
// In-dialog requests (To tag set, or one of the proxy's own Route entries
// carrying a dialog token, whatever the tags say: ACK for 2xx, BYE,
// re-INVITE, UPDATE, INFO, …) are relayed only along their own dialog, and
// only with both tags set (a re-INVITE without a To tag would reach the
// carrier as a new call). Every Record-Route the
// proxy adds carries a dialog token (";cg=", token.go): the call's two legs
// (the peer's source address and transport, the carrier address and
// transport the INVITE went to) and its mint time, sealed (AES-256-GCM
// under a key derived from sip.dialog_secret and the mint day) with its
// Call-ID and the caller's From tag: a peer cannot read which carrier
// address took its call. Both ends copy it into the Route of their
// in-dialog requests; a request is relayed only when one of the proxy's
// own Route entries carries a token that opens (one minted longer ago
// than max_call_duration is dead: 481, counted dialog_ended), the tags say
// which leg sent it (equal tags, a callee that took the caller's tag for
// its own: its source does), it comes from that leg's address (IP and port over
// UDP, IP over a connection), and it goes to the other leg whatever its
// Request-URI says (403 otherwise, sent once); with no hop left
// (Max-Forwards 0) it is answered 483 and not relayed, as is an initial
// INVITE (RFC 3261 16.3; one hop left is forwarded with 0). An initial INVITE of a dialog id (Call-ID, From tag,
// peer leg) that has maxCallsPerDialog calls live already (merged
// requests, another Via branch each) is answered 482 before admission:
// each in-dialog request and end of one of them looks at all of them.
// A token also dies with its call (dialogs.go; the tables are package
// sip/internal/dialogguard's): once a BYE
// of the dialog was answered 2xx or 481 or timed out (the carrier's: any
// final answer but a challenge) (a 481 or timeout
// of a BYE naming another callee tag than the answer of a call the node
// holds ends nothing, and is not remembered), the dialog's
// requests get 481 (counted dialog_ended), on this node at once and, with
// Options.DialogEnds (the pool's Redis), on the pool's other nodes within
// about a second (only copies of the ending BYE, same CSeq, branch and
// side, are still relayed by the node that saw the end: within 32 s of
// it, at most 10); once the call is over (that BYE, an operator's end,
// max_call_duration) so are the requests of its tokens that name another
// callee tag; the token of an attempt the call moves on from (its carrier
// failed it before ringing), and every token of a call that ends
// unanswered (refused, cancelled, timed out), is refused the same way,
// pool-wide: each went to a carrier in its INVITE's Record-Route, maybe
// to the caller in a response, and is no leg of the call (a carrier the
// call moved on from would reach the caller as its callee, on the callee
// side's rate and re-INVITE budget; an INVITE of an unanswered call's
// early dialog would reach the carrier with no admission, slot or place:
// a UAS may take it for a new call), while a retry with the same Call-ID
// and From tag has tokens of its own. The node remembers at most 262,144
// ended dialogs and calls (an answered call's end is two) and, apart,
// 262,144 ended tokens (one per carrier tried that did not take its call:
// a storm of reroutes forgets older tokens' ends, never a dialog's or a
// call's), each until its token expires, the oldest forgotten first when
// full; a token the node minted itself (its
// nonce's instance part) whose call the node no longer holds is refused
// even once the table forgot the end (ownTokenGone), and so is one of a
// call it holds that is not the token of the call's current attempt (a
// carrier the call moved on from is no leg of it). Each direction of a
// dialog may send at most 40 requests at once, refilled at 10 a second
// (per node): beyond,
// 503 (counted dialog_rate, logged at Warn at most every 10 s). A
// re-INVITE is
// also limited per dialog and carrier leg (6 a minute, pool-wide through
// the admission store) and takes no pacing slot. In-dialog requests other than
// INVITE, ACK and CANCEL (BYE, INFO, UPDATE, …) that arrive over UDP and go
// to a UDP leg are relayed from the screen without a transaction
// (stateless.go, RFC 3261 16.11): the proxy's Via branch is an HMAC under
// the dialog-token key over the upstream Via, Call-ID, CSeq and next hop
// IP (and carries the call's key and direction, which it covers, so the
// far leg's answer to a BYE says which call it ends), so a retransmission
// gets the same branch and a response is relayed only when its branch
// verifies (forged ones are dropped); a TCP leg, and
// a request whose top Via holds a quoted parameter (sipgo would read it
// back differently in the response), keep the stateful relay. ACKs of 2xx
// (always relayed without a transaction) to a carrier over UDP leave from
// the screen too, whatever the caller's transport, so a BYE sent right
// after its ACK cannot overtake it; to a carrier over TCP or TLS the ACK
// leaves from a goroutine (the write could wait, and the screen must not)
// and the dialog's next request waits for it (ackorder.go). Every Via of a
// forwarded request stays a plain Via line
// (a carrier that copies the lines named Via, as SIPp does, returns them
// all); the ACK of a non-2xx answer to a forwarded INVITE carries only the
// proxy's Via (RFC 3261 17.1.1.3: sipgo's client transaction builds it
// with every Via, and ack.go trims it on the transaction's connection). A
// response with no Via left below the proxy's is never relayed (RFC 3261
// 16.7 step 3): it is counted (no_via) and logged at most every 10 s, and
// instead of a final one the sender gets the proxy's own answer (the same
// code for a failure, 502 for a 2xx, which is hung up: ACK and BYE). A
// 2xx the node hangs up (this one, one that crossed the node's CANCEL)
// gets its ACK and BYE at the address the INVITE went to, its Contact
// only as their Request-URI: a carrier cannot point them elsewhere. An
// answered call's INVITE transactions (sipgo's server and client ones)
// last answeredLinger (8 s) after its 2xx, not RFC 6026's 32 s, and a
// failed attempt's client transaction as long after its final answer
// (proxy.go init: each holds the call's messages, ~13 KB, and at
// thousands of calls a second 32 s of them was most of the node's
// memory): the carrier's 2xx retransmissions within it reach the caller,
// later ones are strays (dropped), and copies of the INVITE are absorbed
// by its tombstone in the invite table for 32 s (package
// sip/internal/invites). An answered call (over UDP, TCP or TLS) ends
// them earlier, once the node relayed its caller's ACK of the 2xx
// (acked.go): until its linger would have ended, a 2xx retransmission
// from its carrier gets the caller's ACK again (not relayed: the caller
// has its answer), and another To tag's 2xx is ACKed and BYEd at the carrier as
// above (at most 65,536 such calls are kept, the oldest forgotten
// first). An
// initial INVITE loses every Route, the Request-URI's maddr and URI
// headers, and the customer header. Carrier host names are resolved at
// start and every 30 s (by the carriers.Set; resolve.go asks it where a
// request goes): a name without a port in its URI
// through its SRV records first (_sip._udp, _sip._tcp, _sips._tcp by the
// URI's transport; each call to a target of the lowest priority, by
// weight), else its A and AAAA records. TCP connections are bounded per
// source (an IPv4 address, an IPv6 /64) and in all, strangers' to a
// quarter of the total so peers and carriers always find room, and each
// known party's (a peer by name, all its sources together; a carrier by
// address) to twice its even part of that room, never less than one
// source's bound, with the room's last places kept for parties holding
// less than one source's bound: a peer that owns a /24 cannot lock the
// other peers out however many of its addresses it connects from. A
// connection counts against the party its source had at accept until it
// closes. Idle connections are closed, as are ones whose party stops
// reading (a write blocked for the idle timeout; package sip/internal/conns).
//
// IPv4 and IPv6 listeners may be listed together (each family binds its
// own socket; a lone [::] stays dual-stack): the proxy names itself to
// every next hop (Via, Record-Route, a probe's From) by its listener of
// that hop's transport and address family, and UDP leaves from that
// listener (localFor, udpListenerFor). A call whose legs differ in
// family, or in transport, is record-routed twice (RFC 5658), one entry
// per side. Without a listener of a hop's family, UDP leaves from a socket
// sipgo opens (its Via names that socket) and `cpsguard check` warns.
//
// SIP over TLS (package sip/internal/tlspolicy, which says how it
// fails): tls:// listeners sit behind the TCP guard (same bounds, same
// idle timeout, which also bounds the handshake: it runs in sipgo's
// first read, under its read deadline). Strangers' handshakes, each a
// key exchange and a signature of the node's CPU, take a token of one
// bucket for every tls:// listener
// (sip.tls.stranger_handshakes_per_second, one second's worth) at
// accept; without one the connection is closed before the handshake
// starts (counted tls_handshake_rate); peers' and carriers' handshakes
// take none. The listeners present sip.tls.cert_file, read again from
// disk when it changes (at a handshake, at most once a second); with
// sip.tls.client_ca_file a client certificate of those CAs is required.
// Carriers with a sips: or ;transport=tls URI are dialled over TLS: the
// chain is verified against sip.tls.ca_file (else the system roots) in
// the handshake, and the certificate must name the URI's host (or
// address) before a request is written on the connection (else it is
// closed, counted as tls_name, and the call moves on). TLS legs are
// recorded as such in the dialog token, so in-dialog requests go back
// over TLS.

// # Failure
//
// A store error (admission or pacing) rejects the call with 503 and the
// outcome rejected_store; a fallback store goes behind the same interfaces.
// The node's own overload is shed before it reaches the store
// (overload.go): beyond sip.max_inflight new calls being decided (from
// arrival until refused, answered or holding their first pacing slot), a
// new initial INVITE gets 503 at once from the screen, statelessly, outcome
// rejected_overload (while the bound is taken, a peer's plain INVITE gets
// that same answer on its UDP worker, from its raw bytes, before sipgo
// parses it: rawshed.go); in-dialog requests, calls waiting for a slot and
// forwarded calls are never counted nor shed, and priority calls are
// counted but never shed.
//
// The UDP listeners are read by cpsguard itself (ingress.go, package
// sip/internal/ingress): each socket is read in batches (recvmmsg), every
// datagram's header section is scanned before anything parses it (over 32
// parameters in a header element, 256 in the message or 200 header
// fields, each element of a Via, Route, Record-Route, Contact or
// Refer-To list counted as one: dropped, reason params or headers; TCP and
// TLS connections, accepted or dialled, are held to the same bounds by a
// stream scanner, package sip/internal/conns), budgeted against its
// party (a peer by name, a carrier by address, strangers together), and
// handed to one of GOMAXPROCS workers by a hash of its Call-ID. A worker
// takes peers' and carriers' responses and in-dialog requests before their
// new INVITEs, CANCELs and OPTIONS (one of those after every 16), and
// strangers' datagrams last, then sheds, or parses and runs the screen and
// sipgo's transaction layer: a dialog stays in order on one worker, calls
// are decided on every core. (sipgo runs each message it is handed on a
// goroutine of its own, so a carrier's 180 sent right before its 200
// reached the call's transaction after the 200 and was dropped, as h67
// saw in half its runs; the responses to the transactions the node opens
// itself go to them through a queue of their own, in order (sip/internal/txorder).
// A request's server transaction still gets it on sipgo's goroutine.) Each party has a share of each lane in
// datagrams and in bytes, and the last places are kept for quiet parties;
// while the inflight bound is taken a new INVITE waits in its lane up to
// sip.inflight_wait (100 ms by default) for a unit (a burst is decided,
// not shed), and a peer's new INVITE that finds its share of that lane
// taken gets the same 503 at once (parsed for it when the raw path does
// not read it, within a budget: shedParsed) instead of waiting, or being
// dropped unanswered, in the socket buffer; any other datagram that finds
// no room is dropped and counted
// (read_queue_full). The screen also answers 100
// Trying to every INVITE it lets in, and to its retransmissions while it is
// handled, so a handler that sipgo runs late draws no retransmission storm.
// A request whose source is one of the node's own listeners
// never registers that address: the listener's entry in sipgo's pool
// stays the listener's. What the node sends over UDP it writes itself
// (writeMsg, package sip/internal/wire: sipgo's bytes, without sipgo's
// allocations), but for the responses of sipgo's server transactions
// (their connection is sipgo's) and requests with no destination set (the
// ACK sipgo's INVITE transaction builds for a refusal goes where its
// INVITE went, an address only sipgo knows). What it reads over UDP it
// parses itself (wire.Parser: sipgo's message for the same bytes, in a
// third of sipgo's allocations); the strings of such a message share one
// allocation, so what the node keeps of a call for longer than the
// message copies the strings it keeps (call.callID, the record, the
// dialog, the Tracker, the acked table).
// While the node is behind on its own read queues, and for 5 s after, a
// carrier that did not ring a call in time or did not answer a probe is
// not held against it: the answer may be waiting in the node's own queue.
// The node is behind when an answer or in-dialog request reaches sipgo
// more than 250 ms after it was read, or when the queues' fast lane is
// full for every party (TCP has no such queue). Sheds do not count: one
// peer's burst must not keep a dead carrier up.
// A peer whose requests ask for overload control (RFC 7339: "oc" in the top
// Via) gets the node's loss-based reduction (oc, oc-validity, oc-seq,
// oc-algo="loss") in the responses to its INVITEs, relayed or the node's
// own, and to the requests the node answers itself (oc.go, package
// sip/internal/oc); the reduction follows the share of new calls the node
// shed at its inflight bound.
// Strangers, carriers and peers that do not ask see no change, and oc
// values written downstream are removed from relayed responses.
// Every string the proxy logs (Call-IDs, reason phrases, sipgo's errors)
// goes through safetext: controls and Unicode format characters (a
// right-to-left override, zero-width characters) are written as escapes,
// never raw. Malformed or oversized messages are dropped (or answered 400 when a
// transaction can be formed) and counted in cpsguard_sip_errors_total with
// reason parse, oversized, malformed, transaction, source, unknown_source,
// bad_dialog_token, wrong_leg, dialog_ended, dialog_rate, reinvite_limit,
// cancel_source, duplicate, refused_copy, params, headers, stream (a TCP stream that
// cannot be framed), accept, tcp_limit, tcp_read (a TCP connection's read
// failed other than by its idle timeout), tls_name (a TLS next hop whose
// certificate does not name it), tls_handshake_rate (a stranger's TLS
// connection over sip.tls.stranger_handshakes_per_second), read_queue_full, no_via (a relayed
// response with no Via left for the sender), forged_response (a response
// with the proxy's stateless Via whose branch does not verify) or
// stateless_response (one that cannot be relayed statelessly: not over
// UDP, no Via below the proxy's, no IP); they never stop the proxy. sipgo's
// own logs, its package logger's included (log.go), go through the
// proxy's handler with these counts, at Debug for anything a healthy node
// does (a parse failure, an idle SIP/TCP connection closed, sipgo's
// connection bookkeeping). A panic in a handler, the screen or
// a goroutine of the package is recovered, logged once with its stack and
// counted in cpsguard_panics_total{where}. On shutdown Serve drains:
// new INVITEs get 503, calls in progress get sip.drain_grace (5 s by
// default) to finish, then the rest are cancelled; a call refused by the
// drain (a new INVITE, or one still waiting for its pacing slot) is
// outcome rejected_drain, never rejected_queue. Every call ends: the handler goroutine returns on the
// final response, on a carrier timeout (the carrier's setup_timeout, 2 s by
// default, without ringing; 3 min of ringing)
// or on shutdown, and sipgo's transactions end on their RFC 3261 timers.
//
// # Concurrency
//
// A Proxy is safe for concurrent use. sipgo runs each request that reaches
// its transaction layer in its own goroutine (a stateless in-dialog relay
// runs on its UDP worker; a BYE's max_calls release in a goroutine of its
// own, as it may wait on the store); a call waiting for a slot costs that goroutine and one timer.
// With Options.DialogEnds one goroutine exchanges ended dialogs with the
// store every dialogSyncEvery (100 ms); the per-dialog state is one
// mutex-guarded table.
// The configuration is read once per call through Options.Config, so a
// reload applies to the next call; the listen addresses are read once by
// Serve.
package sip
