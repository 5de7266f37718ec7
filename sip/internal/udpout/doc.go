// Package udpout owns the node's UDP sends: each UDP listener as sipgo's
// connection pool holds it (Conn), so that everything sent from a
// listener, whether by sipgo's transactions (a server transaction's
// answers, a client transaction's INVITE and ACK), by the transport
// layer (a request with its Laddr set) or by the sip package itself (the
// stateless relays, the node's own answers, an ACK sent again), leaves
// through one path: the message is serialized once into a pooled buffer
// and written with WriteToUDPAddrPort to the address its Destination
// names.
//
// sipgo's own UDPConnection.WriteMsg did the same write through a
// net.UDPAddr built per message (and an address lookup in the transport
// layer before it), and the node serialized a relayed ACK a second time
// to keep its bytes for a carrier's retransmitted 2xx; Send returns
// those bytes instead (BENCHMARKS.md, "Session 17").
//
// # Failure
//
// A message longer than sipgo's UDP bound (UDPMTUSize less 200 bytes,
// RFC 3261 18.1.1) is not sent and gets sipmsg.ErrUDPMTUCongestion, as
// sipgo's did. A destination that is not an IP address and port (a host
// name sipgo's transport layer resolved into the message's unexported
// remote address) goes through sipgo's own UDPConnection.WriteMsg, as
// does every message while sipgo's SIPDebug trace is on. A write that
// fails or is short returns its error; nothing is retried.
//
// # Concurrency
//
// A Conn is safe for concurrent use; each send takes its own buffer.
package udpout
