package sip

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/admission"
	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
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

// TestForkedSecondAnswerHungUp: a carrier that answers one INVITE twice
// with different To tags (a forking carrier, or a broken one) opens two
// dialogs for one admitted call and one max_calls place. The caller gets
// the first answer only; the node ends the second at the carrier (ACK and
// BYE to the address the INVITE went to), and does so once however often
// the carrier retransmits it. Before, the second 2xx was relayed: a caller
// that kept both ran two calls on one place, and once the first ended the
// second's BYE was refused 481, so it stayed up at the carrier.
func TestForkedSecondAnswerHungUp(t *testing.T) {
	car := startAnsweringEndWith(t, func(car *udpEnd, req *sipmsg.Request, first func(*sipmsg.Request) *sipmsg.Response) *sipmsg.Response {
		res := first(req)
		if req.IsInvite() && !req.To().Params.Has("tag") {
			fork := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
			fork.To().Params.Add("tag", "fork-b")
			fork.AppendHeader(res.Contact().Clone())
			to := net.JoinHostPort(req.Via().Host, strconv.Itoa(req.Via().Port))
			go func() {
				time.Sleep(50 * time.Millisecond) // after the first answer
				for range 3 {                     // and its retransmissions
					car.send(to, fork)
				}
			}()
		}
		return res
	})
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
	cfg.Peers[0].MaxCalls = 5
	adm, pacer := newFakes()
	tr := callplaces.NewTracker(callplaces.NewLocalStore(nil), callplaces.TrackerOptions{TTL: time.Minute})
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Calls: tr})
	peer := startUDPEnd(t, "127.0.0.2", nil)
	rawAnsweredCall(t, peer, h.udp, "forked")
	waitFor(t, func() bool {
		for _, r := range car.requests(sipmsg.BYE) {
			if msgpart.Tag(r.To().Params) == "fork-b" {
				return true
			}
		}
		return false
	}, "the node's BYE of the second answer at the carrier")
	// Each copy of the second answer is ACKed again: once the third ACK is
	// at the carrier, all three were handled.
	waitFor(t, func() bool {
		n := 0
		for _, r := range car.requests(sipmsg.ACK) {
			if msgpart.Tag(r.To().Params) == "fork-b" {
				n++
			}
		}
		return n == 3
	}, "an ACK of each copy of the second answer")
	for _, r := range peer.responses() {
		if r.IsSuccess() && r.CSeq().MethodName == sipmsg.INVITE && msgpart.Tag(r.To().Params) != "raw-callee" {
			t.Errorf("the caller got a second answer, To tag %q", msgpart.Tag(r.To().Params))
		}
	}
	byes := 0
	for _, r := range car.requests(sipmsg.BYE) {
		if msgpart.Tag(r.To().Params) == "fork-b" {
			byes++
		}
	}
	if byes != 1 {
		t.Errorf("the node sent %d BYEs of the second answer, want 1", byes)
	}
	if n := tr.Live(); n != 1 {
		t.Errorf("tracked calls = %d, want the answered one", n)
	}
}

// startRawCarrierProxy starts a proxy whose one carrier is car, with a
// Tracker on an in-process store and a peer max_calls of 5, and returns
// it, the Tracker and the peer's places in use.
func startRawCarrierProxy(t *testing.T, car *udpEnd) (*harness, *callplaces.Tracker, func() int) {
	t.Helper()
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
	cfg.Peers[0].MaxCalls = 5
	adm, pacer := newFakes()
	store := callplaces.NewLocalStore(nil)
	tr := callplaces.NewTracker(store, callplaces.TrackerOptions{TTL: time.Minute})
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, Calls: tr})
	return h, tr, peerPlaces(t, store)
}

