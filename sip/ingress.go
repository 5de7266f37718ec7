package sip

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/ingress"
	"github.com/cpsguard/cpsguard/sip/internal/load"
	"github.com/cpsguard/cpsguard/sip/internal/rawsip"
	"github.com/cpsguard/cpsguard/sip/internal/statelessbranch"
	"github.com/cpsguard/cpsguard/sip/internal/wire"
)

// The UDP read path (package ingress) and what sits between it and sipgo.
//
// sipgo reads a UDP socket in one goroutine that parses every datagram
// and finds its transaction: one core's worth of work for the whole node
// (issue 23 measured ~9,000 CPS at most on 8 cores, that goroutine at 0.8
// of a core), and the place where one hostile datagram delays everyone.
// So the proxy reads its UDP listeners itself: ingress reads each socket
// in batches, classifies and bounds each datagram from its raw bytes,
// budgets it against its party, and hands it to one of GOMAXPROCS
// workers by a hash of its Call-ID. The worker sheds it from raw bytes
// when the node is at its inflight bound (rawshed.go), or parses it into
// sipgo's message (wire.Parser: sipgo's parse, in a third of sipgo's
// allocations) and runs the screen and sipgo's transaction layer, as
// sipgo's loop did: so different calls are parsed and decided on
// different cores, and a dialog's messages stay in order on one worker
// (and in the node's client transactions: package sip/internal/txorder).
//
// sipgo still keeps the transactions: a server transaction answers on
// the connection its request's source address names in sipgo's pool, so
// the source addresses of known parties are registered there (sources),
// a bounded set forgotten when idle; strangers are never registered, and
// the proxy's own stateless answers leave through the listener directly
// (sendUDP). sipgo's own read loop kept every source address it ever read
// from, in two maps, for good (issue 22, C8).
//
// Why sipgo's messages and transaction layer stay, measured (BENCHMARKS.md,
// "Session 8"): once the parse left the socket's goroutine, the one serial
// stage (the reader) is 7.9 % of the node's CPU per call, so the node
// scales with cores until CPU per call, not a goroutine, is the ceiling.
// Of that CPU, sipgo's parser was ~14 %, its sends ~21 % (most of it the
// sendto system call, which no layer avoids), its goroutine per message
// ~6 % of scheduling, allocation and GC ~17 %. The node now writes
// (session 25) and parses (session 26) sipgo's messages itself, byte for
// byte and field for field as sipgo does (sip/internal/wire), without most
// of sipgo's allocations. Replacing the transaction layer (INVITE server
// and client state machines, timers and retransmissions on UDP,
// connection-bound answers on TCP and TLS) and the message type would
// attack the rest; that is a SIP stack of the proxy's own, done behind
// this file's hand-over if it is done, since the workers already hand
// sipgo parsed messages one at a time.

// sourcesMax bounds the UDP source addresses registered in sipgo's pool;
// sourceIdle is how long an unused one stays. A server transaction takes
// its connection when it is created, so an address is needed only while
// requests keep coming from it.
const (
	sourcesMax     = 1 << 16
	sourceIdle     = 2 * time.Minute
	sourcesStripes = 16
)

// sources is the bounded registry of known parties' UDP source addresses
// in sipgo's connection pool (least recently used first out). Safe for
// concurrent use.
type sources struct {
	pool    *sipmsg.ConnectionPool
	stripes [sourcesStripes]sourceStripe
	// own are the node's UDP listeners' addresses (unmapped), set before
	// any is read: their entries in the pool are the listeners', and a
	// request from one of them (spoofed, or a peer's prefix around the
	// node) must not replace it (its expiry would delete it, and every
	// request sent from that listener would then fail).
	own map[netip.AddrPort]bool
}

type sourceStripe struct {
	mu  sync.Mutex
	lru list.List // of *sourceEntry, most recent first
	by  map[netip.AddrPort]*list.Element
}

type sourceEntry struct {
	addr netip.AddrPort
	key  string
	conn sipmsg.Connection
	seen time.Time
}

func newSources(pool *sipmsg.ConnectionPool) *sources {
	s := &sources{pool: pool}
	for i := range s.stripes {
		s.stripes[i].by = make(map[netip.AddrPort]*list.Element)
	}
	return s
}

