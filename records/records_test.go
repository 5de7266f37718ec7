package records

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
)

func counters() (w, d *prometheus.CounterVec) {
	w = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "w"}, []string{"sink"})
	d = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"sink"})
	return w, d
}

func sample(i int) *Record {
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	ans := t0.Add(2 * time.Second)
	setup := int64(120)
	r := &Record{CallID: "call-" + strconv.Itoa(i), Node: "n1", Peer: "dialer-1", Customer: "acme",
		CarriersTried: []string{"a"}, Carrier: "a", Code: 200, Outcome: "forwarded",
		SetupMS: &setup, StartedAt: t0, AnsweredAt: &ans, EndedBy: ByCaller, EndReason: EndBye}
	r.Finish(ans.Add(61500 * time.Millisecond))
	return r
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRecordJSON(t *testing.T) {
	b, err := json.Marshal(sample(1))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"call_id", "peer", "customer", "carriers_tried", "carrier", "code", "admission_wait_ms",
		"pacing_wait_ms", "setup_ms", "started_at", "answered_at", "ended_at", "duration_s", "ended_by", "node", "priority"} {
		if _, ok := m[k]; !ok {
			t.Errorf("record has no %q: %s", k, b)
		}
	}
	if m["duration_s"] != 61.5 {
		t.Errorf("duration_s: got %v, want 61.5", m["duration_s"])
	}
	if m["answered_at"] != "2025-03-01T10:00:02Z" {
		t.Errorf("answered_at: got %v", m["answered_at"])
	}
	// A call never answered: answered_at and setup_ms are null, duration 0.
	r := &Record{CallID: "x", StartedAt: Stamp(time.Now())}
	r.Finish(time.Now())
	b, _ = json.Marshal(r)
	if !bytes.Contains(b, []byte(`"answered_at":null`)) || !bytes.Contains(b, []byte(`"setup_ms":null`)) || !bytes.Contains(b, []byte(`"duration_s":0`)) {
		t.Errorf("unanswered record: %s", b)
	}
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// The file sink writes one JSON object a line and rotates by size
// (lumberjack): past max_size_mb the file is renamed with a timestamp and
// a new one started; every record is in one of the files, once.
func TestFileSinkRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "calls.jsonl")
	wc, dc := counters()
	w := New(Options{Written: wc, Dropped: dc})
	if err := w.Apply(config.Records{File: path, MaxSizeMB: 1, MaxBackups: 5, Buffer: 100000}); err != nil {
		t.Fatal(err)
	}
	// A record with a long detail is ~1.3 KB: 1500 of them are ~2 MB, so
	// at least one rotation at 1 MB.
	const n = 1500
	for i := 0; i < n; i++ {
		r := sample(i)
		r.Detail = strings.Repeat("x", 1000)
		w.Write(r)
	}
	w.Close()
	if got := testutil.ToFloat64(wc.WithLabelValues(SinkFile)); got != n {
		t.Fatalf("written: got %v, want %d (dropped %v)", got, n, testutil.ToFloat64(dc.WithLabelValues(SinkFile)))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "calls*.jsonl"))
	if len(files) < 2 {
		t.Fatalf("files after 2 MB at max_size_mb 1: %v, want the file and a rotated backup", files)
	}
	seen := map[string]bool{}
	for _, f := range files {
		st, _ := os.Stat(f)
		if st.Size() > 1<<20 {
			t.Errorf("%s: %d bytes, over max_size_mb", f, st.Size())
		}
		for _, m := range readLines(t, f) {
			id := m["call_id"].(string)
			if seen[id] {
				t.Errorf("record %s written twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != n {
		t.Errorf("records across the files: got %d, want %d", len(seen), n)
	}
}

// A reload that changes the path reopens: later records go to the new
// file; an unchanged configuration keeps the sink.
func TestApplyReopensOnPathChange(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "sub", "b.jsonl")
	w := New(Options{})
	rc := config.Records{File: a, MaxSizeMB: 10, Buffer: 64}
	if err := w.Apply(rc); err != nil {
		t.Fatal(err)
	}
	w.Write(sample(1))
	before := w.sinks[SinkFile]
	if err := w.Apply(rc); err != nil || w.sinks[SinkFile] != before {
		t.Fatalf("same settings: sink replaced (err %v)", err)
	}
	rc.File = b
	if err := w.Apply(rc); err != nil {
		t.Fatal(err)
	}
	w.Write(sample(2))
	rc.File = ""
	if err := w.Apply(rc); err != nil || w.Enabled() {
		t.Fatalf("no sink configured: enabled %v, err %v", w.Enabled(), err)
	}
	w.Write(sample(3)) // no sink: nowhere
	w.Close()
	if got := readLines(t, a); len(got) != 1 || got[0]["call_id"] != "call-1" {
		t.Errorf("first file: %v", got)
	}
	if got := readLines(t, b); len(got) != 1 || got[0]["call_id"] != "call-2" {
		t.Errorf("second file: %v", got)
	}
}

func TestApplyReportsUnwritableFile(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w := New(Options{})
	defer w.Close()
	// A path under a regular file cannot be created.
	if err := w.Apply(config.Records{File: filepath.Join(blocker, "calls.jsonl"), MaxSizeMB: 1, Buffer: 16, Stdout: true}); err == nil {
		t.Fatal("Apply: got nil, want the file's error")
	}
	if _, ok := w.sinks[SinkStdout]; !ok {
		t.Error("stdout sink not opened beside the failed file")
	}
}

// syslogLine is an RFC 5424 message as the sink writes it.
var syslogLine = regexp.MustCompile(`^<134>1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z (\S+) cpsguard (\d+) call - (\{.*\})$`)

// The syslog sink sends one RFC 5424 message a record, one datagram each
// over UDP.
func TestSyslogUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	wc, dc := counters()
	w := New(Options{Written: wc, Dropped: dc, Hostname: "node one"})
	if err := w.Apply(config.Records{Syslog: "udp://" + pc.LocalAddr().String(), Buffer: 64}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		w.Write(sample(i))
	}
	buf := make([]byte, 65536)
	for i := 0; i < 3; i++ {
		_ = pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		m := syslogLine.FindSubmatch(buf[:n])
		if m == nil {
			t.Fatalf("datagram %d is not RFC 5424 as expected: %q", i, buf[:n])
		}
		if string(m[1]) != "node_one" || string(m[2]) != strconv.Itoa(os.Getpid()) {
			t.Errorf("hostname %q procid %q", m[1], m[2])
		}
		var r Record
		if err := json.Unmarshal(m[3], &r); err != nil || r.CallID != "call-"+strconv.Itoa(i) {
			t.Errorf("message %d: %q (%v)", i, m[3], err)
		}
	}
	w.Close()
	if got := testutil.ToFloat64(wc.WithLabelValues(SinkSyslog)); got != 3 {
		t.Errorf("written: got %v, want 3", got)
	}
}

