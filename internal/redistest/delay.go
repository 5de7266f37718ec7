package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Delayed starts a TCP proxy on a free loopback port in front of addr that
// holds every chunk it reads for d before passing it on, in each direction:
// a Redis d × 2 of round trip away (another zone, a congested link). Order
// is kept per direction. It stops, closing every connection, when the test
// ends. It returns the proxy's address.
func Delayed(t testing.TB, addr string, d time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("delay proxy: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false // closed
		}
		conns = append(conns, c)
		return true
	}
	conns = []net.Conn{}
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			if !track(c) || !track(s) {
				c.Close()
				s.Close()
				return
			}
			wg.Go(func() { delayCopy(s, c, d) })
			wg.Go(func() { delayCopy(c, s, d) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// delayCopy copies src to dst, each chunk d after it was read; it closes
// both when either side ends.
func delayCopy(dst, src net.Conn, d time.Duration) {
	type chunk struct {
		due time.Time
		b   []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(d), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	failed := false
	for c := range q { // until the reader ends: it never blocks on q
		if failed {
			continue
		}
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			src.Close()
		}
	}
	src.Close()
}
