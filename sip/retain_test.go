package sip

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/wire"
)

// TestAnsweredCallPinsNoDatagram: once an answered call's transactions
// ended at its ACK, nothing the node keeps for the call (its record, its
// dialog, its Tracker entry, what its ACK ended, kept for the linger)
// holds the text or the header block of a datagram of the call.
// wire.Parser puts a message's text in one string and its call headers in
// one allocation: a kept tag or Call-ID that is a part of it pins the
// whole message (h73 found the answer's To tag kept so by the fork set;
// 2a49bef the others).
func TestAnsweredCallPinsNoDatagram(t *testing.T) {
	const id = "pinned-call"
	var mu sync.Mutex
	alive := map[string]bool{}
	n := 0
	forget := func(k string) {
		mu.Lock()
		delete(alive, k)
		mu.Unlock()
	}
	prev := wire.VerifyParse
	wire.VerifyParse = func(data []byte, m sipmsg.Message, sp *sipmsg.Parser) {
		if prev != nil {
			prev(data, m, sp)
		}
		c, f := m.CallID(), m.From()
		if c == nil || string(*c) != id || f == nil {
			return
		}
		mu.Lock()
		n++
		name := "datagram " + strconv.Itoa(n) + " (" + shortOf(m) + ")"
		alive[name+": text"], alive[name+": header block"] = true, true
		mu.Unlock()
		// The Call-ID is a part of the message's one string, the From
		// header a part of its block.
		runtime.AddCleanup(unsafe.StringData(string(*c)), forget, name+": text")
		runtime.AddCleanup(f, forget, name+": header block")
	}
	t.Cleanup(func() { wire.VerifyParse = prev })

	h, _, peer, _ := rawAnsweringSetup(t)
	rawAnsweredCall(t, peer, h.udp, id)
	waitFor(t, func() bool { return h.p.acked.len() == 1 }, "the call's transactions ended at its ACK")
	time.Sleep(time.Second)
	for i := 0; i < 5; i++ {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if n < 3 {
		t.Fatalf("%d datagrams of the call went through wire.Parser, want the INVITE, the 200 and the ACK at least", n)
	}
	for k := range alive {
		t.Errorf("the call is up and its ACK in, yet %s is still reachable", k)
	}
}

// shortOf names a message: its method, or its status and CSeq method.
func shortOf(m sipmsg.Message) string {
	switch x := m.(type) {
	case *sipmsg.Request:
		return string(x.Method)
	case *sipmsg.Response:
		return strconv.Itoa(x.StatusCode) + " " + string(x.CSeq().MethodName)
	}
	return "?"
}
