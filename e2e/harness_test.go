//go:build linux

package e2e

// The harness: the real cpsguard binary, built once per test run, started as
// processes on generated configurations with free loopback ports; helpers to
// read /metrics and /api/v1/status, and to stop a node with SIGTERM.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// binary is the cpsguard executable built by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cpsguard-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// CPSGUARD_E2E_BINARY runs the tests against another build (e.g. an
	// older commit's, to see a new test fail on the code it guards).
	if bin := os.Getenv("CPSGUARD_E2E_BINARY"); bin != "" {
		binary = bin
		return m.Run()
	}
	binary = filepath.Join(dir, "cpsguard")
	// The binary itself is built without -race: the tests measure a node as
	// it ships; the race detector runs on the unit tests.
	cmd := exec.Command("go", "build", "-o", binary, "../cmd/cpsguard")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build ./cmd/cpsguard: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// freeSIPPort returns a port free for both UDP and TCP on 127.0.0.1.
func freeSIPPort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		p := redistest.FreePort(t)
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
		if err != nil {
			continue
		}
		u.Close()
		return p
	}
	t.Fatal("no port free for UDP and TCP")
	return 0
}

// peerConf is one peer of a node configuration.
type peerConf struct {
	name    string
	sources []string // CIDRs
	cps     float64
	// maxCalls is the peer's max_calls (0 = none).
	maxCalls int
}

// carrierConf is one carrier; all carriers form the default route in order.
type carrierConf struct {
	name    string
	addr    string // host:port of a UDP carrier
	cps     float64
	maxWait time.Duration
	// maxCalls is the carrier's max_calls (0 = none).
	maxCalls int
	// extra is more of the carrier's flow map, e.g. "probe: {interval: 0s}".
	extra string
}

