//go:build linux

package sip

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// blackholeListener listens on TCP ip:0 with an accept backlog of 0: once
// one connection waits unaccepted, the kernel drops further SYNs, so a dial
// to it hangs (as to a carrier behind a firewall that drops).
func blackholeListener(t *testing.T, ip string) (*net.TCPListener, string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	sa := &syscall.SockaddrInet4{}
	copy(sa.Addr[:], net.ParseIP(ip).To4())
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "blackhole")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.(*net.TCPListener), ln.Addr().String()
}

// readSIP reads one SIP message from a stream.
func readSIP(t *testing.T, r *bufio.Reader) sipmsg.Message {
	t.Helper()
	var head bytes.Buffer
	length := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if strings.TrimSpace(line) == "" && head.Len() == 0 {
			continue // keep-alive
		}
		head.WriteString(line)
		if l := strings.ToLower(line); strings.HasPrefix(l, "content-length:") || strings.HasPrefix(l, "l:") {
			length, _ = strconv.Atoi(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]))
		}
		if line == "\r\n" {
			break
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("read body: %v", err)
	}
	m, err := sipmsg.ParseMessage(append(head.Bytes(), body...))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, head.String())
	}
	return m
}

// TestStrayAnswerOverUDPDoesNotStallTheWorker: a call whose carrier leg is
// TCP ends its transactions at the caller's ACK; a 2xx "retransmission"
// that then comes over UDP from the carrier's address (the carrier
// closed its connection and drops new ones) makes the node send the ACK
// again (ackAgain), which dials the carrier (up to sipgo's one-minute
// dial timeout here). That must not happen on the UDP worker that read
// the 2xx (sipgo hands each response to a goroutine of its own): every
// other message of that worker, the Call-ID's OPTIONS here, would wait
// with it. Linux: the kernel drops SYNs past a listener's backlog.
func TestStrayAnswerOverUDPDoesNotStallTheWorker(t *testing.T) {
	h, ok, wire := ackedCallToBlackhole(t)

	// The 2xx again, over UDP from the carrier's address.
	siptest.WriteRaw(t, "127.0.0.1", h.udp, wire)

	// An OPTIONS of the same Call-ID from the carrier: the same worker.
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	la := uc.LocalAddr().(*net.UDPAddr)
	opt := "OPTIONS sip:" + h.udp + " SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:" + strconv.Itoa(la.Port) + ";branch=z9hG4bK-opt-stall;rport\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:car@127.0.0.1>;tag=o1\r\nTo: <sip:node@" + h.udp + ">\r\n" +
		"Call-ID: " + msgpart.CallID(ok) + "\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
	ra, _ := net.ResolveUDPAddr("udp", h.udp)
	time.Sleep(100 * time.Millisecond) // the 2xx first
	if _, err := uc.WriteToUDP([]byte(opt), ra); err != nil {
		t.Fatal(err)
	}
	uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, _, err := uc.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("the OPTIONS after the carrier's UDP 2xx got no answer (%v): the worker that read the 2xx is dialling the carrier", err)
	}
	t.Logf("answer: %q", strings.SplitN(string(buf[:n]), "\r\n", 2)[0])
}

// TestAckAgainDialBounded: the ACK sent again for a carrier's 2xx
// retransmission (ackAgain) opens the carrier's TCP connection, when it is
// gone, within connectTimeout; sipgo's WriteMsg dials under no deadline
// but its dialer's minute, so each such 2xx held a goroutine that long
// against a carrier that drops SYNs. Linux: the kernel drops SYNs past a
// listener's backlog.
func TestAckAgainDialBounded(t *testing.T) {
	h, ok, _ := ackedCallToBlackhole(t)
	var a *ackedCall
	h.p.acked.mu.Lock()
	for _, c := range h.p.acked.m {
		if c.callID == msgpart.CallID(ok) {
			a = c
		}
	}
	h.p.acked.mu.Unlock()
	if a == nil {
		t.Fatal("the ACKed call is not kept")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.p.ackAgain(a)
	}()
	select {
	case <-done:
	case <-time.After(6 * connectTimeout):
		t.Fatalf("the ACK sent again still dials the carrier after %v (connectTimeout %v)", 6*connectTimeout, connectTimeout)
	}
}

// ackedCallToBlackhole places a call through a node to a raw TCP carrier
// on a blackholeListener, answered 200 (wire: the 200 as the carrier
// wrote it) and ACKed by the caller, the call's transactions ended at the
// ACK; then the carrier closes its connection and takes no new one (the
// node's dial to it hangs). It skips when the kernel does not drop SYNs.
func ackedCallToBlackhole(t *testing.T) (h *harness, ok *sipmsg.Response, wire []byte) {
	t.Helper()
	ln, carAddr := blackholeListener(t, "127.0.0.1")
	cc := config.Carrier{Name: "a", URI: "sip:" + carAddr + ";transport=tcp", CPS: 100, MaxWait: time.Second}
	adm, pacer := newFakes()
	h = startProxy(t, testConfig(cc), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")

	okc := make(chan *sipmsg.Response, 1)
	go func() {
		okc <- caller.Final(ctxT(t, 10*time.Second), caller.Invite(h.udp))
	}()
	ln.SetDeadline(time.Now().Add(5 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	inv, isReq := readSIP(t, r).(*sipmsg.Request)
	if !isReq || inv.Method != sipmsg.INVITE {
		t.Fatalf("carrier got %v, want the INVITE", inv)
	}
	res := sipmsg.NewResponseFromRequest(inv, 200, "OK", nil)
	res.To().Params.Add("tag", "car-tag")
	up := sipmsg.NewParams()
	up.Add("transport", "tcp")
	res.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "callee", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port,
		UriParams: up}})
	wire = []byte(res.String())
	if _, err := conn.Write(wire); err != nil {
		t.Fatalf("write 200: %v", err)
	}
	ok = <-okc
	if ok == nil || ok.StatusCode != 200 {
		t.Fatalf("caller's final %v, want 200", ok)
	}
	ack := inDialogOf(t, caller, h.udp, ok, sipmsg.ACK)
	ack.CSeq().SeqNo = ok.CSeq().SeqNo
	if err := caller.Client().WriteRequest(ack); err != nil {
		t.Fatalf("caller's ACK: %v", err)
	}
	if got, isReq := readSIP(t, r).(*sipmsg.Request); !isReq || got.Method != sipmsg.ACK {
		t.Fatalf("carrier got %v, want the ACK", got)
	}
	waitFor(t, func() bool { return h.p.acked.len() == 1 }, "the call's transactions ended at the ACK")

	// The carrier hangs up its connection and takes no new one.
	conn.Close()
	waitFor(t, func() bool { _, err := h.p.tp.GetConnection("tcp", carAddr); return err != nil },
		"the node to drop the carrier's closed connection")
	filler, err := net.DialTimeout("tcp", carAddr, 2*time.Second)
	if err != nil {
		t.Fatalf("filler: %v", err)
	}
	t.Cleanup(func() { filler.Close() })
	if c, err := net.DialTimeout("tcp", carAddr, 300*time.Millisecond); err == nil {
		c.Close()
		t.Skip("the kernel did not drop SYNs past the backlog")
	}
	return h, ok, wire
}
