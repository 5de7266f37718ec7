// Package sipparse parses one SIP datagram into sipgo's message types with
// far fewer allocations than sipgo's own parser, and with the same result.
//
// It owns one thing: [Parse] (and [ParseMax], the same with the node's
// size bound) returns exactly what sipmsg.NewParser().ParseSIP returns for
// the same bytes in github.com/emiago/sipgo v1.7.2: the same message type,
// start line, headers (same order, same Go types, same field values, the
// same comma-separated values split into separate headers, the same
// folded lines joined) and body; and an error exactly when sipgo's parser
// returns one, with the same text, the same sentinels
// (sipmsg.ErrMessageTooLarge, sipmsg.ErrParseEOF,
// sipmsg.ErrParseLineNoCRLF, sipmsg.ErrParseReadBodyIncomplete) and the
// same partial message beside it. The one difference on an error: a
// Content-Length longer than the datagram's body is refused
// (ErrParseReadBodyIncomplete) before the body is allocated, so the partial
// message that goes with that error has no body, where sipgo's has the
// datagram's body padded with zeros to the declared length. A caller that
// drops the message on an error, as the node does, sees no difference.
//
// How: the header section is converted to one string once and every start
// line part, header name, value, URI part and parameter is a substring of
// it; a message's first Via, From, To, Contact, CSeq, Call-ID,
// Content-Type, Max-Forwards and Content-Length headers and up to eight
// header parameters share one allocation (each a separate value, with its
// parameters capped at their room, so that nothing aliases). Headers are
// sipgo's exported types, built with sipmsg.NewRequest,
// sipmsg.NewResponse, sipmsg.NewHeader, sipmsg.ParseUri and
// sipmsg.UnmarshalHeaderParams; what sipgo keeps unexported or allocates
// in (the line reader, line folding, the header dispatch and its comma
// splitting, the Via, CSeq, Call-ID, Max-Forwards, Content-Length,
// Content-Type, Contact and Route parsers, and ParseAddressValue's state
// machine) is ported from sipgo v1.7.2's parser.go, parse_header.go,
// parse_via.go and parse_address.go line by line. A differential test and
// fuzz target (FuzzParseSameAsSipgo) hold the two equal; a sipgo upgrade
// must rerun them.
//
// The cost of sharing: every string in the message shares the one
// allocation of the header section, so a header value kept after the
// message is dropped keeps the whole header section (at most the size
// bound, typically under 1 KB) alive, and a header pointer kept keeps the
// shared header allocation (about 900 bytes) alive. Clone what outlives
// the message (strings.Clone) when that matters.
//
// Failure: malformed input is an error, never a panic; the message-size
// bound (sipmsg.ErrMessageTooLarge) is checked first, before any
// allocation. Safe for concurrent use: it keeps no state.
package sipparse
