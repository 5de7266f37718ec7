package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/testlog"
)

const testVersion = "v0.0.0-test"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds cpsguard once for all tests, with a version stamped the way
// the Makefile does.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cpsguard-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "cpsguard")
		out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

// cpsguard runs the built binary with args and env (on top of a clean
// CPSGUARD_-free environment) and bounded time.
func cpsguard(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("cpsguard %v did not finish within 30s", args)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, stdout.String(), stderr.String()}
}

// cleanEnv is the test's environment without CPSGUARD_ variables, so a
// developer's settings cannot change the outcome.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CPSGUARD_") {
			env = append(env, kv)
		}
	}
	return env
}

func TestCheckExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		wantOut  []string // in stdout
		wantErr  []string // in stderr
	}{
		{
			name:     "valid",
			args:     []string{"check", "--config", "../../testdata/cpsguard.yaml"},
			wantCode: 0,
			wantOut:  []string{"OK", "peers (2):", "carriers (2):", "routes (2):", "store: in-process"},
		},
		{
			name:     "valid via CPSGUARD_CONFIG",
			env:      []string{"CPSGUARD_CONFIG=../../testdata/cpsguard.yaml"},
			args:     []string{"check"},
			wantCode: 0,
			wantOut:  []string{"OK"},
		},
		{
			name:     "invalid: every error, one per line",
			args:     []string{"check", "--config", "../../testdata/config/bad_many.yaml"},
			wantCode: 1,
			wantErr: []string{
				// Each error starts with its place, FILE:LINE:COLUMN, as
				// compilers and CI annotations write them.
				"\n../../testdata/config/bad_many.yaml:27:56: carriers[1].cps: must be > 0 (got -3)\n",
				"\n../../testdata/config/bad_many.yaml:26:59: carriers[0].max_wiat: unknown key (did you mean \"max_wait\"?)\n",
				"\n../../testdata/config/bad_many.yaml:29:24: routes.default[1]: unknown carrier \"carrier-x\"\n",
				"23 error(s)",
			},
		},
		{
			name:     "invalid value from the environment",
			env:      []string{"CPSGUARD_HTTP_LISTEN=nowhere"},
			args:     []string{"check", "--config", "../../testdata/cpsguard.yaml"},
			wantCode: 1,
			wantErr:  []string{"\nCPSGUARD_HTTP_LISTEN (http.listen): must be host:port (got \"nowhere\")\n"},
		},
		{
			name:     "unknown environment variable",
			env:      []string{"CPSGUARD_HTTP_LISTN=127.0.0.1:9191"},
			args:     []string{"check", "--config", "../../testdata/cpsguard.yaml"},
			wantCode: 1,
			wantErr:  []string{"\nCPSGUARD_HTTP_LISTN: unknown environment variable: it sets no configuration key (did you mean \"CPSGUARD_HTTP_LISTEN\"?)\n"},
		},
		{
			name:     "YAML syntax error on its line",
			args:     []string{"check", "--config", "../../testdata/config/bad_yaml_indent.yaml"},
			wantCode: 1,
			wantErr:  []string{"\n../../testdata/config/bad_yaml_indent.yaml:7: invalid YAML: line 7: "},
		},
		{
			name:     "missing file",
			args:     []string{"check", "--config", "does-not-exist.yaml"},
			wantCode: 1,
			wantErr:  []string{"cannot read file: open does-not-exist.yaml: no such file or directory"},
		},
		{
			name:     "stray argument",
			args:     []string{"check", "--config", "../../testdata/cpsguard.yaml", "extra"},
			wantCode: 2,
			wantErr:  []string{"unexpected argument \"extra\""},
		},
		{
			name:     "unknown flag",
			args:     []string{"check", "--confg", "x"},
			wantCode: 2,
			wantErr:  []string{"flag provided but not defined: -confg"},
		},
		{name: "no arguments", args: nil, wantCode: 2, wantErr: []string{"Usage:", "check", "serve", "version"}},
		{name: "unknown command", args: []string{"frobnicate"}, wantCode: 2, wantErr: []string{`unknown command "frobnicate"`, "Usage:"}},
		{name: "help", args: []string{"help"}, wantCode: 0, wantOut: []string{"Usage:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cpsguard(t, tt.env, tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d\nstdout: %s\nstderr: %s", r.code, tt.wantCode, r.stdout, r.stderr)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
				}
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}

