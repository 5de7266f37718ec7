package udpout

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"sync"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Conn is the node's send path of one of its UDP listeners. It embeds
// the listener's sipgo UDPConnection (references, local address, the
// fallback send), which is what sipgo's connection pool must hold (see
// the package doc), with a WriteMsg of the node's own.
type Conn struct {
	*sipmsg.UDPConnection
	udp *net.UDPConn
}

// New wraps the listener c. The listener is the caller's to close:
// closing the Conn does not close it (sipgo's Listener flag).
func New(c *net.UDPConn) *Conn {
	return &Conn{
		UDPConnection: &sipmsg.UDPConnection{PacketConn: c, PacketAddr: c.LocalAddr().String(), Listener: true},
		udp:           c,
	}
}

// maxDatagram is the longest message sipgo sends over UDP (RFC 3261
// 18.1.1: a request within 200 bytes of the path MTU goes over a
// congestion-controlled transport instead).
func maxDatagram() int { return sipmsg.UDPMTUSize - 200 }

// bufs are the serialization buffers of every Conn.
var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// WriteMsg sends m where sipgo's UDPConnection.WriteMsg would. A
// response goes to the address its Destination names (sipgo's "remote
// address" of a response is that address, parsed). A request goes
// through sipgo's WriteMsg: sipgo sends it to the address its transport
// layer resolved into the request (unexported), which for an ACK or
// CANCEL sipgo built may differ from its Destination; the node's own
// requests use Send, with the address they are for.
func (c *Conn) WriteMsg(m sipmsg.Message) error {
	res, ok := m.(*sipmsg.Response)
	if !ok || sipmsg.SIPDebug {
		return c.UDPConnection.WriteMsg(m)
	}
	to, ok := Destination(res)
	if !ok {
		return c.UDPConnection.WriteMsg(m)
	}
	_, err := c.send(m, to, false)
	return err
}

// Send sends m to to and returns the bytes it sent (a copy the caller
// owns) when keep is set. While sipgo's SIPDebug trace is on it sends
// through sipgo's WriteMsg (to m's Destination) and keeps nothing.
func (c *Conn) Send(m sipmsg.Message, to netip.AddrPort, keep bool) ([]byte, error) {
	if sipmsg.SIPDebug {
		return nil, c.UDPConnection.WriteMsg(m)
	}
	return c.send(m, to, keep)
}

func (c *Conn) send(m sipmsg.Message, to netip.AddrPort, keep bool) ([]byte, error) {
	buf := bufs.Get().(*bytes.Buffer)
	defer bufs.Put(buf)
	buf.Reset()
	m.StringWrite(buf)
	data := buf.Bytes()
	if len(data) > maxDatagram() {
		return nil, sipmsg.ErrUDPMTUCongestion
	}
	if err := c.WriteBytes(data, to); err != nil {
		return nil, err
	}
	if !keep {
		return nil, nil
	}
	return bytes.Clone(data), nil
}

// WriteBytes sends b, one whole message, to to.
func (c *Conn) WriteBytes(b []byte, to netip.AddrPort) error {
	// An IPv4 listener takes only plain IPv4 addresses; an IPv6 one maps
	// them itself.
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	n, err := c.udp.WriteToUDPAddrPort(b, to)
	if err != nil {
		return fmt.Errorf("udp conn %s: %w", c.PacketAddr, err)
	}
	if n != len(b) {
		return fmt.Errorf("udp conn %s: wrote %d of %d bytes", c.PacketAddr, n, len(b))
	}
	return nil
}

// Destination is the IP address and port m's Destination names (port 0
// is sipgo's DefaultUdpPort, as sipgo sends it); false when it names a
// host name or no port.
func Destination(m sipmsg.Message) (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(m.Destination())
	if err != nil {
		return netip.AddrPort{}, false
	}
	if ap.Port() == 0 {
		ap = netip.AddrPortFrom(ap.Addr(), uint16(sipmsg.DefaultUdpPort))
	}
	return ap, true
}
