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
// 403), otherwise the peer's default; 100 Trying goes out at once; one
// admission store call checks the peer and customer windows (refused:
// sip.reject, or admitted anyway in shadow mode); then the carriers of the
// route are tried in order: a pacing slot within the carrier's max_wait is
// reserved and waited for (a timer, cancellable by CANCEL and shutdown), and
// the INVITE is forwarded with a new Via, Record-Route, Max-Forwards minus
// one and the carrier's host, port and transport. Just before the send, a
// local send gate holds the call until this node's own last sends of the
// carrier, peer and customer leave room in the rolling window, so a timer
// woken late never puts limit+1 calls into one second at the carrier; the
// slot and gate waits together stay within the carrier's max_wait (past
// it the carrier counts as full). Both waits are pacing.Pacer.Acquire's;
// this package counts and logs them (pace.go). Responses are relayed
// upstream; a 5xx, 408, timeout or transport error before any provisional
// response above 100 moves the call to the next carrier (paced again). When
// no carrier can take the call it is rejected with 503.
//
// Concurrent calls (calls.go, max_calls) are held through a CallPlaces (a
// calls.Tracker): the peer's and customer's places right after admission,
// all or none (full: sip.reject_calls, outcome rejected_calls), a
// carrier's just before its slot is reserved (full: the next carrier,
// reroute calls_full), given back when the call moves on. An unanswered
// call frees its places when its INVITE handler returns; an answered one
// when a BYE that passed the dialog-token check has been sent on (either
// direction), or by the Tracker at max_call_duration or the places'
// expiry. Options.Calls nil keeps them in process, refreshed by Serve.
//
// The limits applied are the configured ones unless an operator's live
// override (Options.Overrides, package limits) replaces them: effective.go
// is the one place that decides a peer's or customer's cps and burst and a
// carrier's cps (the pacing interval, the send gate, an adaptive carrier's
// AIMD maximum); the lookup reads an in-memory snapshot, no I/O.
//
// Carriers are living systems (probe.go, adaptive.go). Each node probes
// every carrier whose carriers[].probe is on with SIP OPTIONS and feeds the
// answers, and the outcome of every forwarded call (setup timeouts, 5xx and
// 408 that are not back-pressure; down_after failed calls in a row trigger
// a probe at once, which decides), to a health.Tracker: a carrier down on
// this node is skipped without taking a slot, and a call whose route is all
// down is refused at once (503, outcome rejected_down) before admission. A
// carrier's 503 (or 500) with Retry-After blocks it for the whole pool for
// that long (a span in its slot set). An adaptive carrier's overload
// answers (overload.codes, overload.reasons) lower its effective CPS for
// the pool through the pacing store (AIMD, rate.lua), and each node paces
// it at that rate, refreshed every 250 ms.
//
// Before any of that, the screen (screen.go) sees every parsed message
// ahead of sipgo's transaction layer: strangers (neither a peer's source nor
// a carrier's address) get silence or one stateless 403 and cost no state;
// a message without Via, From, To, Call-ID or CSeq (or with an empty tag)
// is never used (stateless 400; responses dropped); out-of-dialog OPTIONS
// are answered statelessly (503 while draining or while the store cannot
// decide, so dispatchers route around the node), other out-of-dialog
// methods 405; a CANCEL of a call in progress must come from its INVITE's
// source: the screen answers it 200 and the call cancels the carrier's leg
// and relays the carrier's 487 (its own 487 only while still queued). A
// refused call's final answer is sent once and its transaction ended.
//
// In-dialog requests (To tag set: ACK for 2xx, BYE, re-INVITE, UPDATE,
// INFO, …) are relayed only along their own dialog. Every Record-Route the
// proxy adds carries a dialog token (";cg=", token.go): the call's two legs
// (the peer's source address and transport, the carrier address and
// transport the INVITE went to) signed with its Call-ID and the caller's
// From tag under sip.dialog_secret. Both ends copy it into the Route of
// their in-dialog requests; a request is relayed only when one of the
// proxy's own Route entries carries a token that verifies, the tags say
// which leg sent it, it comes from that leg's address, and it goes to the
// other leg whatever its Request-URI says (403 otherwise, sent once). A
// re-INVITE is limited per dialog (6 a minute, pool-wide through the
// admission store) and takes no pacing slot. In-dialog requests other than
// INVITE, ACK and CANCEL (BYE, INFO, UPDATE, …) that arrive over UDP and go
// to a UDP leg are relayed from the screen without a transaction
// (stateless.go, RFC 3261 16.11): the proxy's Via branch is an HMAC under
// the dialog-token key over the upstream Via, Call-ID, CSeq and next hop
// IP, so a retransmission gets the same branch and a response is relayed
// only when its branch verifies (forged ones are dropped); a TCP leg, and
// a request whose top Via holds a quoted parameter (sipgo would read it
// back differently in the response), keep the stateful relay. ACKs of 2xx (always relayed without a transaction)
// leave from the screen too, so a BYE sent right after its ACK cannot
// overtake it. Upstream Vias of a forwarded
// INVITE travel folded into one compact "v" header so sipgo's ACK of a
// non-2xx answer carries only the proxy's Via (RFC 3261 17.1.1.3). An
// initial INVITE loses every Route, the Request-URI's maddr and URI
// headers, and the customer header. Carrier host names are resolved at
// start and every 30 s. TCP connections are bounded per source and in all,
// and idle ones closed (tcp.go).