func (s *sources) stripe(a netip.AddrPort) *sourceStripe {
	b := a.Addr().As16()
	h := uint32(a.Port())
	for _, c := range b {
		h = h*31 + uint32(c)
	}
	return &s.stripes[h%sourcesStripes]
}

// touch registers a as served by conn (or refreshes it); never one of
// the node's own addresses.
func (s *sources) touch(a netip.AddrPort, conn sipmsg.Connection, now time.Time) {
	if s.own[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())] {
		return
	}
	st := s.stripe(a)
	st.mu.Lock()
	defer st.mu.Unlock()
	if el, ok := st.by[a]; ok {
		e := el.Value.(*sourceEntry)
		e.seen = now
		if e.conn != conn {
			e.conn = conn
			s.pool.Add(e.key, conn)
		}
		st.lru.MoveToFront(el)
		return
	}
	e := &sourceEntry{addr: a, key: a.String(), conn: conn, seen: now}
	st.by[a] = st.lru.PushFront(e)
	s.pool.Add(e.key, conn)
	for st.lru.Len() > sourcesMax/sourcesStripes {
		s.evict(st, st.lru.Back())
	}
}

// expire forgets the addresses unused since before cutoff.
func (s *sources) expire(cutoff time.Time) {
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		for el := st.lru.Back(); el != nil && el.Value.(*sourceEntry).seen.Before(cutoff); el = st.lru.Back() {
			s.evict(st, el)
		}
		st.mu.Unlock()
	}
}

func (s *sources) evict(st *sourceStripe, el *list.Element) {
	e := st.lru.Remove(el).(*sourceEntry)
	delete(st.by, e.addr)
	if c := s.pool.Get(e.key); c != nil {
		if c == e.conn {
			s.pool.Delete(e.key)
		}
		_, _ = c.TryClose() // Get's reference
	}
}

// len is the number of registered addresses (tests).
func (s *sources) len() int {
	n := 0
	for i := range s.stripes {
		s.stripes[i].mu.Lock()
		n += len(s.stripes[i].by)
		s.stripes[i].mu.Unlock()
	}
	return n
}

// runSources forgets idle source addresses until ctx ends.
func (p *Proxy) runSources(ctx context.Context) {
	t := time.NewTicker(sourceIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.sources.expire(now.Add(-sourceIdle))
		}
	}
}

// Labels of the read path's stages in CPU profiles (pprof, cpsguardprof
// builds): a worker's own work, and the goroutines sipgo's transaction
// layer starts from it (which inherit the labels in force).
var (
	labelWorker = pprof.WithLabels(context.Background(), pprof.Labels("stage", "ingress.worker"))
	labelTx     = pprof.WithLabels(context.Background(), pprof.Labels("stage", "sip.transaction"))
)

// newIngress builds the UDP read path of the proxy's listeners.
func (p *Proxy) newIngress() (*ingress.Ingress, error) {
	g, err := ingress.New(ingress.Options{
		MaxSize:   MaxMessageSize,
		SlowShare: func() int { return slowShare(p.cfg()) },
		Party:     p.ingressParty,
		Early:     p.ingressEarly,
		Handle:    p.handleDatagram,
		Shed:      p.shedDatagram,
		Hold:      p.holdInvite,
		Drop: func(reason string) {
			p.m.SIPErrors.WithLabelValues(reason).Inc()
		},
		Congested: func(l ingress.Lane) {
			if l == ingress.LaneFast {
				p.behind.Note(time.Now())
			}
		},
		Panic: func(where string, v any) {
			_ = p.panics.Report("sip."+where, v, debug.Stack())
		},
	})
	if err != nil {
		return nil, err
	}
	p.inflight.OnRelease(g.WakeHeld)
	return g, nil
}

// slowShare is one party's share of the new-call lane for the inflight
// bound of cfg: a few INVITEs per unit keep the workers busy between two
// decisions without letting one wait long.
func slowShare(cfg *config.Config) int {
	if cfg == nil {
		return readQueueSlowMin
	}
	return min(readQueueSlowMax/4, max(readQueueSlowMin, int(load.Limit(cfg))*readQueueSlowPerUnit))
}

// Sizes of the new-call lane's shares (ingress.DefaultBudget's LaneSlow
// is readQueueSlowMax in all).
const (
	readQueueSlowPerUnit = 4
	readQueueSlowMin     = 64
	readQueueSlowMax     = 4096
)

