//go:build linux

package e2e

// Raw-UDP SIP endpoints owned by this package: a measuring carrier that
// stamps every INVITE with the kernel's receive time, and a small caller that
// sends INVITEs and collects final answers. Both parse leniently (they face
// the proxy, not the wild) and keep no transaction state.

import (
	"bytes"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/siptest"
)

// sipMsg is a leniently parsed SIP message.
type sipMsg struct {
	method string // request method; "" for a response
	code   int    // response status; 0 for a request
	hdrs   []hdr  // in order, folded lines joined
	body   []byte
}

type hdr struct{ name, value string }

var compact = map[string]string{"v": "via", "f": "from", "t": "to", "i": "call-id", "m": "contact",
	"l": "content-length", "c": "content-type"}

func canon(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if c, ok := compact[n]; ok {
		return c
	}
	return n
}

// parseSIP parses a message; ok is false for anything without a start line
// and headers.
func parseSIP(b []byte) (m sipMsg, ok bool) {
	head, body, found := bytes.Cut(b, []byte("\r\n\r\n"))
	if !found {
		head, body, _ = bytes.Cut(b, []byte("\n\n"))
	}
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	if len(lines) < 2 {
		return m, false
	}
	start := strings.Fields(lines[0])
	if len(start) < 2 {
		return m, false
	}
	if strings.HasPrefix(start[0], "SIP/") {
		m.code, _ = strconv.Atoi(start[1])
	} else {
		m.method = start[0]
	}
	for _, l := range lines[1:] {
		if (strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")) && len(m.hdrs) > 0 {
			m.hdrs[len(m.hdrs)-1].value += " " + strings.TrimSpace(l)
			continue
		}
		name, value, found := strings.Cut(l, ":")
		if !found {
			continue
		}
		m.hdrs = append(m.hdrs, hdr{canon(name), strings.TrimSpace(value)})
	}
	m.body = body
	return m, true
}

func (m sipMsg) get(name string) string {
	for _, h := range m.hdrs {
		if h.name == name {
			return h.value
		}
	}
	return ""
}

func (m sipMsg) all(name string) []string {
	var out []string
	for _, h := range m.hdrs {
		if h.name == name {
			out = append(out, h.value)
		}
	}
	return out
}

// response builds a response to req copying Via, Record-Route, From, To,
// Call-ID and CSeq; toTag is added to To when it has none.
func response(req sipMsg, code int, reason, toTag string, extra ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "SIP/2.0 %d %s\r\n", code, reason)
	for _, v := range req.all("via") {
		b.WriteString("Via: " + v + "\r\n")
	}
	for _, v := range req.all("record-route") {
		b.WriteString("Record-Route: " + v + "\r\n")
	}
	b.WriteString("From: " + req.get("from") + "\r\n")
	to := req.get("to")
	if toTag != "" && !strings.Contains(to, ";tag=") {
		to += ";tag=" + toTag
	}
	b.WriteString("To: " + to + "\r\n")
	b.WriteString("Call-ID: " + req.get("call-id") + "\r\n")
	b.WriteString("CSeq: " + req.get("cseq") + "\r\n")
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	return []byte(b.String())
}

// carrier is a UDP UAS on loopback: INVITE → 100 + 200, ACK → nothing,
// anything else → 200. It records the first arrival of every Call-ID.
type carrier struct {
	addr string
	conn *net.UDPConn

	mu       sync.Mutex
	arrivals map[string]time.Time
	methods  map[string]int
	delay    time.Duration          // before the 200 to an INVITE
	pending  map[string]func() bool // delayed answers by Call-ID: stop → true if stopped in time
	invites  map[string]sipMsg      // the last INVITE by Call-ID (its 487 answers it, RFC 3261 9.2)
	canceled int                    // INVITEs ended by CANCEL before their 200
	code     int                    // final answer to INVITEs (0 = 200)
	early    bool                   // send a reliable 183 (early dialog) before the answer
	retry    string                 // Retry-After of a final answer >= 300 ("" = none)
	received []sipMsg               // every request, in order
	byes     map[string]time.Time   // first BYE per Call-ID (kernel time)
}

// maxConcurrent is the most calls the carrier had at once: a call counts
// from its INVITE's arrival to its BYE's (for ever without a BYE).
func (c *carrier) maxConcurrent() int {
	c.mu.Lock()
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for id, at := range c.arrivals {
		evs = append(evs, ev{at, 1})
		if bye, ok := c.byes[id]; ok {
			evs = append(evs, ev{bye, -1})
		}
	}
	c.mu.Unlock()
	// At equal times the end counts first.
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at.Equal(evs[j].at) {
			return evs[i].d < evs[j].d
		}
		return evs[i].at.Before(evs[j].at)
	})
	n, top := 0, 0
	for _, e := range evs {
		n += e.d
		top = max(top, n)
	}
	return top
}

