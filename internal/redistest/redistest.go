package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one running redis-server owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string
	// confFile, when set, is passed first and the server runs as a sentinel.
	confFile string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// sbinDirs are where Require looks when a tool is not on PATH: Debian
// installs kamailio in /usr/sbin, which an ordinary user's PATH lacks.
var sbinDirs = []string{"/usr/local/sbin", "/usr/sbin", "/sbin"}

// Require returns the path of binary name, found on PATH or else in
// sbinDirs, skipping the test when it is missing, or failing it when
// CI=true.
func Require(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	for _, dir := range sbinDirs {
		if p, err := exec.LookPath(filepath.Join(dir, name)); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found in PATH (CI=true: a missing component is a failure; run ./scripts/install-deps.sh)", name)
	}
	t.Skipf("%s not found in PATH; run ./scripts/install-deps.sh", name)
	return ""
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs a private redis-server on a free loopback port with no
// persistence. extra arguments are appended to the command line (for example
// "--cluster-enabled", "yes"). The server is killed when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startOnFreePort(t, FreePort, extra...)
}

// startOnFreePort starts a server on a port pick gives, trying again on
// another (up to 5 times) when one does not come up: a port another
// process took between pick and bind, or a start slower than the deadline
// on a loaded machine.
func startOnFreePort(t testing.TB, pick func(testing.TB) int, extra ...string) *Server {
	t.Helper()
	bin := Require(t, "redis-server")
	s := &Server{t: t, bin: bin, args: extra}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s.port, s.dir = pick(t), t.TempDir() // a fresh dir: no state of a failed attempt
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

// StartOnPort runs a private redis-server on the given loopback port.
func StartOnPort(t testing.TB, port int, extra ...string) *Server {
	t.Helper()
	bin := Require(t, "redis-server")
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: extra, port: port}
	if err := s.start(); err != nil {
		t.Fatalf("redis-server on port %d did not start: %v", port, err)
	}
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start() error {
	logfile := filepath.Join(s.dir, "redis.log")
	var args []string
	if s.confFile != "" {
		// A sentinel: its config file first; it takes no persistence options.
		args = []string{s.confFile, "--sentinel", "--port", strconv.Itoa(s.port),
			"--daemonize", "no", "--logfile", logfile}
	} else {
		args = []string{
			"--port", strconv.Itoa(s.port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", s.dir,
			"--daemonize", "no",
			"--protected-mode", "no",
			"--loglevel", "warning",
			"--logfile", logfile,
		}
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited at start: %s", s.logTail())
		default:
		}
		if err := ping(s.Addr(), 200*time.Millisecond); err == nil {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("redis-server did not answer PING within 10s: %s", s.logTail())
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// ping sends an inline PING and waits for +PONG.
func ping(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir is the server's private working directory.
func (s *Server) Dir() string { return s.dir }

// Kill stops the server at once (SIGKILL) and waits for it to go away.
// Killing a stopped server is a no-op.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ping(s.Addr(), 50*time.Millisecond) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts the server again on the same port after Kill.
func (s *Server) Restart() {
	s.t.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redis-server restart on %s: %v", s.Addr(), err)
}

// Pause freezes the process (SIGSTOP): it keeps accepting TCP connections in
// the kernel but never answers, like a hung Redis.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume undoes Pause (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// CLI runs redis-cli against the server and returns its output.
func (s *Server) CLI(ctx context.Context, args ...string) (string, error) {
	bin, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", err
	}
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port)}, args...)
	out, err := exec.CommandContext(ctx, bin, full...).CombinedOutput()
	return string(out), err
}

// CommandCalls is how many times the server ran cmd since it started or
// its last CONFIG RESETSTAT (INFO commandstats; a subcommand as
// "script|load"). A failure to read it fails the test.
func (s *Server) CommandCalls(t testing.TB, cmd string) int {
	t.Helper()
	out, err := s.CLI(context.Background(), "INFO", "commandstats")
	if err != nil {
		t.Fatalf("redis-cli INFO commandstats: %v %s", err, out)
	}
	m := regexp.MustCompile(`cmdstat_` + regexp.QuoteMeta(cmd) + `:calls=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var netListen = func(addr string) (interface{ Close() error }, error) { return net.Listen("tcp", addr) }

// Forget makes the server forget everything, as a restart without
// persistence does, at once: FLUSHALL and SCRIPT FLUSH sent in one write,
// which Redis runs back to back (no other client's command between
// them), unlike two redis-cli calls. A failure fails the test.
func (s *Server) Forget(t testing.TB) {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("redistest: forget: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("FLUSHALL\r\nSCRIPT FLUSH\r\n")); err != nil {
		t.Fatalf("redistest: forget: %v", err)
	}
	r := bufio.NewReader(c)
	for range 2 {
		line, err := r.ReadString('\n')
		if err != nil || line != "+OK\r\n" {
			t.Fatalf("redistest: forget: reply %q, %v", line, err)
		}
	}
}
