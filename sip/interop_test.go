package sip

// Interop with clients that read SIP literally (issue 22, D): a carrier
// that copies only the header lines named "Via" into its answers (SIPp's
// [last_Via:], Kamailio and Asterisk read every Via), a caller that matches
// responses to its transaction and takes a second 100 Trying for a
// retransmission (SIPp's start_txn/response_txn), and the ACK of a non-2xx
// answer (RFC 3261 17.1.1.3: one Via). Real sockets on loopback; the
// carriers here are raw, so the proxy's bytes are what they see.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/sip/internal/sipgohook"
)

// viaCopy says which Via lines a copyCarrier copies into its answers.
type viaCopy int

const (
	// viaLines copies every header line named "Via" (any case), as SIPp's
	// [last_Via:] does: a compact "v:" line is not copied.
	viaLines viaCopy = iota
	// topViaOnly copies the first Via line only: a broken carrier whose
	// answers reach the proxy with nothing below its own Via.
	topViaOnly
)

// copyCarrier is a carrier on raw sockets (UDP, or TCP when tcp is set): it
// answers every INVITE with 100 Trying and, after delay, its final code
// (200 with a Contact, or a failure), copying Vias as copy says and
// Record-Route, From, To (with a tag), Call-ID and CSeq; BYE and anything
// else but ACK get 200. It records every request as received.
type copyCarrier struct {
	t     *testing.T
	addr  string
	tcp   bool
	copy  viaCopy
	code  int
	delay time.Duration

	mu  sync.Mutex
	got []string
}

func startCopyCarrier(t *testing.T, tcp bool, copy viaCopy, code int, delay time.Duration) *copyCarrier {
	t.Helper()
	c := &copyCarrier{t: t, tcp: tcp, copy: copy, code: code, delay: delay}
	var wg sync.WaitGroup
	if tcp {
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		c.addr = l.Addr().String()
		var conns []net.Conn
		var cmu sync.Mutex
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				cmu.Lock()
				conns = append(conns, conn)
				cmu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					var wmu sync.Mutex
					r := bufio.NewReader(conn)
					for {
						msg, err := readStreamMessage(r)
						if err != nil {
							return
						}
						c.handle(msg, func(b []byte) { wmu.Lock(); _, _ = conn.Write(b); wmu.Unlock() })
					}
				}()
			}
		}()
		t.Cleanup(func() {
			l.Close()
			cmu.Lock()
			for _, conn := range conns {
				conn.Close()
			}
			cmu.Unlock()
			wg.Wait()
		})
		return c
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c.addr = conn.LocalAddr().String()
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 65535)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			c.handle(string(buf[:n]), func(b []byte) { _, _ = conn.WriteToUDP(b, from) })
		}
	}()
	t.Cleanup(func() { conn.Close(); wg.Wait() })
	return c
}

// readStreamMessage reads one SIP message from a stream (headers, then
// Content-Length bytes of body).
func readStreamMessage(r *bufio.Reader) (string, error) {
	var b strings.Builder
	length := 0
	for i := 0; i < 200; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if strings.TrimSpace(line) == "" && b.Len() == 0 {
			continue // keepalive CRLF
		}
		b.WriteString(line)
		if strings.TrimSpace(line) == "" {
			body := make([]byte, length)
			if _, err := io.ReadFull(r, body); err != nil {
				return "", err
			}
			b.Write(body)
			return b.String(), nil
		}
		name, value, _ := strings.Cut(line, ":")
		if n := strings.ToLower(strings.TrimSpace(name)); n == "content-length" || n == "l" {
			length, _ = strconv.Atoi(strings.TrimSpace(value))
		}
	}
	return "", fmt.Errorf("header too long")
}

