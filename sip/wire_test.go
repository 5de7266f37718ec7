package sip

import (
	"flag"
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/wire"
)

// wireSends counts the messages the node wrote with its own writer during
// the package's tests; wireMismatches keeps the first few whose bytes were
// not sipgo's.
var (
	wireSends      atomic.Int64
	wireMu         sync.Mutex
	wireMismatches []string
	// parses counts the datagrams the node parsed with wire.Parser, and
	// parseMismatches keeps the first few sipgo parses otherwise.
	parses          atomic.Int64
	parseMismatches []string
)

// TestMain holds every message the proxy writes with wire.WriteUDP in
// this package's tests to sipgo's own bytes for it, and every datagram it
// parses with wire.Parser to sipgo's message for it: any difference fails
// the run. Not in a benchmark run (-bench), whose figures would count
// sipgo's writer and parser again.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		wire.Verify = verifyWire
		wire.VerifyParse = verifyParse
	}
	code := m.Run()
	wireMu.Lock()
	for _, s := range wireMismatches {
		fmt.Fprintln(os.Stderr, "FAIL: a message the node wrote differs from sipgo's bytes:", s)
		code = 1
	}
	for _, s := range parseMismatches {
		fmt.Fprintln(os.Stderr, "FAIL: a datagram the node parsed differs from sipgo's message for it:", s)
		code = 1
	}
	wireMu.Unlock()
	os.Exit(code)
}

// verifyParse is wire.VerifyParse in the package's tests: sipgo's parser
// must read the datagram into the same message, field by field.
func verifyParse(data []byte, m sipmsg.Message, sp *sipmsg.Parser) {
	parses.Add(1)
	want, err := sp.ParseSIP(data)
	if err == nil && reflect.DeepEqual(m, want) {
		return
	}
	wireMu.Lock()
	if len(parseMismatches) < 5 {
		parseMismatches = append(parseMismatches, fmt.Sprintf("%q: parsed\n%#v\nsipgo parses (error %v)\n%#v", data, m, err, want))
	}
	wireMu.Unlock()
}

// verifyWire is wire.Verify in the package's tests.
func verifyWire(_ sipmsg.Message, got []byte, want string) {
	wireSends.Add(1)
	if string(got) == want {
		return
	}
	wireMu.Lock()
	if len(wireMismatches) < 5 {
		wireMismatches = append(wireMismatches, fmt.Sprintf("wrote\n%q\nsipgo writes\n%q", got, want))
	}
	wireMu.Unlock()
}

// TestUDPSendsUseTheNodesWriter: a UDP call's 100 Trying and the INVITE
// to the carrier go through wire.WriteUDP (the ACK and BYE relays too,
// which the package's other tests hold to sipgo's bytes), and the
// datagrams of the call through wire.Parser (held to sipgo's messages).
func TestUDPSendsUseTheNodesWriter(t *testing.T) {
	if wire.Verify == nil {
		t.Skip("a benchmark run: sends are not counted (TestMain)")
	}
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	caller := siptest.StartCaller(t, "127.0.0.2")
	before, parsedBefore := wireSends.Load(), parses.Load()
	answeredCall(t, caller, h.udp)
	if n := wireSends.Load() - before; n < 2 {
		t.Fatalf("%d sends of an answered call went through the node's writer, want at least 2", n)
	}
	if n := parses.Load() - parsedBefore; n < 2 {
		t.Fatalf("%d datagrams of an answered call went through the node's parser, want at least 2 (the INVITE, the 200)", n)
	}
}

// TestNonSuccessAckOfReinviteGoesToTheCarrier: a peer in an answered
// call sends a re-INVITE whose Request-URI (or whose Route entry below the
// proxy's) names a third host. The proxy relays the re-INVITE to the
// carrier leg (prepareInDialog: "the request never reaches a host:port
// that is neither leg of its dialog"); the carrier refuses it (488) and
// the hop-by-hop ACK sipgo's transaction sends must go to the carrier.
// The ACK has no destination of its own (sipgo sends it where the INVITE
// went), and the node's writer at first sent it where its Route or
// Request-URI said: to the third host (h71).
func TestNonSuccessAckOfReinviteGoesToTheCarrier(t *testing.T) {
	for _, how := range []string{"request-uri", "route"} {
		t.Run(how, func(t *testing.T) {
			h, peer, car, ok := statelessSetup(t, nil)
			victim := startUDPEnd(t, "127.0.0.9", nil)
			vhost, vport, _ := net.SplitHostPort(victim.addr())
			vp, _ := strconv.Atoi(vport)
			refuseReInvites(car, 488, "Not Acceptable Here")
			re := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.INVITE)
			switch how {
			case "request-uri":
				re.Recipient = sipmsg.Uri{Scheme: "sip", User: "victim", Host: vhost, Port: vp}
			case "route":
				re.AppendHeader(sipmsg.NewHeader("Route", "<sip:"+victim.addr()+";lr>"))
			}
			peer.send(h.udp, withVia(re, peer.addr(), "z9hG4bK.nonsuccess-"+how))
			waitFor(t, func() bool { return len(car.requests(sipmsg.INVITE)) == 1 }, "the re-INVITE at the carrier")
			waitFor(t, func() bool {
				for _, r := range peer.responses() {
					if r.StatusCode == 488 {
						return true
					}
				}
				return false
			}, "the 488 at the peer")
			waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) > 0 }, "the ACK of the carrier's 488 at the carrier")
			if n := len(victim.requests(sipmsg.ACK)); n > 0 {
				t.Errorf("ACKs of the carrier's 488 at the peer-chosen %s: %d, want none", victim.addr(), n)
			}
		})
	}
}

// TestNonSuccessAckOfSRVCarrierGoesWhereTheInviteWent: a carrier named by
// host name without a port is reached at its SRV target's port; the
// INVITE's Request-URI carries the transport's default port (5060). The
// ACK of its 486 must go where the INVITE went, not to the SRV target's
// address at 5060 (h71).
func TestNonSuccessAckOfSRVCarrierGoesWhereTheInviteWent(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.77", func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsInvite() {
			res := sipmsg.NewResponseFromRequest(req, 486, "Busy Here", nil)
			res.To().Params.Add("tag", "busy")
			return res
		}
		return nil
	})
	dns := startStubDNS(t)
	dns.setSRV("_sip._udp.carrier.test", srvRec(10, 1, uint16(mustPort(t, car.addr())), "sbc.carrier.test"))
	dns.setIPs("sbc.carrier.test", "127.0.0.77")
	cfg := testConfig(config.Carrier{Name: "a", URI: "sip:carrier.test", CPS: 100, MaxWait: time.Second})
	adm, pacer := newFakes()
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Resolver: dns.resolver()})
	peer := startUDPEnd(t, "127.0.0.2", nil)
	peer.send(h.udp, rawInviteFrom(peer, h.udp, "srv-busy", "ftag-srv"))
	if r := finalOfRaw(peer, "srv-busy", sipmsg.INVITE, 0); r == nil || r.StatusCode != 486 {
		t.Fatalf("final = %v, want the carrier's 486", r)
	}
	if len(car.requests(sipmsg.INVITE)) == 0 {
		t.Fatal("no INVITE at the SRV target")
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) > 0 },
		"the ACK of the 486 at the carrier's SRV port (the INVITE's Request-URI names 5060)")
}