// TestCarrierByeWithCallersTagEndsTheCall: a carrier that answers with
// the caller's From tag as its own To tag (a broken UAS: RFC 3261 19.3
// asks for a random one) sends in-dialog requests whose tags are equal,
// so the tags alone do not say which leg sent them; from the carrier's
// address they are the carrier's. Its BYE was taken for the caller's,
// refused 403 (wrong_leg), and the call held its places until the
// caller's own BYE or max_call_duration.
func TestCarrierByeWithCallersTagEndsTheCall(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	car.mu.Lock()
	car.answer = func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsInvite() {
			res := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
			res.To().Params.Add("tag", msgpart.Tag(req.From().Params))
			res.AppendHeader(car.contact())
			return res
		}
		return nil
	}
	car.mu.Unlock()
	h, tr, live := startRawCarrierProxy(t, car)
	peer := startUDPEnd(t, "127.0.0.2", func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsAck() {
			return nil
		}
		return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
	})
	ok := rawAnsweredCall(t, peer, h.udp, "same-tag")
	if live() != 1 {
		t.Fatalf("places after the answer = %d, want 1", live())
	}
	// The carrier's BYE, as the callee: From its To, To the caller's From,
	// Route the Record-Route in order.
	bye := sipmsg.NewRequest(sipmsg.BYE, sipmsg.Uri{Scheme: "sip", User: "caller", Host: "127.0.0.2"})
	for _, rr := range ok.GetHeaders("Record-Route") {
		bye.AppendHeader(sipmsg.NewHeader("Route", rr.Value()))
	}
	mf := sipmsg.MaxForwardsHeader(70)
	bye.AppendHeader(&mf)
	f, to := ok.To().AsFrom(), ok.From().AsTo()
	bye.AppendHeader(&f)
	bye.AppendHeader(&to)
	bye.AppendHeader(sipmsg.HeaderClone(ok.CallID()))
	bye.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 50, MethodName: sipmsg.BYE})
	car.send(h.udp, withVia(bye, car.addr(), "z9hG4bK.car-bye"))
	waitFor(t, func() bool { return len(car.responses()) > 0 }, "an answer to the carrier's BYE")
	if got := car.responses()[0].StatusCode; got != 200 {
		t.Fatalf("carrier's BYE answered %d, want the caller's 200", got)
	}
	if len(peer.requests(sipmsg.BYE)) != 1 {
		t.Errorf("the caller got %d BYEs, want the carrier's", len(peer.requests(sipmsg.BYE)))
	}
	waitFor(t, func() bool { return live() == 0 && tr.Live() == 0 }, "the call's places given back")
}

// TestUntaggedAnswerIsNotRelayed: a carrier's 2xx without a To tag forms
// no dialog: relayed, its caller could neither ACK nor end it, and the call
// held its max_calls places until max_call_duration (h46). The caller gets
// 502, the carrier an ACK and a BYE, and the call holds nothing.
func TestUntaggedAnswerIsNotRelayed(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	car.mu.Lock()
	car.answer = func(req *sipmsg.Request) *sipmsg.Response {
		switch {
		case req.IsInvite():
			res := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
			res.To().Params.Remove("tag") // sipgo adds one
			res.AppendHeader(car.contact())
			return res
		case req.Method == sipmsg.BYE:
			return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
		}
		return nil
	}
	car.mu.Unlock()
	h, tr, live := startRawCarrierProxy(t, car)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	peer.send(h.udp, rawInviteFrom(peer, h.udp, "untagged", "ftag-untagged"))
	if r := finalOfRaw(peer, "untagged", sipmsg.INVITE, 0); r == nil || r.StatusCode != 502 {
		t.Fatalf("caller's final %v, want 502", r)
	}
	waitFor(t, func() bool { return len(car.requests(sipmsg.ACK)) >= 1 && len(car.requests(sipmsg.BYE)) == 1 },
		"the untagged answer ACKed and hung up at the carrier")
	waitFor(t, func() bool { return live() == 0 && tr.Live() == 0 }, "the call holding nothing")
	if n := sipErrors(h, "malformed"); n < 1 {
		t.Errorf("sip_errors_total{malformed} = %v, want the untagged answer counted", n)
	}
}

