// Package udpout owns the node's own UDP sends: each UDP listener's Conn
// serializes a message once into a pooled buffer and writes it with
// WriteToUDPAddrPort to the address it is for. The sip package sends
// through it the stateless relays' requests and responses, its own
// answers, an INVITE client transaction's INVITE, retransmissions and
// ACK of a non-2xx answer (Send, to the address the INVITE was for), and
// an ACK sent again (WriteBytes, the bytes Send kept).
//
// sipgo's connection pool holds each listener's embedded
// sipgo.UDPConnection, never the Conn: sipgo's UDP transport asserts its
// own connection type on what its pool hands it (transport_udp.go,
// createConnection), which a lookup racing an eviction can reach. So what
// sipgo sends on its own (a server transaction's answers, a non-INVITE
// client transaction's request, an ACK sent on the connection sipgo
// picks) goes through sipgo's UDPConnection.WriteMsg, to the address
// sipgo resolved into it.
//
// sipgo's own UDPConnection.WriteMsg did the same write through a
// net.UDPAddr built per message (and an address lookup in the transport
// layer before it), and the node serialized a relayed ACK a second time
// to keep its bytes for a carrier's retransmitted 2xx; Send returns
// those bytes instead.
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
