package procs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FreeUDP returns a UDP port on 127.0.0.1 that was free a moment ago and
// whose TCP twin was free too (cpsguard and SIPp may bind both).
func FreeUDP() int {
	for {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		p := u.LocalAddr().(*net.UDPAddr).Port
		t, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		u.Close()
		if err == nil {
			t.Close()
			return p
		}
	}
}

// FreeTCP returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreeTCP() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Proc is one started process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // combined stdout/stderr file
	done chan struct{}
	err  error
}

// Start runs name with args, output to logPath.
func Start(name, logPath string, args ...string) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: filepath.Base(name), Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group it leads, then SIGKILL after
// grace.
func (p *Proc) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
	}
}

// Wait waits for the process to end, at most d; false on timeout.
func (p *Proc) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Tail returns the last n lines of the process log.
func (p *Proc) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RSS returns the resident set size of pid in bytes (VmRSS).
func RSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// CPUTime returns user+system CPU seconds used so far by pid.
func CPUTime(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// Redis is a private redis-server.
type Redis struct {
	*Proc
	Addr string
}

// StartRedis runs redis-server on a free loopback port, no persistence.
func StartRedis(dir string) (*Redis, error) {
	port := FreeTCP()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p, err := Start("redis-server", filepath.Join(dir, "redis.log"),
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no")
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := waitTCP(addr, 5*time.Second); err != nil {
		p.Stop(time.Second)
		return nil, fmt.Errorf("redis-server: %w\n%s", err, p.Tail(10))
	}
	return &Redis{Proc: p, Addr: addr}, nil
}

func waitTCP(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kamailio is a running kamailio relay.
type Kamailio struct {
	*Proc
	Addr string
}

// KamailioOptions select the relay variant.
type KamailioOptions struct {
	Config    string // bench/kamailio/relay.cfg
	Dir       string // run dir (logs, pid)
	Dest      string // sip:host:port of the carrier
	Pipelimit int    // > 0: pl_check TAILDROP at this limit per second
}

// StartKamailio runs kamailio in the foreground on a free UDP port, as
// issue 7 asks: -x tlsf -m 2048 -DD -E.
func StartKamailio(o KamailioOptions) (*Kamailio, error) {
	if _, err := exec.LookPath("kamailio"); err != nil {
		return nil, errors.New("kamailio not found: apt-get install kamailio (bench scripts do this)")
	}
	port := FreeUDP()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"-f", o.Config, "-x", "tlsf", "-m", "2048", "-DD", "-E",
		"-l", "udp:" + addr, "-A", `DEST="` + o.Dest + `"`,
		"-Y", o.Dir, "-P", filepath.Join(o.Dir, "kamailio.pid"), "-w", o.Dir}
	if o.Pipelimit > 0 {
		args = append(args, "-A", "WITH_PIPELIMIT", "-A", "PL_LIMIT="+strconv.Itoa(o.Pipelimit))
	}
	p, err := Start("kamailio", filepath.Join(o.Dir, "kamailio.log"), args...)
	if err != nil {
		return nil, err
	}
	// Ready when it answers OPTIONS... kamailio relays OPTIONS to DEST; a
	// short settle is simpler and enough for a foreground start.
	time.Sleep(700 * time.Millisecond)
	if p.Exited() {
		return nil, fmt.Errorf("kamailio exited at start:\n%s", p.Tail(20))
	}
	return &Kamailio{Proc: p, Addr: addr}, nil
}

// Cpsguard is a running cpsguard node.
type Cpsguard struct {
	*Proc
	SIP  string // host:port (UDP)
	HTTP string // host:port
}

// CpsguardOptions describe a one-peer, one-carrier node.
type CpsguardOptions struct {
	Bin        string
	Dir        string
	Redis      string  // "" = in-process store
	PeerCPS    float64 // admission limit of the peer
	CarrierCPS float64
	MaxWait    time.Duration
	Carrier    string // host:port of the carrier (UDP)
	// RedisTimeout is store.redis.timeout; 0 = 200ms.
	RedisTimeout time.Duration
	// LogLevel is log.level; "" = error.
	LogLevel string
	// NoProbe turns the carrier's OPTIONS probing (and passive down
	// marking) off.
	NoProbe bool
	// MaxInflight is sip.max_inflight; 0 leaves it out of the file (the
	// node's default, and a binary that predates the key accepts it).
	MaxInflight int
}

// StartCpsguard writes a config for o and runs `cpsguard serve`, returning
// once /readyz answers 200.
func StartCpsguard(o CpsguardOptions) (*Cpsguard, error) {
	sipPort, httpPort := FreeUDP(), FreeTCP()
	if o.MaxInflight == 0 {
		// cpsbench -node-max-inflight, for every experiment at once.
		o.MaxInflight, _ = strconv.Atoi(os.Getenv("CPSBENCH_MAX_INFLIGHT"))
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	store := "store:\n  key_prefix: bench\n  on_error: reject\n"
	if o.Redis != "" {
		timeout := o.RedisTimeout
		if timeout <= 0 {
			timeout = 200 * time.Millisecond
		}
		store = fmt.Sprintf("store:\n  redis: {addrs: [%s], timeout: %s}\n  key_prefix: bench\n  on_error: reject\n", o.Redis, timeout)
	}
	probe := ""
	if o.NoProbe {
		probe = ", probe: {interval: 0s}"
	}
	if by := os.Getenv("CPSBENCH_SHARE_BY"); by != "" {
		// cpsbench -node-share-by (a binary that predates the key gets
		// none of it unless asked).
		probe += ", share_by: " + by
	}
	inflight := ""
	if o.MaxInflight > 0 {
		inflight = fmt.Sprintf("  max_inflight: %d\n", o.MaxInflight)
	}
	level := o.LogLevel
	if level == "" {
		level = "error"
	}
	cfg := fmt.Sprintf(`# written by bench/ for one run
node_id: bench-1
sip:
  listen: [udp://127.0.0.1:%d]
  record_route: true
  unknown_source: reject
  reject: {code: 503, reason: CPS Limit Exceeded, retry_after: 0s}
%s%shttp:
  listen: 127.0.0.1:%d
log: {level: %s, format: text}
shadow: false
peers:
  - {name: caller, sources: [127.0.0.0/8], cps: %g, customer: bench, customers: [bench]}
customers:
  - {name: bench, cps: %g}
carriers:
  - {name: carrier, uri: "sip:%s", cps: %g, max_wait: %s%s}
routes:
  default: [carrier]
`, sipPort, inflight, store, httpPort, level, o.PeerCPS, o.PeerCPS, o.Carrier, o.CarrierCPS, o.MaxWait, probe)
	cfgPath := filepath.Join(o.Dir, "cpsguard.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	p, err := Start(o.Bin, filepath.Join(o.Dir, "cpsguard.log"), "serve", "--config", cfgPath)
	if err != nil {
		return nil, err
	}
	c := &Cpsguard{Proc: p, SIP: "127.0.0.1:" + strconv.Itoa(sipPort), HTTP: "127.0.0.1:" + strconv.Itoa(httpPort)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p.Exited() {
			return nil, fmt.Errorf("cpsguard exited at start:\n%s", p.Tail(20))
		}
		r, err := http.Get("http://" + c.HTTP + "/readyz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return c, nil
			}
		}
		if time.Now().After(deadline) {
			p.Stop(time.Second)
			return nil, fmt.Errorf("cpsguard not ready in 10 s:\n%s", p.Tail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Metric returns the sum of every sample of a Prometheus metric family
// (name, optionally with a label filter substring) from /metrics.
func (c *Cpsguard) Metric(ctx context.Context, name, filter string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.HTTP+"/metrics", nil)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer r.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || !strings.HasPrefix(l, name) {
			continue
		}
		rest := l[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if filter != "" && !strings.Contains(rest, filter) {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("metric %s%s not found", name, filter)
	}
	return sum, nil
}

// Scrape returns the whole /metrics text.
func (c *Cpsguard) Scrape() string {
	r, err := http.Get("http://" + c.HTTP + "/metrics")
	if err != nil {
		return ""
	}
	defer r.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String()
}
