package conns

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/internal/connlimit"
	"github.com/cpsguard/cpsguard/sip/internal/ingress"
)

// SIP over TCP is a stranger's cheapest way to hold a node's memory: a
// half-sent message keeps a goroutine, a descriptor and sipgo's read buffer
// for as long as the connection stays open. These bounds apply:
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
//     the other three quarters (the known room), whatever the number of
//     stranger addresses;
//   - sip.tcp.max_connections_per_source: the same for one source: an IPv4
//     address, or an IPv6 /64 (one host holds a whole /64);
//   - one known party's share of the known room (partyMax, partyReserve):
//     a peer by name, all its source addresses together, or a carrier by
//     address (the parties of the UDP read path's budgets, sip's partyOf), so
//     that a peer owning a /24 cannot open max_connections_per_source
//     from each address and lock every other peer out. A party holds at
//     most twice its even part of the known room (known room / parties,
//     the parties being the configuration's peers and carriers), never
//     less than max_connections_per_source: twice, so that a busy party
//     may use what idle ones leave, and the sum of the shares is twice the
//     room, so at least half the parties must be at their share before it
//     fills. For the rest, the last partyReserve places of the known room
//     are kept for parties holding fewer than max_connections_per_source
//     (one source's worth, so a party with a single address is never held
//     back by it): however the big parties fill the room, a party that
//     holds little still connects;
//   - sip.tls.stranger_handshakes_per_second (tls:// listeners only): a
//     token bucket, one second's worth, over every tls:// listener and
//     stranger address, that a stranger's connection takes from at accept
//     (HandshakeBucket): each handshake costs the node a key exchange and
//     a signature, and a stranger that closes and opens again stays within
//     the connection bounds while burning the node's cores. Beyond it the
//     connection is closed before the handshake starts (counted as
//     tls_handshake_rate); peers' and carriers' handshakes take no token.
//
// A connection over a bound, or from a stranger when unknown_source is
// drop, is closed at accept, before sipgo reads a byte of it. Whether a
// source is a stranger, and whose party it is, is decided at accept, by
// the configuration then, and the connection counts against that party
// until it closes (connlimit.OnClose gives back exactly what was taken),
// whatever a reload says of its source since; a reload changes the shares
// of the connections accepted after it. A tls:// listener is guarded
// alike (its own counts, the same bounds), before the TLS handshake,
// which then runs in sipgo's first read of the connection, under the read
// deadline sipgo sets for it (the idle timeout): a stranger that never
// sends its ClientHello holds its place no longer than idle_timeout.

// Defaults of sip.tcp (DESIGN.md), for configurations built by hand.
const (
	DefaultTCPIdle      = 60 * time.Second
	DefaultTCPMax       = 10000
	DefaultTCPPerSource = 200
)

// DefaultTLSStrangerHandshakes is sip.tls.stranger_handshakes_per_second's
// default (DESIGN.md), for configurations built by hand.
const DefaultTLSStrangerHandshakes = 100

// Limits are the bounds on accepted TCP connections.
type Limits struct {
	// Idle is sip.tcp.idle_timeout.
	Idle time.Duration
	// Max is sip.tcp.max_connections.
	Max int
	// PerSource is sip.tcp.max_connections_per_source.
	PerSource int
	// Parties is how many known parties share the known room: the
	// configuration's peers and carriers (at least 1).
	Parties int
	// Handshakes is sip.tls.stranger_handshakes_per_second.
	Handshakes int
}

// strangerShare is the part of sip.tcp.max_connections strangers may hold
// (max / strangerShare, at least one).
const strangerShare = 4

// StrangerMax is how many connections strangers may hold in all when total
// is sip.tcp.max_connections.
func StrangerMax(total int) int { return max(1, total/strangerShare) }

// partyMultiple is how many times its even part of the known room one
// known party may hold.
const partyMultiple = 2

// knownRoom is the part of sip.tcp.max_connections that strangers never
// hold.
func (l Limits) knownRoom() int { return l.Max - StrangerMax(l.Max) }

// partyMax is how many connections one known party (a peer, all its
// sources together, or a carrier's address) may hold: partyMultiple times
// its even part of the known room, never less than one source's bound.
func (l Limits) partyMax() int {
	return max(l.PerSource, partyMultiple*l.knownRoom()/max(1, l.Parties))
}

// partyReserve is how many of the known room's places are kept for the
// parties holding fewer than perSource connections: an eighth of the
// room, at least one source's worth, at most half the room.
func (l Limits) partyReserve() int {
	room := l.knownRoom()
	return max(0, min(room/2, max(l.PerSource, room/8)))
}

// HandshakeBucket bounds the TLS handshakes started for strangers: a token
// bucket refilled at the configured rate, holding one second's worth.
// Safe for concurrent use.
type HandshakeBucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
	ok     bool // tokens and last are set
}