// ingressParty is who a datagram from ip counts against.
func (p *Proxy) ingressParty(ip netip.Addr) (ingress.Party, bool) {
	who, ok := p.partyOf(p.cfg(), ip)
	if !ok {
		return ingress.Stranger, false
	}
	return ingress.Party{Name: who.peer, Addr: who.ip}, true
}

// party is who a datagram counts against in the read path's budgets: a
// carrier by address (checked first, even inside a peer's prefix), a peer
// by name (all its source addresses together).
type party struct {
	peer string
	ip   netip.Addr
}

// partyOf is the party a datagram from ip counts against, and whether ip
// is a peer's or a carrier's at all.
func (p *Proxy) partyOf(cfg *config.Config, ip netip.Addr) (party, bool) {
	if cfg == nil {
		return party{}, false
	}
	if p.isCarrierAddr(cfg, ip) {
		// Before the peers: a carrier's address is a single host, however
		// wide a peer's prefix around it.
		return party{ip: ip}, true
	}
	if pe := cfg.PeerByAddr(ip); pe != nil {
		return party{peer: pe.Name}, true
	}
	return party{}, false
}

// ingressEarly drops, in the reader, what costs nothing to recognise and
// nothing to lose: a stranger's datagram when unknown_source is drop, and
// the ACK of one of the proxy's shed answers from a known source. A
// stranger's in-dialog request that routes a dialog token (";cg="), or
// response on a stateless branch of the node's, goes on to the screen:
// it may be a party a reload removed ending its calls (screenFormerParty),
// and the screen stays silent to it under drop when it is not.
func (p *Proxy) ingressEarly(d *ingress.Datagram) bool {
	if !d.Known {
		cfg := p.cfg()
		if cfg == nil || (cfg.SIP.UnknownSource == "drop" && !formerPartyRaw(d)) {
			p.m.SIPErrors.WithLabelValues("unknown_source").Inc()
			return true
		}
		return false
	}
	return shedAckRaw(d.Data)
}

// formerPartyRaw reports whether a stranger's datagram may be a removed
// party's (screenFormerParty), from its raw bytes: an in-dialog request
// that routes a dialog token, or a response on a stateless branch.
func formerPartyRaw(d *ingress.Datagram) bool {
	switch d.Info.Kind {
	case ingress.KindInDialog:
		return bytes.Contains(d.Data, formerTokenMark)
	case ingress.KindResponse:
		return bytes.Contains(d.Data, formerBranchMark)
	}
	return false
}

var (
	formerTokenMark  = []byte(";" + tokenParam + "=")
	formerBranchMark = []byte(statelessbranch.Prefix)
)

// holdInvite is how much longer a worker holds a new INVITE back: while
// every unit of the inflight bound is taken, up to sip.inflight_wait from
// its arrival (a burst is decided, not shed).
func (p *Proxy) holdInvite(d *ingress.Datagram, now time.Time) time.Duration {
	cfg := p.cfg()
	if cfg == nil || p.inflight.Load() < load.Limit(cfg) || p.priorityRawFrom(cfg, d.From, d.Data) {
		return 0 // a priority call is not held back: it passes the bound
	}
	return cfg.SIP.InflightWait - now.Sub(d.At)
}

// shedDatagram answers a peer's INVITE that found its share of the
// new-call lane taken: the screen's 503 from its raw bytes, or parsed
// within the parse budget when the raw path does not read it. A priority
// call is never shed: it is handled as if it had found room.
func (p *Proxy) shedDatagram(d *ingress.Datagram) bool {
	if p.priorityRawFrom(p.cfg(), d.From, d.Data) {
		p.handleDatagram(d)
		return true
	}
	return p.shedRawFrom(d.Conn, d.From, d.Data, true, &p.parsed)
}

