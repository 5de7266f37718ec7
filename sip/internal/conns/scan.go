package conns

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/sip/internal/ingress"
)

// The parameter bounds on SIP over TCP (issue 22, C6).
//
// sipgo parses a header's parameters in quadratic time; on UDP the ingress
// scans every datagram before it is parsed (ingress.Scan). A TCP
// connection is read by sipgo's own loop, one per connection, so each
// accepted connection is wrapped: everything read from it goes through an
// ingress.StreamScanner before sipgo sees it, and a message over the
// bounds (or a stream that cannot be framed) closes the connection at once
// (its sender is a known party sending what no real UA sends, or a
// stranger), counted in cpsguard_sip_errors_total{reason="params"|
// "headers"|"stream"}. What was read before the offending chunk has been
// parsed already; nothing of that chunk is.
//
// The connections the node dials itself (to a carrier over TCP or TLS, or
// to a party's TCP contact) are opened by sipgo and cannot be wrapped:
// their bytes are scanned in sipgo's read filter instead (StreamScans,
// Proxy.readFilter), one scanner per connection, told apart by the
// remote address the connection hands out (the same *net.TCPAddr on
// every read of one connection, a new one for the next: no string is
// built per read, and a new connection between the same ends is never
// taken for an old one); a message over the bounds closes the connection
// the same way.

// maxDialledScans bounds the dialled connections scanned at once (a node
// dials its carriers and the TCP contacts of calls' parties: far fewer);
// a new one past it is closed at its first read, counted as tcp_limit.
const maxDialledScans = 4096

// errDialledLimit ends a dialled connection past maxDialledScans.
var errDialledLimit = errors.New("sip: too many dialled connections to scan")

// connKey names a TCP connection: by the *net.TCPAddr its RemoteAddr
// returns (one per connection), else by both ends' text.
type connKey struct {
	addr *net.TCPAddr
	ends string
}

// connKeyOf is the key of the connection with these ends.
func connKeyOf(local, remote net.Addr) connKey {
	if ta, ok := remote.(*net.TCPAddr); ok && ta != nil {
		return connKey{addr: ta}
	}
	return connKey{ends: addrString(local) + " " + addrString(remote)}
}

// StreamScans holds the scanners of the dialled connections and the set
// of accepted ones (their scanConn scans them). Safe for concurrent use.
type StreamScans struct {
	bounds ingress.Bounds
	// idle is the connections' idle timeout: a dialled connection not
	// read from for longer has (but at the edge: sipgo's deadline counts
	// from after it parsed the last read) been closed by it. Its scanner
	// is forgotten when the table is full (pruneLocked), or at its next
	// read when the connection is named by its ends' text only.
	idle time.Duration

	mu       sync.Mutex
	accepted map[connKey]struct{}
	dialled  map[connKey]*dialledScan
}

// dialledScan is the scanner of one dialled connection and its last read.
type dialledScan struct {
	scan *ingress.StreamScanner
	last time.Time
}

// NewStreamScans scans with b; idle is the connections' idle timeout
// (<= 0: DefaultTCPIdle).
func NewStreamScans(b ingress.Bounds, idle time.Duration) *StreamScans {
	if idle <= 0 {
		idle = DefaultTCPIdle
	}
	return &StreamScans{bounds: b, idle: idle, accepted: map[connKey]struct{}{}, dialled: map[connKey]*dialledScan{}}
}

func keyOfConn(c net.Conn) connKey { return connKeyOf(c.LocalAddr(), c.RemoteAddr()) }

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// Filter scans a read of a TCP or TLS connection sipgo reads (local and
// remote its ends) unless the connection was accepted (scanned by its
// scanConn). It returns the error that makes sipgo close the connection
// when the read takes its message over the bounds, counted by count.
func (s *StreamScans) Filter(local, remote net.Addr, data []byte, count func(reason string)) ([]byte, error) {
	k := connKeyOf(local, remote)
	now := time.Now()
	s.mu.Lock()
	if _, ok := s.accepted[k]; ok {
		s.mu.Unlock()
		return data, nil
	}
	d := s.dialled[k]
	if d != nil && k.addr == nil && now.Sub(d.last) > s.idle {
		// Named by its ends' text, idle past the timeout: sipgo closed
		// it, and this is a new connection between the same ends. A
		// connection named by its address value is never another one:
		// its scanner stays (a read may come a little more than the
		// timeout after the last was stamped, sipgo's deadline counting
		// from after it parsed that read), or a fresh one would start
		// in the middle of a message.
		d = nil
	}
	if d == nil {
		if len(s.dialled) >= maxDialledScans {
			s.pruneLocked(now)
		}
		if len(s.dialled) >= maxDialledScans {
			s.mu.Unlock()
			count("tcp_limit")
			return nil, errDialledLimit
		}
		d = &dialledScan{scan: ingress.NewStreamScanner(s.bounds)}
		s.dialled[k] = d
	}
	d.last = now
	s.mu.Unlock()
	// The connection's reads come from its one sipgo reader, in order:
	// d is this goroutine's alone.
	if skippedBySipgo(data, d.scan.Idle()) {
		return data, nil
	}
	if err := d.scan.Write(data); err != nil {
		s.mu.Lock()
		if s.dialled[k] == d {
			delete(s.dialled, k)
		}
		s.mu.Unlock()
		count(scanReason(err))
		return nil, err
	}
	return data, nil
}

