package main

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/httpapi"
)

// statusNode serves a node's operations API in the test process.
func statusNode(t *testing.T) string {
	t.Helper()
	cfg, err := config.Load("../../testdata/cpsguard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Config: func() *config.Config { return cfg }}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// watchFrames runs `cpsguard status --watch` with stdout on out until read
// says it has shown two tables (bounded by 15 s), then interrupts it.
func watchFrames(t *testing.T, addr string, out *os.File, read func() string) string {
	t.Helper()
	cmd := exec.Command(binary(t), "status", "--watch", "--addr", addr)
	cmd.Env = cleanEnv()
	cmd.Stdout = out
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	var got string
	for {
		got = read()
		if strings.Count(got, "node example-1") >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("status --watch after SIGINT: %v (stderr %q)", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Error("status --watch did not stop on SIGINT")
	}
	if n := strings.Count(got, "node example-1"); n < 2 {
		t.Fatalf("got %d tables within 15s, want 2:\n%q", n, got)
	}
	return got
}

// To a pipe or a file, --watch writes plain tables one after another: no
// screen codes for a log or `| tee` to choke on.
func TestStatusWatchPlainWhenNotATerminal(t *testing.T) {
	addr := statusNode(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var buf syncBuffer
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			buf.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	got := watchFrames(t, addr, w, buf.String)
	w.Close()
	if strings.Contains(got, "\x1b") {
		t.Errorf("output to a pipe has escape codes:\n%q", got)
	}
	if !strings.Contains(got, "--- ") {
		t.Errorf("plain frames are not separated by a --- line:\n%s", got)
	}
}

// openPTY opens a pseudo-terminal pair: the master to read, the slave to
// give the command as its stdout.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		m.Close()
		t.Skipf("unlockpt: %v", e)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Skipf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open pts: %v", err)
	}
	return m, s
}

// On a terminal, --watch redraws the screen in place.
func TestStatusWatchClearsATerminal(t *testing.T) {
	addr := statusNode(t)
	master, slave := openPTY(t)
	defer master.Close()
	var buf syncBuffer
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			buf.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	got := watchFrames(t, addr, slave, buf.String)
	slave.Close()
	if !bytes.Contains([]byte(got), []byte(httpapi.ClearScreen)) {
		t.Errorf("output to a terminal has no clear-screen code:\n%q", got)
	}
}
