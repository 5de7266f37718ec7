package sip

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/config"
)

// SIP over TCP is a stranger's cheapest way to hold a node's memory: a
// half-sent message keeps a goroutine, a descriptor and sipgo's read buffer
// for as long as the connection stays open. Three bounds apply:
//
//   - sip.tcp.idle_timeout: a connection that sends nothing for that long is
//     closed (sipgo's TCP read timeout; it also applies to the proxy's own
//     connections to carriers, which are opened again when needed);
//   - sip.tcp.max_connections: accepted connections open at once, over all
//     sources;
//   - sip.tcp.max_connections_per_source: the same for one source IP.
//
// A connection over a bound, or from a stranger when unknown_source is
// drop, is closed at accept, before sipgo reads a byte of it. A tls://
// listener is guarded alike (its own counts, the same bounds), before the
// TLS handshake, which then runs under the idle timeout.

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

// guardedListener is a TCP listener that enforces tcpLimits and closes
// strangers' connections at accept when admit says so. Safe for concurrent
// use.
type guardedListener struct {
	net.Listener
	limits func() tcpLimits
	// admit reports whether a connection from ip may be served at all.
	admit func(ip netip.Addr) bool
	// refused is told why a connection was closed at accept.
	refused func(reason string)

	mu    sync.Mutex
	open  int
	bySrc map[netip.Addr]int
}

func newGuardedListener(l net.Listener, limits func() tcpLimits, admit func(netip.Addr) bool, refused func(string)) *guardedListener {
	return &guardedListener{Listener: l, limits: limits, admit: admit, refused: refused, bySrc: map[netip.Addr]int{}}
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
		if !l.admit(ip) {
			l.refused("unknown_source") // counted before the close is seen
			_ = c.Close()
			continue
		}
		lim := l.limits()
		l.mu.Lock()
		if l.open >= lim.max || l.bySrc[ip] >= lim.perSource {
			l.mu.Unlock()
			l.refused("tcp_limit") // counted before the close is seen
			_ = c.Close()
			continue
		}
		l.open++
		l.bySrc[ip]++
		l.mu.Unlock()
		return &guardedConn{Conn: c, l: l, ip: ip}, nil
	}
}

// counts returns the connections open in all and from ip (tests).
func (l *guardedListener) counts(ip netip.Addr) (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.bySrc[ip]
}

func (l *guardedListener) release(ip netip.Addr) {
	l.mu.Lock()
	l.open--
	if l.bySrc[ip]--; l.bySrc[ip] <= 0 {
		delete(l.bySrc, ip)
	}
	l.mu.Unlock()
}

// guardedConn gives its place back when closed.
type guardedConn struct {
	net.Conn
	l    *guardedListener
	ip   netip.Addr
	once sync.Once
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
