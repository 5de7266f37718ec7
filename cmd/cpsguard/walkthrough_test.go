package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// repoRoot is where the README's commands run from.
const repoRoot = "../.."

// fencedBlocks returns the fenced code blocks of a Markdown file with their
// language and the line of their opening fence, in order; an indented fence
// (inside a list item) counts too.
type fenced struct {
	lang  string
	line  int
	lines []string // trimmed
	raw   []string // as written, less the fence's indentation
}

func fencedBlocks(t *testing.T, path string) []fenced {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []fenced
	var cur *fenced
	indent := ""
	for i, l := range strings.Split(string(b), "\n") {
		s := strings.TrimSpace(l)
		if strings.HasPrefix(s, "```") {
			if cur == nil {
				cur = &fenced{lang: strings.TrimSpace(strings.TrimPrefix(s, "```")), line: i + 1}
				indent = l[:len(l)-len(strings.TrimLeft(l, " "))]
			} else {
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, s)
			cur.raw = append(cur.raw, strings.TrimPrefix(l, indent))
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: fence never closed", path, cur.line)
	}
	return out
}

// sectionBlocks returns the sh blocks under the ## heading title of path
// (up to the next ## heading).
func sectionBlocks(t *testing.T, path, title string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(b), "\n## "+title+"\n")
	if start < 0 {
		t.Fatalf("%s: no section %q", path, title)
	}
	first := strings.Count(string(b[:start]), "\n") + 2
	end := len(b)
	if i := strings.Index(string(b[start+1:]), "\n## "); i >= 0 {
		end = start + 1 + i
	}
	last := strings.Count(string(b[:end]), "\n") + 1
	var out [][]string
	for _, f := range fencedBlocks(t, path) {
		if f.lang == "sh" && f.line > first && f.line < last {
			out = append(out, commandLines(f.lines))
		}
	}
	return out
}

// trailingComment is a shell comment at the end of a command line.
var trailingComment = regexp.MustCompile(`\s+#\s.*$`)

// commandLines drops comments and blank lines and joins continued lines.
func commandLines(lines []string) []string {
	var out []string
	cont := ""
	for _, l := range lines {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		l = trailingComment.ReplaceAllString(l, "")
		if strings.HasSuffix(l, "\\") {
			cont += strings.TrimSuffix(l, "\\")
			continue
		}
		out = append(out, strings.Join(strings.Fields(cont+l), " "))
		cont = ""
	}
	return out
}

// scenarioCommands returns the sipp command lines of a scenario's header.
func scenarioCommands(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "testdata/sipp", name))
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(b), "-->")
	var out []string
	for _, l := range strings.Split(head, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "sipp ") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no sipp command in its header", name)
	}
	return out
}

// walk is one node of the example configuration on free ports, with the
// documented addresses mapped onto them.
type walk struct {
	t      *testing.T
	remap  *strings.Replacer
	config string // the remapped copy of testdata/cpsguard.yaml
	http   string
	carA   int // carrier-a's UDP port
	mu     sync.Mutex
	bg     map[string]*exec.Cmd // background processes by the port they hold
}

