package httpapi

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
)

// served reports whether a GET /healthz from ip over a new connection to
// addr is answered 200 (and returns the open connection, to keep it).
func served(t *testing.T, ip, addr string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, false
	}
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("GET " + PathHealthz + " HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		c.Close()
		return nil, false
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, false
	}
	res.Body.Close()
	_ = c.SetDeadline(time.Time{})
	return c, res.StatusCode == http.StatusOK
}

// serveBounded serves the API on a bounded Listener of a free loopback
// port until the test ends, and returns its address.
func serveBounded(t *testing.T) string {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer("", New(Options{Config: func() *config.Config { return testConfig() }}), nil)
	go func() { _ = srv.Serve(Listener(inner)) }()
	t.Cleanup(func() { srv.Close() })
	return inner.Addr().String()
}

// TestListenerBoundsConnectionsPerSource: the HTTP listener kept every
// connection it accepted (each a descriptor, held up to the idle
// timeout by a client that sends a request now and then), however many
// one client opened. Its descriptors are the process's, shared with the
// SIP listeners, their connections to carriers and Redis: a client that
// reaches http.listen (on the pod network, where Prometheus scrapes it)
// could take them all. A source now holds at most MaxConnsPerSource
// connections and the listener MaxConns; the others are closed at accept,
// and another source is still served.
func TestListenerBoundsConnectionsPerSource(t *testing.T) {
	addr := serveBounded(t)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	refused := 0
	for range MaxConnsPerSource + 8 {
		c, ok := served(t, "127.0.0.7", addr)
		if !ok {
			refused++
			continue
		}
		held = append(held, c)
	}
	if len(held) != MaxConnsPerSource || refused != 8 {
		t.Errorf("one source: %d connections served, %d refused; want %d, 8", len(held), refused, MaxConnsPerSource)
	}
	c, ok := served(t, "127.0.0.8", addr)
	if !ok {
		t.Fatal("another source refused while one source holds its share")
	}
	c.Close()
	// A connection closed frees its place.
	held[0].Close()
	held = held[1:]
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, ok := served(t, "127.0.0.7", addr); ok {
			held = append(held, c)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a source's place was not given back when its connection closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestListenerKeepsPlacesForSmallSources: sources idling their whole share
// of keep-alive connections took every place, and /healthz failed for
// everyone else (h46). The last ReservedConns places are kept for sources
// that hold fewer than SmallSource: a new source is still served once the
// big ones hold all the rest, and a middling one gets none of them.
func TestListenerKeepsPlacesForSmallSources(t *testing.T) {
	addr := serveBounded(t)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// A middling source (SmallSource+1), then big ones fill everything
	// but the reserve.
	open := 0
	for range SmallSource + 1 {
		c, ok := served(t, "127.0.7.1", addr)
		if !ok {
			t.Fatal("a middling source refused with the listener empty")
		}
		held = append(held, c)
		open++
	}
	for s := 0; open < MaxConns-ReservedConns; s++ {
		ip := "127.0.9." + strconv.Itoa(10+s)
		for range MaxConnsPerSource {
			if open == MaxConns-ReservedConns {
				break
			}
			c, ok := served(t, ip, addr)
			if !ok {
				t.Fatalf("source %s refused at %d connections open, before the reserve", ip, open)
			}
			held = append(held, c)
			open++
		}
	}
	if c, ok := served(t, "127.0.7.1", addr); ok {
		c.Close()
		t.Fatalf("a source holding %d connections took a reserved place", SmallSource+1)
	}
	// A small source takes a reserved place, up to SmallSource.
	for i := range SmallSource {
		c, ok := served(t, "127.0.8.1", addr)
		if !ok {
			t.Fatalf("a small source refused its connection %d while places are reserved for it", i+1)
		}
		held = append(held, c)
	}
	if c, ok := served(t, "127.0.8.1", addr); ok {
		c.Close()
		t.Fatalf("a source holding %d took one more reserved place", SmallSource)
	}
	if c, ok := served(t, "127.0.8.2", addr); !ok {
		t.Fatal("another small source refused")
	} else {
		c.Close()
	}
}
