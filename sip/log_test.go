package sip

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// logRecord is one record a captureHandler kept.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// captureHandler keeps every record at Debug and above, with the
// attributes of its logger, for a test to read.
type captureHandler struct {
	mu    *sync.Mutex
	recs  *[]logRecord
	attrs []slog.Attr
}

func newCapture() *captureHandler {
	return &captureHandler{mu: &sync.Mutex{}, recs: &[]logRecord{}}
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{mu: h.mu, recs: h.recs, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

func (h *captureHandler) records() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.recs)
}

// A SIP/TCP connection that goes idle for sip.tcp.idle_timeout is closed
// as it should be, and says so at Debug: sipgo's "Read error … i/o
// timeout" (an ERROR from its connection's logger, which is sipgo's
// package logger, not the one the proxy gives its transport layer) and its
// "TCP ref went negative" bookkeeping warning were an operator's only
// ERROR and WARN lines on a healthy node. Nothing sipgo logs about a
// normal call and an idle close reaches Warn.
func TestSipgoConnectionLogsAtDebug(t *testing.T) {
	capture := newCapture()
	prev := slog.Default()
	slog.SetDefault(slog.New(capture)) // as cmd/cpsguard does with its own logger
	t.Cleanup(func() { slog.SetDefault(prev) })

	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.TCP.IdleTimeout = 300 * time.Millisecond
	cfg.SIP.DialogSecret = "a-secret-of-sixteen-chars" // no warning about a random key
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Logger: slog.New(capture)})

	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	local := conn.LocalAddr().String()
	invite := "INVITE sip:18005550100@" + h.tcp + ";transport=tcp SIP/2.0\r\n" +
		"Via: SIP/2.0/TCP " + local + ";branch=z9hG4bK-idle-1\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:dialer@127.0.0.2>;tag=a1\r\nTo: <sip:18005550100@127.0.0.1>\r\n" +
		"Call-ID: idle-1@127.0.0.2\r\nCSeq: 1 INVITE\r\nContact: <sip:dialer@" + local + ";transport=tcp>\r\nContent-Length: 0\r\n\r\n"
	if _, err := conn.Write([]byte(invite)); err != nil {
		t.Fatal(err)
	}
	// Read the answers until the proxy closes the idle connection.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	var got []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "SIP/2.0 ") {
			got = append(got, strings.TrimSpace(line))
		}
	}
	if !slices.Contains(got, "SIP/2.0 200 OK") {
		t.Fatalf("answers on the TCP connection: %q, want a 200 OK", got)
	}
	waitFor(t, func() bool {
		for _, rec := range capture.records() {
			if rec.msg == "Read error" {
				return true
			}
		}
		return false
	}, "sipgo's read error on the idle connection")
	// Give sipgo's connection clean-up its turn, then read everything.
	time.Sleep(200 * time.Millisecond)
	for _, rec := range capture.records() {
		if rec.level >= slog.LevelWarn {
			t.Errorf("%s %q %v: a normal call and an idle close must log below Warn", rec.level, rec.msg, rec.attrs)
		}
		if rec.msg == "Read error" && rec.attrs["component"] != "sipgo" {
			t.Errorf("sipgo's read error has component %q, want sipgo (routed through the proxy's handler)", rec.attrs["component"])
		}
	}
	if n := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("tcp_read")); n != 0 {
		t.Errorf("sip_errors_total{tcp_read} = %v after an idle close, want 0 (a timeout is not an error)", n)
	}
}

// sipgo's package logger reaches the proxy's handler: a connection's
// reference count going negative (sipgo closing a connection twice, its own
// bookkeeping) is Debug, and a read error other than a timeout (a reset)
// is Debug and counted as tcp_read.
func TestSipgoPackageLoggerRoutedAndLowered(t *testing.T) {
	capture := newCapture()
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return testConfig(carrierCfg("a", car)) },
		Admission: adm, Pacer: pacer, Logger: slog.New(capture)})

	a, b := net.Pipe()
	defer b.Close()
	c := &sipmsg.TCPConnection{Conn: a}
	c.Ref(1)
	_, _ = c.TryClose() // closes it: refcount 0
	_, _ = c.TryClose() // -1: "TCP ref went negative"
	sipmsg.DefaultLogger().Error("Read error", "error", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	sipmsg.DefaultLogger().Error("Read error", "error", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})

	var negative, reads int
	for _, rec := range capture.records() {
		switch {
		case rec.msg == "TCP ref went negative":
			negative++
		case rec.msg == "Read error":
			reads++
		default:
			continue
		}
		if rec.level != slog.LevelDebug || rec.attrs["component"] != "sipgo" {
			t.Errorf("%q: level %s component %q, want DEBUG and sipgo", rec.msg, rec.level, rec.attrs["component"])
		}
	}
	if negative != 1 || reads != 2 {
		t.Errorf("records: %d ref-went-negative and %d read errors reached the proxy's handler, want 1 and 2", negative, reads)
	}
	if n := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("tcp_read")); n != 1 {
		t.Errorf("sip_errors_total{tcp_read} = %v, want 1 (the reset, not the timeout)", n)
	}
}

// A party that opens TCP connections only to break their framing (a
// Content-Length that is not a number, more headers than the bound) gets
// each closed and counted, and writes no log line at Warn: the scan
// closed the connection, and sipgo's own close after it failed and
// logged "connection pool not clean cleanup" at Warn, once per
// connection (h55: 1,000 lines from 1,000 connections in 70 ms).
func TestBrokenTCPFramingLogsNothingAtWarn(t *testing.T) {
	capture := newCapture()
	prev := slog.Default()
	slog.SetDefault(slog.New(capture))
	t.Cleanup(func() { slog.SetDefault(prev) })
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.SIP.DialogSecret = "a-secret-of-sixteen-chars"
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Logger: slog.New(capture)})

	const conns = 20
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}, Timeout: 5 * time.Second}
	for range conns {
		c, err := d.Dial("tcp", h.tcp)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("INVITE x\r\nContent-Length: abc\r\n\r\n"))
		// The node closes it: read until it does.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		_ = c.Close()
	}
	waitFor(t, func() bool { return testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("stream")) >= conns },
		"every broken connection counted as stream")
	time.Sleep(200 * time.Millisecond) // sipgo's clean-up of the last one
	for _, rec := range capture.records() {
		if rec.level >= slog.LevelWarn {
			t.Errorf("%s %q %v: a connection closed for its framing must log below Warn", rec.level, rec.msg, rec.attrs)
		}
	}
}

// sipgo's "ACK loop" error, which its INVITE client transaction logs for
// every non-2xx final a next hop sends again after the ACK (h67: a
// carrier's retransmissions were ERROR lines), is Debug; an error sipgo
// logs otherwise stays an error.
func TestSipgoAckLoopAtDebug(t *testing.T) {
	capture := newCapture()
	log := slog.New(&sipgoHandler{inner: capture})
	log.Error("ACK loop retransimission. Resending after T2", "tx", "z9hG4bK.x__INVITE")
	log.Error("something else failed")
	recs := capture.records()
	if len(recs) != 2 || recs[0].level != slog.LevelDebug || recs[1].level != slog.LevelError {
		t.Fatalf("records %+v: want the ACK loop at Debug, the other at Error", recs)
	}
}