// setCode makes the carrier answer INVITEs with code (e.g. 486) instead
// of 200.
func (c *carrier) setCode(code int) {
	c.mu.Lock()
	c.code = code
	c.mu.Unlock()
}

// requests returns the requests of method received so far (all when
// method is empty).
func (c *carrier) requests(method string) []sipMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []sipMsg
	for _, m := range c.received {
		if method == "" || m.method == method {
			out = append(out, m)
		}
	}
	return out
}

// cancelCount returns how many INVITEs a CANCEL ended (answered 487).
func (c *carrier) cancelCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.canceled
}

// setAnswerDelay makes the carrier answer INVITEs with 100 at once and 200
// after d.
func (c *carrier) setAnswerDelay(d time.Duration) {
	c.mu.Lock()
	c.delay = d
	c.mu.Unlock()
}

// startCarrier listens on ip (e.g. 127.0.0.1), a free port; it stops when
// the test ends.
func startCarrier(t testing.TB, ip string) *carrier {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatalf("carrier: %v", err)
	}
	_ = conn.SetReadBuffer(4 << 20)
	if err := siptest.EnableTimestamps(conn); err != nil {
		t.Fatalf("carrier: SO_TIMESTAMPNS: %v", err)
	}
	c := &carrier{addr: conn.LocalAddr().String(), conn: conn, arrivals: map[string]time.Time{}, byes: map[string]time.Time{}, methods: map[string]int{},
		pending: map[string]func() bool{}, invites: map[string]sipMsg{}}
	done := make(chan struct{})
	go c.serve(done)
	t.Cleanup(func() { conn.Close(); <-done })
	return c
}

func (c *carrier) serve(done chan struct{}) {
	defer close(done)
	buf := make([]byte, 65536)
	oob := make([]byte, siptest.OOBSize)
	for {
		// at is the kernel's receive time, before any scheduling delay of
		// this reader.
		n, from, at, err := siptest.ReadStamped(c.conn, buf, oob)
		if err != nil {
			return
		}
		m, ok := parseSIP(buf[:n])
		if !ok || m.method == "" {
			continue
		}
		id := m.get("call-id")
		c.mu.Lock()
		delay, code, early, retry := c.delay, c.code, c.early, c.retry
		c.methods[m.method]++
		c.received = append(c.received, m)
		if m.method == "INVITE" {
			if _, seen := c.arrivals[id]; !seen {
				c.arrivals[id] = at
			}
			c.invites[id] = m
		}
		if m.method == "BYE" {
			if _, seen := c.byes[id]; !seen {
				c.byes[id] = at
			}
		}
		c.mu.Unlock()
		switch m.method {
		case "ACK":
		case "CANCEL":
			// 200 to the CANCEL; a still unanswered INVITE ends with 487.
			_, _ = c.conn.WriteToUDP(response(m, 200, "OK", "car"), from)
			c.mu.Lock()
			stop := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if stop != nil && stop() {
				c.mu.Lock()
				c.canceled++
				inv := c.invites[id] // the 487 answers the INVITE: its Vias, its CSeq
				c.mu.Unlock()
				_, _ = c.conn.WriteToUDP(response(inv, 487, "Request Terminated", "car"+strconv.Itoa(len(id))), from)
			}
		case "INVITE":
			_, _ = c.conn.WriteToUDP(response(m, 100, "Trying", ""), from)
			if early {
				_, _ = c.conn.WriteToUDP(response(m, 183, "Session Progress", "car"+strconv.Itoa(len(id)),
					"Contact: <sip:carrier@"+c.addr+">", "Require: 100rel", "RSeq: 1"), from)
			}
			ok := response(m, 200, "OK", "car"+strconv.Itoa(len(id)), "Contact: <sip:carrier@"+c.addr+">")
			if code >= 300 {
				var extra []string
				if retry != "" {
					extra = append(extra, "Retry-After: "+retry)
				}
				ok = response(m, code, "Busy Here", "car"+strconv.Itoa(len(id)), extra...)
			}
			if delay > 0 {
				tm := time.AfterFunc(delay, func() { _, _ = c.conn.WriteToUDP(ok, from) })
				c.mu.Lock()
				c.pending[id] = tm.Stop
				c.mu.Unlock()
			} else {
				_, _ = c.conn.WriteToUDP(ok, from)
			}
		default:
			_, _ = c.conn.WriteToUDP(response(m, 200, "OK", "car"), from)
		}
	}
}

// arrivals returns the first arrival of every INVITE, sorted.
func (c *carrier) arrivalTimes() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, 0, len(c.arrivals))
	for _, at := range c.arrivals {
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// count returns how many requests of method arrived (retransmissions too).
func (c *carrier) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.methods[method]
}

