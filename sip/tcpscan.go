package sip

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"

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

// scanListener wraps the connections a listener accepts in scanConns.
type scanListener struct {
	net.Listener
	bounds ingress.Bounds
	count  func(reason string)
}

func (l *scanListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &scanConn{Conn: c, scan: ingress.NewStreamScanner(l.bounds), count: l.count}, nil
}

// scanConn is a connection whose bytes are scanned as they are read.
type scanConn struct {
	net.Conn
	count func(reason string)

	mu     sync.Mutex // Read is sipgo's loop alone; mu guards against a second reader
	scan   *ingress.StreamScanner
	closed bool
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
		return n, err
	}
	if serr := c.scan.Write(p[:n]); serr != nil {
		c.closed = true
		reason := "stream"
		switch {
		case errors.Is(serr, ingress.ErrParams):
			reason = ingress.DropParams
		case errors.Is(serr, ingress.ErrHeaders):
			reason = ingress.DropHeaders
		}
		c.count(reason)
		_ = c.Conn.Close()
		// io.EOF: sipgo ends the connection quietly (the count above is
		// the record of it).
		return 0, io.EOF
	}
	return n, err
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
