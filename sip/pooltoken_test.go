package sip

import (
	"strconv"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// startRedisPool starts two nodes of one pool on cfg: a real redis-server
// carries their ended dialogs (calls.RedisEnded, as serve wires it), and
// they share the admission store and cfg's sip.dialog_secret.
func startRedisPool(t *testing.T, cfg *config.Config) (h1, h2 *harness) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := redistest.Start(t)
	ends := func() DialogEnds {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		if err := lua.Load(ctxT(t, 5*time.Second), c); err != nil {
			t.Fatal(err)
		}
		return callplaces.NewRedisEnded(c, "t:{ended:dialogs}", callplaces.RedisOptions{Timeout: time.Second})
	}
	cfg.SIP.DialogSecret = "a-pool-secret-of-sixteen-chars"
	store := admission.NewLocalStore(nil)
	start := func() *harness {
		_, pacer := newFakes()
		return startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: store, Pacer: pacer, DialogEnds: ends()})
	}
	return start(), start()
}

// routesVia returns the Record-Route values rrs, in order, naming node
// to where they named node from (the same token, sent to another node of
// the pool).
func routesVia(rrs []sipmsg.Header, from, to string) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, strings.Replace(rr.Value(), from, to, 1))
	}
	return out
}

// finalOfSeq waits for e's final response to the request of method m and
// CSeq seq (nil after 5 s).
func finalOfSeq(e *udpEnd, m sipmsg.RequestMethod, seq uint32) *sipmsg.Response {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range e.responses() {
			if c := r.CSeq(); r.StatusCode >= 200 && c != nil && c.MethodName == m && c.SeqNo == seq {
				return r
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// awaitRefused sends carrier e's INFO, as the callee of the call whose
// final answer to the caller was final, through the node at node with
// Route routes, every 100 ms until one is answered 481 (the pool store
// carried the end of e's token to that node: within about a second),
// for at most 10 s; it fails the test when none was.
func awaitRefused(t *testing.T, e *udpEnd, node string, routes []string, final *sipmsg.Response, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		seq := uint32(100 + i)
		e.send(node, calleeRequest(e, sipmsg.INFO, routes, final, "made-up-"+what, seq, "z9hG4bK.poll-"+what+"-"+strconv.Itoa(i)))
		got := 0 // no answer
		if r := finalOfSeq(e, sipmsg.INFO, seq); r != nil {
			got = r.StatusCode
		}
		if got == 481 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: its INFO through another node of the pool still answered %d (200: the caller's, relayed) after 10 s, want 481", what, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMovedOnTokenEndedPoolWide: a call through node 1 tried carrier x,
// which got the INVITE (and with it the Record-Route's dialog token) and
// failed it (503) before ringing; the call moved on to y, which answered.
// Node 1 refuses x's token (ownTokenGone), but node 2 of the same pool
// (same secret) did not hold the call and knew no end of that token: it
// relayed x's requests to the caller as the callee's. The move is now
// published to the pool as the end of x's token: node 2 answers x 481
// (counted dialog_ended) within the ended dialogs' delay, while y's
// requests and the caller's towards y still pass on both nodes, and y's
// BYE through node 2 ends the call.
func TestMovedOnTokenEndedPoolWide(t *testing.T) {
	x, y, cfg := rerouteCarriers(t, func(req *sipmsg.Request) bool { return req.IsInvite() && !msgpart.HasToTag(req) })
	h1, h2 := startRedisPool(t, cfg)
	peer := startUDPEnd(t, "127.0.0.2", func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsAck() {
			return nil
		}
		return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
	})
	ok := rawAnsweredCall(t, peer, h1.udp, "moved-on")
	xInv, yInv := x.requests(sipmsg.INVITE), y.requests(sipmsg.INVITE)
	if len(xInv) == 0 || len(yInv) == 0 {
		t.Fatalf("INVITEs at x %d, at y %d; want the call tried at x, then answered by y", len(xInv), len(yInv))
	}
	xRoutes := routesVia(xInv[0].GetHeaders("Record-Route"), h1.udp, h2.udp)
	yRoutes := routesVia(yInv[0].GetHeaders("Record-Route"), h1.udp, h2.udp)
	calleeTag := msgpart.Tag(ok.To().Params)

	awaitRefused(t, x, h2.udp, xRoutes, ok, "x")
	if n := sipErrors(h2, "dialog_ended"); n < 1 {
		t.Errorf("node 2 sip_errors_total{dialog_ended} = %v, want x's INFO counted", n)
	}

	// y, the call's carrier, and the caller towards y: relayed by both nodes.
	peer.reset()
	y.send(h2.udp, calleeRequest(y, sipmsg.INFO, yRoutes, ok, calleeTag, 20, "z9hG4bK.y-info-2"))
	if r := finalOfSeq(y, sipmsg.INFO, 20); r == nil || r.StatusCode != 200 {
		t.Fatalf("y's INFO through node 2: %v, want 200 from the caller", r)
	}
	y.send(h1.udp, calleeRequest(y, sipmsg.INFO, routesVia(yInv[0].GetHeaders("Record-Route"), h1.udp, h1.udp), ok, calleeTag, 21, "z9hG4bK.y-info-1"))
	if r := finalOfSeq(y, sipmsg.INFO, 21); r == nil || r.StatusCode != 200 {
		t.Fatalf("y's INFO through node 1: %v, want 200 from the caller", r)
	}
	for i, node := range []string{h1.udp, h2.udp} {
		info := inDialogOf(t, peer.caller(), node, ok, sipmsg.INFO)
		info.CSeq().SeqNo = uint32(30 + i)
		info.RemoveHeader("Route")
		rs := routesVia(ok.GetHeaders("Record-Route"), h1.udp, node)
		for j := len(rs) - 1; j >= 0; j-- {
			info.AppendHeader(sipmsg.NewHeader("Route", rs[j]))
		}
		peer.send(node, withVia(info, peer.addr(), "z9hG4bK.caller-info-"+strconv.Itoa(i)))
		if r := finalOfSeq(peer, sipmsg.INFO, uint32(30+i)); r == nil || r.StatusCode != 200 {
			t.Fatalf("the caller's INFO towards y through node %d: %v, want 200 from y", i+1, r)
		}
	}
	if n := len(peer.requests(sipmsg.INFO)); n != 2 {
		t.Fatalf("INFOs at the caller = %d, want y's 2", n)
	}

	// y's BYE through node 2 ends the call.
	y.send(h2.udp, calleeRequest(y, sipmsg.BYE, yRoutes, ok, calleeTag, 40, "z9hG4bK.y-bye"))
	if r := finalOfSeq(y, sipmsg.BYE, 40); r == nil || r.StatusCode != 200 {
		t.Fatalf("y's BYE through node 2: %v, want 200 from the caller", r)
	}
	if n := len(peer.requests(sipmsg.BYE)); n != 1 {
		t.Fatalf("BYEs at the caller = %d, want y's", n)
	}
}

// TestUnansweredRerouteTokensEndedPoolWide: a call that tried carrier x
// (503 before ringing) and then y, which refused it too with no
// Record-Route in its answer, ends unanswered without any token shown to
// the caller. Both carriers got an INVITE with a token; node 1 refuses
// both (it no longer holds the call), but node 2 relayed their requests
// to the caller. Every token of the call is now ended pool-wide.
func TestUnansweredRerouteTokensEndedPoolWide(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yCode int
	}{
		{"all carriers failed", 503}, // y's failure moves the call on too, past the last carrier
		{"last carrier refused", 486},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refuse := func(code int) func(*sipmsg.Request) *sipmsg.Response {
				return func(req *sipmsg.Request) *sipmsg.Response {
					if req.IsInvite() && !msgpart.HasToTag(req) {
						return sipmsg.NewResponseFromRequest(req, code, "No", nil)
					}
					return nil
				}
			}
			x := startUDPEnd(t, "127.0.0.1", refuse(503))
			y := startUDPEnd(t, "127.0.0.1", refuse(tc.yCode))
			cfg := testConfig(
				config.Carrier{Name: "x", URI: "sip:" + x.addr(), CPS: 100, MaxWait: time.Second},
				config.Carrier{Name: "y", URI: "sip:" + y.addr(), CPS: 100, MaxWait: time.Second})
			h1, h2 := startRedisPool(t, cfg)
			peer := startUDPEnd(t, "127.0.0.2", func(req *sipmsg.Request) *sipmsg.Response {
				if req.IsAck() {
					return nil
				}
				return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
			})
			id := "unanswered-" + strconv.Itoa(tc.yCode)
			peer.send(h1.udp, rawInviteFrom(peer, h1.udp, id, "ftag-"+id))
			final := finalOfRaw(peer, id, sipmsg.INVITE, 0)
			if final == nil || final.StatusCode != tc.yCode {
				t.Fatalf("final answer %v, want y's %d", final, tc.yCode)
			}
			if final.GetHeader("Record-Route") != nil {
				t.Fatal("the final answer showed a Record-Route; this test is about a call that showed none")
			}
			for _, c := range []struct {
				name string
				e    *udpEnd
			}{{"x", x}, {"y", y}} {
				inv := c.e.requests(sipmsg.INVITE)
				if len(inv) == 0 {
					t.Fatalf("no INVITE at %s", c.name)
				}
				awaitRefused(t, c.e, h2.udp, routesVia(inv[0].GetHeaders("Record-Route"), h1.udp, h2.udp), final, c.name)
			}
		})
	}
}