// rawHeaderLines returns the header lines of msg (no start line, no body).
func rawHeaderLines(msg string) []string {
	head, _, _ := strings.Cut(msg, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	return lines[1:]
}

// lineName is a header line's name, trimmed and lower case.
func lineName(l string) string {
	name, _, _ := strings.Cut(l, ":")
	return strings.ToLower(strings.TrimSpace(name))
}

// linesNamed returns the header lines of msg whose name is one of names
// (lower case, compact forms are their own names).
func linesNamed(msg string, names ...string) []string {
	var out []string
	for _, l := range rawHeaderLines(msg) {
		for _, n := range names {
			if lineName(l) == n {
				out = append(out, l)
			}
		}
	}
	return out
}

// viaValues counts the Via values of msg, long and compact lines alike
// (each comma-separated value is one).
func viaValues(msg string) []string {
	var out []string
	for _, l := range linesNamed(msg, "via", "v") {
		_, v, _ := strings.Cut(l, ":")
		for _, x := range strings.Split(v, ",") {
			out = append(out, strings.TrimSpace(x))
		}
	}
	return out
}

func (c *copyCarrier) handle(msg string, write func([]byte)) {
	start, _, _ := strings.Cut(msg, "\r\n")
	if strings.HasPrefix(start, "SIP/") {
		return
	}
	c.mu.Lock()
	c.got = append(c.got, msg)
	c.mu.Unlock()
	method, _, _ := strings.Cut(start, " ")
	switch method {
	case "ACK":
	case "INVITE":
		write(c.answer(msg, 100, ""))
		final := c.answer(msg, c.code, "Contact: <sip:carrier@"+c.addr+">")
		if c.delay > 0 {
			time.AfterFunc(c.delay, func() { write(final) })
		} else {
			write(final)
		}
	default:
		write(c.answer(msg, 200, ""))
	}
}

// answer builds a response to req as the carrier's mode copies it.
func (c *copyCarrier) answer(req string, code int, extra string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "SIP/2.0 %d %s\r\n", code, map[int]string{100: "Trying", 200: "OK", 486: "Busy Here", 503: "Service Unavailable"}[code])
	vias := linesNamed(req, "via")
	if c.copy == topViaOnly && len(vias) > 1 {
		vias = vias[:1]
	}
	for _, l := range vias {
		b.WriteString(l + "\r\n")
	}
	for _, l := range linesNamed(req, "record-route", "from", "call-id", "cseq") {
		b.WriteString(l + "\r\n")
	}
	for _, l := range linesNamed(req, "to", "t") {
		if code > 100 && !strings.Contains(l, ";tag=") {
			l += ";tag=car-" + strconv.Itoa(len(req))
		}
		b.WriteString(l + "\r\n")
	}
	if extra != "" && code == 200 {
		b.WriteString(extra + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	return b.Bytes()
}

// requests returns the requests of method received so far.
func (c *copyCarrier) requests(method string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.got {
		if strings.HasPrefix(m, method+" ") {
			out = append(out, m)
		}
	}
	return out
}

func (c *copyCarrier) uri() string {
	if c.tcp {
		return "sip:" + c.addr + ";transport=tcp"
	}
	return "sip:" + c.addr
}

// lineCaller is a raw UDP UA on 127.0.0.2 (the test peer's address) that
// records every datagram it receives.
type lineCaller struct {
	t    *testing.T
	conn *net.UDPConn
	addr string

	mu  sync.Mutex
	got []string
}

func startLineCaller(t *testing.T) *lineCaller {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	c := &lineCaller{t: t, conn: conn, addr: conn.LocalAddr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65535)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			c.mu.Lock()
			c.got = append(c.got, string(buf[:n]))
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return c
}

func (c *lineCaller) send(to, msg string) {
	c.t.Helper()
	ra, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.conn.WriteToUDP([]byte(msg), ra); err != nil {
		c.t.Fatal(err)
	}
}

// invite is an initial INVITE for Call-ID id to the proxy at to.
func (c *lineCaller) invite(to, id string) string {
	return "INVITE sip:100@" + to + " SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP " + c.addr + ";branch=z9hG4bK-" + id + ";rport\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:caller@" + c.addr + ">;tag=f-" + id + "\r\n" +
		"To: <sip:100@" + to + ">\r\nCall-ID: " + id + "\r\nCSeq: 1 INVITE\r\n" +
		"Contact: <sip:caller@" + c.addr + ">\r\nContent-Length: 0\r\n\r\n"
}

// inDialog is a request of the dialog answered by ok (Route from its
// Record-Route in reverse, its tags, Request-URI its Contact).
func (c *lineCaller) inDialog(ok, method, branch string, seq int) string {
	ruri := ""
	for _, l := range linesNamed(ok, "contact", "m") {
		_, v, _ := strings.Cut(l, ":")
		ruri = strings.Trim(strings.TrimSpace(v), "<>")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK-%s;rport\r\n", method, ruri, c.addr, branch)
	rr := linesNamed(ok, "record-route")
	for i := len(rr) - 1; i >= 0; i-- {
		_, v, _ := strings.Cut(rr[i], ":")
		b.WriteString("Route:" + v + "\r\n")
	}
	for _, l := range linesNamed(ok, "from", "to", "call-id") {
		b.WriteString(l + "\r\n")
	}
	fmt.Fprintf(&b, "Max-Forwards: 70\r\nCSeq: %d %s\r\nContact: <sip:caller@%s>\r\nContent-Length: 0\r\n\r\n", seq, method, c.addr)
	return b.String()
}

// responses returns the responses received for Call-ID id whose CSeq is
// cseq ("1 INVITE").
func (c *lineCaller) responses(id, cseq string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.got {
		if !strings.HasPrefix(m, "SIP/2.0 ") {
			continue
		}
		idOK, seqOK := false, false
		for _, l := range rawHeaderLines(m) {
			_, v, _ := strings.Cut(l, ":")
			switch lineName(l) {
			case "call-id", "i":
				idOK = strings.TrimSpace(v) == id
			case "cseq":
				seqOK = strings.TrimSpace(v) == cseq
			}
		}
		if idOK && seqOK {
			out = append(out, m)
		}
	}
	return out
}

// final waits up to limit for the final response of id/cseq ("" if none).
func (c *lineCaller) final(id, cseq string, limit time.Duration) string {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, r := range c.responses(id, cseq) {
			if statusOf(r) >= 200 {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}

// statusOf is a response's status code (0 for anything else).
func statusOf(msg string) int {
	start, _, _ := strings.Cut(msg, "\r\n")
	f := strings.Fields(start)
	if len(f) < 2 || !strings.HasPrefix(f[0], "SIP/") {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// ackOf2xx is the caller's ACK of a 200 along its route set.
func (c *lineCaller) ackOf2xx(ok string, seq int) string {
	return c.inDialog(ok, "ACK", "ack-"+strconv.Itoa(seq)+"-"+strconv.Itoa(len(ok)), seq)
}

func interopProxy(t *testing.T, car *copyCarrier) *harness {
	t.Helper()
	adm, pacer := newFakes()
	return startProxy(t, testConfig(config.Carrier{Name: "raw", URI: car.uri(), CPS: 100, MaxWait: time.Second}), adm, pacer)
}

// TestCarrierCopyingViaLinesAnswersTheCaller: a carrier that copies the
// header lines named "Via" into its answers, as SIPp's [last_Via:] does,
// answers the caller: the 200 the caller gets carries the caller's own Via
// and nothing else. The forwarded INVITE carries every Via as a plain Via
// line (a folded compact "v:" line was not copied, and the proxy relayed
// the 200 with no Via at all: Kamailio and Asterisk drop those).
func TestCarrierCopyingViaLinesAnswersTheCaller(t *testing.T) {
	for _, tp := range []string{"udp", "tcp"} {
		t.Run(tp, func(t *testing.T) {
			car := startCopyCarrier(t, tp == "tcp", viaLines, 200, 0)
			h := interopProxy(t, car)
			caller := startLineCaller(t)
			id := "vialines-" + tp
			caller.send(h.udp, caller.invite(h.udp, id))
			ok := caller.final(id, "1 INVITE", 5*time.Second)
			if statusOf(ok) != 200 {
				t.Fatalf("final %q, want the carrier's 200", ok)
			}
			if v := viaValues(ok); len(v) != 1 || !strings.Contains(v[0], "branch=z9hG4bK-"+id) {
				t.Errorf("Vias of the 200 at the caller: %q, want exactly the caller's own", v)
			}
			invs := car.requests("INVITE")
			if len(invs) != 1 {
				t.Fatalf("carrier INVITEs: %d, want 1", len(invs))
			}
			if l := linesNamed(invs[0], "v"); len(l) != 0 {
				t.Errorf("forwarded INVITE has compact Via lines %q: every Via must be a plain Via line", l)
			}
			if l := linesNamed(invs[0], "via"); len(l) != 2 || !strings.Contains(l[1], "branch=z9hG4bK-"+id) ||
				!strings.Contains(l[1], "received=127.0.0.2") {
				t.Errorf("forwarded INVITE's Via lines %q: want the proxy's, then the caller's (with received)", l)
			}
		})
	}
}

// TestAckOfNon2xxHasOneVia: the proxy's ACK of a carrier's non-2xx final
// answer carries exactly one Via, the proxy's own with the INVITE's
// branch (RFC 3261 17.1.1.3), over UDP and TCP alike, while the INVITE
// carried the caller's Via below it.
func TestAckOfNon2xxHasOneVia(t *testing.T) {
	for _, tp := range []string{"udp", "tcp"} {
		t.Run(tp, func(t *testing.T) {
			car := startCopyCarrier(t, tp == "tcp", viaLines, 486, 0)
			h := interopProxy(t, car)
			caller := startLineCaller(t)
			id := "ack486-" + tp
			caller.send(h.udp, caller.invite(h.udp, id))
			if r := caller.final(id, "1 INVITE", 5*time.Second); statusOf(r) != 486 {
				t.Fatalf("final %q, want the carrier's 486", r)
			}
			waitFor(t, func() bool { return len(car.requests("ACK")) >= 1 }, "the ACK of the 486 at the carrier")
			ack := car.requests("ACK")[0]
			inv := car.requests("INVITE")[0]
			if v := viaValues(inv); len(v) != 2 {
				t.Fatalf("forwarded INVITE has %d Via values, want 2: %q", len(v), v)
			}
			top := linesNamed(inv, "via")[0]
			if v := viaValues(ack); len(v) != 1 || "Via: "+v[0] != top {
				t.Errorf("ACK of the 486 has Vias %q, want exactly the INVITE's top one %q\n%s", v, top, ack)
			}
		})
	}
}

// TestResponseWithNoViaLeftIsNotRelayed: a carrier's answer with nothing
// below the proxy's Via is meant for nobody upstream (RFC 3261 16.7 step
// 3): it is not relayed, it is counted (sip_errors_total{no_via}), and
// the caller gets the proxy's own answer instead, with its own Via: the
// same code for a failure, 502 for a 2xx, which nobody will ACK and is
// hung up (ACK and BYE at the carrier).
func TestResponseWithNoViaLeftIsNotRelayed(t *testing.T) {
	for _, tc := range []struct{ carrier, caller int }{{200, 502}, {486, 486}} {
		t.Run(strconv.Itoa(tc.carrier), func(t *testing.T) {
			car := startCopyCarrier(t, false, topViaOnly, tc.carrier, 0)
			h := interopProxy(t, car)
			caller := startLineCaller(t)
			id := "novia-" + strconv.Itoa(tc.carrier)
			caller.send(h.udp, caller.invite(h.udp, id))
			r := caller.final(id, "1 INVITE", 5*time.Second)
			if statusOf(r) != tc.caller {
				t.Fatalf("final %q, want the proxy's %d", r, tc.caller)
			}
			for _, m := range caller.responses(id, "1 INVITE") {
				if v := viaValues(m); len(v) != 1 || !strings.Contains(v[0], "branch=z9hG4bK-"+id) {
					t.Errorf("the caller got a response with Vias %q, want its own:\n%s", v, m)
				}
			}
			if v := testutil.ToFloat64(h.m.SIPErrors.WithLabelValues("no_via")); v < 1 {
				t.Errorf("sip_errors_total{no_via} = %v, want >= 1", v)
			}
			if tc.carrier == 200 {
				waitFor(t, func() bool { return len(car.requests("ACK")) >= 1 && len(car.requests("BYE")) >= 1 },
					"the carrier's unrelayable 200 hung up (ACK and BYE)")
			} else {
				waitFor(t, func() bool { return len(car.requests("ACK")) >= 1 }, "the ACK of the carrier's failure")
			}
		})
	}
}

// TestOneTryingPerInvite: an INVITE sent once gets exactly one 100 Trying,
// also while the carrier takes a second to answer 200 without ringing (a
// second 100 is a retransmission to a transaction-aware UAC, which then
// fails the call); so does a re-INVITE.
func TestOneTryingPerInvite(t *testing.T) {
	car := startCopyCarrier(t, false, viaLines, 200, 700*time.Millisecond)
	h := interopProxy(t, car)
	caller := startLineCaller(t)
	caller.send(h.udp, caller.invite(h.udp, "trying"))
	ok := caller.final("trying", "1 INVITE", 5*time.Second)
	if statusOf(ok) != 200 {
		t.Fatalf("final %q, want 200", ok)
	}
	count100 := func(cseq string) int {
		n := 0
		for _, r := range caller.responses("trying", cseq) {
			if statusOf(r) == 100 {
				n++
			}
		}
		return n
	}
	if n := count100("1 INVITE"); n != 1 {
		t.Errorf("100 Trying for one INVITE: %d, want exactly 1", n)
	}
	caller.send(h.udp, caller.ackOf2xx(ok, 1))
	caller.send(h.udp, caller.inDialog(ok, "INVITE", "reinvite", 2))
	if r := caller.final("trying", "2 INVITE", 5*time.Second); statusOf(r) != 200 {
		t.Fatalf("re-INVITE final %q, want 200", r)
	}
	if n := count100("2 INVITE"); n != 1 {
		t.Errorf("100 Trying for one re-INVITE: %d, want exactly 1", n)
	}
}

// TestSIPpTransactionAwareCaller: SIPp's transaction-aware UAC (start_txn,
// response_txn: responses matched by Via branch, a second 100 taken for a
// retransmission) through the proxy to a SIPp carrier that copies Vias
// with [last_Via:] and answers 200 without 180 (uas.xml): every call
// succeeds on both sides.
func TestSIPpTransactionAwareCaller(t *testing.T) {
	redistest.Require(t, "sipp")
	port := redistest.FreePort(t)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "sipp", URI: "sip:127.0.0.1:" + strconv.Itoa(port), CPS: 100, MaxWait: time.Second}), adm, pacer)
	const n = 10
	var carCode int
	var carOut string
	done := make(chan struct{})
	go func() {
		defer close(done)
		carCode, carOut = sipp(t, 30*time.Second, "-sf", scenario(t, "uas_no180.xml"), "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-m", strconv.Itoa(n))
	}()
	waitUDPBound(t, "127.0.0.1", port)
	dir := t.TempDir()
	code, out := sippIn(t, dir, 30*time.Second, "-sf", scenario(t, "uac_txn.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", "10", "-m", strconv.Itoa(n), "-recv_timeout", "5000", "-trace_counts", h.udp)
	<-done
	if code != 0 {
		t.Errorf("transaction-aware caller: sipp exit %d, want 0 (every call successful):\n%s", code, tail(out))
	}
	if carCode != 0 {
		t.Errorf("carrier sipp exit %d:\n%s", carCode, tail(carOut))
	}
	// SIPp takes a copy of the 100 it just read for a retransmission and
	// counts it on that step (its _Retrans column): there must be none.
	counts := sippCounts(t, dir)
	if got, ok := counts["1_100_Recv"]; !ok || got != n {
		t.Errorf("caller's 100 Trying received: %d (%v), want %d (one per INVITE); counts %v", got, ok, n, counts)
	}
	if r := counts["1_100_Retrans"]; r != 0 {
		t.Errorf("caller's 100 Trying counted as retransmissions: %d, want 0 (one 100 per INVITE)", r)
	}
}

// sippCounts reads the final row of the -trace_counts file SIPp left in
// dir, by column name (e.g. "1_100_Recv": step 1 counted from 0, the 100, received).
func sippCounts(t *testing.T, dir string) map[string]int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*_counts.csv"))
	if len(files) != 1 {
		t.Fatalf("SIPp counts files in %s: %v, want one", dir, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 {
		t.Fatalf("SIPp counts file %s: %q", files[0], b)
	}
	head, last := strings.Split(lines[0], ";"), strings.Split(lines[len(lines)-1], ";")
	out := map[string]int{}
	for i, h := range head {
		if i < len(last) {
			if v, err := strconv.Atoi(strings.TrimSpace(last[i])); err == nil {
				out[strings.TrimSpace(h)] = v
			}
		}
	}
	return out
}

// TestClientTxConnHook: the field ack.go wraps exists in this sipgo, and a
// wrapped connection writes an ACK with its top Via only (anything else
// as it is).
func TestClientTxConnHook(t *testing.T) {
	if err := sipgohook.CheckClientTxConn(); err != nil {
		t.Fatal(err)
	}
	ack := "ACK sip:b@127.0.0.9 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-proxy\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.2:5070;branch=z9hG4bK-caller\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-first\r\n" +
		"From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\nCall-ID: hook\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
	for _, tc := range []struct {
		raw  string
		vias int
	}{{ack, 1}, {strings.Replace(strings.Replace(ack, "ACK sip:", "BYE sip:", 1), "1 ACK", "1 BYE", 1), 3}} {
		msg, err := sipmsg.ParseMessage([]byte(tc.raw))
		if err != nil {
			t.Fatal(err)
		}
		var w recordConn
		if err := (ackConn{Connection: &w}).WriteMsg(msg); err != nil {
			t.Fatal(err)
		}
		req := w.last.(*sipmsg.Request)
		if v := req.GetHeaders("Via"); len(v) != tc.vias || !strings.Contains(v[0].Value(), "z9hG4bK-proxy") || req.Via() != v[0] {
			t.Errorf("%s written with Vias %v (Via() %v), want %d with the proxy's on top", req.Method, v, req.Via(), tc.vias)
		}
	}
}

// recordConn is a sipgo connection that keeps the last message written.
type recordConn struct {
	sipmsg.Connection
	last sipmsg.Message
}

func (c *recordConn) WriteMsg(m sipmsg.Message) error { c.last = m; return nil }
