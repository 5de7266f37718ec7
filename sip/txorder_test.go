package sip

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// TestCarrierAnswersKeepTheirOrder: a carrier's 180, 183 and 200 sent back
// to back reach the caller, all three, in that order. Each response ran
// on a goroutine of sipgo's own and raced the next into the INVITE's
// transaction: the 180 or 183 reached it after the 200 and was dropped,
// or 183 came before 180 (h67: in half the runs). The transactions the
// node opened are forgotten when they end (at the caller's ACK).
func TestCarrierAnswersKeepTheirOrder(t *testing.T) {
	car := startAnsweringEndWith(t, func(car *udpEnd, req *sipmsg.Request, ok200 func(*sipmsg.Request) *sipmsg.Response) *sipmsg.Response {
		if !req.IsInvite() {
			return ok200(req)
		}
		via := req.Via()
		to := &net.UDPAddr{IP: net.ParseIP(via.Host), Port: via.Port}
		for _, code := range []int{180, 183} {
			res := sipmsg.NewResponseFromRequest(req, code, "Early", nil)
			res.To().Params.Add("tag", "raw-callee")
			_, _ = car.conn.WriteToUDP([]byte(res.String()), to)
		}
		return ok200(req)
	})
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 1000, MaxWait: time.Second}), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	const calls = 30
	for i := range calls {
		id := fmt.Sprint("order-", i)
		rawAnsweredCall(t, peer, h.udp, id) // the ACK ends the INVITE's transactions
	}
	for i := range calls {
		id := fmt.Sprint("order-", i)
		var got []int
		for _, r := range peer.responses() {
			if msgpart.CallID(r) == id && r.StatusCode > 100 {
				got = append(got, r.StatusCode)
			}
		}
		if fmt.Sprint(got[:min(3, len(got))]) != "[180 183 200]" {
			t.Errorf("call %s: the caller got %v, want 180, 183, 200 in that order", id, got)
		}
	}
	waitFor(t, func() bool { return h.p.txOrder.Len() == 0 }, "the ended transactions forgotten")
}