// nodeConf describes one node's configuration file.
type nodeConf struct {
	id            string
	redis         string // host:port; empty = in-process store
	sentinels     []string
	masterName    string // with sentinels: a Sentinel group
	onError       string // local | admit | reject
	redisTimeout  time.Duration
	unknownSource string // reject | drop
	token         string
	logLevel      string // default info
	tcp           string // sip.tcp block, e.g. "{idle_timeout: 1s}"; empty = defaults
	peers         []peerConf
	carriers      []carrierConf
	// callRefreshTTL is sip.call_refresh_ttl; 0 = the default.
	callRefreshTTL time.Duration
	// records is the call records' file (records.file); empty = none.
	records string
	// tlsCert and tlsKey, when set, add a tls:// listener (node.sipTLS)
	// presenting them; tlsCA verifies TLS carriers (sip.tls.ca_file).
	tlsCert, tlsKey, tlsCA string
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// yaml renders the configuration for a node listening on sipPort and
// httpPort (and tlsPort, with tlsCert).
func (c nodeConf) yaml(sipPort, httpPort, tlsPort int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node_id: %s\n", c.id)
	tls := ""
	if c.tlsCert != "" {
		tls = fmt.Sprintf(", tls://127.0.0.1:%d", tlsPort)
	}
	fmt.Fprintf(&b, "sip:\n  listen: [udp://127.0.0.1:%d, tcp://127.0.0.1:%d%s]\n  record_route: true\n", sipPort, sipPort, tls)
	if c.tlsCert != "" {
		fmt.Fprintf(&b, "  tls: {cert_file: %q, key_file: %q, ca_file: %q}\n", c.tlsCert, c.tlsKey, c.tlsCA)
	}
	us := c.unknownSource
	if us == "" {
		us = "reject"
	}
	fmt.Fprintf(&b, "  unknown_source: %s\n  reject: {code: 503, reason: CPS Limit Exceeded}\n", us)
	if c.tcp != "" {
		fmt.Fprintf(&b, "  tcp: %s\n", c.tcp)
	}
	if c.callRefreshTTL > 0 {
		fmt.Fprintf(&b, "  call_refresh_ttl: %s\n", c.callRefreshTTL)
	}
	b.WriteString("store:\n  key_prefix: e2e\n")
	to := c.redisTimeout
	if to == 0 {
		to = 50 * time.Millisecond
	}
	switch {
	case c.masterName != "":
		fmt.Fprintf(&b, "  redis: {addrs: [%s], master_name: %s, timeout: %s}\n", strings.Join(c.sentinels, ", "), c.masterName, to)
	case c.redis != "":
		fmt.Fprintf(&b, "  redis: {addrs: [%s], timeout: %s}\n", c.redis, to)
	}
	if c.onError != "" {
		fmt.Fprintf(&b, "  on_error: %s\n", c.onError)
	}
	fmt.Fprintf(&b, "http:\n  listen: 127.0.0.1:%d\n", httpPort)
	if c.token != "" {
		fmt.Fprintf(&b, "  token: %s\n", c.token)
	}
	lvl := c.logLevel
	if lvl == "" {
		lvl = "info"
	}
	fmt.Fprintf(&b, "log: {level: %s, format: json}\n", lvl)
	if c.records != "" {
		fmt.Fprintf(&b, "records: {file: %q}\n", c.records)
	}
	b.WriteString("customers:\n  - {name: any, cps: 100000}\n")
	b.WriteString("peers:\n")
	for _, p := range c.peers {
		fmt.Fprintf(&b, "  - {name: %s, sources: [%s], cps: %s, max_calls: %d, customer: any, customers: [any]}\n",
			p.name, strings.Join(p.sources, ", "), num(p.cps), p.maxCalls)
	}
	b.WriteString("carriers:\n")
	var names []string
	for _, k := range c.carriers {
		mw := k.maxWait
		if mw == 0 {
			mw = time.Second
		}
		extra := ""
		if k.extra != "" {
			extra = ", " + k.extra
		}
		fmt.Fprintf(&b, "  - {name: %s, uri: \"sip:%s\", cps: %s, max_wait: %s, max_calls: %d%s}\n", k.name, k.addr, num(k.cps), mw, k.maxCalls, extra)
		names = append(names, k.name)
	}
	fmt.Fprintf(&b, "routes:\n  default: [%s]\n", strings.Join(names, ", "))
	return b.String()
}

// node is one running cpsguard process.
type node struct {
	t       testing.TB
	id      string
	sip     string // 127.0.0.1:port (UDP and TCP)
	sipTLS  string // 127.0.0.1:port of the tls:// listener (nodeConf.tlsCert)
	http    string // http://127.0.0.1:port
	cfgPath string
	logPath string
	cmd     *exec.Cmd

	mu       sync.Mutex
	exited   chan struct{}
	exitCode int
	stopped  bool
}

// startNode writes c's configuration and runs `cpsguard serve` on it. It
// waits until /healthz answers and, when ready is true, until /readyz is 200.
// The node is stopped with SIGTERM when the test ends (exit 0 required).
func startNode(t testing.TB, c nodeConf, ready bool) *node {
	t.Helper()
	redistest.Require(t, "sipp")
	dir := t.TempDir()
	var last string
	for attempt := 0; attempt < 3; attempt++ {
		sipPort, httpPort, tlsPort := freeSIPPort(t), redistest.FreePort(t), redistest.FreePort(t)
		n := &node{t: t, id: c.id, sip: fmt.Sprintf("127.0.0.1:%d", sipPort), sipTLS: fmt.Sprintf("127.0.0.1:%d", tlsPort),
			http: fmt.Sprintf("http://127.0.0.1:%d", httpPort), exited: make(chan struct{}),
			cfgPath: filepath.Join(dir, c.id+".yaml"), logPath: filepath.Join(dir, fmt.Sprintf("%s-%d.log", c.id, attempt))}
		if err := os.WriteFile(n.cfgPath, []byte(c.yaml(sipPort, httpPort, tlsPort)), 0o600); err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(n.logPath)
		if err != nil {
			t.Fatal(err)
		}
		n.cmd = exec.Command(binary, "serve", "--config", n.cfgPath)
		n.cmd.Stdout, n.cmd.Stderr = logf, logf
		n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := n.cmd.Start(); err != nil {
			t.Fatalf("start cpsguard: %v", err)
		}
		go func() {
			err := n.cmd.Wait()
			logf.Close()
			n.mu.Lock()
			n.exitCode = 0
			if ee, ok := err.(*exec.ExitError); ok {
				n.exitCode = ee.ExitCode()
			} else if err != nil {
				n.exitCode = -1
			}
			n.mu.Unlock()
			close(n.exited)
		}()
		path := "/healthz"
		if ready {
			path = "/readyz"
		}
		if err := n.waitHTTP(path, 15*time.Second); err != nil {
			last = fmt.Sprintf("%v\n%s", err, n.logTail())
			n.kill()
			continue // a port taken in the meantime: try others
		}
		t.Cleanup(func() { n.stop(t, 20*time.Second) })
		return n
	}
	t.Fatalf("node %s did not start:\n%s", c.id, last)
	return nil
}

// waitHTTP polls path until it answers 200.
func (n *node) waitHTTP(path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			return fmt.Errorf("cpsguard exited with %d", n.exitCode)
		default:
		}
		code, _, err := n.get(path)
		if err == nil && code == 200 {
			return nil
		}
		last = fmt.Errorf("GET %s: %d %v", path, code, err)
		time.Sleep(30 * time.Millisecond)
	}
	return fmt.Errorf("not up within %s: %v", limit, last)
}

var httpClient = &http.Client{Timeout: 3 * time.Second}

