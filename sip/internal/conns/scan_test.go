package conns

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/sip/internal/ingress"
)

// StreamScans: a dialled connection's reads are scanned, one scanner per
// connection (its remote address value), forgotten when it is closed for
// a message over the bounds; an accepted connection's are not (its
// scanConn scans them) and it is forgotten when closed; past
// maxDialledScans, connections idle beyond the idle timeout are
// forgotten, and a new one is refused while none is.
func TestStreamScans(t *testing.T) {
	s := NewStreamScans(ingress.DefaultBounds, time.Minute)
	counted := map[string]int{}
	count := func(r string) { counted[r]++ }
	// A connection hands out one remote address value for all its reads.
	conns := map[int]net.Addr{}
	tcp := func(port int) net.Addr {
		if a, ok := conns[port]; ok {
			return a
		}
		a := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
		conns[port] = a
		return a
	}
	local := tcp(40000)
	good := "SIP/2.0 180 Ringing\r\nVia: SIP/2.0/TCP 127.0.0.1;branch=z9hG4bK-1\r\nContent-Length: 0\r\n\r\n"
	hostile := strings.Replace(good, "branch=z9hG4bK-1", "branch=z9hG4bK-1"+strings.Repeat(";p", 5000), 1)

	// In pieces: the scanner keeps its place between reads.
	for i := 0; i < len(good); i += 10 {
		if _, err := s.Filter(local, tcp(5060), []byte(good[i:min(i+10, len(good))]), count); err != nil {
			t.Fatalf("a plain answer in pieces: %v", err)
		}
	}
	if _, d := s.sizes(); d != 1 {
		t.Fatalf("dialled scanners = %d, want 1", d)
	}
	if _, err := s.Filter(local, tcp(5060), []byte(hostile), count); !errors.Is(err, ingress.ErrParams) {
		t.Fatalf("a hostile answer: %v, want ErrParams", err)
	}
	if counted[ingress.DropParams] != 1 {
		t.Fatalf("counted %v, want params 1", counted)
	}
	if _, d := s.sizes(); d != 0 {
		t.Fatalf("dialled scanners after the close = %d, want 0", d)
	}

	// An accepted connection is its scanConn's to scan.
	c1, c2 := net.Pipe()
	defer c2.Close()
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 33000}
	k := connKeyOf(tcp(5060), peer)
	sc := &scanConn{Conn: c1, scan: ingress.NewStreamScanner(ingress.DefaultBounds), count: count, scans: s, key: k}
	s.accept(k)
	if _, err := s.Filter(tcp(5060), peer, []byte(hostile), count); err != nil {
		t.Fatalf("an accepted connection's read scanned twice: %v", err)
	}
	if a, d := s.sizes(); a != 1 || d != 0 {
		t.Fatalf("accepted %d, dialled %d; want 1, 0", a, d)
	}
	_ = sc.Close()
	if a, _ := s.sizes(); a != 0 {
		t.Fatalf("accepted after the close = %d, want 0", a)
	}

	// The bound: full of live connections, a new one is refused; once they
	// are idle past the timeout, they are forgotten and it is served.
	now := time.Now()
	for i := range maxDialledScans {
		if _, err := s.Filter(local, tcp(10000+i), []byte(good), count); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	if _, err := s.Filter(local, tcp(9999), []byte(good), count); !errors.Is(err, errDialledLimit) || counted["tcp_limit"] != 1 {
		t.Fatalf("one past the bound: %v (counted %v), want errDialledLimit counted as tcp_limit", err, counted)
	}
	s.mu.Lock()
	for _, d := range s.dialled {
		d.last = now.Add(-2 * time.Minute)
	}
	s.mu.Unlock()
	if _, err := s.Filter(local, tcp(9999), []byte(good), count); err != nil {
		t.Fatalf("after the others went idle: %v", err)
	}
	if _, d := s.sizes(); d != 1 {
		t.Fatalf("dialled scanners = %d, want 1 (the idle ones forgotten)", d)
	}
}

