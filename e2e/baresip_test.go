//go:build linux

package e2e

// Interop with a real user agent: baresip (Debian's baresip-core), a
// softphone as operators' customers run them, places calls through a node
// to a second baresip that answers them as the carrier. Unlike SIPp it
// keeps real dialog state: it sends its ACK and BYE along the Route set the
// node recorded, to the Contact the far end gave, and it checks the answers
// it gets to them.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// baresip is one baresip process: a single account without registration,
// its SIP trace and log in logPath, driven through its UDP console (the
// cons module: one command a datagram, the answer in the reply).
type baresip struct {
	t       *testing.T
	addr    string // ip:port of its SIP socket (UDP)
	cons    string // ip:port of its console
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// startBaresip runs baresip on ip as sip:user@ip:port (a free port),
// answering calls at once when answer is set. Audio is a generated tone
// (ausine) in Opus, played to /dev/null: no sound device is needed. Its
// media go to the address baresip picks on the host (the kernel keeps
// them on the box). Without baresip in PATH the test skips, except under
// CI=true, where it fails. extra are more lines of its configuration
// ("sip_certificate FILE": it then serves TLS on its port + 1).
func startBaresip(t *testing.T, name, ip, user string, answer bool, extra ...string) *baresip {
	t.Helper()
	bin := redistest.Require(t, "baresip")
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	mode := "manual"
	if answer {
		mode = "auto"
	}
	tls := false
	for _, l := range extra {
		tls = tls || strings.HasPrefix(l, "sip_certificate ")
	}
	requireHostAddress(t)
	var last string
	for attempt := 0; attempt < 3; attempt++ {
		port, consPort := baresipPort(t, ip, tls), redistest.FreePort(t)
		b := &baresip{t: t, addr: net.JoinHostPort(ip, strconv.Itoa(port)), cons: net.JoinHostPort(ip, strconv.Itoa(consPort)),
			logPath: filepath.Join(dir, fmt.Sprintf("baresip-%d.log", attempt)), exited: make(chan struct{})}
		conf := strings.Join([]string{
			"poll_method epoll",
			"sip_listen " + b.addr,
			"audio_player aufile,/dev/null",
			"audio_source ausine,440",
			"audio_alert aufile,/dev/null",
			"module_path " + baresipModules(t),
			"module opus.so",
			"module ausine.so",
			"module aufile.so",
			"module cons.so",
			"module_app account.so",
			"module_app menu.so",
			"cons_listen " + b.cons,
		}, "\n") + "\n" + strings.Join(extra, "\n") + "\n"
		account := fmt.Sprintf("<sip:%s@%s>;regint=0;answermode=%s;audio_codecs=opus/48000/2\n", user, b.addr, mode)
		if err := os.WriteFile(filepath.Join(dir, "config"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "accounts"), []byte(account), 0o600); err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(b.logPath)
		if err != nil {
			t.Fatal(err)
		}
		b.cmd = exec.Command(bin, "-f", dir, "-s")
		b.cmd.Dir = dir
		b.cmd.Stdout, b.cmd.Stderr = logf, logf
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := b.cmd.Start(); err != nil {
			t.Fatalf("start baresip: %v", err)
		}
		go func() {
			_ = b.cmd.Wait()
			logf.Close()
			close(b.exited)
		}()
		if waitUDPBound(b.addr, b.exited, 10*time.Second) && waitUDPBound(b.cons, b.exited, 5*time.Second) &&
			(!tls || waitListening(b.tlsAddr(), 5*time.Second)) {
			t.Cleanup(b.stop)
			return b
		}
		last = b.logTail()
		b.kill()
	}
	t.Fatalf("baresip %s did not start:\n%s", name, last)
	return nil
}

// requireHostAddress: baresip 1.0 opens its SIP sockets only when the host
// has an IPv4 address besides loopback (its "Local network address"),
// whatever sip_listen says, and sends its media there (the kernel keeps
// them on the box). Without one the test skips, except under CI=true,
// where it fails.
func requireHostAddress(t *testing.T) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return
			}
		}
	}
	msg := fmt.Sprintf("baresip needs an IPv4 address of the host besides loopback for its SIP sockets (%v)", err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// baresipPort is a free SIP port on ip, and with tls the next one free
// for TCP too (baresip serves TLS on its SIP port + 1).
func baresipPort(t *testing.T, ip string, tls bool) int {
	t.Helper()
	for range 50 {
		p := freeSIPPort(t)
		if !tls {
			return p
		}
		if l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p+1))); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no SIP port free with the next one free")
	return 0
}

