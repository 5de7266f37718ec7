// Package opaque is the text form of the opaque values the proxy writes
// into messages: dialog tokens (the ";cg=" of its Record-Route), the
// branches of its Via and its stateless branches, the tags and Call-IDs of
// its own requests (Text).
//
// The values are random or sealed bytes, and other parties read the
// messages that carry them, some with parsers that search the whole
// message for a header name as a bare substring. SIPp 3.6 does: it takes
// the method of a response's CSeq from the first "CSeq" anywhere in the
// message (call.cpp, extract_cseq_method), so a Record-Route token in
// base64url that happened to hold those four letters made it abort a good
// call on an "unexpected" 200 (about once in 275,000 calls: 61 places in
// 64 characters, each 64^-4).
//
// The text form here cannot spell a full SIP header name, in any case:
// its 32 characters are the digits, the lowercase consonants and '_'
// (Alphabet), and every header name holds a vowel or a '-'
// (TestNoHeaderName checks the registered names). Compact forms are single
// letters, some of them in the alphabet; no parser finds those without the
// ':' that follows, and the alphabet has no ':', ';', '=', ',', '<', '>'
// or whitespace, so a value never ends a parameter or a header either.
//
// Failure: Decode reports false for a character outside the alphabet, a
// length no byte count encodes to, or a second text of the same bytes (a
// spare bit set). Nothing here panics on any input (FuzzDecode).
package opaque
