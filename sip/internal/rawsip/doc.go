// Package rawsip reads SIP messages from their raw bytes, without parsing
// them into sipgo's types: enough of an INVITE to answer it statelessly
// (ScanInvite, AppendShed, TxKey), whether an ACK answers one of those
// answers (ShedAck), whether a header section has a line break sipgo does
// not see (BareLineBreak), and the line and name helpers the sip package's raw
// paths share (CutLine, IsName, EqualFold, NameAddr, URIUser).
//
// It is conservative by design: ScanInvite accepts only the plain forms it
// reads in full, the way sipgo's parser would read them (every header
// sipgo parses with a parser of its own is parsed here with that parser,
// or by a stricter grammar), and reports false for anything else, which
// then goes on to sipgo's parser and the screen. The sip package holds it
// to that with FuzzRawShed and TestRawShedMatchesScreen.
//
// Failure: every function reports false (or nil) for input it does not
// read; none panics on any input. Everything here is safe for concurrent
// use and keeps no state.
package rawsip
