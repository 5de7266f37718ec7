package httpapi

import (
	"net"
	"net/netip"
	"sync"

	"github.com/cpsguard/cpsguard/internal/connlimit"
)

// The bounds of Listener. A Prometheus server keeps one connection per
// target, the clients of this package one per command, a load balancer's
// health checks a few: far below either.
const (
	// MaxConns is how many connections the listener holds open at once.
	MaxConns = 512
	// MaxConnsPerSource is how many of them one source holds: an IPv4
	// address, or an IPv6 /64.
	MaxConnsPerSource = 32
	// ReservedConns of MaxConns are kept for sources that hold fewer than
	// SmallSource connections: a kubelet's probes, a Prometheus, an
	// operator's CLI. Sixteen sources idling 32 keep-alive connections
	// each took every place, and /healthz failed (h46: a pod killed by
	// its liveness probe); now the big ones stop at 448, and the last 64
	// take 22 more sources, at most 3 connections each.
	ReservedConns = 64
	// SmallSource is the holding below which a source may take a
	// reserved place.
	SmallSource = 4
)

// Listener bounds the connections l accepts: MaxConns at once and
// MaxConnsPerSource from one source, the last ReservedConns only for
// sources that hold fewer than SmallSource; a connection over a bound is
// closed at accept, before anything is read from it. Every connection is a file
// descriptor of the process, which the SIP listeners, the node's
// connections to carriers and Redis share: without a bound, a client that
// reaches http.listen (where a scraper must reach it) could hold all of
// them, each for the server's idle timeout at a request now and then.
func Listener(l net.Listener) net.Listener {
	return &boundedListener{Listener: l, bySrc: map[netip.Addr]int{}}
}

type boundedListener struct {
	net.Listener
	mu    sync.Mutex
	open  int
	bySrc map[netip.Addr]int
}

// sourceOf is what the per-source bound counts a connection from a under:
// its IPv4 address or its IPv6 /64; ok false for an address that is not
// IP (counted in the total only).
func sourceOf(a net.Addr) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return connlimit.SourceKey(ap.Addr()), true
}

func (l *boundedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err // http.Server retries a temporary one
		}
		src, keyed := sourceOf(c.RemoteAddr())
		l.mu.Lock()
		held := l.bySrc[src]
		reserved := l.open >= MaxConns-ReservedConns && (!keyed || held >= SmallSource)
		if l.open >= MaxConns || (keyed && held >= MaxConnsPerSource) || reserved {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open++
		if keyed {
			l.bySrc[src]++
		}
		l.mu.Unlock()
		return connlimit.OnClose(c, func() { l.release(src, keyed) }), nil
	}
}

func (l *boundedListener) release(src netip.Addr, keyed bool) {
	l.mu.Lock()
	l.open--
	if keyed {
		if l.bySrc[src]--; l.bySrc[src] <= 0 {
			delete(l.bySrc, src)
		}
	}
	l.mu.Unlock()
}