// waitUDPBound reports whether a UDP socket is bound to addr (IPv4)
// within limit, as /proc/net/udp lists them (false as soon as exited
// closes). It looks without binding the address itself, which would make
// the process's own bind fail if both came at once.
func waitUDPBound(addr string, exited <-chan struct{}, limit time.Duration) bool {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return false
	}
	ip := ap.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port())
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		data, _ := os.ReadFile("/proc/net/udp")
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] == want {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// tlsAddr is where baresip serves SIP over TLS (with sip_certificate):
// its SIP port + 1.
func (b *baresip) tlsAddr() string {
	host, port, _ := net.SplitHostPort(b.addr)
	p, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(p+1))
}

// waitListening reports whether a TCP connection to addr succeeds within
// limit.
func waitListening(addr string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// baresipModules is the directory of baresip's modules.
func baresipModules(t *testing.T) string {
	for _, d := range []string{"/usr/lib/baresip/modules", "/usr/local/lib/baresip/modules"} {
		if _, err := os.Stat(filepath.Join(d, "cons.so")); err == nil {
			return d
		}
	}
	t.Fatal("baresip's modules (cons.so) not found")
	return ""
}

// do sends one console command ("/dial sip:…", "/hangup") and returns
// baresip's reply.
func (b *baresip) do(command string) string {
	b.t.Helper()
	c, err := net.Dial("udp", b.cons)
	if err != nil {
		b.t.Fatalf("baresip console: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(command + "\n")); err != nil {
		b.t.Fatalf("baresip console: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		b.t.Fatalf("baresip %s: no answer to %q: %v\n%s", b.addr, command, err, b.logTail())
	}
	return string(buf[:n])
}

// send sends one console command without waiting for baresip's reply.
func (b *baresip) send(command string) {
	b.t.Helper()
	c, err := net.Dial("udp", b.cons)
	if err != nil {
		b.t.Fatalf("baresip console: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(command + "\n")); err != nil {
		b.t.Fatalf("baresip console: %v", err)
	}
}

// stop quits baresip (hanging up its calls), killing it if it lingers.
func (b *baresip) stop() {
	if c, err := net.Dial("udp", b.cons); err == nil {
		_, _ = c.Write([]byte("/quit\n"))
		c.Close()
	}
	select {
	case <-b.exited:
	case <-time.After(3 * time.Second):
		b.kill()
	}
}

func (b *baresip) kill() {
	_ = b.cmd.Process.Kill()
	<-b.exited
}

// logTail is the end of baresip's log (its SIP trace), for failure
// messages.
func (b *baresip) logTail() string { return fileTail(b.logPath, 6000) }

// received counts the requests of method baresip's SIP trace shows it
// received, and how many of them came through via (a Via of that
// sent-by on the request, over any transport). The trace puts "UDP from
// -> to" (TCP, TLS) before each message, sent and received.
func (b *baresip) received(method, via string) (all, through int) {
	data, _ := os.ReadFile(b.logPath)
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(string(data), "\r\n", "\n")))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	in, start, seen := false, false, false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case (strings.HasPrefix(l, "UDP ") || strings.HasPrefix(l, "TCP ") || strings.HasPrefix(l, "TLS ")) && strings.Contains(l, " -> "):
			in, start, seen = strings.HasSuffix(l, " -> "+b.addr) || strings.HasSuffix(l, " -> "+b.tlsAddr()), true, false
		case start:
			start = false
			if in && strings.HasPrefix(l, method+" sip:") {
				all++
				seen = true
			}
		case seen && l == "":
			seen = false
		case seen && strings.HasPrefix(l, "Via: SIP/2.0/") && strings.Contains(l, " "+via+";"):
			through++
			seen = false
		}
	}
	return all, through
}

