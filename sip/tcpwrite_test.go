package sip

import (
	"bufio"
	"crypto/tls"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// smallReadBuffer dials with a receive buffer as small as the kernel
// allows, so that what the node writes to a client that never reads
// fills the connection soon.
func smallReadBuffer(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
	})
	if err != nil {
		return err
	}
	return serr
}

func tcpOptions(local, target string, i int) string {
	return "OPTIONS sip:" + target + ";transport=tcp SIP/2.0\r\n" +
		"Via: SIP/2.0/TCP " + local + ";branch=z9hG4bK-noread-" + strconv.Itoa(i) + "\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:dialer@127.0.0.2>;tag=nr" + strconv.Itoa(i) + "\r\nTo: <sip:" + target + ">\r\n" +
		"Call-ID: noread-" + strconv.Itoa(i) + "@127.0.0.2\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
}

// TestTCPClientThatNeverReadsIsClosed: a peer's TCP connection that sends
// requests and never reads their answers fills its socket until the
// node's write blocks. That write ran in the connection's sipgo reader,
// with no write deadline: the reader never read again, so the idle
// timeout never fired, and the connection, its goroutine and its place
// under max_connections_per_source were held for good (any party, a
// stranger under reject included, could keep connections past every
// bound). The node must close such a connection: a write that cannot
// complete within sip.tcp.idle_timeout ends it.
func TestTCPClientThatNeverReadsIsClosed(t *testing.T) {
	cfg := testConfig()
	cfg.SIP.TCP = config.TCP{IdleTimeout: 300 * time.Millisecond, MaxConnections: 10, MaxConnectionsPerSource: 1}
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	dial := func() (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second, Control: smallReadBuffer}
		return d.Dial("tcp", h.tcp)
	}
	neverReads(t, h.tcp, dial, func() bool { return servedOptions(t, h.tcp, nil) })
}

// TestTLSClientThatNeverReadsIsClosed: the same over TLS.
func TestTLSClientThatNeverReadsIsClosed(t *testing.T) {
	k := newTLSPKI(t)
	cfg := k.tlsConfig(false)
	cfg.SIP.TCP = config.TCP{IdleTimeout: 300 * time.Millisecond, MaxConnections: 10, MaxConnectionsPerSource: 1}
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	addr := tlsAddr(t, h)
	dial := func() (net.Conn, error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second, Control: smallReadBuffer}
		return tls.DialWithDialer(d, "tcp", addr, k.clientTLS(t, "", ""))
	}
	neverReads(t, addr, dial, func() bool { return servedOptions(t, addr, k.clientTLS(t, "", "")) })
}

// neverReads writes requests over a connection from dial, never reading,
// until the node stops reading them, then checks that a new connection
// (the source's only allowed one) is served within a bounded time.
func neverReads(t *testing.T, target string, dial func() (net.Conn, error), served func() bool) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := c.LocalAddr().String()
	// Write requests, never reading, until the node stops reading them
	// (its write of an answer is blocked): a write of ours then times out,
	// or fails because the node closed the connection.
	blocked := false
	batch := strings.Builder{}
	for i := 0; i < 200000 && !blocked; i++ {
		batch.WriteString(tcpOptions(local, target, i))
		if batch.Len() < 32<<10 {
			continue
		}
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte(batch.String())); err != nil {
			blocked = true
		}
		batch.Reset()
	}
	if !blocked {
		t.Fatal("the node read every request without its answers being read")
	}
	// The connection is silent now. Within a bounded time a second
	// connection from the source (max_connections_per_source 1) must be
	// served: the first one's place given back.
	deadline := time.Now().Add(15 * time.Second)
	for !served() {
		if time.Now().After(deadline) {
			t.Fatal("a connection that never reads is still held past idle_timeout: a new one from its source is refused")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// servedOptions dials the node at addr from 127.0.0.2 (over TLS with tc)
// and reports whether an OPTIONS over the new connection is answered.
func servedOptions(t *testing.T, addr string, tc *tls.Config) bool {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}
	var c net.Conn
	var err error
	if tc != nil {
		c, err = tls.DialWithDialer(d, "tcp", addr, tc)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(tcpOptions(c.LocalAddr().String(), addr, -1))); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SIP/2.0 200")
}

// TestCarrierThatNeverReadsIsLeftBehind: a TCP carrier that accepts and
// never reads fills its connection until the node's INVITE writes block.
// Those writes ran in the calls' handlers before any setup timer, and
// sipgo's write deadline never ended them while others queued behind (each
// set the socket's deadline again): calls waited until the connection died
// (sip.tcp.idle_timeout, a minute and more) with no next carrier (h46).
// A write blocked past streamWriteBound now closes the connection, and the
// calls go to the route's next carrier.
func TestCarrierThatNeverReadsIsLeftBehind(t *testing.T) {
	old := streamWriteBound
	streamWriteBound = 500 * time.Millisecond
	t.Cleanup(func() { streamWriteBound = old })     // after the proxy's own cleanup (registered later, run first)
	lc := net.ListenConfig{Control: smallReadBuffer} // accepted sockets inherit it
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never read
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	ok := siptest.StartCarrier(t, "127.0.0.1", nil)
	black := config.Carrier{Name: "blackhole", URI: "sip:" + ln.Addr().String() + ";transport=tcp", CPS: 5000, MaxWait: time.Second,
		SetupTimeout: 300 * time.Millisecond}
	cfg := testConfig(black, carrierCfg("ok", ok))
	cfg.Peers[0].CPS = 5000
	cfg.Customers[0].CPS = 5000
	cfg.SIP.TCP = config.TCP{IdleTimeout: 10 * time.Minute, MaxConnections: 100, MaxConnectionsPerSource: 100}
	adm, pacer := newFakes()
	var logs syncBuffer
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	caller := siptest.StartCaller(t, "127.0.0.2")
	body := strings.Repeat("a=x-fill:"+strings.Repeat("0", 90)+"\r\n", 120) // ~12 KB of SDP
	const calls = 400
	var wg sync.WaitGroup
	var answered atomic.Int64
	var cmu sync.Mutex
	codes := map[int]int{}
	for i := range calls {
		if i%25 == 0 {
			wg.Wait() // batches: the node's inflight bound would shed a burst of 400
			if n := answered.Load(); n != int64(i) {
				t.Fatalf("%d of the first %d calls answered by the next carrier, want all (the blackhole held them); answers %v", n, i, codes)
			}
		}
		wg.Go(func() {
			req := caller.Invite(h.udp, "Content-Type: application/sdp")
			req.SetBody([]byte(body))
			res := caller.Final(ctxT(t, 20*time.Second), req)
			code := 0
			if res != nil {
				code = res.StatusCode
			}
			cmu.Lock()
			codes[code]++
			cmu.Unlock()
			if code == 200 {
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	if n := answered.Load(); n != calls {
		t.Fatalf("%d of %d calls answered by the next carrier, want all (the blackhole held them); answers %v", n, calls, codes)
	}
	// The operator learns why the carrier's calls moved on (h52).
	if !strings.Contains(logs.String(), "a next hop stopped reading") {
		t.Errorf("no log line for the connection closed on a blocked write:\n%s", logs.String())
	}
	if n := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("write_blocked")); n < 1 {
		t.Errorf("sip_errors_total{write_blocked} = %v, want >= 1", n)
	}
}
