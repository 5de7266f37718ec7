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
	var last string
	for attempt := 0; attempt < 3; attempt++ {
		port, consPort := freeSIPPort(t), redistest.FreePort(t)
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
		if waitBoundUDP(b.addr, b.exited, 10*time.Second) && waitBoundUDP(b.cons, b.exited, 5*time.Second) &&
			(!strings.Contains(conf, "sip_certificate") || waitListening(b.tlsAddr(), 5*time.Second)) {
			t.Cleanup(b.stop)
			return b
		}
		last = b.logTail()
		b.kill()
	}
	// baresip 1.0 opens its SIP sockets only when the host has a network
	// address besides loopback (its "Local network address"), whatever
	// sip_listen says.
	t.Fatalf("baresip %s did not start (its SIP socket needs an address of the host besides loopback):\n%s", name, last)
	return nil
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
func (b *baresip) logTail() string {
	data, _ := os.ReadFile(b.logPath)
	if len(data) > 6000 {
		data = data[len(data)-6000:]
	}
	return string(data)
}

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

// TestBaresipThroughNode: baresip (a customer's softphone) → cpsguard on
// Redis → baresip as the carrier, answering at once. A call hung up by the
// carrier, then one hung up by the caller, each with its ACK and BYE
// through the node and each recorded as such, and a call over the peer's
// 1 CPS refused 503 before it reaches the carrier.
func TestBaresipThroughNode(t *testing.T) {
	srv := redistest.Start(t)
	records := filepath.Join(t.TempDir(), "calls.jsonl")
	callee := startBaresip(t, "carrier", "127.0.0.41", "100", true)
	n := startNode(t, nodeConf{id: "baresip", redis: srv.Addr(), records: records,
		peers:    []peerConf{{name: "phone", sources: []string{"127.0.0.31/32"}, cps: 1}},
		carriers: []carrierConf{{name: "baresip", addr: callee.addr, cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	caller := startBaresip(t, "phone", "127.0.0.31", "alice", false)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ncaller:\n%s\ncarrier:\n%s\ncpsguard:\n%s", append(args, caller.logTail(), callee.logTail(), n.logTail())...)
	}
	dial := "/dial sip:100@" + n.sip
	answered := func(k int) {
		t.Helper()
		if !waitFor(10*time.Second, func() bool { return len(n.answeredCalls()) == k }) {
			fail("the node lists %d answered calls, want %d", len(n.answeredCalls()), k)
		}
	}
	recorded := func(k int) []callRecord {
		t.Helper()
		if !waitFor(10*time.Second, func() bool { return len(readRecords(t, records)) >= k }) {
			fail("%d call records, want %d", len(readRecords(t, records)), k)
		}
		return readRecords(t, records)
	}

	// 1. The carrier hangs up: its BYE goes back through the node.
	caller.do(dial)
	answered(1)
	callee.do("/hangup")
	recs := recorded(1)
	if r := recs[0]; r.Outcome != "forwarded" || r.Code != 200 || r.Peer != "phone" || r.Carrier != "baresip" ||
		r.EndedBy != "callee" || r.EndReason != "bye" {
		fail("call hung up by the carrier recorded as %+v", r)
	}
	answered(0)

	// 2. Two calls in the same second: the second is over the peer's
	// 1 CPS and refused; the first is answered, and the caller hangs up.
	time.Sleep(1100 * time.Millisecond) // past the first call's second
	caller.do(dial)
	caller.do(dial)
	answered(1)
	recs = recorded(2)
	var refused callRecord
	for _, r := range recs[1:] {
		if r.Outcome == "rejected_cps" {
			refused = r
		}
	}
	if refused.Code != 503 || refused.Carrier != "" {
		fail("the call over 1 CPS recorded as %+v, want refused 503 before any carrier (records %+v)", refused, recs)
	}
	caller.do("/hangup")
	recs = recorded(3)
	last := recs[2]
	if last.Outcome != "forwarded" || last.Code != 200 || last.EndedBy != "caller" || last.EndReason != "bye" {
		fail("call hung up by the caller recorded as %+v", last)
	}
	answered(0)

	// Every in-dialog request went through the node (its Via on top of
	// the caller's), as the Record-Route told both ends.
	if all, through := callee.received("INVITE", n.sip); all != 2 || through != 2 {
		fail("the carrier got %d INVITEs, %d through the node; want 2 and 2", all, through)
	}
	if all, through := callee.received("ACK", n.sip); all != 2 || through != 2 {
		fail("the carrier got %d ACKs, %d through the node; want 2 and 2", all, through)
	}
	if all, through := callee.received("BYE", n.sip); all != 1 || through != 1 {
		fail("the carrier got %d BYEs, %d through the node; want the caller's one", all, through)
	}
	if all, through := caller.received("BYE", n.sip); all != 1 || through != 1 {
		fail("the caller got %d BYEs, %d through the node; want the carrier's one", all, through)
	}
	if v := n.metric("cpsguard_sip_errors_total"); v != 0 {
		m, _ := n.metrics()
		var errs []string
		for k, v := range m {
			if strings.HasPrefix(k, "cpsguard_sip_errors_total") && v != 0 {
				errs = append(errs, fmt.Sprintf("%s %v", k, v))
			}
		}
		fail("sip_errors_total = %v: %v", v, errs)
	}
}

// TestBaresipHoldCancelBusy: baresip → cpsguard (in-process store) →
// baresip as a carrier whose user answers by hand. A call put on hold and
// resumed by each end in turn (four re-INVITEs, each ACKed, through the
// node both ways), a call the
// caller cancels while it rings (the CANCEL through the node, 487 to the
// caller), and a call the carrier refuses busy (486 to the caller).
func TestBaresipHoldCancelBusy(t *testing.T) {
	records := filepath.Join(t.TempDir(), "calls.jsonl")
	callee := startBaresip(t, "carrier", "127.0.0.42", "100", false)
	n := startNode(t, nodeConf{id: "baresip-hold", records: records,
		peers:    []peerConf{{name: "phone", sources: []string{"127.0.0.32/32"}, cps: 10}},
		carriers: []carrierConf{{name: "baresip", addr: callee.addr, cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	caller := startBaresip(t, "phone", "127.0.0.32", "bob", false)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ncaller:\n%s\ncarrier:\n%s\ncpsguard:\n%s", append(args, caller.logTail(), callee.logTail(), n.logTail())...)
	}
	dial := "/dial sip:100@" + n.sip
	listed := func(all, answered int) {
		t.Helper()
		if !waitFor(10*time.Second, func() bool { a, b := n.listedCalls(); return len(a) == all && len(b) == answered }) {
			a, b := n.listedCalls()
			fail("the node lists %d calls, %d answered; want %d and %d", len(a), len(b), all, answered)
		}
	}
	recorded := func(k int) callRecord {
		t.Helper()
		if !waitFor(10*time.Second, func() bool { return len(readRecords(t, records)) >= k }) {
			fail("%d call records, want %d", len(readRecords(t, records)), k)
		}
		return readRecords(t, records)[k-1]
	}
	count := func(b *baresip, method string, want int) {
		t.Helper()
		if all, through := b.received(method, n.sip); all != want || through != want {
			fail("%s got %d %s requests, %d through the node; want %d, all through it", b.addr, all, method, through, want)
		}
	}

	// 1. Answered, held, resumed, hung up by the caller.
	caller.do(dial)
	listed(1, 0)
	callee.do("/accept")
	listed(1, 1)
	caller.do("/hold")
	if !waitFor(5*time.Second, func() bool { all, _ := callee.received("ACK", n.sip); return all == 2 }) {
		fail("the hold's re-INVITE was not answered and ACKed")
	}
	caller.do("/resume")
	if !waitFor(5*time.Second, func() bool { all, _ := callee.received("ACK", n.sip); return all == 3 }) {
		fail("the resume's re-INVITE was not answered and ACKed")
	}
	count(callee, "INVITE", 3)
	count(callee, "ACK", 3)
	// The carrier's user holds and resumes too: its re-INVITEs come the
	// other way, each answered by the caller and ACKed, through the node.
	callee.do("/hold")
	if !waitFor(5*time.Second, func() bool { all, _ := caller.received("ACK", n.sip); return all == 1 }) {
		fail("the carrier's hold re-INVITE was not answered and ACKed")
	}
	callee.do("/resume")
	if !waitFor(5*time.Second, func() bool { all, _ := caller.received("ACK", n.sip); return all == 2 }) {
		fail("the carrier's resume re-INVITE was not answered and ACKed")
	}
	count(caller, "INVITE", 2)
	count(caller, "ACK", 2)
	caller.do("/hangup")
	if r := recorded(1); r.Outcome != "forwarded" || r.Code != 200 || r.EndedBy != "caller" || r.EndReason != "bye" {
		fail("the held call recorded as %+v", r)
	}
	count(callee, "BYE", 1)
	listed(0, 0)

	// 2. Cancelled while it rings.
	caller.do(dial)
	listed(1, 0)
	caller.do("/hangup")
	// Forwarded (the outcome of a call that reached its carrier), ended
	// by the caller's CANCEL.
	if r := recorded(2); r.Outcome != "forwarded" || r.Code != 487 || r.EndedBy != "caller" || r.EndReason != "cancel" {
		fail("the cancelled call recorded as %+v", r)
	}
	count(callee, "CANCEL", 1)
	listed(0, 0)

	// 3. Refused busy by the carrier's user.
	caller.do(dial)
	listed(1, 0)
	callee.do("/hangup")
	if r := recorded(3); r.Code != 486 || r.Carrier != "baresip" || r.EndReason != "final_answer" {
		fail("the busy call recorded as %+v", r)
	}
	listed(0, 0)
	count(callee, "INVITE", 5)
	count(callee, "ACK", 5) // and the 487's and the 486's ACKs, hop by hop from the node
	if v := n.metric("cpsguard_sip_errors_total"); v != 0 {
		fail("sip_errors_total = %v", v)
	}
}

// TestBaresipOverTCP: the caller's baresip reaches the node over TCP and
// the node reaches the carrier's over TCP: a call answered, ACKed and hung
// up by the caller, every request of it on a stream.
func TestBaresipOverTCP(t *testing.T) {
	records := filepath.Join(t.TempDir(), "calls.jsonl")
	callee := startBaresip(t, "carrier", "127.0.0.43", "100", true)
	// baresip binds its listener, not its outgoing connections: those
	// leave from the address the kernel picks for 127.0.0.1, which is
	// where the node knows the peer from (by source address, as ever).
	n := startNode(t, nodeConf{id: "baresip-tcp", records: records,
		peers:    []peerConf{{name: "phone", sources: []string{"127.0.0.1/32"}, cps: 10}},
		carriers: []carrierConf{{name: "baresip", addr: callee.addr + ";transport=tcp", cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	caller := startBaresip(t, "phone", "127.0.0.33", "carol", false)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ncaller:\n%s\ncarrier:\n%s\ncpsguard:\n%s", append(args, caller.logTail(), callee.logTail(), n.logTail())...)
	}
	caller.do("/dial sip:100@" + n.sip + ";transport=tcp")
	if !waitFor(10*time.Second, func() bool { return len(n.answeredCalls()) == 1 }) {
		fail("the call was not answered")
	}
	caller.do("/hangup")
	if !waitFor(10*time.Second, func() bool { return len(readRecords(t, records)) == 1 }) {
		fail("no call record")
	}
	if r := readRecords(t, records)[0]; r.Outcome != "forwarded" || r.Code != 200 || r.EndedBy != "caller" || r.EndReason != "bye" {
		fail("the call recorded as %+v", r)
	}
	for _, m := range []string{"INVITE", "ACK", "BYE"} {
		if all, through := callee.received(m, n.sip); all != 1 || through != 1 {
			fail("the carrier got %d %s, %d through the node; want 1", all, m, through)
		}
	}
	if !callee.traced("TCP", callee.addr) {
		fail("the node did not reach the carrier over TCP")
	}
	if !caller.traced("TCP", n.sip) {
		fail("the caller did not reach the node over TCP")
	}
	if caller.traced("UDP", n.sip) || callee.traced("UDP", callee.addr) {
		fail("a message of the call went over UDP")
	}
	if v := n.metric("cpsguard_sip_errors_total"); v != 0 {
		fail("sip_errors_total = %v", v)
	}
}

// TestBaresipTransferNotAdmitted: the caller transfers an answered call
// (REFER) to a number behind the node. The REFER reaches the carrier's
// baresip and its NOTIFYs come back, in the dialog, through the node; the
// INVITE the transfer makes the carrier send is refused 403: a carrier is
// not a peer, and a transfer does not make it one.
func TestBaresipTransferNotAdmitted(t *testing.T) {
	records := filepath.Join(t.TempDir(), "calls.jsonl")
	callee := startBaresip(t, "carrier", "127.0.0.44", "100", true)
	n := startNode(t, nodeConf{id: "baresip-refer", records: records,
		peers:    []peerConf{{name: "phone", sources: []string{"127.0.0.34/32"}, cps: 10}},
		carriers: []carrierConf{{name: "baresip", addr: callee.addr, cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	caller := startBaresip(t, "phone", "127.0.0.34", "dave", false)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ncaller:\n%s\ncarrier:\n%s\ncpsguard:\n%s", append(args, caller.logTail(), callee.logTail(), n.logTail())...)
	}
	caller.do("/dial sip:100@" + n.sip)
	if !waitFor(10*time.Second, func() bool { return len(n.answeredCalls()) == 1 }) {
		fail("the call was not answered")
	}
	caller.do("/transfer sip:200@" + n.sip)
	// The transfer's last NOTIFY carries the 403 of the carrier's INVITE;
	// baresip then hangs up. Two records: that refusal and the call.
	if !waitFor(10*time.Second, func() bool { return len(readRecords(t, records)) == 2 }) {
		fail("%d call records, want the refused transfer and the call: %+v", len(readRecords(t, records)), readRecords(t, records))
	}
	recs := readRecords(t, records)
	if all, through := callee.received("REFER", n.sip); all != 1 || through != 1 {
		fail("the carrier got %d REFERs, %d through the node; want 1", all, through)
	}
	if all, through := caller.received("NOTIFY", n.sip); all < 1 || through != all {
		fail("the caller got %d NOTIFYs, %d through the node; want them all through it", all, through)
	}
	data, _ := os.ReadFile(callee.logPath)
	if !strings.Contains(string(data), " -> "+n.sip+"\nINVITE sip:200@") || !strings.Contains(string(data), "SIP/2.0 403 ") {
		fail("the carrier's INVITE of the transfer was not sent to the node and refused 403")
	}
	if r := recs[0]; r.Outcome != "rejected_forbidden" || r.Code != 403 || r.Carrier != "" {
		fail("the carrier's INVITE of the transfer recorded as %+v, want refused 403 before any carrier", r)
	}
	if r := recs[1]; r.Outcome != "forwarded" || r.Code != 200 || r.Peer != "phone" || r.EndedBy != "caller" || r.EndReason != "bye" {
		fail("the transferred call recorded as %+v", r)
	}
	if v := n.metric("cpsguard_calls_total", `outcome="forwarded"`); v != 1 {
		fail("calls forwarded = %v, want only the caller's", v)
	}
	if all, _ := callee.received("INVITE", n.sip); all != 1 {
		fail("the carrier got %d INVITEs, want the caller's one", all)
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

// TestBaresipOverTLS: the caller's baresip reaches the node over TLS
// (verifying the node's certificate against the test CA) and the node
// reaches the carrier's baresip over TLS (verifying the carrier's
// certificate, which names its IP address): a call answered, ACKed and
// hung up by the caller, every request of it on TLS.
func TestBaresipOverTLS(t *testing.T) {
	pki := redistest.NewTLSFiles(t)
	both := certAndKey(t, pki, net.IPv4(127, 0, 0, 45))
	records := filepath.Join(t.TempDir(), "calls.jsonl")
	callee := startBaresip(t, "carrier", "127.0.0.45", "100", true, "sip_certificate "+both)
	// As over TCP, baresip's connection leaves from 127.0.0.1.
	n := startNode(t, nodeConf{id: "baresip-tls", records: records, tlsCert: pki.ServerCert, tlsKey: pki.ServerKey, tlsCA: pki.CA,
		peers:    []peerConf{{name: "phone", sources: []string{"127.0.0.1/32"}, cps: 10}},
		carriers: []carrierConf{{name: "baresip", addr: callee.tlsAddr() + ";transport=tls", cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	caller := startBaresip(t, "phone", "127.0.0.35", "erin", false, "sip_cafile "+pki.CA)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ncaller:\n%s\ncarrier:\n%s\ncpsguard:\n%s", append(args, caller.logTail(), callee.logTail(), n.logTail())...)
	}
	caller.do("/dial sip:100@" + n.sipTLS + ";transport=tls")
	if !waitFor(10*time.Second, func() bool { return len(n.answeredCalls()) == 1 }) {
		fail("the call was not answered")
	}
	caller.do("/hangup")
	if !waitFor(10*time.Second, func() bool { return len(readRecords(t, records)) == 1 }) {
		fail("no call record")
	}
	if r := readRecords(t, records)[0]; r.Outcome != "forwarded" || r.Code != 200 || r.EndedBy != "caller" || r.EndReason != "bye" {
		fail("the call recorded as %+v", r)
	}
	for _, m := range []string{"INVITE", "ACK", "BYE"} {
		if all, through := callee.received(m, n.sipTLS); all != 1 || through != 1 {
			fail("the carrier got %d %s, %d through the node's TLS listener; want 1", all, m, through)
		}
	}
	if !callee.traced("TLS", callee.tlsAddr()) {
		fail("the node did not reach the carrier over TLS")
	}
	if !caller.traced("TLS", n.sipTLS) {
		fail("the caller did not reach the node over TLS")
	}
	if caller.traced("UDP", n.sip) || callee.traced("UDP", callee.addr) || callee.traced("TCP", callee.addr) {
		fail("a message of the call went over UDP or TCP")
	}
	if v := n.metric("cpsguard_sip_errors_total"); v != 0 {
		fail("sip_errors_total = %v", v)
	}
}

// TestBaresipTLSCarrierNotNamed: a TLS carrier whose certificate, from
// the trusted CA, names another address than the one the call goes to
// gets nothing: the node's handshake fails its name check (RFC 5922), no
// INVITE reaches the carrier's baresip, and the caller gets the node's
// failure.
func TestBaresipTLSCarrierNotNamed(t *testing.T) {
	pki := redistest.NewTLSFiles(t)
	records := filepath.Join(t.TempDir(), "calls.jsonl")
	callee := startBaresip(t, "carrier", "127.0.0.47", "100", true, "sip_certificate "+certAndKey(t, pki, net.IPv4(127, 0, 0, 46)))
	n := startNode(t, nodeConf{id: "baresip-tls-name", records: records, tlsCert: pki.ServerCert, tlsKey: pki.ServerKey, tlsCA: pki.CA,
		peers:    []peerConf{{name: "phone", sources: []string{"127.0.0.37/32"}, cps: 10}},
		carriers: []carrierConf{{name: "baresip", addr: callee.tlsAddr() + ";transport=tls", cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	caller := startBaresip(t, "phone", "127.0.0.37", "frank", false)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ncaller:\n%s\ncarrier:\n%s\ncpsguard:\n%s", append(args, caller.logTail(), callee.logTail(), n.logTail())...)
	}
	caller.do("/dial sip:100@" + n.sip)
	if !waitFor(15*time.Second, func() bool { return len(readRecords(t, records)) == 1 }) {
		fail("no call record")
	}
	if r := readRecords(t, records)[0]; r.Code < 500 || r.Code == 200 {
		fail("the call recorded as %+v, want the node's failure (5xx)", r)
	}
	if all, _ := callee.received("INVITE", n.sipTLS); all != 0 {
		fail("the carrier whose certificate names another address got %d INVITEs", all)
	}
	if len(n.answeredCalls()) != 0 {
		fail("a call is up")
	}
}

// TestBaresipOperatorEndsCall: an operator ends a live call through the
// API. The node's own BYEs, built from what it kept of the dialog (tags,
// URIs, route sets, CSeq), are taken by both baresips, which keep real
// dialog state and would answer 481 to one that does not match: each
// answers 200, and the call is recorded as ended by the node.
func TestBaresipOperatorEndsCall(t *testing.T) {
	const token = "e2e-operator-token"
	records := filepath.Join(t.TempDir(), "calls.jsonl")
	callee := startBaresip(t, "carrier", "127.0.0.48", "100", true)
	n := startNode(t, nodeConf{id: "baresip-end", records: records, token: token,
		peers:    []peerConf{{name: "phone", sources: []string{"127.0.0.38/32"}, cps: 10}},
		carriers: []carrierConf{{name: "baresip", addr: callee.addr, cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	caller := startBaresip(t, "phone", "127.0.0.38", "grace", false)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ncaller:\n%s\ncarrier:\n%s\ncpsguard:\n%s", append(args, caller.logTail(), callee.logTail(), n.logTail())...)
	}
	caller.do("/dial sip:100@" + n.sip)
	var ids []string
	if !waitFor(10*time.Second, func() bool { ids = n.answeredCalls(); return len(ids) == 1 }) {
		fail("the call was not answered")
	}
	req, err := http.NewRequest(http.MethodDelete, n.http+"/api/v1/calls/"+url.PathEscape(ids[0]), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := httpClient.Do(req)
	if err != nil {
		fail("DELETE /api/v1/calls: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		fail("DELETE /api/v1/calls: %d %s", res.StatusCode, body)
	}
	if !waitFor(10*time.Second, func() bool { return len(readRecords(t, records)) == 1 }) {
		fail("no call record after the operator's end (%s)", body)
	}
	if r := readRecords(t, records)[0]; r.Outcome != "forwarded" || r.Code != 200 || r.EndedBy != "node" || r.EndReason != "operator" {
		fail("the call recorded as %+v", r)
	}
	for _, b := range []*baresip{caller, callee} {
		if !waitFor(5*time.Second, func() bool { return len(b.answers("BYE")) == 1 }) {
			fail("%s answered the node's BYE %v times, want once", b.addr, b.answers("BYE"))
		}
		if got := b.answers("BYE"); got[0] != 200 {
			fail("%s answered the node's BYE %d, want 200 (it matched no dialog)", b.addr, got[0])
		}
		if all, through := b.received("BYE", n.sip); all != 1 || through != 1 {
			fail("%s got %d BYEs, %d from the node; want 1", b.addr, all, through)
		}
	}
	if !waitFor(5*time.Second, func() bool { all, _ := n.listedCalls(); return len(all) == 0 }) {
		fail("the call is still listed")
	}
}
