// Package statelessbranch is the codec of the branch the proxy puts in
// its Via on an in-dialog request it relays statelessly (RFC 3261 16.11:
// the sip package's stateless relay, stateless.go). The proxy keeps
// nothing per such request: the branch carries everything the far leg's
// response needs, authenticated, and a response is relayed only along its
// request's path. This package owns the branch's bytes, its MAC input and
// its text, and the two Via parameters of that path (SetReceived writes
// them on the way out, Dest reads them on the way back); the sip package
// decides which requests go this way, which key is in force and in which
// text, and what a verified response does to its call.
//
// A branch is Prefix followed by, in opaque's text (which cannot spell a
// header name) or in base64url (Text), Bytes bytes: a flags byte (the
// direction: FromCarrier), the call's key (KeyBytes, the sip package's
// callKey) and the first MACBytes bytes of an HMAC-SHA256 (under the
// dialog-token key, dialogtoken.Key.Sum, with the Call-ID) over
//
//   - the upstream Via as the proxy forwarded it (transport, host, port,
//     branch, and the received and rport parameters the proxy set from the
//     packet's source, SetReceived: where the response will go),
//   - the CSeq number and method,
//   - the next hop's IP (where the response must come from),
//   - the flags and the call key,
//
// each text length-prefixed and every other field of a fixed or
// self-delimiting width (Input), after a domain string that no
// dialog token's payload starts with. It is deterministic, so a
// retransmission gets the same branch (16.11) and the next hop recognises
// it. A response whose top Via branch has the prefix (OnTop) carries its
// request's branch back: Decode reads it, and Verify checks its MAC over
// the response's own second Via, Call-ID, CSeq and packet source IP; the
// response then goes to the address that second Via names (Dest: received,
// rport, RFC 3261 18.2.2, RFC 3581). A forged proxy Via thus never sends a
// response anywhere.
//
// # Failure
//
// Decode reports false for anything that is not Chars of opaque's text or
// Chars64 of base64url decoding to Bytes with known flags (one text per
// value: spare bits set are refused), and Verify false for a MAC that is
// not the key's over the input; neither panics on any input (FuzzDecode).
// Dest reports false for a Via that names no IP address or a port out of
// range. Nothing else fails: Input, Seal and Text take any Via, CSeq (nil
// too) and address.
//
// # Concurrency
//
// Everything here is safe for concurrent use (a dialogtoken.Key is); the
// functions keep no state, and Seal and Verify only read the input they
// are given, so one input may be checked against several branches at
// once. SetReceived changes the Via it is given, which
// the caller owns.
package statelessbranch
