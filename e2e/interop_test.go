//go:build linux

package e2e

// Interop with real clients (issue 22, D): Kamailio, a stateful proxy that
// drops any reply without a Via of its own ("no via found in reply"), in
// front of cpsguard, a transaction-aware SIPp caller behind it and a SIPp
// carrier that copies Vias with [last_Via:] after cpsguard.

import (
	"errors"
	"fmt"
	"net"
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

// kamailio is a Kamailio process running testdata/kamailio/kamailio.cfg.
type kamailio struct {
	addr    string // ip:port it listens on (UDP)
	logPath string
}

// startKamailio runs Kamailio on ip (a free port), relaying every call to
// cpsguard at target (ip:port); it is stopped when the test ends. Without
// kamailio in PATH the test skips, except under CI=true, where it fails.
func startKamailio(t *testing.T, ip, target string) *kamailio {
	t.Helper()
	bin := redistest.Require(t, "kamailio")
	cfg, err := filepath.Abs(filepath.Join("..", "testdata", "kamailio", "kamailio.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	mods := ""
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu/kamailio/modules", "/usr/lib/aarch64-linux-gnu/kamailio/modules",
		"/usr/lib/kamailio/modules", "/usr/local/lib64/kamailio/modules", "/usr/local/lib/kamailio/modules"} {
		if _, err := os.Stat(filepath.Join(d, "tm.so")); err == nil {
			mods = d
			break
		}
	}
	if mods == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("kamailio's modules (tm.so) not found")
		}
		t.Skip("kamailio's modules (tm.so) not found")
	}
	dir := t.TempDir()
	for attempt := 0; attempt < 3; attempt++ {
		port := freeSIPPort(t)
		k := &kamailio{addr: net.JoinHostPort(ip, strconv.Itoa(port)), logPath: filepath.Join(dir, fmt.Sprintf("kamailio-%d.log", attempt))}
		logf, err := os.Create(k.logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-f", cfg, "-L", mods, "-l", "udp:"+k.addr,
			"-A", `CPSGUARD="sip:`+target+`"`, "-DD", "-E", "-Y", dir, "-P", filepath.Join(dir, "kamailio.pid"), "-m", "32", "-M", "4")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start kamailio: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if waitBoundUDP(k.addr, exited, 10*time.Second) {
			t.Cleanup(stop)
			return k
		}
		stop()
	}
	t.Fatalf("kamailio did not start")
	return nil
}