// rerouteCarriers starts carrier x, which answers 503 to the requests
// refuses picks (and nothing to the others), carrier y, which answers
// every call, and a configuration whose route tries x, then y.
func rerouteCarriers(t *testing.T, refuses func(*sipmsg.Request) bool) (x, y *udpEnd, cfg *config.Config) {
	t.Helper()
	x = startUDPEnd(t, "127.0.0.1", func(req *sipmsg.Request) *sipmsg.Response {
		if refuses(req) {
			return sipmsg.NewResponseFromRequest(req, 503, "Service Unavailable", nil)
		}
		return nil
	})
	y = startUDPEnd(t, "127.0.0.1", nil)
	self := y.addr()
	y.mu.Lock()
	y.answer = rawAnswerer(func() string { return self }, nil)
	y.mu.Unlock()
	cfg = testConfig(
		config.Carrier{Name: "x", URI: "sip:" + x.addr(), CPS: 100, MaxWait: time.Second},
		config.Carrier{Name: "y", URI: "sip:" + y.addr(), CPS: 100, MaxWait: time.Second})
	return x, y, cfg
}

// TestFailedCarrierTokenRefused: a call rerouted from carrier x (503
// before ringing) to carrier y keeps going on y, but x still held a
// dialog token: the Record-Route of the INVITE it refused. x could use it
// for the call's whole life, from its own address (the token's carrier
// leg), to reach the caller as the callee: requests the caller never had
// a dialog for, taking the callee side's per-dialog rate (shared with y,
// so y's own BYE and re-INVITEs were refused 503 while x kept the bucket
// empty) and its re-INVITE budget (a session refresh refused ends the
// call), or a BYE whose 481 set the call's pending end. A token of an
// attempt the call has moved on from is refused: 481, never relayed.
func TestFailedCarrierTokenRefused(t *testing.T) {
	x, y, cfg := rerouteCarriers(t, (*sipmsg.Request).IsInvite)
	adm, pacer := newFakes()
	h := startProxy(t, cfg, adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsAck() {
			return nil
		}
		return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
	})
	ok := rawAnsweredCall(t, peer, h.udp, "rerouted")
	invs := x.requests(sipmsg.INVITE)
	if len(invs) == 0 || len(y.requests(sipmsg.INVITE)) == 0 {
		t.Fatalf("INVITEs at x %d, at y %d; want the call tried at x, then answered by y", len(invs), len(y.requests(sipmsg.INVITE)))
	}
	// x's INFO as a callee of the call: its own tag, the caller's From as
	// To, the Route its INVITE's Record-Route gave it.
	info := sipmsg.NewRequest(sipmsg.INFO, sipmsg.Uri{Scheme: "sip", User: "caller", Host: "127.0.0.2"})
	for _, rr := range invs[0].GetHeaders("Record-Route") {
		info.AppendHeader(sipmsg.NewHeader("Route", rr.Value()))
	}
	mf := sipmsg.MaxForwardsHeader(70)
	info.AppendHeader(&mf)
	from := &sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sip", User: "x", Host: "127.0.0.1"}, Params: sipmsg.NewParams()}
	from.Params.Add("tag", "x-made-up")
	info.AppendHeader(from)
	to := ok.From().AsTo()
	info.AppendHeader(&to)
	info.AppendHeader(sipmsg.HeaderClone(ok.CallID()))
	info.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 7, MethodName: sipmsg.INFO})
	peer.reset()
	x.send(h.udp, withVia(info, x.addr(), "z9hG4bK.x-info"))
	waitFor(t, func() bool { return len(x.responses()) > 0 || len(peer.requests(sipmsg.INFO)) > 0 }, "the node's answer to x's INFO, or the INFO at the caller")
	if n := len(peer.requests(sipmsg.INFO)); n != 0 {
		t.Fatalf("the caller got %d INFO from carrier x, which the call moved on from; want none", n)
	}
	if got := x.responses()[0].StatusCode; got != 481 {
		t.Errorf("x's INFO answered %d, want 481", got)
	}
}

// calleeRequest is a request of carrier e as the callee of the call
// answered ok: its own tag (tag) in From, the caller's From as To, Route
// routes, CSeq seq; sent to the node at proxy.
func calleeRequest(e *udpEnd, method sipmsg.RequestMethod, routes []string, ok *sipmsg.Response, tag string, seq uint32, branch string) *sipmsg.Request {
	req := sipmsg.NewRequest(method, sipmsg.Uri{Scheme: "sip", User: "caller", Host: "127.0.0.2"})
	for _, r := range routes {
		req.AppendHeader(sipmsg.NewHeader("Route", r))
	}
	mf := sipmsg.MaxForwardsHeader(70)
	req.AppendHeader(&mf)
	from := &sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sip", User: "callee", Host: "127.0.0.1"}, Params: sipmsg.NewParams()}
	from.Params.Add("tag", tag)
	req.AppendHeader(from)
	to := ok.From().AsTo()
	req.AppendHeader(&to)
	req.AppendHeader(sipmsg.HeaderClone(ok.CallID()))
	req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: seq, MethodName: method})
	req.AppendHeader(e.contact())
	return withVia(req, e.addr(), branch)
}