// Over TCP each message is framed by its length (RFC 6587 octet
// counting); a server that goes away loses records, counted, and a new
// connection is made.
func TestSyslogTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					lenStr, err := br.ReadString(' ')
					if err != nil {
						return
					}
					n, err := strconv.Atoi(strings.TrimSpace(lenStr))
					if err != nil {
						got <- "bad frame length " + lenStr
						return
					}
					msg := make([]byte, n)
					if _, err := io.ReadFull(br, msg); err != nil {
						return
					}
					got <- string(msg)
				}
			}()
		}
	}()
	wc, dc := counters()
	w := New(Options{Written: wc, Dropped: dc, Hostname: "h"})
	if err := w.Apply(config.Records{Syslog: "tcp://" + ln.Addr().String(), Buffer: 64}); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write(sample(1))
	w.Write(sample(2))
	for i := 1; i <= 2; i++ {
		select {
		case msg := <-got:
			m := syslogLine.FindStringSubmatch(msg)
			if m == nil || !strings.Contains(m[3], `"call_id":"call-`+strconv.Itoa(i)+`"`) {
				t.Fatalf("frame %d: %q", i, msg)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("frame %d not received", i)
		}
	}
	waitFor(t, func() bool { return testutil.ToFloat64(wc.WithLabelValues(SinkSyslog)) == 2 }, "2 written")
}

// blockingWriter blocks every Write until release is closed; entered is
// signalled at the first.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// A sink that cannot keep up never holds the caller: a full queue drops
// the record and counts it; what was queued is written once the sink
// moves again.
func TestFullBufferDropsAndCounts(t *testing.T) {
	bw := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	wc, dc := counters()
	w := New(Options{Written: wc, Dropped: dc, Stdout: bw})
	const buffer = 16
	if err := w.Apply(config.Records{Stdout: true, Buffer: buffer}); err != nil {
		t.Fatal(err)
	}
	w.Write(sample(0))
	select {
	case <-bw.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the sink never wrote")
	}
	// The sink is stuck in its write: the queue takes buffer records, the
	// rest are dropped, and Write returns at once every time.
	const more = 100
	done := make(chan struct{})
	go func() {
		for i := 1; i <= more; i++ {
			w.Write(sample(i))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked on a stuck sink")
	}
	if got := testutil.ToFloat64(dc.WithLabelValues(SinkStdout)); got != more-buffer {
		t.Fatalf("dropped: got %v, want %d", got, more-buffer)
	}
	close(bw.release)
	w.Close()
	if got := testutil.ToFloat64(wc.WithLabelValues(SinkStdout)); got != buffer+1 {
		t.Errorf("written: got %v, want %d", got, buffer+1)
	}
	if n := strings.Count(bw.buf.String(), "\n"); n != buffer+1 {
		t.Errorf("lines on stdout: got %d, want %d", n, buffer+1)
	}
}

// A syslog TCP server that is not there: records are dropped and counted,
// the sink does not stall.
func TestSyslogDownDropsAndCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	wc, dc := counters()
	w := New(Options{Written: wc, Dropped: dc})
	if err := w.Apply(config.Records{Syslog: "tcp://" + addr, Buffer: 64}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		w.Write(sample(i))
	}
	waitFor(t, func() bool { return testutil.ToFloat64(dc.WithLabelValues(SinkSyslog)) == 5 }, "5 dropped")
	w.Close()
	if got := testutil.ToFloat64(wc.WithLabelValues(SinkSyslog)); got != 0 {
		t.Errorf("written: got %v, want 0", got)
	}
}

func TestHeaderField(t *testing.T) {
	for _, tt := range []struct{ in, want string }{{"", "-"}, {"a b", "a_b"}, {"héllo", "h__llo"}, {strings.Repeat("x", 300), strings.Repeat("x", 255)}} {
		if got := headerField(tt.in, maxHostname); got != tt.want {
			t.Errorf("headerField(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}