// handleDatagram is a datagram's turn on a worker: shed from raw bytes
// while the inflight bound is taken (a peer's new INVITE), else parsed and
// handed to the screen and sipgo's transaction layer.
func (p *Proxy) handleDatagram(d *ingress.Datagram) {
	if d.Lane == ingress.LaneFast {
		if now := time.Now(); now.Sub(d.At) > load.Lag {
			// An answer waited this long in the node's own queue.
			p.behind.Note(now)
		}
	}
	if d.Info.Kind == ingress.KindInvite && d.Known && p.shedRawFrom(d.Conn, d.From, d.Data, false, nil) {
		return
	}
	msg, err := p.parser.ParseSIP(d.Data)
	if err != nil {
		reason := "parse"
		if errors.Is(err, sipmsg.ErrMessageTooLarge) {
			reason = "oversized"
		}
		p.m.SIPErrors.WithLabelValues(reason).Inc()
		if p.log.Enabled(context.Background(), slog.LevelDebug) {
			p.log.Debug("datagram not parsed", "source", d.From.String(), "error", err)
		}
		return
	}
	msg.SetTransport("UDP")
	msg.SetSource(d.From.String())
	if d.Known && rawsip.BareLineBreak(d.Data) {
		// Relayed, its lines would not be the ones checked here
		// (rawsip.BareLineBreak): malformed, as the screen refuses one.
		p.m.SIPErrors.WithLabelValues("malformed").Inc()
		if req, ok := msg.(*sipmsg.Request); ok && d.Known && !req.IsAck() && req.Via() != nil {
			p.stateless(req, sipmsg.StatusBadRequest, "Bad Request")
		}
		return
	}
	p.deliver(msg, d.Conn, d.From, d.Known, d.At)
}

// deliverUDP hands a known party's request, parsed by a worker (a priority
// INVITE the shed path would not shed), to the screen and sipgo's
// transaction layer, as handleDatagram does.
func (p *Proxy) deliverUDP(conn *net.UDPConn, from netip.AddrPort, req *sipmsg.Request) {
	p.deliver(req, conn, from, true, time.Now())
}

// deliver runs the screen on a message read from conn, from from, and
// hands it to sipgo's transaction layer when the screen lets it pass.
func (p *Proxy) deliver(msg sipmsg.Message, conn *net.UDPConn, from netip.AddrPort, known bool, at time.Time) {
	if !p.screen(msg) {
		return // answered or dropped by the screen, or relayed statelessly
	}
	if _, ok := msg.(*sipmsg.Request); ok && known {
		// sipgo's server transaction answers through its source's entry
		// in the pool (never one of the node's own addresses: sources).
		if c := p.udpConns[conn]; c != nil {
			p.sources.touch(from, c, at)
		}
	}
	pprof.SetGoroutineLabels(labelTx)
	p.txOrder.Handle(msg)
	pprof.SetGoroutineLabels(labelWorker)
}

// sendUDP sends m over UDP to its destination: through the connection
// sipgo's pool has for that address (a known party's source), or else
// from the UDP listener of the destination's address family.
func (p *Proxy) sendUDP(m sipmsg.Message) error {
	dest := m.Destination()
	var conn sipmsg.Connection
	if c, err := p.tp.GetConnection("udp", dest); err == nil && c != nil {
		conn = c
		defer c.TryClose()
	} else {
		conn = p.udpListenerFor(dest)
	}
	if conn == nil {
		return errors.New("sip: no UDP listener")
	}
	return writeMsg(conn, m)
}

// writeMsg writes m on conn: over UDP with the node's own writer
// (wire.WriteUDP: sipgo's bytes without sipgo's allocations), else with
// the connection's.
func writeMsg(conn sipmsg.Connection, m sipmsg.Message) error {
	if uc, ok := conn.(*sipmsg.UDPConnection); ok {
		return wire.WriteUDP(uc, m)
	}
	return conn.WriteMsg(m)
}

// udpListenerFor is the UDP listener a message to dest leaves from: the
// first that reaches dest's address family, else the first.
func (p *Proxy) udpListenerFor(dest string) sipmsg.Connection {
	ap, err := netip.ParseAddrPort(dest)
	v6 := err == nil && !ap.Addr().Unmap().Is4()
	var first sipmsg.Connection
	for _, l := range p.listeners {
		if l.udp == nil {
			continue
		}
		c := p.udpConns[l.udp]
		if first == nil {
			first = c
		}
		if err == nil && l.serves(v6) {
			return c
		}
	}
	return first
}

// udpConnection is how sipgo's pool holds one of the proxy's UDP
// listeners.
func udpConnection(c *net.UDPConn) *sipmsg.UDPConnection {
	return &sipmsg.UDPConnection{PacketConn: c, PacketAddr: c.LocalAddr().String(), Listener: true}
}
