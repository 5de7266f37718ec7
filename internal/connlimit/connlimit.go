package connlimit

import (
	"net"
	"net/netip"
	"sync"
)

// SourceKey is what a per-source connection bound counts a connection
// from ip under: its IPv4 address (an IPv4-mapped IPv6 one unmapped), or
// the IPv6 /64 it is in (one host's usual allocation, so that a host
// cannot step around the bound by using more of its addresses).
func SourceKey(ip netip.Addr) netip.Addr {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().Addr()
	}
	return ip
}

// OnClose returns c, whose first Close also calls release: a listener's
// place, given back exactly once however often the connection is closed.
func OnClose(c net.Conn, release func()) net.Conn {
	return &placeConn{Conn: c, release: release}
}

type placeConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *placeConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