// answers returns the status codes of the responses to method baresip's
// SIP trace shows it sent, in order.
func (b *baresip) answers(method string) []int {
	data, _ := os.ReadFile(b.logPath)
	var codes []int
	out, start, code := false, false, 0
	for _, l := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") {
		switch {
		case (strings.HasPrefix(l, "UDP ") || strings.HasPrefix(l, "TCP ") || strings.HasPrefix(l, "TLS ")) && strings.Contains(l, " -> "):
			out = strings.HasPrefix(l[4:], b.addr+" ") || strings.HasPrefix(l[4:], b.tlsAddr()+" ")
			start, code = true, 0
		case start:
			start = false
			if f := strings.Fields(l); out && len(f) > 1 && f[0] == "SIP/2.0" {
				code, _ = strconv.Atoi(f[1])
			}
		case code != 0 && strings.HasPrefix(l, "CSeq: "):
			if f := strings.Fields(l); len(f) == 3 && f[2] == method {
				codes = append(codes, code)
			}
			code = 0
		}
	}
	return codes
}

// traced reports whether baresip's SIP trace shows a message over proto
// (UDP, TCP, TLS) to the address to.
func (b *baresip) traced(proto, to string) bool {
	data, _ := os.ReadFile(b.logPath)
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, proto+" ") && strings.HasSuffix(strings.TrimSpace(l), " -> "+to) {
			return true
		}
	}
	return false
}

// callsListed is GET /api/v1/calls: the calls up on the node.
type callsListed struct {
	Calls []struct {
		CallID     string `json:"call_id"`
		Peer       string `json:"peer"`
		Carrier    string `json:"carrier"`
		AnsweredAt string `json:"answered_at"`
	} `json:"calls"`
}

// listedCalls returns the calls the node lists, and of them the answered
// ones.
func (n *node) listedCalls() (all, answered []string) {
	n.t.Helper()
	code, body, err := n.get("/api/v1/calls")
	if err != nil || code != 200 {
		n.t.Fatalf("GET /api/v1/calls: %d %v %s", code, err, body)
	}
	var l callsListed
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		n.t.Fatalf("GET /api/v1/calls: %v: %s", err, body)
	}
	for _, c := range l.Calls {
		all = append(all, c.CallID)
		if c.AnsweredAt != "" {
			answered = append(answered, c.CallID)
		}
	}
	return all, answered
}

// answeredCalls returns the calls the node lists as answered.
func (n *node) answeredCalls() []string {
	n.t.Helper()
	_, answered := n.listedCalls()
	return answered
}

// callRecord is what the test reads of a call record (records.Record).
type callRecord struct {
	CallID    string `json:"call_id"`
	Peer      string `json:"peer"`
	Carrier   string `json:"carrier"`
	Code      int    `json:"code"`
	Outcome   string `json:"outcome"`
	EndedBy   string `json:"ended_by"`
	EndReason string `json:"end_reason"`
}

// readRecords reads the call records in path.
func readRecords(t *testing.T, path string) []callRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []callRecord
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l == "" {
			continue
		}
		var r callRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("call record %q: %v", l, err)
		}
		out = append(out, r)
	}
	return out
}

// waitFor polls cond every 50 ms until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// phones is a node between two baresips: a customer's phone (the caller,
// a peer of the node) and a carrier's (the callee, the node's one
// carrier), with the node's call records.
type phones struct {
	t              *testing.T
	caller, callee *baresip
	n              *node
	records        string
}

// phoneSetup describes a phones: the node's id, the caller's and the
// callee's addresses, whether the callee answers at once, and the node's
// configuration beyond them (peer "phone", carrier "baresip").
type phoneSetup struct {
	id                 string
	callerIP, calleeIP string
	answer             bool
	// peerSources are the peer's sources (default: the caller's /32).
	peerSources []string
	// carrierURI makes the carrier's address from the callee's (default:
	// its UDP address).
	carrierURI func(callee *baresip) string
	// node, when set, completes the node's configuration.
	node func(*nodeConf)
	// calleeExtra and callerExtra are more configuration lines.
	calleeExtra, callerExtra []string
	// cps is the peer's CPS (default 10).
	cps float64
}

