package sip

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/internal/siptest"
)

// A request whose source is the node's own UDP listener (a peer's prefix
// that holds the node's address, and a datagram spoofed from it) does not
// take over the listener's entry in sipgo's pool: requests sent from the
// listener (Laddr) still find it there, also once the source is forgotten.
// Before the fix the source registry replaced the entry and, at its
// expiry, deleted it: every INVITE forwarded from that listener then
// failed (sipgo tried to bind a new socket to the listener's address):
// calls 503.
func TestOwnListenerAddressNotASource(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.3", nil)
	cfg := testConfig(carrierCfg("a", car))
	cfg.Peers[0].Sources = append(cfg.Peers[0].Sources, netip.MustParsePrefix("127.0.0.1/32"))
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	var ln *net.UDPConn
	for _, l := range h.p.listeners {
		if l.udp != nil {
			ln = l.udp
		}
	}
	own := ln.LocalAddr().(*net.UDPAddr).AddrPort()
	pool := h.p.tp.Pool("udp")

	// Answers to the forged INVITE go to sink (its Via, no rport).
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	via := sink.LocalAddr().String()
	raw := "INVITE sip:100@" + own.String() + " SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP " + via + ";branch=z9hG4bK-own-listener\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:x@" + via + ">;tag=f1\r\nTo: <sip:100@" + own.String() + ">\r\n" +
		"Call-ID: own-listener-source\r\nCSeq: 1 INVITE\r\n" +
		"Contact: <sip:x@" + via + ">\r\nContent-Length: 0\r\n\r\n"
	msg, err := sipmsg.ParseMessage([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	// As a worker hands it over once read on the listener from its own
	// address.
	msg.SetTransport("UDP")
	msg.SetSource(own.String())
	h.p.deliverUDP(ln, own, msg.(*sipmsg.Request))
	waitFor(t, func() bool { return len(car.Invites()) == 1 }, "the forged INVITE forwarded")
	h.p.sources.expire(time.Now().Add(time.Minute))

	if c := pool.Get(own.String()); c == nil {
		t.Errorf("the listener %s is no longer in sipgo's pool", own)
	} else if _, _ = c.TryClose(); c != h.p.udpConns[ln] {
		t.Errorf("sipgo's pool holds %T %p for the listener %s, want its own %p", c, c, own, h.p.udpConns[ln])
	}

	// A call from the peer still leaves from the listener.
	before := len(car.Invites())
	caller := siptest.StartCaller(t, "127.0.0.2")
	answeredCall(t, caller, h.udp)
	inv := car.Invites()
	if len(inv) != before+1 {
		t.Fatalf("carrier INVITEs = %d, want %d", len(inv), before+1)
	}
	if v := inv[len(inv)-1].Via(); net.JoinHostPort(v.Host, strconv.Itoa(v.Port)) != own.String() {
		t.Errorf("carrier's top Via = %s, want %s", v.Value(), own)
	}
}

// TestPoolHoldsSipgoConnections: sipgo's UDP transport asserts its own
// connection type on what its pool hands it (createConnection, reached
// when a lookup races a source's eviction), so the pool must hold sipgo's
// *UDPConnection for the node's listeners and the sources it registers,
// never a wrapper of the node's (a panic in a sipgo goroutine: h39's
// review of a send path of the node's own, since reverted).
func TestPoolHoldsSipgoConnections(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	answeredCall(t, caller, h.udp)
	for _, key := range []string{h.udp, caller.Addr} {
		c, err := h.p.tp.GetConnection("udp", key)
		if err != nil || c == nil {
			t.Fatalf("sipgo's pool has nothing under %s: %v", key, err)
		}
		if _, ok := c.(*sipmsg.UDPConnection); !ok {
			t.Errorf("sipgo's pool holds a %T under %s, want *sip.UDPConnection", c, key)
		}
		_, _ = c.TryClose()
	}
}
