// Package wire owns the node's SIP messages on the wire in both
// directions: it writes sipgo messages as bytes exactly as sipgo writes
// them (sipgo's Message.StringWrite), without sipgo's allocations, sends
// them over UDP as sipgo's UDPConnection.WriteMsg does, and reads
// datagrams into sipgo messages exactly as sipgo's parser does (Parser),
// in about a third of sipgo's allocations.
//
// Reading. sipgo's parser copies every header's value into a string of
// its own (a generic header's name too), allocates each header, grows
// each parameter list one Add at a time and allocates a URI's parameters
// whether or not it has any: about 30 objects for an INVITE. Parser
// copies the start line and the headers once, hands sipgo's own header
// parsers parts of that string, and parses the headers a call reads
// every time (Via, From, To, Contact, Call-ID, CSeq, Max-Forwards,
// Content-Length) into one allocation with room for their parameters,
// through sipgo's exported address and parameter parsers; a header it
// does not read itself (an IPv6 Via host, a comma outside a Via) goes to
// sipgo's parser for that header. It takes the common shape of a message
// only (CRLF lines, no folding, no header sipgo refuses) and leaves every
// other datagram to sipgo's parser, from its first byte. What it returns
// is sipgo's: FuzzParse compares the two
// field by field through every pointer (reflect.DeepEqual) and error for
// error, and the sip package's tests compare them on every datagram the
// node parses in them (VerifyParse). The price: the strings of a message
// share one allocation, so a string kept from it keeps the message's
// headers alive (the node's long-lived records copy what they keep), and
// a message takes 7-33 % more bytes than sipgo's (the block has room for
// every header it may hold).
//
// Writing. sipgo renders a message into a pooled buffer through
// io.StringWriter: every port, CSeq and Max-Forwards number becomes a
// string of its own, every URI's and header's parameter list another,
// every host is parsed into a net.IP to decide whether it needs brackets,
// and the body is copied into a string before it is written. On the
// node's call path that was about a third of the objects it allocated per
// call. Append writes the same bytes into a []byte the caller reuses;
// WriteUDP sends them with a netip address (no net.UDPAddr). Append is
// held to sipgo's output byte for byte: FuzzAppend compares the two on
// whatever sipgo's parser reads, and the sip package's tests compare them
// on every message the proxy sends in them (Verify).
//
// Failure: Parser fails exactly where sipgo's parser fails, with its
// error (it is sipgo's parser that reads every datagram it does not take
// whole). Append never fails and never panics on a message sipgo can
// write; a header type it does not know is written through its Value, as
// sipgo does; a message with compact headers is left to sipgo (Append
// reports false). WriteUDP leaves to sipgo's WriteMsg every message it
// cannot send the same way (a request with no destination set, whose
// address only sipgo's transport layer knows; a destination that is not
// an IP literal with a port, an IPv6 zone, the unspecified address; a
// socket that is not a *net.UDPConn; sipgo's SIPDebug on) and returns
// sipgo's errors: ErrUDPMTUCongestion for a message longer than
// UDPMTUSize-200, the socket's error wrapped as sipgo wraps it.
// Everything here is safe for concurrent use.
package wire
