// Package wire writes sipgo messages as bytes exactly as sipgo writes them
// (sipgo's Message.StringWrite), without sipgo's allocations, and sends
// them over UDP as sipgo's UDPConnection.WriteMsg does.
//
// sipgo renders a message into a pooled buffer through io.StringWriter:
// every port, CSeq and Max-Forwards number becomes a string of its own,
// every URI's and header's parameter list another, every host is parsed
// into a net.IP to decide whether it needs brackets, and the body is
// copied into a string before it is written. On the node's call path that
// was about a third of the objects it allocated per call. Append writes
// the same bytes into a []byte the caller reuses; WriteUDP sends them
// with a netip address (no net.UDPAddr).
//
// Append is held to sipgo's output byte for byte: FuzzAppend compares the
// two on whatever sipgo's parser reads, and the sip package's tests compare
// them on every message the proxy sends in them (CheckSends).
//
// Failure: Append never fails and never panics on a message sipgo can
// write; a header type it does not know is written through its Value, as
// sipgo does; a message with compact headers is left to sipgo (Append
// reports false). WriteUDP leaves to sipgo's WriteMsg every message it
// cannot send the same way (a request with no destination set, whose
// address only sipgo's transport layer knows; a destination that is not
// an IP literal with a port, an IPv6 zone, the unspecified address; a
// socket that is not a *net.UDPConn; sipgo's SIPDebug on) and returns sipgo's errors: ErrUDPMTUCongestion for a
// message longer than UDPMTUSize-200, the socket's error wrapped as sipgo
// wraps it. Everything here is safe for concurrent use.
package wire