// A dialled connection's scanner lives as long as the connection: a read
// that comes more than the idle timeout after the last one (sipgo's read
// deadline counts from after it parsed that read, the scanner's stamp
// from before) goes on with the same scanner, mid-message. A fresh one
// there would take the rest of a body for a new message and frame the
// stream apart from sipgo: here it would skip, as that message's body,
// the hostile message sipgo parses.
func TestStreamScansKeepAConnectionsScanner(t *testing.T) {
	const idle = time.Minute
	s := NewStreamScans(ingress.DefaultBounds, idle)
	count := func(string) {}
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5060}
	var params strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&params, ";%x", i)
	}
	hostile := "SIP/2.0 180 Ringing\r\nVia: SIP/2.0/TCP 127.0.0.1;branch=z9hG4bK-2" + params.String() + "\r\nContent-Length: 0\r\n\r\n"
	// The rest of the first message's body reads as a message whose body
	// is the hostile one.
	rest := fmt.Sprintf("X sip:a SIP/2.0\r\nl: %d\r\n\r\n", len(hostile))
	const head = "0123456789"
	first := fmt.Sprintf("SIP/2.0 200 OK\r\nVia: SIP/2.0/TCP 127.0.0.1;branch=z9hG4bK-1\r\nContent-Length: %d\r\n\r\n", len(head)+len(rest)) + head
	if _, err := s.Filter(local, remote, []byte(first), count); err != nil {
		t.Fatalf("the first read: %v", err)
	}
	s.mu.Lock()
	for _, d := range s.dialled {
		d.last = d.last.Add(-idle - time.Millisecond)
	}
	s.mu.Unlock()
	if _, err := s.Filter(local, remote, []byte(rest+hostile), count); !errors.Is(err, ingress.ErrParams) {
		t.Fatalf("the rest of the body, then a message over the bounds, read past the idle timeout: %v, want ErrParams", err)
	}
}

// A message trickled into an accepted connection must be read whole
// within the idle timeout of its first byte: sipgo's read deadline,
// renewed by every read, let one byte every few seconds hold a
// connection for good (h67). Messages read whole in pieces, however many
// follow one another, and a slow one that ends in the read past the
// timeout, keep it.
func TestTrickledMessageClosesTheConnection(t *testing.T) {
	const idle = 300 * time.Millisecond
	good := "OPTIONS sip:a@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.2;branch=z9hG4bK-1\r\nContent-Length: 2\r\n\r\nab"
	open := func() (*scanConn, net.Conn, *int) {
		c1, c2 := net.Pipe()
		t.Cleanup(func() { c1.Close(); c2.Close() })
		closed := new(int)
		sc := &scanConn{Conn: c1, scan: ingress.NewStreamScanner(ingress.DefaultBounds),
			count: func(r string) {
				if r == "stream" {
					*closed++
				}
			}, idle: func() time.Duration { return idle }}
		return sc, c2, closed
	}
	// send writes s to the far end and reads it through the scanConn.
	send := func(sc *scanConn, far net.Conn, s string) error {
		go func() { _, _ = far.Write([]byte(s)) }()
		buf := make([]byte, len(s))
		_, err := io.ReadFull(sc, buf)
		return err
	}

	sc, far, closed := open()
	for range 3 { // messages in pieces, each whole within the timeout
		for i := 0; i < len(good); i += 40 {
			if err := send(sc, far, good[i:min(i+40, len(good))]); err != nil {
				t.Fatalf("a message in pieces: %v", err)
			}
		}
	}
	if err := send(sc, far, good[:30]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * idle)
	if err := send(sc, far, good[30:]); err != nil || *closed != 0 {
		t.Fatalf("a slow message that ends in the late read: %v, closed %d; want it kept", err, *closed)
	}

	sc, far, closed = open()
	if err := send(sc, far, good[:30]); err != nil {
		t.Fatal(err)
	}
	for i := 30; i < 33; i++ { // a byte now and then, never the end
		time.Sleep(idle / 2)
		if err := send(sc, far, good[i:i+1]); err != nil {
			break
		}
	}
	if *closed != 1 {
		t.Fatalf("a trickled message: closed %d times as \"stream\", want 1", *closed)
	}
	if err := send(sc, far, good[33:34]); err == nil {
		t.Fatal("the connection of a trickled message still reads")
	}

	// NULs, which sipgo skips (and which renew its deadline), trickled in
	// the middle of a message (h70).
	sc, far, closed = open()
	if err := send(sc, far, good[:30]); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(idle / 2)
		if err := send(sc, far, "\x00"); err != nil {
			break
		}
	}
	if *closed != 1 {
		t.Fatalf("a message stretched with NULs: closed %d times as \"stream\", want 1", *closed)
	}
}
