package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeNotifiesAndDrains runs the node as systemd runs a Type=notify
// service: READY=1 arrives once the SIP and HTTP listeners are bound;
// `cpsguard drain` takes it out of service (readyz 503, SIP sockets closed,
// the process and its HTTP API still up); SIGTERM then sends STOPPING=1 and
// the process exits 0.
func TestServeNotifiesAndDrains(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	notifications, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notifications.Close()
	next := func(what string) string {
		t.Helper()
		notifications.SetReadDeadline(time.Now().Add(15 * time.Second))
		b := make([]byte, 4096)
		n, err := notifications.Read(b)
		if err != nil {
			t.Fatalf("waiting for %s from the node: %v", what, err)
		}
		return string(b[:n])
	}

	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sipPort := freePort(t)
	cmd := exec.Command(binary(t), "serve", "--config", "../../testdata/cpsguard.yaml")
	const token = "notify-test-token"
	cmd.Env = append(cleanEnv(), "NOTIFY_SOCKET="+sock, "CPSGUARD_HTTP_LISTEN="+httpAddr, "CPSGUARD_HTTP_TOKEN="+token,
		fmt.Sprintf("CPSGUARD_SIP_LISTEN=udp://127.0.0.1:%d,tcp://127.0.0.1:%d", sipPort, sipPort))
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
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
			t.Logf("cpsguard output:\n%s", out.String())
		}
	}()

	if got := next("READY=1"); !strings.HasPrefix(got, "READY=1\nSTATUS=serving SIP on ") {
		t.Fatalf("first notification %q, want READY=1 and a STATUS", got)
	}
	// READY means bound: the SIP port is taken, and HTTP answers at once.
	sipUDP := fmt.Sprintf("127.0.0.1:%d", sipPort)
	if pc, err := net.ListenPacket("udp", sipUDP); err == nil {
		pc.Close()
		t.Error("READY=1 before the SIP UDP socket was bound")
	}
	client := &http.Client{Timeout: 5 * time.Second}
	status := func(path string) int {
		resp, err := client.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := status("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after READY=1: %d, want 200", code)
	}

	// The preStop hook's command.
	r := cpsguard(t, nil, "drain", "--addr", httpAddr, "--token", token, "--timeout", "20s")
	if r.code != 0 || !strings.Contains(r.stdout, "drained") {
		t.Fatalf("cpsguard drain: exit %d, stdout %q, stderr %q; want 0 and drained", r.code, r.stdout, r.stderr)
	}
	if got := next("the drain's STATUS"); got != "STATUS=draining (api)" {
		t.Errorf("notification on drain %q, want STATUS=draining (api) (no STOPPING=1: systemd would stop the unit)", got)
	}
	if code := status("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after drain: %d, want 503", code)
	}
	if code := status("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after drain: %d, want 200 (the process stays until stopped)", code)
	}
	pc, err := net.ListenPacket("udp", sipUDP)
	if err != nil {
		t.Errorf("SIP UDP socket still bound after drain: %v", err)
	} else {
		pc.Close()
	}
	// Draining again is harmless and immediate.
	if r := cpsguard(t, nil, "drain", "--addr", httpAddr, "--token", token, "--timeout", "20s"); r.code != 0 {
		t.Errorf("second drain: exit %d, %s", r.code, r.stderr)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := next("STOPPING=1"); !strings.HasPrefix(got, "STOPPING=1") {
		t.Errorf("notification on SIGTERM %q, want STOPPING=1", got)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20s of SIGTERM")
	}
	_ = os.Remove(sock)
}
