package sip

import (
	"net"
	"strconv"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// TestHungUpAnswerGoesToCarrierNotContact: a 2xx the node hangs up itself
// (here one with no Via left for the caller: 502 upstream, ACK and BYE
// downstream) is ended at the address the INVITE went to, never at the
// Contact the carrier chose: a carrier's Contact naming another address
// would turn the node's ACK and BYE (and the BYE's retransmissions, or a
// TCP or TLS dial) on any host the config never granted.
func TestHungUpAnswerGoesToCarrierNotContact(t *testing.T) {
	victim := startUDPEnd(t, "127.0.0.3", nil)
	car := startUDPEnd(t, "127.0.0.1", nil)
	vhost, vport, _ := net.SplitHostPort(victim.addr())
	vp, _ := strconv.Atoi(vport)
	car.mu.Lock()
	car.answer = func(req *sipmsg.Request) *sipmsg.Response {
		switch {
		case req.IsAck():
			return nil
		case req.IsInvite():
			res := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
			res.To().Params.Add("tag", "hostile")
			// Only the node's own Via: nobody upstream to relay it to.
			top := res.Via().Clone()
			for res.RemoveHeader("Via") {
			}
			res.PrependHeader(top)
			res.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "x", Host: vhost, Port: vp}})
			return res
		}
		return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
	}
	car.mu.Unlock()
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	peer.send(h.udp, rawInviteFrom(peer, h.udp, "hung-up-contact", "ftag-hc"))
	res := finalOfRaw(peer, "hung-up-contact", sipmsg.INVITE, 0)
	if res == nil || res.StatusCode != 502 {
		t.Fatalf("caller's final answer = %v, want the node's 502", res)
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.BYE)) >= 1 || len(victim.requests(sipmsg.BYE)) >= 1 }, "the node's BYE of the 2xx")
	if n, m := len(victim.requests(sipmsg.ACK)), len(victim.requests(sipmsg.BYE)); n+m > 0 {
		t.Errorf("the Contact's address (no carrier's) got %d ACKs and %d BYEs from the node", n, m)
	}
	if len(car.requests(sipmsg.ACK)) == 0 || len(car.requests(sipmsg.BYE)) == 0 {
		t.Errorf("the carrier got %d ACKs and %d BYEs, want the node's ACK and BYE of its 2xx",
			len(car.requests(sipmsg.ACK)), len(car.requests(sipmsg.BYE)))
	}
	if got := car.requests(sipmsg.BYE); len(got) > 0 && got[0].Recipient.Host != vhost {
		t.Errorf("the BYE's Request-URI = %s, want the Contact's", got[0].Recipient.String())
	}
}
