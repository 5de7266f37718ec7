// Package tlspolicy owns SIP over TLS (sip.tls) for the sip package: the
// certificate files and their reload on change, the configuration of the
// tls:// listeners and of the connections the proxy dials, and the check,
// before a request leaves on a TLS connection, that the next hop's
// certificate names it. It knows nothing of calls; the sip package gives
// it, at New, the configuration snapshot, its logger, the connection a
// request would leave on (sipgo's transport layer), its tls:// listeners'
// addresses, the carriers' TLS host names and whether a name resolved to
// an address, and a counter of refused names.
//
// The tls:// listeners are TCP listeners behind the same guard as
// tcp:// ones (package sip/internal/conns: per-source and total bounds,
// strangers closed at accept when unknown_source is drop, sipgo's idle
// timeout), wrapped in crypto/tls and served by sipgo's TLS transport.
// Each handshake takes its configuration from the current snapshot
// (Policy.Server, through GetConfigForClient): the certificate of
// sip.tls.cert_file and key_file, and with sip.tls.client_ca_file a
// client certificate signed by one of those CAs is required. The files
// are read again when they change (size or modification time, checked at
// a handshake at most once a checkEvery, a second): a renewed certificate
// is served from the next handshakes on, no restart or reload needed.
// Files that change but do not load (a key written before its
// certificate) leave the last good ones in use; the failure is logged
// once per change.
//
// Carriers reached over TLS (sips: URIs, ;transport=tls) are dialled by
// sipgo with the client configuration of Policy.Client. sipgo dials the
// address the proxy resolved and names the server by that address, which
// crypto/tls then neither sends (no SNI for an address) nor shows to a
// verification hook; so the handshake verifies the chain only, against
// sip.tls.ca_file (else the system roots: verifyChain), and before a
// request leaves on a connection the proxy opened, Policy.CheckHop checks
// the certificate's name: the carrier's URI host name (RFC 5922), or its
// address when the URI holds one (names, for an in-dialog hop, found by
// its address). A connection whose certificate does not name its hop is
// closed before a byte of SIP is written on it. A carrier that asks for a
// client certificate gets sip.tls.cert_file's.
//
// # Failure
//
// Fails closed. Server fails when the certificate (or, with
// sip.tls.client_ca_file, the client CAs) never loaded, and a handshake
// then fails; a carrier's chain that does not verify fails its handshake;
// CheckHop returns an error (the call moves on) when the connection
// cannot be opened, its certificate names none of the hop's names
// (counted by Options.NameFailed: tls_name in the sip package) or
// sip.tls.ca_file never loaded. A client certificate that does not load
// is not offered (the carrier decides). The memo of checked certificates
// is bounded (4,096, then forgotten at once: checked again). Nothing
// panics on any input.
//
// # Concurrency
//
// A Policy is safe for concurrent use.
package tlspolicy