// waitBoundUDP reports whether something binds addr (UDP) within limit
// (false as soon as exited closes).
func waitBoundUDP(addr string, exited <-chan struct{}, limit time.Duration) bool {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return false
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		c, err := net.ListenUDP("udp", ua)
		if err != nil {
			return errors.Is(err, syscall.EADDRINUSE)
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// logTail is the end of Kamailio's log, for failure messages.
func (k *kamailio) logTail() string { return fileTail(k.logPath, 3000) }

// TestKamailioInFront: SIPp (transaction-aware, uac_txn.xml) → Kamailio
// (stateful, record-routing) → cpsguard → a SIPp carrier copying Vias with
// [last_Via:] (uas.xml). Every call is answered, ACKed and hung up end to
// end: Kamailio gets every reply with its own Via (a reply relayed without
// one it drops, and the caller never hears of its call), and the BYE
// follows both Record-Routes.
func TestKamailioInFront(t *testing.T) {
	redistest.Require(t, "sipp")
	carPort := freeSIPPort(t)
	n := startNode(t, nodeConf{id: "behind-kamailio",
		peers:    []peerConf{{name: "kamailio", sources: []string{"127.0.0.4/32"}, cps: 100}},
		carriers: []carrierConf{{name: "sipp", addr: fmt.Sprintf("127.0.0.1:%d", carPort), cps: 100, extra: "probe: {interval: 0s}"}}}, true)
	k := startKamailio(t, "127.0.0.4", n.sip)

	const calls = 10
	car := make(chan sippRun, 1)
	go func() {
		car <- runSIPp(t, 40*time.Second, "-sf", scenario(t, "uas.xml"), "-i", "127.0.0.1", "-p", strconv.Itoa(carPort),
			"-m", strconv.Itoa(calls))
	}()
	if !waitBoundUDP(fmt.Sprintf("127.0.0.1:%d", carPort), nil, 10*time.Second) {
		t.Fatal("the SIPp carrier did not start")
	}
	caller := runSIPp(t, 30*time.Second, "-sf", scenario(t, "uac_txn.xml"), "-i", "127.0.0.3", "-s", "100",
		"-r", "5", "-m", strconv.Itoa(calls), "-recv_timeout", "5000", k.addr)
	carrier := <-car
	if caller.code != 0 || caller.n("SuccessfulCall") != calls {
		t.Errorf("caller through Kamailio and cpsguard: %s\nkamailio:\n%s\ncpsguard:\n%s", caller.failure(), k.logTail(), n.logTail())
	}
	if carrier.code != 0 || carrier.n("SuccessfulCall") != calls {
		t.Errorf("SIPp carrier: %s", carrier.failure())
	}
	if b, _ := os.ReadFile(k.logPath); strings.Contains(string(b), "no via found") {
		t.Errorf("Kamailio dropped replies without its Via:\n%s", k.logTail())
	}
	if v := n.metric("cpsguard_sip_errors_total", `reason="no_via"`); v != 0 {
		t.Errorf("sip_errors_total{no_via} = %v, want 0", v)
	}
	if v := n.metric("cpsguard_calls_total", `outcome="forwarded"`); v != calls {
		t.Errorf("calls forwarded = %v, want %d", v, calls)
	}
}

// TestKamailioBehind: SIPp (transaction-aware, uac_txn.xml) → cpsguard →
// Kamailio as the carrier (stateful, record-routing) → a SIPp UAS that
// answers 200 without a 180 (uas.xml). Every call is answered, ACKed and
// hung up end to end: cpsguard's ACK and BYE follow Kamailio's
// Record-Route, Kamailio's answers reach cpsguard with cpsguard's Via on
// top, and cpsguard relays them to the caller with the caller's.
func TestKamailioBehind(t *testing.T) {
	redistest.Require(t, "sipp")
	uasPort := freeSIPPort(t)
	uas := fmt.Sprintf("127.0.0.1:%d", uasPort)
	k := startKamailio(t, "127.0.0.5", uas)
	// On Redis: the production path, where a call's admission and its
	// first carrier slot are one script (admit_pace).
	srv := redistest.Start(t)
	n := startNode(t, nodeConf{id: "before-kamailio", redis: srv.Addr(),
		peers:    []peerConf{{name: "sipp", sources: []string{"127.0.0.3/32"}, cps: 100}},
		carriers: []carrierConf{{name: "kamailio", addr: k.addr, cps: 100, extra: "probe: {interval: 0s}"}}}, true)

	const calls = 10
	car := make(chan sippRun, 1)
	go func() {
		car <- runSIPp(t, 40*time.Second, "-sf", scenario(t, "uas.xml"), "-i", "127.0.0.1", "-p", strconv.Itoa(uasPort),
			"-m", strconv.Itoa(calls))
	}()
	if !waitBoundUDP(uas, nil, 10*time.Second) {
		t.Fatal("the SIPp carrier did not start")
	}
	caller := runSIPp(t, 30*time.Second, "-sf", scenario(t, "uac_txn.xml"), "-i", "127.0.0.3", "-s", "100",
		"-r", "5", "-m", strconv.Itoa(calls), "-recv_timeout", "5000", n.sip)
	carrier := <-car
	if caller.code != 0 || caller.n("SuccessfulCall") != calls {
		t.Errorf("caller through cpsguard and Kamailio: %s\ncpsguard:\n%s\nkamailio:\n%s", caller.failure(), n.logTail(), k.logTail())
	}
	if carrier.code != 0 || carrier.n("SuccessfulCall") != calls {
		t.Errorf("SIPp UAS behind Kamailio: %s", carrier.failure())
	}
	if v := n.metric("cpsguard_sip_errors_total", `reason="no_via"`); v != 0 {
		t.Errorf("sip_errors_total{no_via} = %v, want 0", v)
	}
	if v := n.metric("cpsguard_calls_total", `outcome="forwarded"`); v != calls {
		t.Errorf("calls forwarded = %v, want %d", v, calls)
	}
	if v := n.metric("cpsguard_store_duration_seconds_count", `script="admit_pace"`); v != calls {
		t.Errorf("admit_pace runs = %v, want one per call (%d)", v, calls)
	}
}

// TestSIPpCarrierOverTCP: SIPp's transaction-aware caller, over UDP and
// over TCP, sends each call's ACK and BYE back to back; the carrier is
// SIPp over TCP (uas.xml, which fails a call whose BYE comes before its
// ACK: "unexpected message"). Every call is answered, ACKed and hung up:
// the node's ACK to a stream carrier, sent from a goroutine, is not
// overtaken by the BYE behind it (ackorder.go). Without that, 2 of 200
// calls failed in one of two runs here over UDP; sip's
// TestAckBeforeByeToStreamCarrier fails every run.
func TestSIPpCarrierOverTCP(t *testing.T) {
	redistest.Require(t, "sipp")
	for _, callerTransport := range []string{"u1", "t1"} {
		t.Run(callerTransport, func(t *testing.T) {
			carPort := freeSIPPort(t)
			n := startNode(t, nodeConf{id: "tcp-carrier",
				peers:    []peerConf{{name: "sipp", sources: []string{"127.0.0.3/32"}, cps: 100}},
				carriers: []carrierConf{{name: "sipp-tcp", addr: fmt.Sprintf("127.0.0.1:%d;transport=tcp", carPort), cps: 100, extra: "probe: {interval: 0s}"}}}, true)

			const calls = 200
			car := make(chan sippRun, 1)
			go func() {
				car <- runSIPp(t, 40*time.Second, "-sf", scenario(t, "uas.xml"), "-t", "t1", "-i", "127.0.0.1", "-p", strconv.Itoa(carPort),
					"-m", strconv.Itoa(calls))
			}()
			if !waitListening(fmt.Sprintf("127.0.0.1:%d", carPort), 10*time.Second) {
				t.Fatal("the SIPp carrier did not start")
			}
			caller := runSIPp(t, 30*time.Second, "-sf", scenario(t, "uac_txn.xml"), "-t", callerTransport, "-i", "127.0.0.3", "-s", "100",
				"-r", "50", "-m", strconv.Itoa(calls), "-recv_timeout", "5000", n.sip)
			carrier := <-car
			if carrier.code != 0 || carrier.n("SuccessfulCall") != calls {
				t.Errorf("SIPp carrier over TCP: %s", carrier.failure())
			}
			if caller.code != 0 || caller.n("SuccessfulCall") != calls {
				t.Errorf("caller: %s\ncpsguard:\n%s", caller.failure(), n.logTail())
			}
		})
	}
}