func newWalk(t *testing.T) *walk {
	sip, carA, carB, http := freePort(t), freePort(t), freePort(t), freePort(t)
	w := &walk{t: t, http: fmt.Sprintf("127.0.0.1:%d", http), carA: carA, bg: map[string]*exec.Cmd{}}
	w.remap = strings.NewReplacer(
		"127.0.0.1:5060", fmt.Sprintf("127.0.0.1:%d", sip),
		"127.0.0.1:5070", fmt.Sprintf("127.0.0.1:%d", carA),
		"127.0.0.1:5071", fmt.Sprintf("127.0.0.1:%d", carB),
		"-p 5070", fmt.Sprintf("-p %d", carA),
		"-p 5071", fmt.Sprintf("-p %d", carB),
		"127.0.0.1:9060", w.http,
	)
	data, err := os.ReadFile(filepath.Join(repoRoot, "testdata/cpsguard.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mapped := w.remap.Replace(string(data))
	for _, port := range []string{"5060", "5070", "5071", "9060"} {
		if strings.Contains(mapped, "127.0.0.1:"+port) {
			t.Fatalf("example configuration: 127.0.0.1:%s left after remapping", port)
		}
	}
	w.config = filepath.Join(t.TempDir(), "cpsguard.yaml")
	if err := os.WriteFile(w.config, []byte(mapped), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, c := range w.bg {
			stop(c)
		}
	})
	return w
}

// stop ends a background process: SIGTERM, then SIGKILL after 10 s.
func stop(c *exec.Cmd) {
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// args turns a documented command into the program and arguments to run:
// the addresses remapped, `go run ./cmd/cpsguard` the test's build, the
// configuration the remapped copy, and SIPp without its keyboard.
func (w *walk) args(cmd string) (string, []string) {
	w.t.Helper()
	cmd = w.remap.Replace(cmd)
	cmd = strings.ReplaceAll(cmd, "--config testdata/cpsguard.yaml", "--config "+w.config)
	f := strings.Fields(cmd)
	switch {
	case strings.HasPrefix(cmd, "go run ./cmd/cpsguard "):
		return binary(w.t), f[3:]
	case f[0] == "sipp":
		return redistest.Require(w.t, "sipp"), append(f[1:], "-nostdin")
	}
	w.t.Fatalf("walkthrough: no way to run %q", cmd)
	return "", nil
}

// start runs cmd in the background, holding key (a port) until the test
// ends or stopKey.
func (w *walk) start(key, cmd string) {
	w.t.Helper()
	prog, args := w.args(cmd)
	c := exec.Command(prog, args...)
	c.Dir = repoRoot
	c.Env = cleanEnv()
	var out syncBuffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	if old := w.bg[key]; old != nil {
		stop(old)
	}
	w.bg[key] = c
	w.mu.Unlock()
}

// waitCarrierA waits until a process (the SIPp carrier just started)
// holds carrier-a's UDP port, read from /proc/net/udp: binding the port to
// find out could take it from under SIPp.
func (w *walk) waitCarrierA() {
	w.t.Helper()
	local := fmt.Sprintf("0100007F:%04X ", w.carA) // 127.0.0.1, as the kernel writes it
	waitFor(w.t, "the SIPp carrier on carrier-a's port", func() bool {
		b, err := os.ReadFile("/proc/net/udp")
		if err != nil {
			w.t.Skipf("/proc/net/udp: %v", err)
		}
		return strings.Contains(string(b), local)
	})
}

func (w *walk) stopKey(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.bg[key]; c != nil {
		stop(c)
		delete(w.bg, key)
	}
}

// run runs cmd to its end (bounded by limit) and returns its exit code and
// output.
func (w *walk) run(cmd string, limit time.Duration) (int, string) {
	w.t.Helper()
	prog, args := w.args(cmd)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := exec.CommandContext(ctx, prog, args...)
	c.Dir = repoRoot
	c.Env = cleanEnv()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	if ctx.Err() != nil {
		w.t.Fatalf("%s: not done within %v:\n%s", cmd, limit, tail(out.String()))
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		w.t.Fatal(err)
	}
	return 0, out.String()
}

// metric reads one series of the node's /metrics (0 when absent).
func (w *walk) metric(series string) float64 {
	w.t.Helper()
	body := w.get("/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				w.t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return 0
}

func (w *walk) get(path string) string {
	w.t.Helper()
	resp, err := http.Get("http://" + w.http + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return string(b)
}

// sippCount returns a SIPp final screen's cumulative count of a row
// ("Successful call", "Failed call").
func sippCount(out, row string) int {
	re := regexp.MustCompile(regexp.QuoteMeta(row) + `\s*\|\s*\d+\s*\|\s*(\d+)`)
	m := re.FindAllStringSubmatch(out, -1)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}

// The README's "Try it with SIPp" walkthrough and the commands in the
// headers of testdata/sipp/*.xml work as they say, run as written against
// the example configuration, with only the loopback ports moved to free
// ones: the dialer's 150 calls all succeed, with 200s and 503s; status and
// the metrics show them; uac_customer.xml names its customer;
// uac_cancel.xml, against uas_ring.xml, cancels a ringing call (487, the
// CANCEL reaches the carrier); with uas_503.xml on carrier-a the calls
// complete on carrier-b.
func TestWalkthrough(t *testing.T) {
	redistest.Require(t, "sipp")
	w := newWalk(t)
	blocks := sectionBlocks(t, filepath.Join(repoRoot, "README.md"), "Try it with SIPp")
	if len(blocks) != 2 {
		t.Fatalf("README, Try it with SIPp: %d sh blocks, want 2 (the four terminals, the fifth)", len(blocks))
	}
	terminals, fifth := blocks[0], blocks[1]
	if len(terminals) != 4 || !strings.Contains(terminals[0], "cpsguard serve") || !strings.Contains(terminals[3], "uac.xml") {
		t.Fatalf("README walkthrough: %q, want serve, two carriers, the dialer", terminals)
	}

	// Terminals 2 and 3 (the carriers), then 1 (the node): the carriers
	// answer the node's first probes.
	w.start("carrier-a", terminals[1])
	w.start("carrier-b", terminals[2])
	w.waitCarrierA()
	w.start("node", terminals[0])
	waitFor(t, "the node to be ready", func() bool {
		return cpsguard(t, nil, "probe", "--config", w.config).code == 0
	})

	// Terminal 4: the dialer.
	code, out := w.run(terminals[3], 90*time.Second)
	if code != 0 || sippCount(out, "Successful call") != 150 {
		t.Fatalf("%s: exit %d, %d successful calls, want 0 and 150:\n%s", terminals[3], code, sippCount(out, "Successful call"), tail(out))
	}
	fwd := w.metric(`cpsguard_calls_total{outcome="forwarded",peer="dialer-1"}`)
	cps := w.metric(`cpsguard_calls_total{outcome="rejected_cps",peer="dialer-1"}`)
	if fwd == 0 || cps == 0 {
		t.Errorf("after the dialer: forwarded %v, rejected_cps %v; want both > 0 (acme allows 20 a second of the 30 offered)", fwd, cps)
	}

	// The fifth terminal: status and the metrics.
	for _, cmd := range fifth {
		switch {
		case strings.HasPrefix(cmd, "go run ./cmd/cpsguard status"):
			code, out := w.run(cmd, 30*time.Second)
			if code != 0 || !strings.Contains(out, "node example-1") || !strings.Contains(out, "dialer-1") {
				t.Errorf("%s: exit %d:\n%s", cmd, code, out)
			}
		case strings.HasPrefix(cmd, "curl -s "):
			// curl -s ADDR/metrics | grep -E 'RE'
			m := regexp.MustCompile(`^curl -s (\S+) \| grep -E '([^']+)'$`).FindStringSubmatch(w.remap.Replace(cmd))
			if m == nil {
				t.Fatalf("%s: not the curl | grep this test knows", cmd)
			}
			addr, _ := strings.CutPrefix(m[1], w.http)
			re := regexp.MustCompile(m[2])
			n := 0
			for _, l := range strings.Split(w.get(addr), "\n") {
				if re.MatchString(l) {
					n++
				}
			}
			if n == 0 {
				t.Errorf("%s: no line matches", cmd)
			}
		default:
			t.Errorf("README walkthrough: %q: no way to run it", cmd)
		}
	}

	t.Run("uac.xml header", func(t *testing.T) {
		cmd := scenarioCommands(t, "uac.xml")[0]
		if code, out := w.run(cmd, 60*time.Second); code != 0 {
			t.Errorf("%s: exit %d:\n%s", cmd, code, tail(out))
		}
	})
	t.Run("uac_customer.xml header", func(t *testing.T) {
		cmd := scenarioCommands(t, "uac_customer.xml")[0]
		before := w.metric(`cpsguard_admission_total{name="acme",result="admitted",scope="customer"}`)
		if code, out := w.run(cmd, 60*time.Second); code != 0 {
			t.Fatalf("%s: exit %d:\n%s", cmd, code, tail(out))
		}
		if after := w.metric(`cpsguard_admission_total{name="acme",result="admitted",scope="customer"}`); after <= before {
			t.Errorf("customer acme admitted %v before, %v after: the header did not name it", before, after)
		}
	})
	t.Run("uac_cancel.xml header", func(t *testing.T) {
		cmds := scenarioCommands(t, "uac_cancel.xml")
		if len(cmds) != 2 || !strings.Contains(cmds[0], "uas_ring.xml") {
			t.Fatalf("uac_cancel.xml header: %q, want the ringing carrier, then the caller", cmds)
		}
		w.stopKey("carrier-a")
		w.start("carrier-a", cmds[0])
		w.waitCarrierA()
		canceled := w.metric(`cpsguard_carrier_responses_total{carrier="carrier-a",class="4xx"}`)
		if code, out := w.run(cmds[1], 60*time.Second); code != 0 || sippCount(out, "Successful call") != 1 {
			t.Fatalf("%s: exit %d (want 200 to the CANCEL and 487 to the INVITE):\n%s", cmds[1], code, tail(out))
		}
		waitFor(t, "the carrier's 487", func() bool {
			return w.metric(`cpsguard_carrier_responses_total{carrier="carrier-a",class="4xx"}`) > canceled
		})
	})
	t.Run("uas_503.xml header", func(t *testing.T) {
		w.stopKey("carrier-a")
		w.start("carrier-a", scenarioCommands(t, "uas_503.xml")[0])
		w.waitCarrierA()
		failed := w.metric(`cpsguard_reroutes_total{carrier="carrier-a",reason="failed"}`)
		fwd := w.metric(`cpsguard_calls_total{outcome="forwarded",peer="dialer-1"}`)
		code, out := w.run(terminals[3], 90*time.Second)
		if code != 0 || sippCount(out, "Successful call") != 150 {
			t.Fatalf("%s against uas_503.xml: exit %d, want every call successful:\n%s", terminals[3], code, tail(out))
		}
		if w.metric(`cpsguard_reroutes_total{carrier="carrier-a",reason="failed"}`) <= failed {
			t.Errorf("no call moved past carrier-a's 503")
		}
		if w.metric(`cpsguard_calls_total{outcome="forwarded",peer="dialer-1"}`) <= fwd {
			t.Errorf("no call completed on carrier-b")
		}
	})
}