// startPhones starts the carrier's phone, then the node, then the
// customer's phone, as c says; each is stopped when the test ends.
func startPhones(t *testing.T, c phoneSetup) *phones {
	t.Helper()
	ph := &phones{t: t, records: filepath.Join(t.TempDir(), "calls.jsonl")}
	ph.callee = startBaresip(t, "carrier", c.calleeIP, "100", c.answer, c.calleeExtra...)
	sources := c.peerSources
	if sources == nil {
		sources = []string{c.callerIP + "/32"}
	}
	addr := ph.callee.addr
	if c.carrierURI != nil {
		addr = c.carrierURI(ph.callee)
	}
	cps := c.cps
	if cps == 0 {
		cps = 10
	}
	nc := nodeConf{id: c.id, records: ph.records,
		peers:    []peerConf{{name: "phone", sources: sources, cps: cps}},
		carriers: []carrierConf{{name: "baresip", addr: addr, cps: 100, extra: "probe: {interval: 0s}"}}}
	if c.node != nil {
		c.node(&nc)
	}
	ph.n = startNode(t, nc, true)
	ph.caller = startBaresip(t, "phone", c.callerIP, "caller", false, c.callerExtra...)
	return ph
}

// fail ends the test with both phones' traces and the node's log.
func (ph *phones) fail(format string, args ...any) {
	ph.t.Helper()
	ph.t.Fatalf(format+"\ncaller:\n%s\ncarrier:\n%s\ncpsguard:\n%s",
		append(args, ph.caller.logTail(), ph.callee.logTail(), ph.n.logTail())...)
}

// dial has the caller call 100 at the node's address addr (with its
// transport parameter, if any).
func (ph *phones) dial(addr string) { ph.caller.do("/dial sip:100@" + addr) }

// listed waits until the node lists all calls, answered of them answered.
func (ph *phones) listed(all, answered int) {
	ph.t.Helper()
	if !waitFor(10*time.Second, func() bool { a, b := ph.n.listedCalls(); return len(a) == all && len(b) == answered }) {
		a, b := ph.n.listedCalls()
		ph.fail("the node lists %d calls, %d answered; want %d and %d", len(a), len(b), all, answered)
	}
}

// ringing waits until the callee has rung k times (its 180s): from then
// on it has the call, to answer or refuse, and the node has a provisional
// answer of it, to CANCEL.
func (ph *phones) ringing(k int) {
	ph.t.Helper()
	count := func() int {
		n := 0
		for _, c := range ph.callee.answers("INVITE") {
			if c == 180 {
				n++
			}
		}
		return n
	}
	if !waitFor(10*time.Second, func() bool { return count() == k }) {
		ph.fail("the carrier's phone rang %d times, want %d", count(), k)
	}
}

// recorded waits for k call records and returns them.
func (ph *phones) recorded(k int) []callRecord {
	ph.t.Helper()
	if !waitFor(10*time.Second, func() bool { return len(readRecords(ph.t, ph.records)) >= k }) {
		ph.fail("%d call records, want %d", len(readRecords(ph.t, ph.records)), k)
	}
	return readRecords(ph.t, ph.records)
}

// endedAs waits for k call records and checks the k-th against want: its
// outcome, code, ended_by and end_reason, and its peer and carrier where
// want names them ("-" for none).
func (ph *phones) endedAs(k int, want callRecord, what string) {
	ph.t.Helper()
	r := ph.recorded(k)[k-1]
	ok := r.Outcome == want.Outcome && r.Code == want.Code && r.EndedBy == want.EndedBy && r.EndReason == want.EndReason
	for _, f := range [][2]string{{want.Peer, r.Peer}, {want.Carrier, r.Carrier}} {
		if f[0] == "-" && f[1] != "" || f[0] != "" && f[0] != "-" && f[0] != f[1] {
			ok = false
		}
	}
	if !ok {
		ph.fail("%s recorded as %+v, want %+v", what, r, want)
	}
}

// got checks that b received want requests of method, all through the
// node (its Via, at via).
func (ph *phones) got(b *baresip, method, via string, want int) {
	ph.t.Helper()
	if all, through := b.received(method, via); all != want || through != want {
		ph.fail("%s got %d %s requests, %d through the node; want %d, all through it", b.addr, all, method, through, want)
	}
}

// noErrors checks the node counted no SIP error.
func (ph *phones) noErrors() {
	ph.t.Helper()
	m, err := ph.n.metrics()
	if err != nil {
		ph.fail("metrics: %v", err)
	}
	if v := sumMetric(m, "cpsguard_sip_errors_total"); v != 0 {
		var errs []string
		for k, v := range m {
			if strings.HasPrefix(k, "cpsguard_sip_errors_total") && v != 0 {
				errs = append(errs, fmt.Sprintf("%s %v", k, v))
			}
		}
		ph.fail("sip_errors_total = %v: %v", v, errs)
	}
}