// get fetches path from the node's HTTP endpoint.
func (n *node) get(path string) (int, string, error) {
	res, err := httpClient.Get(n.http + path)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// post sends an empty POST with an optional bearer token.
func (n *node) post(path, token string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, n.http+path, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// metrics reads /metrics as a map from series (name{labels} exactly as
// exposed) to value.
func (n *node) metrics() (map[string]float64, error) {
	code, body, err := n.get("/metrics")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /metrics: %d", code)
	}
	return parseMetrics(body), nil
}

func parseMetrics(body string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// sumMetric adds every series of name whose labels contain all of labels
// (each `key="value"`).
func sumMetric(m map[string]float64, name string, labels ...string) float64 {
	var s float64
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(k, l) {
				ok = false
				break
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

// metric reads one value, failing the test when /metrics is unreachable.
func (n *node) metric(name string, labels ...string) float64 {
	n.t.Helper()
	m, err := n.metrics()
	if err != nil {
		n.t.Fatalf("node %s: %v", n.id, err)
	}
	return sumMetric(m, name, labels...)
}

// status reads /api/v1/status as generic JSON.
func (n *node) status() (map[string]any, error) {
	code, body, err := n.get("/api/v1/status")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("GET /api/v1/status: %d %s", code, body)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return v, nil
}

// outcomes returns cpsguard_calls_total by outcome, summed over peers.
func (n *node) outcomes() map[string]float64 {
	n.t.Helper()
	m, err := n.metrics()
	if err != nil {
		n.t.Fatalf("node %s: %v", n.id, err)
	}
	out := map[string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, "cpsguard_calls_total{") {
			continue
		}
		i := strings.Index(k, `outcome="`)
		if i < 0 {
			continue
		}
		rest := k[i+len(`outcome="`):]
		out[rest[:strings.IndexByte(rest, '"')]] += v
	}
	return out
}

// waitOutcomes waits until the node has counted want call outcomes in all.
func (n *node) waitOutcomes(want int, limit time.Duration) map[string]float64 {
	n.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		o := n.outcomes()
		var sum float64
		for _, v := range o {
			sum += v
		}
		if int(sum) >= want || time.Now().After(deadline) {
			return o
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pid is the node's process id.
func (n *node) pid() int { return n.cmd.Process.Pid }

// rssKB reads VmRSS of the node in kB.
func (n *node) rssKB() int {
	n.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.pid()))
	if err != nil {
		n.t.Fatalf("node %s: %v", n.id, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	n.t.Fatalf("node %s: no VmRSS", n.id)
	return 0
}

// alive reports whether the process is still running.
func (n *node) alive() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the node.
func (n *node) signal(sig syscall.Signal) {
	_ = n.cmd.Process.Signal(sig)
}

// stop sends SIGTERM and waits up to limit for exit; it fails the test unless
// the node exits 0 in time. Stopping a stopped node only reports its result.
func (n *node) stop(t testing.TB, limit time.Duration) (code int, took time.Duration) {
	t.Helper()
	n.mu.Lock()
	first := !n.stopped
	n.stopped = true
	n.mu.Unlock()
	start := time.Now()
	if first {
		n.signal(syscall.SIGTERM)
	}
	select {
	case <-n.exited:
	case <-time.After(limit):
		n.kill()
		t.Errorf("node %s: no exit within %s of SIGTERM; killed\n%s", n.id, limit, n.logTail())
		return -1, time.Since(start)
	}
	n.mu.Lock()
	code = n.exitCode
	n.mu.Unlock()
	if first && code != 0 {
		t.Errorf("node %s: exit code %d after SIGTERM, want 0\n%s", n.id, code, n.logTail())
	}
	return code, time.Since(start)
}

func (n *node) kill() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// logTail returns the end of the node's log.
func (n *node) logTail() string { return fileTail(n.logPath, 4000) }

// fileTail is the last max bytes of the file at path ("" if unreadable),
// for failure messages.
func fileTail(path string, max int) string {
	b, _ := os.ReadFile(path)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// logTimes returns the times of the log records whose "msg" is msg.
func (n *node) logTimes(msg string) []time.Time {
	b, _ := os.ReadFile(n.logPath)
	var out []time.Time
	for _, line := range bytes.Split(b, []byte("\n")) {
		var rec struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == msg {
			out = append(out, rec.Time)
		}
	}
	return out
}

// countIn counts the times in [from, to].
func countIn(ts []time.Time, from, to time.Time) int {
	c := 0
	for _, x := range ts {
		if !x.Before(from) && !x.After(to) {
			c++
		}
	}
	return c
}

// logCount counts log records whose "msg" is msg.
func (n *node) logCount(msg string) int {
	b, _ := os.ReadFile(n.logPath)
	c := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		var rec struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == msg {
			c++
		}
	}
	return c
}

// ctxT is a context bounded by d and by the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// grep returns the log lines containing s (at most 20).
func (n *node) grep(s string) string {
	b, _ := os.ReadFile(n.logPath)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) && len(out) < 20 {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

const sigterm = syscall.SIGTERM
