//go:build linux

package e2e

// Hostile input at a running node: the RFC 4475 torture messages
// (testdata/torture) from an allowed peer over UDP and TCP, and a flood of
// garbage and of INVITEs from unknown sources, while SIPp places real calls.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// tortureSrc is the loopback address the torture messages come from; the
// fixtures' hosts are mapped to it, so responses (sent to the Via host on
// the default port 5060) come back to the test.
const tortureSrc = "127.0.6.2"

var (
	exampleHost = regexp.MustCompile(`(?i)\b([a-z0-9-]+\.)*(example\.(com|net|org|edu)|company\.com)\b`)
	testNetIP   = regexp.MustCompile(`\b192\.0\.2\.\d+\b`)
)

// loadTorture reads the fixtures with their hosts mapped to tortureSrc.
func loadTorture(t *testing.T) (names []string, msgs map[string][]byte) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "torture", "*.sip"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no torture fixtures: %v", err)
	}
	msgs = map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b = exampleHost.ReplaceAll(b, []byte(tortureSrc))
		b = testNetIP.ReplaceAll(b, []byte(tortureSrc))
		name := strings.TrimSuffix(filepath.Base(f), ".sip")
		names = append(names, name)
		msgs[name] = b
	}
	sort.Strings(names)
	return names, msgs
}

// ownBranch gives every send its own RFC 3261 branch: many fixtures share a
// branch (z9hG4bKkdjuw) and, once their hosts are mapped, a sent-by, so the
// node would take them for retransmissions of one transaction. badbranch
// keeps its branch, which is its point.
func ownBranch(msg []byte, name string, round int) []byte {
	if name == "badbranch" {
		return msg
	}
	return bytes.ReplaceAll(msg, []byte("branch=z9hG4bK"), []byte(fmt.Sprintf("branch=z9hG4bK%s.%d.", name, round)))
}

// callIDOf is the first Call-ID of a raw message ("" when it has none).
func callIDOf(b []byte) string {
	m, _ := parseSIP(b)
	return m.get("call-id")
}

func TestTortureMessages(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, nodeConf{id: "torture", logLevel: "debug",
		peers: []peerConf{
			{name: "torture", sources: []string{tortureSrc + "/32"}, cps: 1000},
			{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000},
		},
		carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 1000}}}, true)
	names, msgs := loadTorture(t)

	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(tortureSrc), Port: 5060})
	if err != nil {
		t.Fatalf("bind %s:5060 (the fixtures' Via port): %v", tortureSrc, err)
	}
	defer sock.Close()
	var (
		mu       sync.Mutex
		codes    = map[string][]int{} // by Call-ID
		requests = map[string]int{}   // requests the node sent to the torture source
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 65536)
		for {
			k, _, err := sock.ReadFromUDP(buf)
			if err != nil {
				return
			}
			m, ok := parseSIP(buf[:k])
			mu.Lock()
			switch {
			case !ok:
			case m.code != 0:
				codes[m.get("call-id")] = append(codes[m.get("call-id")], m.code)
			default:
				requests[m.method]++
			}
			mu.Unlock()
		}
	}()

	// Real calls throughout.
	var calls sippRun
	var wg sync.WaitGroup
	wg.Go(func() { calls = dial(t, "127.0.0.2", n.sip, 5, 30, 40*time.Second) })

	nodeUDP, _ := net.ResolveUDPAddr("udp", n.sip)
	for round := 0; round < 2; round++ {
		for _, name := range names {
			if _, err := sock.WriteToUDP(ownBranch(msgs[name], name, round), nodeUDP); err != nil {
				t.Fatalf("send %s: %v", name, err)
			}
			time.Sleep(40 * time.Millisecond)
			if !n.alive() {
				t.Fatalf("node died after torture message %s (UDP):\n%s", name, n.logTail())
			}
		}
	}
	// A few over TCP, each on its own connection.
	tcpCodes := map[string][]int{}
	for _, name := range []string{"wsinv", "longreq", "clerr", "ncl", "scalar02", "insuf", "badinv01", "mcl01", "dblreq"} {
		tcpCodes[name] = sendTCP(t, n.sip, ownBranch(msgs[name], name, 9))
		if !n.alive() {
			t.Fatalf("node died after torture message %s (TCP):\n%s", name, n.logTail())
		}
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // stragglers
	sock.Close()
	<-readDone

	if calls.code != 0 || calls.n("SuccessfulCall") != 30 {
		t.Errorf("real calls sent between the torture messages must all complete:\n%s", calls.failure())
	}
	if code, _, err := n.get("/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz after the torture messages: %d %v", code, err)
	}

	mu.Lock()
	defer mu.Unlock()
	var table strings.Builder
	for _, name := range names {
		got := codes[callIDOf(msgs[name])]
		fmt.Fprintf(&table, "%-14s udp %v tcp %v\n", name, got, tcpCodes[name])
		for _, c := range append(append([]int(nil), got...), tcpCodes[name]...) {
			if c < 100 || c > 699 || c == 500 {
				t.Errorf("%s: answered %d, want a sane status (not 500)", name, c)
			}
		}
	}
	t.Logf("answers per torture message (2 UDP rounds; none = dropped):\n%s", table.String())
	if len(requests) > 0 {
		t.Logf("requests the node sent to the torture source: %v", requests)
	}
	if got := codes[callIDOf(msgs["zeromf-invite"])]; !containsCode(got, 483) {
		t.Errorf("INVITE with Max-Forwards 0: answered %v, want 483", got)
	}
	if os.Getenv("E2E_KEEP_LOG") != "" {
		b, _ := os.ReadFile(n.logPath)
		_ = os.WriteFile(os.Getenv("E2E_KEEP_LOG"), b, 0o644)
	}
	if m, err := n.metrics(); err == nil {
		t.Logf("cpsguard_sip_errors_total: %g", sumMetric(m, "cpsguard_sip_errors_total"))
	}
}