// TestBaresipThroughNode: baresip (a customer's softphone) → cpsguard on
// Redis → baresip as the carrier, answering at once. A call hung up by the
// carrier, then one hung up by the caller, each with its ACK and BYE
// through the node and each recorded as such, and a call over the peer's
// 1 CPS refused 503 before it reaches the carrier.
func TestBaresipThroughNode(t *testing.T) {
	srv := redistest.Start(t)
	ph := startPhones(t, phoneSetup{id: "baresip", callerIP: "127.0.0.31", calleeIP: "127.0.0.41", answer: true, cps: 1,
		node: func(c *nodeConf) { c.redis = srv.Addr() }})
	n := ph.n

	// 1. The carrier hangs up: its BYE goes back through the node.
	ph.dial(n.sip)
	ph.listed(1, 1)
	ph.callee.do("/hangup")
	ph.endedAs(1, callRecord{Outcome: "forwarded", Code: 200, Peer: "phone", Carrier: "baresip", EndedBy: "callee", EndReason: "bye"},
		"the call hung up by the carrier")
	ph.listed(0, 0)

	// 2. Two calls in the same second, sent without waiting for the
	// console's replies: the second is over the peer's 1 CPS and refused;
	// the first is answered, and the caller hangs up.
	time.Sleep(1100 * time.Millisecond) // past the first call's second
	ph.caller.send("/dial sip:100@" + n.sip)
	ph.caller.send("/dial sip:100@" + n.sip)
	ph.listed(1, 1)
	ph.endedAs(2, callRecord{Outcome: "rejected_cps", Code: 503, Carrier: "-", EndedBy: "node", EndReason: "final_answer"},
		"the call over 1 CPS (refused before any carrier)")
	ph.caller.do("/hangup")
	ph.endedAs(3, callRecord{Outcome: "forwarded", Code: 200, EndedBy: "caller", EndReason: "bye"}, "the call hung up by the caller")
	ph.listed(0, 0)

	// Every in-dialog request went through the node (its Via on top of
	// the caller's), as the Record-Route told both ends.
	ph.got(ph.callee, "INVITE", n.sip, 2)
	ph.got(ph.callee, "ACK", n.sip, 2)
	ph.got(ph.callee, "BYE", n.sip, 1)
	ph.got(ph.caller, "BYE", n.sip, 1)
	ph.noErrors()
}

// TestBaresipHoldCancelBusy: baresip → cpsguard (in-process store) →
// baresip as a carrier whose user answers by hand. A call put on hold and
// resumed by each end in turn (four re-INVITEs, each ACKed, through the
// node both ways), a call the caller cancels while it rings (the CANCEL
// through the node, 487 to the caller), and a call the carrier refuses
// busy (486 to the caller).
func TestBaresipHoldCancelBusy(t *testing.T) {
	ph := startPhones(t, phoneSetup{id: "baresip-hold", callerIP: "127.0.0.32", calleeIP: "127.0.0.42"})
	n, caller, callee := ph.n, ph.caller, ph.callee
	acks := func(b *baresip, k int, what string) {
		t.Helper()
		if !waitFor(5*time.Second, func() bool { all, _ := b.received("ACK", n.sip); return all == k }) {
			ph.fail("%s was not answered and ACKed", what)
		}
	}

	// 1. Answered, held and resumed by each end, hung up by the caller.
	ph.dial(n.sip)
	ph.ringing(1)
	callee.do("/accept")
	ph.listed(1, 1)
	caller.do("/hold")
	acks(callee, 2, "the caller's hold re-INVITE")
	caller.do("/resume")
	acks(callee, 3, "the caller's resume re-INVITE")
	ph.got(callee, "INVITE", n.sip, 3)
	ph.got(callee, "ACK", n.sip, 3)
	// The carrier's user holds and resumes too: its re-INVITEs come the
	// other way, each answered by the caller and ACKed, through the node.
	callee.do("/hold")
	acks(caller, 1, "the carrier's hold re-INVITE")
	callee.do("/resume")
	acks(caller, 2, "the carrier's resume re-INVITE")
	ph.got(caller, "INVITE", n.sip, 2)
	ph.got(caller, "ACK", n.sip, 2)
	caller.do("/hangup")
	ph.endedAs(1, callRecord{Outcome: "forwarded", Code: 200, EndedBy: "caller", EndReason: "bye"}, "the held call")
	ph.got(callee, "BYE", n.sip, 1)
	ph.listed(0, 0)

	// 2. Cancelled while it rings. Forwarded (the outcome of a call that
	// reached its carrier), ended by the caller's CANCEL.
	ph.dial(n.sip)
	ph.ringing(2)
	caller.do("/hangup")
	ph.endedAs(2, callRecord{Outcome: "forwarded", Code: 487, EndedBy: "caller", EndReason: "cancel"}, "the cancelled call")
	ph.got(callee, "CANCEL", n.sip, 1)
	ph.listed(0, 0)

	// 3. Refused busy by the carrier's user.
	ph.dial(n.sip)
	ph.ringing(3)
	callee.do("/hangup")
	ph.endedAs(3, callRecord{Outcome: "forwarded", Code: 486, Carrier: "baresip", EndedBy: "callee", EndReason: "final_answer"}, "the busy call")
	ph.listed(0, 0)
	ph.got(callee, "INVITE", n.sip, 5)
	ph.got(callee, "ACK", n.sip, 5) // and the 487's and the 486's ACKs, hop by hop from the node
	ph.noErrors()
}