// # Failure
//
// A store error (admission or pacing) rejects the call with 503 and the
// outcome rejected_store; a fallback store goes behind the same interfaces.
// The node's own overload is shed before it reaches the store
// (overload.go): beyond sip.max_inflight new calls being decided (from
// arrival until refused, answered or holding their first pacing slot), a
// new initial INVITE gets 503 at once from the screen, statelessly, outcome
// rejected_overload (while the bound is taken, a peer's plain INVITE gets
// that same answer from the UDP read filter, from its raw bytes, before
// sipgo parses it: rawshed.go); in-dialog requests, calls waiting for a slot and
// forwarded calls are never counted nor shed. Each UDP listener is drained
// by a reader of its own into three bounded queues (readq.go): peers' and
// carriers' responses and in-dialog requests are handed to sipgo before
// their new INVITEs, CANCELs and OPTIONS (one of those after every 16),
// and strangers' datagrams after both; each party (carrier address, peer)
// has a share of the first two, and their last quarter is kept for quiet
// parties;
// while the inflight bound is taken a new INVITE waits there up to
// sip.inflight_wait (100 ms by default) for a unit (a burst is decided,
// not shed), and a peer's new INVITE that finds its share of that queue
// taken gets the same 503 at once (parsed for it when the raw path does
// not read it, within a budget per listener: shedParsed)
// instead of waiting, or being dropped unanswered, in the socket buffer;
// any other datagram that finds no room is dropped and counted
// (read_queue_full). The screen also answers 100
// Trying to every INVITE it lets in, and to its retransmissions while it is
// handled, so a handler that sipgo runs late draws no retransmission storm.
// While the node sheds (and 5 s after), a carrier that did not ring a call
// in time or did not answer a probe is not held against it: the answer may
// be waiting in the node's own queue.
// A peer whose requests ask for overload control (RFC 7339: "oc" in the top
// Via) gets the node's loss-based reduction (oc, oc-validity, oc-seq,
// oc-algo="loss") in the responses to its INVITEs, relayed or the node's
// own, and to the requests the node answers itself (oc.go); the reduction
// follows the share of new calls the node shed at its inflight bound.
// Strangers, carriers and peers that do not ask see no change, and oc
// values written downstream are removed from relayed responses.
// Malformed or oversized messages are dropped (or answered 400 when a
// transaction can be formed) and counted in cpsguard_sip_errors_total with
// reason parse, oversized, malformed, transaction, source, unknown_source,
// bad_dialog_token, wrong_leg, reinvite_limit, cancel_source, duplicate,
// params, headers, accept, tcp_limit, tcp_read (a TCP connection's read
// failed other than by its idle timeout), read_queue_full, forged_response
// (a response with the proxy's stateless Via whose branch does not verify)
// or stateless_response (one that cannot be relayed statelessly: not over
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
// runs in the read loop; a BYE's max_calls release in a goroutine of its
// own, as it may wait on the store); a call waiting for a slot costs that goroutine and one timer.
// The configuration is read once per call through Options.Config, so a
// reload applies to the next call; the listen addresses are read once by
// Serve.
package sip