// TestFailedCarrierCannotSpendTheReinviteBudget: the re-INVITE budget of
// a dialog (6 a minute, pool-wide) was keyed by the Call-ID and the
// caller's tag only. Carrier x, which failed the call before it moved on
// to carrier y, still holds the token of its own attempt; the node that
// set the call up refuses it (TestFailedCarrierTokenRefused), but another
// node of the pool does not hold the call and knows no end of it, so x
// could spend the budget through that node, and y's session refresh was
// refused 503 (a refresh refused ends the call). The budget is now the
// dialog's with its carrier leg: x's re-INVITEs count against x's.
func TestFailedCarrierCannotSpendTheReinviteBudget(t *testing.T) {
	x, y, cfg := rerouteCarriers(t, func(req *sipmsg.Request) bool { return req.IsInvite() && !msgpart.HasToTag(req) })
	cfg.SIP.DialogSecret = "a-pool-secret-of-sixteen-chars"
	store := admission.NewLocalStore(nil)
	_, pacer1 := newFakes()
	_, pacer2 := newFakes()
	h1 := startProxy(t, cfg, store, pacer1)
	h2 := startProxy(t, cfg, store, pacer2) // another node of the pool
	peer := startUDPEnd(t, "127.0.0.2", func(req *sipmsg.Request) *sipmsg.Response {
		if req.IsAck() {
			return nil
		}
		res := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
		if req.IsInvite() {
			res.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: "127.0.0.2"}})
		}
		return res
	})
	ok := rawAnsweredCall(t, peer, h1.udp, "budget")
	invs := x.requests(sipmsg.INVITE)
	if len(invs) == 0 {
		t.Fatal("the call was not tried at x first")
	}
	// x's route: its INVITE's Record-Route, naming the other node.
	var xRoutes []string
	for _, rr := range invs[0].GetHeaders("Record-Route") {
		xRoutes = append(xRoutes, strings.Replace(rr.Value(), h1.udp, h2.udp, 1))
	}
	for i := range reinviteLimit {
		id := "x-re-" + strconv.Itoa(i)
		x.send(h2.udp, calleeRequest(x, sipmsg.INVITE, xRoutes, ok, "x-made-up", uint32(100+i), "z9hG4bK."+id))
	}
	waitFor(t, func() bool {
		n := 0
		for _, r := range x.responses() {
			if r.StatusCode >= 200 && r.CSeq().MethodName == sipmsg.INVITE {
				n++
			}
		}
		return n >= reinviteLimit
	}, "answers to x's re-INVITEs")
	// y's session refresh, through the node that set the call up.
	var yRoutes []string
	for _, rr := range y.requests(sipmsg.INVITE)[0].GetHeaders("Record-Route") {
		yRoutes = append(yRoutes, rr.Value())
	}
	calleeTag := msgpart.Tag(ok.To().Params)
	before := len(peer.requests(sipmsg.INVITE))
	y.send(h1.udp, calleeRequest(y, sipmsg.INVITE, yRoutes, ok, calleeTag, 200, "z9hG4bK.y-refresh"))
	waitFor(t, func() bool {
		for _, r := range y.responses() {
			if r.StatusCode >= 200 && r.CSeq().MethodName == sipmsg.INVITE {
				return true
			}
		}
		return false
	}, "an answer to y's re-INVITE")
	for _, r := range y.responses() {
		if r.StatusCode >= 200 && r.CSeq().MethodName == sipmsg.INVITE && r.StatusCode != 200 {
			t.Fatalf("y's session refresh answered %d after x's re-INVITEs through another node; want it relayed (200)", r.StatusCode)
		}
	}
	if len(peer.requests(sipmsg.INVITE)) <= before {
		t.Fatal("y's session refresh did not reach the caller")
	}
}