// TestBaresipOverStreams: the caller's baresip reaches the node over TCP
// (TLS) and the node reaches the carrier's baresip over TCP (TLS: the
// carrier's certificate, from the test CA, names its IP address, and the
// node checks it): a call answered, ACKed and hung up by the caller,
// every request of it on the stream transport.
func TestBaresipOverStreams(t *testing.T) {
	for i, tp := range []string{"tcp", "tls"} {
		t.Run(tp, func(t *testing.T) {
			proto := strings.ToUpper(tp)
			calleeIP := fmt.Sprintf("127.0.0.%d", 43+2*i)
			setup := phoneSetup{id: "baresip-" + tp, callerIP: fmt.Sprintf("127.0.0.%d", 33+2*i), calleeIP: calleeIP, answer: true,
				// baresip binds its listener, not its outgoing
				// connections: those leave from the address the kernel
				// picks for 127.0.0.1, which is where the node knows the
				// peer from (by source address, as ever).
				peerSources: []string{"127.0.0.1/32"},
				carrierURI:  func(b *baresip) string { return b.addr + ";transport=tcp" }}
			if tp == "tls" {
				pki := redistest.NewTLSFiles(t)
				setup.calleeExtra = []string{"sip_certificate " + certAndKey(t, pki, net.ParseIP(calleeIP))}
				setup.carrierURI = func(b *baresip) string { return b.tlsAddr() + ";transport=tls" }
				setup.node = func(c *nodeConf) { c.tlsCert, c.tlsKey, c.tlsCA = pki.ServerCert, pki.ServerKey, pki.CA }
			}
			ph := startPhones(t, setup)
			n := ph.n
			nodeAddr, carAddr := n.sip, ph.callee.addr
			if tp == "tls" {
				nodeAddr, carAddr = n.sipTLS, ph.callee.tlsAddr()
			}
			ph.dial(nodeAddr + ";transport=" + tp)
			ph.listed(1, 1)
			ph.caller.do("/hangup")
			ph.endedAs(1, callRecord{Outcome: "forwarded", Code: 200, EndedBy: "caller", EndReason: "bye"}, "the call")
			for _, m := range []string{"INVITE", "ACK", "BYE"} {
				ph.got(ph.callee, m, nodeAddr, 1)
			}
			if !ph.callee.traced(proto, carAddr) {
				ph.fail("the node did not reach the carrier over %s", proto)
			}
			if !ph.caller.traced(proto, nodeAddr) {
				ph.fail("the caller did not reach the node over %s", proto)
			}
			if ph.caller.traced("UDP", n.sip) || ph.callee.traced("UDP", ph.callee.addr) ||
				(tp == "tls" && (ph.caller.traced("TCP", n.sip) || ph.callee.traced("TCP", ph.callee.addr))) {
				ph.fail("a message of the call went over another transport than %s", proto)
			}
			ph.noErrors()
		})
	}
}