// TestEveryCommandHelp: every subcommand's -h exits 0 and says how to
// call it, under its own name (version said only "Usage of version:").
func TestEveryCommandHelp(t *testing.T) {
	for name := range commands {
		for _, args := range [][]string{{name, "-h"}, {"help", name}} {
			r := cpsguard(t, nil, args...)
			if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "cpsguard "+name) {
				t.Errorf("%q: exit %d, want 0 and a usage naming \"cpsguard %s\":\n%s%s", args, r.code, name, r.stdout, r.stderr)
			}
		}
	}
	if r := cpsguard(t, nil, "help", "nosuch"); r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "nosuch"`) {
		t.Errorf("help nosuch: exit %d, want %d and the unknown command named:\n%s", r.code, exitUsage, r.stderr)
	}
	// A command with flags of its own lists them (calls had only its text).
	if r := cpsguard(t, nil, "calls", "-h"); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "-peer") {
		t.Errorf("calls -h: exit %d, want 0 and its flags:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// -h never shows the token of $CPSGUARD_HTTP_TOKEN: the --token flags took
// it as their default and printed it, `(default "…")`.
func TestHelpHidesToken(t *testing.T) {
	env := []string{"CPSGUARD_HTTP_TOKEN=token-should-not-show"}
	for _, args := range [][]string{{"limit", "-h"}, {"limit", "set", "-h"}, {"carrier", "-h"}, {"carrier", "out", "-h"}, {"calls", "-h"}, {"drain", "-h"}} {
		r := cpsguard(t, env, args...)
		if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "-token") || strings.Contains(r.stdout+r.stderr, "should-not-show") {
			t.Errorf("%q: exit %d, want 0 and --token listed without its value:\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestCheckHidesSecrets(t *testing.T) {
	r := cpsguard(t, []string{
		"CPSGUARD_STORE_REDIS_ADDRS=127.0.0.1:6379",
		"CPSGUARD_STORE_REDIS_PASSWORD=pw-should-not-show",
		"CPSGUARD_HTTP_TOKEN=token-should-not-show",
	}, "check", "--config", "../../testdata/cpsguard.yaml")
	if r.code != 0 {
		t.Fatalf("exit code %d: %s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "should-not-show") {
		t.Errorf("check output shows a secret:\n%s%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "(password set)") || !strings.Contains(r.stdout, "(token set)") {
		t.Errorf("check output should say the secrets are set:\n%s", r.stdout)
	}
}

// TestCheckWarns: a valid but weak configuration passes (exit 0) with one
// "warning:" line per finding.
func TestCheckWarns(t *testing.T) {
	r := cpsguard(t, []string{"CPSGUARD_HTTP_LISTEN=0.0.0.0:9090", "CPSGUARD_STORE_REDIS_ADDRS=127.0.0.1:6379"},
		"check", "--config", "../../testdata/cpsguard.yaml")
	if r.code != 0 {
		t.Fatalf("exit code %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"warning: http.token: not set while http.listen 0.0.0.0:9090", "warning: sip.dialog_secret: not set with store.redis"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, r.stdout)
		}
	}
	// docs/api.md shows these lines exactly as the binary prints them.
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.HasPrefix(line, "warning: ") && !strings.Contains(string(doc), "\n"+line+"\n") {
			t.Errorf("docs/api.md does not show the warning as printed:\n%s", line)
		}
	}

	// --quiet: the warnings only (ExecReload's journal lines).
	q := cpsguard(t, []string{"CPSGUARD_HTTP_LISTEN=0.0.0.0:9090", "CPSGUARD_STORE_REDIS_ADDRS=127.0.0.1:6379"},
		"check", "--quiet", "--config", "../../testdata/cpsguard.yaml")
	for _, line := range strings.Split(strings.TrimSpace(q.stdout), "\n") {
		if !strings.HasPrefix(line, "warning: ") {
			t.Errorf("check --quiet printed %q; want warning lines only", line)
		}
	}
	if q.code != 0 || strings.Count(q.stdout, "warning: ") != 2 {
		t.Errorf("check --quiet: exit %d, stdout %q; want 0 and the two warnings", q.code, q.stdout)
	}
	bad := cpsguard(t, nil, "check", "--quiet", "--config", "../../testdata/config/bad_cps_zero.yaml")
	if bad.code != 1 || !strings.Contains(bad.stderr, "peers[0].cps: must be > 0") {
		t.Errorf("check --quiet of a bad file: exit %d, stderr %q; want 1 and the error", bad.code, bad.stderr)
	}
}

// TestVersionFlag: --version prints what the version command prints.
func TestVersionFlag(t *testing.T) {
	a, b := cpsguard(t, nil, "version"), cpsguard(t, nil, "--version")
	if a.code != 0 || b.code != 0 || a.stdout != b.stdout || !strings.Contains(b.stdout, "cpsguard "+testVersion) {
		t.Errorf("--version: exit %d, %q; want the version command's output %q", b.code, b.stdout, a.stdout)
	}
}

func TestVersion(t *testing.T) {
	r := cpsguard(t, nil, "version")
	if r.code != 0 {
		t.Fatalf("exit code %d: %s", r.code, r.stderr)
	}
	for _, w := range []string{"cpsguard " + testVersion + "\n", "commit: ", "go: " + runtime.Version() + "\n"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("version output lacks %q:\n%s", w, r.stdout)
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a buffer safe for the process's writer and the test.
type syncBuffer = testlog.Buffer

// waitFor polls cond every 50ms for at most 30s: a bound on a hang, not
// on speed (a node starting while make test builds and runs the other
// packages with -race once took more than 10s to answer its first probe,
// TestWalkthrough in a fresh-clone CI run).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 30s waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServe starts the built binary on a copy of the example config with
// free ports (from the environment), checks /healthz, reloads with SIGHUP,
// and stops it with SIGTERM: exit 0.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "cpsguard.yaml")
	data, err := os.ReadFile("../../testdata/cpsguard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sipPort := freePort(t)

	cmd := exec.Command(binary(t), "serve", "--config", cfgPath)
	cmd.Env = append(cleanEnv(),
		"CPSGUARD_HTTP_LISTEN="+httpAddr,
		fmt.Sprintf("CPSGUARD_SIP_LISTEN=udp://127.0.0.1:%d,tcp://127.0.0.1:%d", sipPort, sipPort),
		"CPSGUARD_LOG_FORMAT=json",
	)
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("cpsguard output:\n%s", stderr.String())
		}
	}()

	client := &http.Client{Timeout: 2 * time.Second}
	waitFor(t, "/healthz to answer 200", func() bool {
		resp, err := client.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// A valid change, reloaded on SIGHUP (the watcher may get there first:
	// either way one "config reloaded" appears).
	edited := strings.Replace(string(data), "cps: 50", "cps: 60", 1)
	if err := os.WriteFile(cfgPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a config reload", func() bool { return strings.Contains(stderr.String(), `"msg":"config reloaded"`) })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("exit after SIGTERM: got %v, want status 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("cpsguard did not exit within 15s of SIGTERM")
	}
	if out := stderr.String(); !strings.Contains(out, `"msg":"cpsguard stopped"`) {
		t.Errorf("no clean-stop log line:\n%s", out)
	}
}

func TestServeBadConfig(t *testing.T) {
	r := cpsguard(t, nil, "serve", "--config", "../../testdata/config/bad_cps_zero.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "peers[0].cps: must be > 0 (got 0)") {
		t.Errorf("got exit %d, stderr %q; want 1 and the error", r.code, r.stderr)
	}
	// serve reports a bad file as check does, each error after its place
	// (an operator who ran one knows how to read the other).
	for _, file := range []string{"bad_many.yaml", "bad_yaml_indent.yaml", "does-not-exist.yaml"} {
		path := "../../testdata/config/" + file
		serve := cpsguard(t, nil, "serve", "--config", path)
		check := cpsguard(t, nil, "check", "--config", path)
		if serve.code != 1 || check.code != 1 {
			t.Errorf("%s: exit serve %d, check %d; want 1 from both", file, serve.code, check.code)
		}
		if want := strings.ReplaceAll(check.stderr, "cpsguard check:", "cpsguard serve:"); serve.stderr != want {
			t.Errorf("%s: serve wrote\n%s\ncheck wrote\n%s", file, serve.stderr, check.stderr)
		}
	}
	if r := cpsguard(t, nil, "serve", "--config", "../../testdata/config/bad_many.yaml"); !strings.Contains(r.stderr,
		"\n../../testdata/config/bad_many.yaml:27:56: carriers[1].cps: must be > 0 (got -3)\n") {
		t.Errorf("serve's errors have no FILE:LINE:COLUMN place:\n%s", r.stderr)
	}
}

func TestServeHTTPPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := cpsguard(t, []string{"CPSGUARD_HTTP_LISTEN=" + ln.Addr().String()}, "serve", "--config", "../../testdata/cpsguard.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("got exit %d, stderr %q; want 1 and 'address already in use'", r.code, r.stderr)
	}
}

// A SIP port in use stops the node with the proxy's own error, named once
// ("sip: listen …", never "sip: sip: listen …").
func TestServeSIPPortInUse(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	r := cpsguard(t, []string{"CPSGUARD_SIP_LISTEN=udp://" + pc.LocalAddr().String(),
		"CPSGUARD_HTTP_LISTEN=127.0.0.1:" + strconv.Itoa(freePort(t))}, "serve", "--config", "../../testdata/cpsguard.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, `error="sip: listen`) || strings.Contains(r.stderr, "sip: sip:") {
		t.Errorf("got exit %d, stderr %q; want 1 and one 'sip: listen' error", r.code, r.stderr)
	}
}
