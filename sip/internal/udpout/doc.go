// Package udpout owns the node's UDP sends: each UDP listener as sipgo's
// connection pool holds it (Conn). What leaves through Conn's own path
// (the message serialized once into a pooled buffer and written with
// WriteToUDPAddrPort to the address its Destination names) is every
// response sent from a listener (a server transaction's answers, the
// stateless relays' and the node's own), the stateless relays' requests
// and an INVITE client transaction's INVITE, retransmissions and ACK
// (the sip package's Send), and an ACK sent again (WriteBytes). Other
// requests sipgo's transport layer addresses itself (non-INVITE client
// transactions such as CANCEL, BYE and OPTIONS, an ACK of a 2xx sent on
// the connection sipgo picks) still go through sipgo's own
// UDPConnection.WriteMsg, to the address sipgo resolved into them.
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