// TestBaresipTransferNotAdmitted: the caller transfers an answered call
// (REFER) to a number behind the node. The REFER reaches the carrier's
// baresip and its NOTIFYs come back, in the dialog, through the node; the
// INVITE the transfer makes the carrier send is refused 403: a carrier is
// not a peer, and a transfer does not make it one.
func TestBaresipTransferNotAdmitted(t *testing.T) {
	ph := startPhones(t, phoneSetup{id: "baresip-refer", callerIP: "127.0.0.34", calleeIP: "127.0.0.44", answer: true})
	n := ph.n
	ph.dial(n.sip)
	ph.listed(1, 1)
	ph.caller.do("/transfer sip:200@" + n.sip)
	// The transfer's last NOTIFY carries the 403 of the carrier's INVITE;
	// baresip then hangs up. Two records: that refusal and the call.
	recs := ph.recorded(2)
	ph.got(ph.callee, "REFER", n.sip, 1)
	if all, through := ph.caller.received("NOTIFY", n.sip); all < 1 || through != all {
		ph.fail("the caller got %d NOTIFYs, %d through the node; want them all through it", all, through)
	}
	data, _ := os.ReadFile(ph.callee.logPath)
	if !strings.Contains(string(data), " -> "+n.sip+"\nINVITE sip:200@") || !strings.Contains(string(data), "SIP/2.0 403 ") {
		ph.fail("the carrier's INVITE of the transfer was not sent to the node and refused 403")
	}
	if r := recs[0]; r.Outcome != "rejected_forbidden" || r.Code != 403 || r.Carrier != "" {
		ph.fail("the carrier's INVITE of the transfer recorded as %+v, want refused 403 before any carrier", r)
	}
	if r := recs[1]; r.Outcome != "forwarded" || r.Code != 200 || r.Peer != "phone" || r.EndedBy != "caller" || r.EndReason != "bye" {
		ph.fail("the transferred call recorded as %+v", r)
	}
	if v := n.metric("cpsguard_calls_total", `outcome="forwarded"`); v != 1 {
		ph.fail("calls forwarded = %v, want only the caller's", v)
	}
	if all, _ := ph.callee.received("INVITE", n.sip); all != 1 {
		ph.fail("the carrier got %d INVITEs, want the caller's one", all)
	}
}