// An ordinary INVITE over UDP whose SDP makes it about 1.6 kB (several
// codecs, ICE candidates, SRTP keys are common) must be forwarded to a UDP
// carrier and answered like any call. sipgo refuses UDP writes above
// sip.UDPMTUSize-200 = 1300 bytes; see the report of issue 6.
func TestLargeInviteOverUDP(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, nodeConf{id: "large",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 100}},
		carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 100}}}, true)
	c, err := startCaller(t, "127.0.0.2", 0)
	if err != nil {
		t.Fatal(err)
	}
	var sdp strings.Builder
	sdp.WriteString("v=0\r\no=- 1 1 IN IP4 127.0.0.2\r\ns=-\r\nc=IN IP4 127.0.0.2\r\nt=0 0\r\n")
	sdp.WriteString("m=audio 49170 RTP/SAVP 0 8 9 18 101\r\n")
	for i := 0; i < 16; i++ {
		fmt.Fprintf(&sdp, "a=candidate:%d 1 UDP 2130706431 127.0.0.2 %d typ host\r\n", i, 49170+2*i)
	}
	sdp.WriteString("a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:32\r\n")
	msg := inviteWithBody(c.addr, n.sip, "large@e2e", sdp.String())
	if len(msg) < 1400 {
		t.Fatalf("test INVITE is %d bytes, want > 1400", len(msg))
	}
	if err := c.send(n.sip, "large@e2e", msg); err != nil {
		t.Fatal(err)
	}
	final := c.waitFinal([]string{"large@e2e"}, 6*time.Second)["large@e2e"]
	if final != 200 || car.count("INVITE") != 1 {
		t.Errorf("%d-byte INVITE over UDP: caller got %v, carrier got %d INVITE(s); want it forwarded and answered 200 "+
			"(outcomes %v)", len(msg), c.responses("large@e2e"), car.count("INVITE"), n.outcomes())
	}
}

func containsCode(codes []int, want int) bool {
	for _, c := range codes {
		if c == want {
			return true
		}
	}
	return false
}

// sendTCP writes msg on a new connection from tortureSrc and returns the
// status codes read within a short time.
func sendTCP(t *testing.T, addr string, msg []byte) []int {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(tortureSrc)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("tcp dial %s: %v", addr, err)
	}
	defer c.Close()
	if _, err := c.Write(msg); err != nil {
		return nil // the node may close a connection on bad input
	}
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var got []byte
	buf := make([]byte, 65536)
	for {
		k, err := c.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			break
		}
	}
	var codes []int
	for _, line := range bytes.Split(got, []byte("\r\n")) {
		var code int
		if _, err := fmt.Sscanf(string(line), "SIP/2.0 %d", &code); err == nil {
			codes = append(codes, code)
		}
	}
	return codes
}

// seriesCount is the number of exposed series.
func seriesCount(m map[string]float64) int { return len(m) }

