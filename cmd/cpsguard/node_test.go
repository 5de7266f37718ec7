package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startNode runs `cpsguard serve` on a copy of the example configuration
// whose http.listen is a free loopback port (in the file, so --config finds
// it), and returns that address and the file.
func startNode(t *testing.T) (httpAddr, cfgPath string) {
	t.Helper()
	return startNodeEnv(t)
}

// startNodeEnv is startNode with env added to the node's environment.
func startNodeEnv(t *testing.T, env ...string) (httpAddr, cfgPath string) {
	t.Helper()
	httpAddr, cfgPath, _ = startNodeEdit(t, nil, env...)
	return httpAddr, cfgPath
}

// startNodeEdit is startNodeEnv on the example configuration as edit
// changes it (nil: as it is); it also returns the node's SIP address
// (UDP and TCP).
func startNodeEdit(t *testing.T, edit func([]byte) []byte, env ...string) (httpAddr, cfgPath, sipAddr string) {
	t.Helper()
	data, err := os.ReadFile("../../testdata/cpsguard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		data = edit(data)
	}
	httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	data = bytes.Replace(data, []byte("listen: 127.0.0.1:9060"), []byte("listen: "+httpAddr), 1)
	if !bytes.Contains(data, []byte(httpAddr)) {
		t.Fatal("example configuration: http.listen line not found")
	}
	cfgPath = filepath.Join(t.TempDir(), "cpsguard.yaml")
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sipPort := freePort(t)
	sipAddr = fmt.Sprintf("127.0.0.1:%d", sipPort)
	cmd := exec.Command(binary(t), "serve", "--config", cfgPath)
	cmd.Env = append(cleanEnv(), fmt.Sprintf("CPSGUARD_SIP_LISTEN=udp://127.0.0.1:%d,tcp://127.0.0.1:%d", sipPort, sipPort))
	cmd.Env = append(cmd.Env, env...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("cpsguard output:\n%s", out.String())
		}
	})
	return httpAddr, cfgPath, sipAddr
}

// `cpsguard probe` answers for /readyz by its exit code, and probe and
// status find the node from --addr, $CPSGUARD_HTTP_LISTEN, --config or
// $CPSGUARD_CONFIG.
func TestProbeAndStatusFindTheNode(t *testing.T) {
	closed := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := cpsguard(t, nil, "probe", "--addr", closed)
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach http://"+closed+": connection refused") {
		t.Errorf("probe of a stopped node: exit %d, stderr %q; want 1 and connection refused", r.code, r.stderr)
	}
	r = cpsguard(t, nil, "status", "--addr", closed)
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused") || strings.Contains(r.stderr, "deadline") {
		t.Errorf("status of a stopped node: exit %d, stderr %q; want 1 and connection refused", r.code, r.stderr)
	}
	r = cpsguard(t, nil, "probe", "--config", "does-not-exist.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("probe with a missing --config: exit %d, stderr %q; want 1 and the file error", r.code, r.stderr)
	}

	addr, cfgPath := startNode(t)
	waitFor(t, "cpsguard probe --config to succeed", func() bool {
		return cpsguard(t, nil, "probe", "--config", cfgPath).code == 0
	})
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"--addr", nil, []string{"--addr", "http://" + addr}},
		{"CPSGUARD_HTTP_LISTEN", []string{"CPSGUARD_HTTP_LISTEN=" + addr}, nil},
		{"--config", nil, []string{"--config", cfgPath}},
		{"CPSGUARD_CONFIG", []string{"CPSGUARD_CONFIG=" + cfgPath}, nil},
		// The environment wins over the file, as it does for serve.
		{"CPSGUARD_HTTP_LISTEN over --config", []string{"CPSGUARD_HTTP_LISTEN=" + addr}, []string{"--config", "../../testdata/cpsguard.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := cpsguard(t, tc.env, append([]string{"probe"}, tc.args...)...); r.code != 0 {
				t.Errorf("probe: exit %d, stderr %q; want 0", r.code, r.stderr)
			}
			r := cpsguard(t, tc.env, append([]string{"status"}, tc.args...)...)
			if r.code != 0 || !strings.Contains(r.stdout, "node example-1") || !strings.Contains(r.stdout, "CARRIERS") {
				t.Errorf("status: exit %d, stdout %q, stderr %q; want 0 and the table", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// `cpsguard status` shows a burst's token level and the extra windows of
// a live node: the example's dialer-2 (burst 10, 200 calls a minute) after
// one call it placed.
func TestStatusShowsTokensAndWindows(t *testing.T) {
	sipPort := freePort(t)
	_, cfgPath := startNodeEnv(t, fmt.Sprintf("CPSGUARD_SIP_LISTEN=udp://127.0.0.1:%d", sipPort))
	waitFor(t, "the node to be ready", func() bool { return cpsguard(t, nil, "probe", "--config", cfgPath).code == 0 })

	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	local := conn.LocalAddr().String()
	invite := "INVITE sip:18005550100@127.0.0.1 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP " + local + ";branch=z9hG4bK-status-1;rport\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:dialer@127.0.0.2>;tag=a1\r\nTo: <sip:18005550100@127.0.0.1>\r\n" +
		"Call-ID: status-1@127.0.0.2\r\nCSeq: 1 INVITE\r\nContact: <sip:dialer@" + local + ">\r\nContent-Length: 0\r\n\r\n"
	if _, err := conn.WriteToUDP([]byte(invite), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sipPort}); err != nil {
		t.Fatal(err)
	}
	var out string
	waitFor(t, "the call in dialer-2's minute window", func() bool {
		r := cpsguard(t, nil, "status", "--config", cfgPath)
		out = r.stdout
		return r.code == 0 && strings.Contains(out, "1m 1/200")
	})
	var row string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  dialer-2 ") {
			row = line
		}
	}
	if !strings.Contains(out, "TOKENS") || !regexp.MustCompile(` (9|10)/10 `).MatchString(row) {
		t.Errorf("status: want a TOKENS column with dialer-2 at 9 or 10 of 10 tokens (refilled at 5 a second), got\n%s", out)
	}
}