// certAndKey issues a server certificate naming ip from pki's CA and
// writes it with its key in one PEM file, as baresip's sip_certificate
// takes them.
func certAndKey(t *testing.T, pki redistest.TLSFiles, ip net.IP) string {
	t.Helper()
	cert, key := pki.Leaf(t, "carrier", nil, []net.IP{ip}, false)
	var pem []byte
	for _, f := range []string{cert, key} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	both := filepath.Join(t.TempDir(), "carrier.pem")
	if err := os.WriteFile(both, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return both
}

// TestBaresipTLSCarrierNotNamed: a TLS carrier whose certificate, from
// the trusted CA, names another address than the one the call goes to
// gets nothing: the node's handshake fails its name check (RFC 5922,
// counted as tls_name), no INVITE reaches the carrier's baresip, and the
// caller gets the node's failure.
func TestBaresipTLSCarrierNotNamed(t *testing.T) {
	pki := redistest.NewTLSFiles(t)
	ph := startPhones(t, phoneSetup{id: "baresip-tls-name", callerIP: "127.0.0.37", calleeIP: "127.0.0.47", answer: true,
		calleeExtra: []string{"sip_certificate " + certAndKey(t, pki, net.IPv4(127, 0, 0, 46))},
		carrierURI:  func(b *baresip) string { return b.tlsAddr() + ";transport=tls" },
		node:        func(c *nodeConf) { c.tlsCert, c.tlsKey, c.tlsCA = pki.ServerCert, pki.ServerKey, pki.CA }})
	n := ph.n
	ph.dial(n.sip)
	if r := ph.recorded(1)[0]; r.Code < 500 {
		ph.fail("the call recorded as %+v, want the node's failure (5xx)", r)
	}
	if v := n.metric("cpsguard_sip_errors_total", `reason="tls_name"`); v < 1 {
		ph.fail("sip_errors_total{tls_name} = %v: the call failed, but not at the name check", v)
	}
	if all, _ := ph.callee.received("INVITE", n.sipTLS); all != 0 {
		ph.fail("the carrier whose certificate names another address got %d INVITEs", all)
	}
	ph.listed(0, 0)
}

// TestBaresipOperatorEndsCall: an operator ends a live call through the
// API. The node's own BYEs, built from what it kept of the dialog (tags,
// URIs, route sets, CSeq), are taken by both baresips, which keep real
// dialog state and would answer 481 to one that does not match: each
// answers 200, and the call is recorded as ended by the node.
func TestBaresipOperatorEndsCall(t *testing.T) {
	const token = "e2e-operator-token"
	ph := startPhones(t, phoneSetup{id: "baresip-end", callerIP: "127.0.0.38", calleeIP: "127.0.0.48", answer: true,
		node: func(c *nodeConf) { c.token = token }})
	n := ph.n
	ph.dial(n.sip)
	ph.listed(1, 1)
	ids := n.answeredCalls()
	req, err := http.NewRequest(http.MethodDelete, n.http+"/api/v1/calls/"+url.PathEscape(ids[0]), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := httpClient.Do(req)
	if err != nil {
		ph.fail("DELETE /api/v1/calls: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		ph.fail("DELETE /api/v1/calls: %d %s", res.StatusCode, body)
	}
	ph.endedAs(1, callRecord{Outcome: "forwarded", Code: 200, EndedBy: "node", EndReason: "operator"}, "the call an operator ended")
	for _, b := range []*baresip{ph.caller, ph.callee} {
		if !waitFor(5*time.Second, func() bool { return len(b.answers("BYE")) == 1 }) {
			ph.fail("%s answered the node's BYE %v times, want once", b.addr, b.answers("BYE"))
		}
		if got := b.answers("BYE"); got[0] != 200 {
			ph.fail("%s answered the node's BYE %d, want 200 (it matched no dialog)", b.addr, got[0])
		}
		ph.got(b, "BYE", n.sip, 1)
	}
	ph.listed(0, 0)
}

// TestBaresipBehindKamailio: baresip → Kamailio (stateful,
// record-routing) → cpsguard → baresip as the carrier. The phones' route
// sets hold both proxies' Record-Routes: the ACK, a re-INVITE (hold) and
// the BYE of a real UA pass Kamailio and the node in order, both ways.
func TestBaresipBehindKamailio(t *testing.T) {
	ph := &phones{t: t, records: filepath.Join(t.TempDir(), "calls.jsonl")}
	ph.callee = startBaresip(t, "carrier", "127.0.0.49", "100", true)
	ph.n = startNode(t, nodeConf{id: "baresip-kamailio", records: ph.records,
		peers:    []peerConf{{name: "kamailio", sources: []string{"127.0.0.6/32"}, cps: 10}},
		carriers: []carrierConf{{name: "baresip", addr: ph.callee.addr, cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	k := startKamailio(t, "127.0.0.6", ph.n.sip)
	ph.caller = startBaresip(t, "phone", "127.0.0.39", "caller", false)
	n := ph.n
	ph.dial(k.addr)
	ph.listed(1, 1)
	ph.caller.do("/hold")
	if !waitFor(5*time.Second, func() bool { all, _ := ph.callee.received("ACK", n.sip); return all == 2 }) {
		ph.fail("the hold's re-INVITE was not answered and ACKed\nkamailio:\n%s", k.logTail())
	}
	ph.callee.do("/hangup")
	ph.endedAs(1, callRecord{Outcome: "forwarded", Code: 200, Peer: "kamailio", EndedBy: "callee", EndReason: "bye"}, "the call through Kamailio")
	ph.got(ph.callee, "INVITE", n.sip, 2)
	ph.got(ph.callee, "ACK", n.sip, 2)
	// The carrier's BYE reaches the caller through the node and Kamailio
	// (Kamailio's Via on top).
	ph.got(ph.caller, "BYE", k.addr, 1)
	if all, through := ph.caller.received("BYE", n.sip); all != 1 || through != 1 {
		ph.fail("the caller's BYE did not come through the node too (%d, %d)", all, through)
	}
	ph.listed(0, 0)
	ph.noErrors()
}
