// Package sip is cpsguard's SIP front end: it identifies, admits, routes,
// paces and forwards calls. It is a stateful proxy built on sipgo
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
// it the carrier counts as full). Responses are relayed
// upstream; a 5xx, 408, timeout or transport error before any provisional
// response above 100 moves the call to the next carrier (paced again). When
// no carrier can take the call it is rejected with 503.
//
// In-dialog requests (To tag set: ACK for 2xx, BYE, re-INVITE, UPDATE,
// INFO, …) are relayed along their Route set, without limits, but only when
// their top Route names this proxy and they come from, and go to, a party
// the configuration knows (a peer's source or a carrier's address; 403
// otherwise, or nothing from an unknown source when unknown_source is drop),
// so the proxy is no open relay. A re-INVITE must also prove it belongs to
// a call the proxy forwarded: every Record-Route the proxy adds carries a
// dialog token (";cg=", HMAC-SHA256 of the Call-ID under sip.dialog_secret,
// 96 bits, base64url), which both ends copy into the Route of their
// in-dialog requests, and at least one of the proxy's own Route entries of
// a re-INVITE must carry the token of its Call-ID (under the current secret
// or the one before the last reload); otherwise it gets 403. A To tag and a
// Route are easy to forge, and a forged "re-INVITE" would reach a carrier
// past admission and pacing: carriers count CPS on INVITE arrival, whatever
// they answer. A re-INVITE bound for a carrier also takes a pacing slot of
// that carrier and passes the send gate, like a new call, so a reused
// token cannot push a carrier past its cps (no slot within max_wait: 503).
// Other in-dialog methods create no call at a carrier and are
// not checked, so a BYE works across restarts and key changes. With an
// empty sip.dialog_secret the key is random per process (one warning at
// start), so re-INVITEs of calls set up before a restart or through
// another node are refused; with record_route off no in-dialog request
// should reach the proxy, and a re-INVITE that does is refused. A 403 to a
// stranger, in or out of a dialog, is sent once and its transaction ended
// at once: a spoofed source gets no retransmissions and costs no state.
// Out-of-dialog OPTIONS get 200 OK; other out-of-dialog methods get 405.
// A CANCEL for a call waiting for its slot releases the slot and the
// caller gets 487 (the carrier never sees the call); a CANCEL after
// forwarding is forwarded, and so is one of a re-INVITE (a 2xx crossing it
// is ACKed by the proxy).
//
// # Failure
//
// A store error (admission or pacing) rejects the call with 503 and the
// outcome rejected_store; a fallback store goes behind the same interfaces.
// Malformed or oversized messages are dropped (or answered 400 when a
// transaction can be formed) and counted in cpsguard_sip_errors_total with
// reason parse, oversized, malformed, transaction, source, unknown_source or
// unknown_destination (in-dialog requests from or to strangers), or
// bad_dialog_token (a re-INVITE from a known party without a valid dialog
// token, answered 403); they never stop the proxy. On shutdown Serve drains:
// new INVITEs get 503, calls in progress get 5 s to finish, then the rest
// are cancelled. Every call ends: the handler goroutine returns on the
// final response, on a carrier timeout (4 s of silence, 3 min of ringing)
// or on shutdown, and sipgo's transactions end on their RFC 3261 timers.
//
// # Concurrency
//
// A Proxy is safe for concurrent use. sipgo runs each request in its own
// goroutine; a call waiting for a slot costs that goroutine and one timer.
// The configuration is read once per call through Options.Config, so a
// reload applies to the next call; the listen addresses are read once by
// Serve.
package sip
