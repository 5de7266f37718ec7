package sip

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
)

// readStreamResponse reads the next response on r (a SIP stream): its
// header section and its Content-Length body.
func readStreamResponse(t *testing.T, r *bufio.Reader) *sipmsg.Response {
	t.Helper()
	var head strings.Builder
	length := 0
	for i := 0; i < 200; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading a response: %v", err)
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("reading a response body: %v", err)
	}
	m, err := sipmsg.ParseMessage(append([]byte(head.String()), body...))
	if err != nil {
		t.Fatalf("parsing %q: %v", head.String(), err)
	}
	res, ok := m.(*sipmsg.Response)
	if !ok {
		t.Fatalf("a request on the caller's connection: %s", m.String())
	}
	return res
}

// TestStreamCallerAckBeforeBye: a caller over TCP that sends its ACK and
// BYE back to back (one write) to a carrier over UDP. sipgo hands every
// message read on a stream to a goroutine of its own, so the BYE could
// reach the carrier before the ACK (a UAS waiting for the ACK fails the
// call). The node now relays such an ACK from the screen, in the
// connection's read loop, as it does over UDP: the carrier gets every
// call's ACK before its BYE.
func TestStreamCallerAckBeforeBye(t *testing.T) {
	car := startAnsweringEnd(t, nil)
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 1000, MaxWait: time.Second})
	cfg.SIP.TCP = config.TCP{IdleTimeout: time.Minute, MaxConnections: 8, MaxConnectionsPerSource: 2}
	h := startProxy(t, cfg, adm, pacer)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := c.LocalAddr().String()
	r := bufio.NewReader(c)
	const calls = 30
	for i := range calls {
		id := fmt.Sprint("stream-ack-", i)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(tcpInvite(local, h.tcp, id))); err != nil {
			t.Fatal(err)
		}
		var ok *sipmsg.Response
		for range 10 {
			if res := readStreamResponse(t, r); res.StatusCode >= 200 {
				ok = res
				break
			}
		}
		if ok == nil || ok.StatusCode != 200 {
			t.Fatalf("call %d: final %v, want 200", i, ok)
		}
		var out []byte
		for j, m := range []sipmsg.RequestMethod{sipmsg.ACK, sipmsg.BYE} {
			req := inDialogOf(t, &siptest.Caller{Addr: local}, h.tcp, ok, m)
			if m == sipmsg.ACK {
				req.CSeq().SeqNo = ok.CSeq().SeqNo
			}
			host, port, _ := net.SplitHostPort(local)
			p, _ := strconv.Atoi(port)
			v := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "TCP", Host: host, Port: p, Params: sipmsg.NewParams()}
			v.Params.Add("branch", fmt.Sprint("z9hG4bK-", id, "-", j))
			req.PrependHeader(v)
			req.SetBody(nil)
			out = append(out, req.String()...)
		}
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
		if res := readStreamResponse(t, r); res.StatusCode != 200 || res.CSeq().MethodName != sipmsg.BYE {
			t.Fatalf("call %d: the BYE's answer %s %s, want 200 BYE", i, res.StartLine(), res.CSeq().Value())
		}
	}
	car.mu.Lock()
	defer car.mu.Unlock()
	acked := map[string]bool{}
	byes := 0
	for _, req := range car.reqs {
		id := req.CallID().Value()
		switch req.Method {
		case sipmsg.ACK:
			acked[id] = true
		case sipmsg.BYE:
			byes++
			if !acked[id] {
				t.Errorf("%s: the BYE reached the carrier before the ACK", id)
			}
		}
	}
	if byes != calls || len(acked) != calls {
		t.Fatalf("the carrier got %d ACKs and %d BYEs, want %d each", len(acked), byes, calls)
	}
}