func TestFloodFromUnknownSourcesAndGarbage(t *testing.T) {
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, nodeConf{id: "flood", unknownSource: "reject",
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 1000}},
		carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 1000}}}, true)

	// Warm up, then take the baseline.
	if r := dial(t, "127.0.0.2", n.sip, 20, 20, 30*time.Second); r.code != 0 {
		t.Fatalf("warm-up calls:\n%s", r.failure())
	}
	m0, err := n.metrics()
	if err != nil {
		t.Fatal(err)
	}
	rss0, series0, gor0 := n.rssKB(), seriesCount(m0), sumMetric(m0, "go_goroutines")

	const (
		sockets     = 100 // unknown sources: distinct ports on 127.0.0.9
		perSocket   = 30  // INVITEs each: 3000 in all
		garbageMsgs = 3000
		realCalls   = 60
	)
	var calls sippRun
	var wg sync.WaitGroup
	wg.Go(func() { calls = dial(t, "127.0.0.2", n.sip, 10, realCalls, 40*time.Second) })
	wg.Go(func() { floodUnknown(t, n.sip, sockets, perSocket) })
	wg.Go(func() { floodGarbage(t, n.sip, garbageMsgs) })
	wg.Wait()

	if calls.code != 0 || calls.n("SuccessfulCall") != realCalls {
		t.Errorf("admitted calls during the flood must all complete:\n%s", calls.failure())
	}
	if !n.alive() {
		t.Fatalf("node died during the flood:\n%s", n.logTail())
	}
	out := n.waitOutcomes(20+realCalls+sockets*perSocket, 10*time.Second)
	t.Logf("outcomes after the flood: %v", out)
	if int(out["forwarded"]) != 20+realCalls {
		t.Errorf("forwarded = %g, want %d (only the real calls)", out["forwarded"], 20+realCalls)
	}
	if got := len(car.arrivalTimes()); got != 20+realCalls {
		t.Errorf("carrier got %d calls, want %d: nothing from unknown sources or garbage", got, 20+realCalls)
	}

	m1, err := n.metrics()
	if err != nil {
		t.Fatal(err)
	}
	rss1, series1, gor1 := n.rssKB(), seriesCount(m1), sumMetric(m1, "go_goroutines")
	t.Logf("RSS %d → %d kB, series %d → %d, goroutines %g → %g (right after %d unknown-source INVITEs and %d garbage datagrams)",
		rss0, rss1, series0, series1, gor0, gor1, sockets*perSocket, garbageMsgs)
	// Generous: a node keeping per-source or per-message state would grow
	// with 6000 messages from 100 sources; transient transaction buffers
	// stay far below this.
	if rss1-rss0 > 64*1024 {
		t.Errorf("RSS grew by %d kB during the flood, want < 64 MB", rss1-rss0)
	}
	// No per-source metrics: the flood adds at most a handful of series
	// (new outcome and error-reason labels), never one per source.
	if series1-series0 > 30 {
		t.Errorf("/metrics grew from %d to %d series: per-source labels?", series0, series1)
	}
	for k := range m1 {
		if strings.Contains(k, "127.0.0.9") {
			t.Errorf("series names an unknown source address: %s", k)
			break
		}
	}
}

// floodUnknown sends perSocket INVITEs from each of sockets UDP sockets on
// 127.0.0.9, spread over about five seconds; answers are read and dropped.
func floodUnknown(t *testing.T, target string, sockets, perSocket int) {
	to, _ := net.ResolveUDPAddr("udp", target)
	var conns []*net.UDPConn
	for i := 0; i < sockets; i++ {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
		if err != nil {
			t.Errorf("flood socket: %v", err)
			return
		}
		defer c.Close()
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, _, err := c.ReadFromUDP(buf); err != nil {
					return
				}
			}
		}()
		conns = append(conns, c)
	}
	for r := 0; r < perSocket; r++ {
		for i, c := range conns {
			id := fmt.Sprintf("flood-%d-%d@127.0.0.9", i, r)
			_, _ = c.WriteToUDP(inviteMsg(c.LocalAddr().String(), target, id), to)
		}
		time.Sleep(5 * time.Second / time.Duration(perSocket))
	}
	time.Sleep(200 * time.Millisecond) // let the last answers arrive before closing
}

// floodGarbage sends count datagrams of garbage: random bytes and bare start
// lines from 127.0.0.2 (an allowed peer's address) and 127.0.0.9, truncated
// and bit-flipped INVITEs from 127.0.0.9 only (a flip could make a valid
// INVITE, which from an allowed peer would be a real call).
func floodGarbage(t *testing.T, target string, count int) {
	to, _ := net.ResolveUDPAddr("udp", target)
	var conns []*net.UDPConn
	for _, ip := range []net.IP{net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 9)} {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip})
		if err != nil {
			t.Errorf("garbage socket: %v", err)
			return
		}
		defer c.Close()
		conns = append(conns, c)
	}
	rng := rand.New(rand.NewPCG(6, 4475))
	inv := inviteMsg("127.0.0.9:9", target, "garbage@e2e")
	for i := 0; i < count; i++ {
		var b []byte
		switch i % 4 {
		case 0: // random bytes
			b = make([]byte, 1+rng.IntN(1400))
			for j := range b {
				b[j] = byte(rng.UintN(256))
			}
		case 1: // a truncated INVITE
			b = inv[:1+rng.IntN(len(inv)-1)]
		case 2: // an INVITE with a byte flipped
			b = append([]byte(nil), inv...)
			b[rng.IntN(len(b))] ^= byte(1 + rng.UintN(255))
		default: // a start line and nothing else, or keep-alive CRLFs
			if rng.IntN(2) == 0 {
				b = []byte("INVITE sip:x SIP/2.0\r\n")
			} else {
				b = []byte("\r\n\r\n")
			}
		}
		c := conns[1]
		if i%4 == 0 || i%4 == 3 {
			c = conns[(i/4)%2]
		}
		_, _ = c.WriteToUDP(b, to)
		if i%100 == 99 {
			time.Sleep(150 * time.Millisecond)
		}
	}
}