// take takes a token at now with rate a second (and as many at most),
// and reports whether there was one.
func (b *HandshakeBucket) take(now time.Time, rate int) bool {
	r := float64(max(1, rate))
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ok {
		b.tokens, b.last, b.ok = r, now, true
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(r, b.tokens+d.Seconds()*r)
		b.last = now
	}
	b.tokens = min(r, b.tokens) // a lower rate since a reload
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// GuardedListener is a TCP listener that enforces Limits and closes
// strangers' connections at accept when classify says so. Safe for
// concurrent use.
type GuardedListener struct {
	net.Listener
	limits func() Limits
	// classify says whether a connection from ip may be served at all
	// (serve), whether ip is a known party's (known: a peer's source or a
	// carrier's address) and which party's (who; strangers hold at most
	// StrangerMax together).
	classify func(ip netip.Addr) (serve bool, who ingress.Party, known bool)
	// refused is told why a connection was closed at accept.
	refused func(reason string)
	// handshakes, set on a tls:// listener, is taken from by each
	// stranger's connection before its handshake.
	handshakes *HandshakeBucket

	mu        sync.Mutex
	open      int
	strangers int
	bySrc     map[netip.Addr]int    // by connlimit.SourceKey
	byParty   map[ingress.Party]int // known parties' connections
}

// NewGuardedListener guards l: limits gives the bounds at each accept,
// classify says whether a source is served and whose party it is, refused
// is told the reason of each connection closed at accept (a reason of
// cpsguard_sip_errors_total), and handshakes, set on a tls:// listener
// only, is the strangers' handshake bucket.
func NewGuardedListener(l net.Listener, limits func() Limits, classify func(netip.Addr) (bool, ingress.Party, bool), refused func(string), handshakes *HandshakeBucket) *GuardedListener {
	return &GuardedListener{Listener: l, limits: limits, classify: classify, refused: refused, handshakes: handshakes,
		bySrc: map[netip.Addr]int{}, byParty: map[ingress.Party]int{}}
}

// Accept returns the next connection within the bounds; the others are
// closed at once.
//
// An accept error other than a closed listener (descriptors exhausted,
// ECONNABORTED) is retried after a pause doubling from 5 ms to 1 s, as
// net/http does: sipgo stops serving TCP on any error Accept returns, and
// the node would stop with it.
func (l *GuardedListener) Accept() (net.Conn, error) {
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
		serve, who, known := l.classify(ip)
		if !serve {
			l.refused("unknown_source") // counted before the close is seen
			_ = c.Close()
			continue
		}
		lim := l.limits()
		key := connlimit.SourceKey(ip)
		l.mu.Lock()
		if reason := l.admit(lim, key, who, known); reason != "" {
			l.mu.Unlock()
			l.refused(reason) // counted before the close is seen
			_ = c.Close()
			continue
		}
		l.open++
		l.bySrc[key]++
		if known {
			l.byParty[who]++
		} else {
			l.strangers++
		}
		l.mu.Unlock()
		return connlimit.OnClose(c, func() { l.release(key, who, known) }), nil
	}
}

// admit says why a connection from the source key of party who (known or
// a stranger) is refused now, "" if it is not. Called with l.mu held. A
// stranger's handshake token is taken last: only by a connection served.
func (l *GuardedListener) admit(lim Limits, key netip.Addr, who ingress.Party, known bool) (reason string) {
	switch {
	case l.open >= lim.Max || l.bySrc[key] >= lim.PerSource:
		reason = "tcp_limit"
	case !known && l.strangers >= StrangerMax(lim.Max):
		reason = "tcp_limit"
	case !known && l.handshakes != nil && !l.handshakes.take(time.Now(), lim.Handshakes):
		reason = "tls_handshake_rate"
	case known && l.byParty[who] >= lim.partyMax():
		reason = "tcp_limit"
	case known && l.byParty[who] >= lim.PerSource && l.open-l.strangers >= lim.knownRoom()-lim.partyReserve():
		reason = "tcp_limit" // the reserve is for parties holding little
	}
	return reason
}

// counts returns the connections open in all, from strangers and from
// ip's source (connlimit.SourceKey) (tests).
func (l *GuardedListener) counts(ip netip.Addr) (open, strangers, src int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.strangers, l.bySrc[connlimit.SourceKey(ip)]
}

// partyCounts returns the connections open per known party, and how many
// sources hold some (tests).
func (l *GuardedListener) partyCounts() (map[ingress.Party]int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[ingress.Party]int, len(l.byParty))
	for k, v := range l.byParty {
		m[k] = v
	}
	return m, len(l.bySrc)
}

// release gives back the places a connection took at accept: its source
// key's and its party's (who, or the strangers' when not known), as
// classified then.
func (l *GuardedListener) release(key netip.Addr, who ingress.Party, known bool) {
	l.mu.Lock()
	l.open--
	if known {
		if l.byParty[who]--; l.byParty[who] <= 0 {
			delete(l.byParty, who)
		}
	} else {
		l.strangers--
	}
	if l.bySrc[key]--; l.bySrc[key] <= 0 {
		delete(l.bySrc, key)
	}
	l.mu.Unlock()
}
