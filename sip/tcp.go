package sip

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/connlimit"
)

// SIP over TCP is a stranger's cheapest way to hold a node's memory: a
// half-sent message keeps a goroutine, a descriptor and sipgo's read buffer
// for as long as the connection stays open. Three bounds apply:
//
//   - sip.tcp.idle_timeout: a connection that sends nothing for that long is
//     closed (sipgo's TCP read timeout; it also applies to the proxy's own
//     connections to carriers, which are opened again when needed); a
//     write blocked that long (a party that does not read) fails too, and
//     closes an accepted connection (scanConn.Write);
//   - sip.tcp.max_connections: accepted connections open at once, over all
//     sources; strangers (neither a peer's source nor a carrier's address,
//     served when unknown_source is reject, to get their 403) hold at most
//     a quarter of it (strangerShare), so peers and carriers always find
//     the other three quarters, whatever the number of stranger addresses;
//   - sip.tcp.max_connections_per_source: the same for one source: an IPv4
//     address, or an IPv6 /64 (one host holds a whole /64).
//
// A connection over a bound, or from a stranger when unknown_source is
// drop, is closed at accept, before sipgo reads a byte of it. Whether a
// source is a stranger is decided at accept, by the configuration then. A
// tls:// listener is guarded alike (its own counts, the same bounds),
// before the TLS handshake, which then runs under the idle timeout.

// Defaults of sip.tcp (DESIGN.md), for configurations built by hand.
const (
	defaultTCPIdle      = 60 * time.Second
	defaultTCPMax       = 10000
	defaultTCPPerSource = 200
)

// tcpLimits are the bounds on accepted TCP connections.
type tcpLimits struct {
	idle      time.Duration
	max       int
	perSource int
}

// tcpLimitsOf returns cfg's TCP bounds (sip.tcp), with the defaults for
// what a hand-built configuration leaves at zero.
func tcpLimitsOf(cfg *config.Config) tcpLimits {
	l := tcpLimits{idle: defaultTCPIdle, max: defaultTCPMax, perSource: defaultTCPPerSource}
	if cfg == nil {
		return l
	}
	if t := cfg.SIP.TCP; t.IdleTimeout > 0 {
		l.idle = t.IdleTimeout
	}
	if t := cfg.SIP.TCP; t.MaxConnections > 0 {
		l.max = t.MaxConnections
	}
	if t := cfg.SIP.TCP; t.MaxConnectionsPerSource > 0 {
		l.perSource = t.MaxConnectionsPerSource
	}
	return l
}

// strangerShare is the part of sip.tcp.max_connections strangers may hold
// (max / strangerShare, at least one).
const strangerShare = 4

// strangerMax is how many connections strangers may hold in all when total
// is sip.tcp.max_connections.
func strangerMax(total int) int { return max(1, total/strangerShare) }

// guardedListener is a TCP listener that enforces tcpLimits and closes
// strangers' connections at accept when classify says so. Safe for
// concurrent use.
type guardedListener struct {
	net.Listener
	limits func() tcpLimits
	// classify says whether a connection from ip may be served at all
	// (serve) and whether ip is a known party's (known: a peer's source or
	// a carrier's address); strangers hold at most strangerMax.
	classify func(ip netip.Addr) (serve, known bool)
	// refused is told why a connection was closed at accept.
	refused func(reason string)

	mu        sync.Mutex
	open      int
	strangers int
	bySrc     map[netip.Addr]int // by connlimit.SourceKey
}

func newGuardedListener(l net.Listener, limits func() tcpLimits, classify func(netip.Addr) (bool, bool), refused func(string)) *guardedListener {
	return &guardedListener{Listener: l, limits: limits, classify: classify, refused: refused, bySrc: map[netip.Addr]int{}}
}

// Accept returns the next connection within the bounds; the others are
// closed at once.
//
// An accept error other than a closed listener (descriptors exhausted,
// ECONNABORTED) is retried after a pause doubling from 5 ms to 1 s, as
// net/http does: sipgo stops serving TCP on any error Accept returns, and
// the node would stop with it.
func (l *guardedListener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			l.refused("accept")
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			time.Sleep(pause)
			continue
		}
		pause = 0
		ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
		if err != nil {
			_ = c.Close()
			continue
		}
		ip := ap.Addr().Unmap()
		serve, known := l.classify(ip)
		if !serve {
			l.refused("unknown_source") // counted before the close is seen
			_ = c.Close()
			continue
		}
		lim := l.limits()
		key := connlimit.SourceKey(ip)
		l.mu.Lock()
		if l.open >= lim.max || l.bySrc[key] >= lim.perSource || (!known && l.strangers >= strangerMax(lim.max)) {
			l.mu.Unlock()
			l.refused("tcp_limit") // counted before the close is seen
			_ = c.Close()
			continue
		}
		l.open++
		l.bySrc[key]++
		if !known {
			l.strangers++
		}
		l.mu.Unlock()
		return connlimit.OnClose(c, func() { l.release(key, !known) }), nil
	}
}

// counts returns the connections open in all, from strangers and from
// ip's source (connlimit.SourceKey) (tests).
func (l *guardedListener) counts(ip netip.Addr) (open, strangers, src int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.strangers, l.bySrc[connlimit.SourceKey(ip)]
}

func (l *guardedListener) release(key netip.Addr, stranger bool) {
	l.mu.Lock()
	l.open--
	if stranger {
		l.strangers--
	}
	if l.bySrc[key]--; l.bySrc[key] <= 0 {
		delete(l.bySrc, key)
	}
	l.mu.Unlock()
}