// gaps lists the times between arrivals in ms, for failure messages.
func gaps(ts []time.Time) string {
	var b strings.Builder
	for i := 1; i < len(ts); i++ {
		fmt.Fprintf(&b, "%.1f ", float64(ts[i].Sub(ts[i-1]).Microseconds())/1000)
	}
	return b.String() + "(ms)"
}

// caller is a raw UDP UAC bound to one source address. It sends INVITEs
// and records every response code per Call-ID; non-2xx finals are ACKed.
type caller struct {
	t    testing.TB
	conn *net.UDPConn
	addr string

	mu    sync.Mutex
	codes map[string][]int
	other int // responses to requests this caller did not make
}

func startCaller(t testing.TB, ip string, port int) (*caller, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip), Port: port})
	if err != nil {
		return nil, err
	}
	c := &caller{t: t, conn: conn, addr: conn.LocalAddr().String(), codes: map[string][]int{}}
	done := make(chan struct{})
	go c.serve(done)
	t.Cleanup(func() { conn.Close(); <-done })
	return c, nil
}

func (c *caller) serve(done chan struct{}) {
	defer close(done)
	buf := make([]byte, 65536)
	for {
		n, from, err := c.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		m, ok := parseSIP(buf[:n])
		if !ok || m.code == 0 {
			continue
		}
		id := m.get("call-id")
		c.mu.Lock()
		if _, mine := c.codes[id]; mine {
			c.codes[id] = append(c.codes[id], m.code)
		} else {
			c.other++
		}
		c.mu.Unlock()
		if m.code >= 300 && strings.HasSuffix(m.get("cseq"), "INVITE") {
			_, _ = c.conn.WriteToUDP(ackFor(m), from)
		}
	}
}

// ackFor builds the hop-by-hop ACK of a non-2xx final response.
func ackFor(res sipMsg) []byte {
	seq, _, _ := strings.Cut(res.get("cseq"), " ")
	to := res.get("to")
	uri := to
	if i, j := strings.IndexByte(to, '<'), strings.IndexByte(to, '>'); i >= 0 && j > i {
		uri = to[i+1 : j]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ACK %s SIP/2.0\r\nVia: %s\r\nFrom: %s\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: %s ACK\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
		uri, res.get("via"), res.get("from"), to, res.get("call-id"), seq)
	return []byte(b.String())
}

// invite sends one INVITE for Call-ID id to target (ip:port).
func (c *caller) invite(target, id string) error {
	c.mu.Lock()
	if _, ok := c.codes[id]; !ok {
		c.codes[id] = []int{}
	}
	c.mu.Unlock()
	to, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return err
	}
	_, err = c.conn.WriteToUDP(inviteMsg(c.addr, target, id), to)
	return err
}

// send sends a prepared request for Call-ID id to target.
func (c *caller) send(target, id string, msg []byte) error {
	c.mu.Lock()
	if _, ok := c.codes[id]; !ok {
		c.codes[id] = []int{}
	}
	c.mu.Unlock()
	to, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return err
	}
	_, err = c.conn.WriteToUDP(msg, to)
	return err
}

// inviteMsg is a minimal initial INVITE from a UA at local to target.
func inviteMsg(local, target, id string) []byte {
	return inviteWithBody(local, target, id, "")
}

// inviteWithBody is inviteMsg with an SDP body (none when empty).
func inviteWithBody(local, target, id, body string) []byte {
	ct := ""
	if body != "" {
		ct = "Content-Type: application/sdp\r\n"
	}
	return []byte(fmt.Sprintf("INVITE sip:100@%s SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP %s;branch=z9hG4bK-%s;rport\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:e2e@%s>;tag=f-%s\r\n"+
		"To: <sip:100@%s>\r\n"+
		"Call-ID: %s\r\n"+
		"CSeq: 1 INVITE\r\n"+
		"Contact: <sip:e2e@%s>\r\n"+
		"%sContent-Length: %d\r\n\r\n%s", target, local, id, local, id, target, id, local, ct, len(body), body))
}

// final returns the final response code (>= 200) of call id, or 0.
func (c *caller) final(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, code := range c.codes[id] {
		if code >= 200 {
			return code
		}
	}
	return 0
}

// responses returns every code received for call id.
func (c *caller) responses(id string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.codes[id]...)
}

// waitFinal waits until every call in ids has a final answer or limit passes;
// it returns the finals (0 = none).
func (c *caller) waitFinal(ids []string, limit time.Duration) map[string]int {
	deadline := time.Now().Add(limit)
	for {
		out := map[string]int{}
		missing := 0
		for _, id := range ids {
			out[id] = c.final(id)
			if out[id] == 0 {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}