// pruneLocked forgets the dialled connections idle past the idle timeout
// (sipgo closed them); s.mu held.
func (s *StreamScans) pruneLocked(now time.Time) {
	for k, d := range s.dialled {
		if now.Sub(d.last) > s.idle {
			delete(s.dialled, k)
		}
	}
}

// accept records an accepted connection (scanned by its scanConn) until
// done forgets it.
func (s *StreamScans) accept(k connKey) {
	s.mu.Lock()
	s.accepted[k] = struct{}{}
	delete(s.dialled, k)
	s.mu.Unlock()
}

func (s *StreamScans) done(k connKey) {
	s.mu.Lock()
	delete(s.accepted, k)
	s.mu.Unlock()
}

// sizes are the accepted and dialled connections known (tests).
func (s *StreamScans) sizes() (accepted, dialled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.accepted), len(s.dialled)
}

// scanReason is the sip_errors_total reason of a StreamScanner error.
func scanReason(err error) string {
	reason := "stream"
	switch {
	case errors.Is(err, ingress.ErrParams):
		reason = ingress.DropParams
	case errors.Is(err, ingress.ErrHeaders):
		reason = ingress.DropHeaders
	}
	return reason
}

// ScanListener wraps the connections a listener accepts in scanConns,
// recorded in Scans (nil: not recorded).
type ScanListener struct {
	net.Listener
	// Bounds are the bounds each connection's stream is scanned against.
	Bounds ingress.Bounds
	// Count is told the reason of each connection closed by its scan.
	Count func(reason string)
	// Scans records the accepted connections (nil: not recorded).
	Scans *StreamScans
	// Idle, when set, is the connections' idle timeout: a message must
	// be read whole within it of its first byte, or its connection is
	// closed (counted "stream"). sipgo's read deadline, renewed by every
	// read, let a message trickled a byte at a time hold a connection
	// for good (h67).
	Idle func() time.Duration
}

// Accept returns the next connection, its reads scanned.
func (l *ScanListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &scanConn{Conn: c, scan: ingress.NewStreamScanner(l.Bounds), count: l.Count, scans: l.Scans, key: keyOfConn(c), idle: l.Idle}
	if l.Scans != nil {
		l.Scans.accept(sc.key)
	}
	return sc, nil
}

// scanConn is a connection whose bytes are scanned as they are read.
type scanConn struct {
	net.Conn
	count func(reason string)
	scans *StreamScans
	key   connKey

	mu     sync.Mutex // Read is sipgo's loop alone; mu guards against a second reader
	scan   *ingress.StreamScanner
	closed bool
	// idle is ScanListener.Idle; since is when the message being read
	// began (zero between messages).
	idle  func() time.Duration
	since time.Time
}

func (c *scanConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n <= 0 {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, io.EOF
	}
	if skippedBySipgo(p[:n], c.scan.Idle()) {
		// NULs in the middle of a message renew sipgo's deadline too:
		// they must not stretch the message's (h70).
		if c.idle != nil && !c.since.IsZero() && time.Since(c.since) > c.idle() {
			return c.refuse("stream")
		}
		return n, err
	}
	idle, ended := c.scan.Idle(), c.scan.Ended()
	if serr := c.scan.Write(p[:n]); serr != nil {
		return c.refuse(scanReason(serr))
	}
	if c.idle != nil {
		now := time.Now()
		switch {
		case c.scan.Idle():
			c.since = time.Time{}
		case idle || c.scan.Ended() != ended || c.since.IsZero():
			c.since = now // a message began in this read
		case now.Sub(c.since) > c.idle():
			return c.refuse("stream") // a message trickled past the idle timeout
		}
	}
	return n, err
}

// refuse closes the connection for reason (c.mu held).
func (c *scanConn) refuse(reason string) (int, error) {
	c.closed = true
	c.count(reason)
	_ = c.Conn.Close()
	// io.EOF: sipgo ends the connection quietly (the count is the record
	// of it).
	return 0, io.EOF
}

// Write writes to the connection; a write that fails (its deadline, the
// idle timeout, passed: the party does not read) closes it. Part of a
// message may have gone, so the stream is no longer framed; and the write
// may have run in the connection's reader, which would otherwise read on
// and block again on its next answer, the connection held past every
// timeout.
func (c *scanConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		_ = c.Conn.Close()
	}
	return n, err
}

// Close closes the connection and forgets it in the accepted set. A
// connection this wrapper closed already (its scan refused the stream, or
// a write failed) closes without an error: sipgo logs a failed close at
// warn, and a party opening connections only to break their framing would
// write one such line per connection.
func (c *scanConn) Close() error {
	if c.scans != nil {
		c.scans.done(c.key)
	}
	err := c.Conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// skippedBySipgo reports a read sipgo's TCP loop does not parse: NULs
// only, or between messages (idle) a keepalive of up to 4 CRs and LFs.
// The scanner skips them too, or the two would frame the stream apart (a
// read of NULs taken for body bytes by the scanner alone would end its
// body early, and the scanner would skip as a body what sipgo parses).
func skippedBySipgo(data []byte, idle bool) bool {
	if len(bytes.Trim(data, "\x00")) == 0 {
		return true
	}
	return idle && len(data) <= 4 && len(bytes.Trim(data, "\r\n")) == 0
}
