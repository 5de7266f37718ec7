// Package dialogtoken is the codec of cpsguard's dialog tokens: the sealed
// proof an in-dialog request carries in its Route (";cg=<token>") that
// names the two legs of its call. It mints, decodes and opens tokens and
// keeps the keys (one per secret, one AEAD key per mint day); the sip
// package decides which secret is in force and what a token's legs and
// tags allow.
//
// A dialog token is the proof an in-dialog request needs to be relayed. The
// proxy puts it in the URI of every Record-Route it adds to a forwarded
// initial INVITE (";cg=<token>"); both ends copy those URIs into the Route
// of their in-dialog requests (RFC 3261 12.1), so every genuine in-dialog
// request brings it back.
//
// The token names the two legs the proxy set up for the call, sealed:
//
//   - the peer leg: the packet source (IP, port) and transport the initial
//     INVITE came from;
//   - the carrier leg: the address (IP, port) and transport the proxy sent
//     it to;
//   - the call's Call-ID and the caller's From tag (the "ftag" of
//     Kamailio's rr module), which are not carried but are authenticated
//     with the rest;
//   - when it was minted (the sip package expires it after
//     max_call_duration).
//
// In-dialog requests from the caller carry that tag in From, requests from
// the callee carry it in To, so the tag also tells the direction: a request
// is relayed only from one leg to the other (never to a host:port that is
// neither), and only when it comes from the leg its direction says. Nothing
// is stored per dialog to check a token, so tokens work across restarts
// and across a pool that shares sip.dialog_secret.
//
// The legs are encrypted (AES-256-GCM): a peer learns nothing from its
// token, not even which carrier address took its call (wholesale routes
// are confidential, and a spoofed BYE needs that address). Layout, before
// opaque's text (base32 in digits, lowercase consonants and '_', which
// cannot spell a SIP header name: SIPp took a "CSeq" inside a base64url
// token for the response's CSeq): a header of version (1 byte, 4) and the mint
// time (4 bytes, Unix seconds, big endian), then the GCM nonce (12
// bytes: a process's random instance part of 4 bytes, drawn once, and a
// 64-bit counter, Nonces; or 12 random bytes, Mint), the sealed plaintext
// and the tag (16 bytes). A process tells its own tokens by the instance
// part. The plaintext is a
// flags byte (bit 0 peer over TCP, bit 1 carrier over TCP, bit 2 peer
// over TLS, bit 3 carrier over TLS) and the peer
// and carrier addresses (each: IP length 4 or 16, the IP, the port big
// endian). The additional data is the header, then 0, the Call-ID, 0 and
// the caller's From tag (neither holds a NUL: the sip package refuses such
// messages). Two IPv4 legs
// make 48 bytes, 77 characters; two IPv6 legs 72 bytes, 116 characters.
//
// The AES key is derived from the secret and the mint day (HKDF-SHA256,
// info keyInfo and the day number): random 96-bit nonces are safe for
// 2^32 tokens per key (NIST SP 800-38D), and one key per day keeps a pool
// far below that (49,000 calls a second). A version-3 token (the same
// layout in base64url, minted by the releases before, and by this one as
// Base64URL while such a release runs in the pool) still opens; tokens
// of another version, an unsealed version-2 token of an older release
// included, are refused. Decode takes one text per token: the spare bits
// of its last character must be zero.
//
// Failure: Decode and Open report false for anything that is not a token
// of this format under this key; they never panic on any input (FuzzToken).
// Mint fails only when the clock is outside what 32 bits of Unix seconds
// hold, or when no key can be derived.
//
// A Key is safe for concurrent use.
package dialogtoken
