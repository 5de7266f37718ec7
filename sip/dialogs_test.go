package sip

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// methodsAfterTheEnd are the requests a peer sent in a dialog after its
// call ended (the repro: 200 in 0.8 s, all relayed).
var methodsAfterTheEnd = []sipmsg.RequestMethod{sipmsg.BYE, sipmsg.INFO, sipmsg.MESSAGE, sipmsg.NOTIFY}

// TestEndedDialogIsClosed: once a BYE of the dialog was answered 200, its
// token is dead: every later request of the dialog (BYE, INFO, MESSAGE,
// NOTIFY) gets 481 from the node, is counted dialog_ended and never
// reaches the other leg. Both relays.
func TestEndedDialogIsClosed(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		t.Run("stateful="+strconv.FormatBool(stateful), func(t *testing.T) {
			h, _, car, _ := byeRelayProxy(t, stateful, 0)
			car.mu.Lock()
			inner := car.answer
			car.answer = func(req *sipmsg.Request) *sipmsg.Response {
				if req.Method == sipmsg.BYE || req.IsInvite() || req.IsAck() {
					return inner(req)
				}
				return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
			}
			car.mu.Unlock()
			peer := startUDPEnd(t, "127.0.0.2", nil)
			ok := rawAnsweredCall(t, peer, h.udp, "ended")
			bye := withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.end-bye")
			peer.send(h.udp, bye)
			if r := finalOfRaw(peer, "ended", sipmsg.BYE, 0); r == nil || r.StatusCode != 200 {
				t.Fatalf("BYE: final %v, want 200", r)
			}
			// A copy of the BYE that ended the dialog (its sender retransmits
			// until an answer reaches it) is answered as the BYE was, not 481.
			peer.send(h.udp, bye)
			if r := finalOfRaw(peer, "ended", sipmsg.BYE, 1); r == nil || r.StatusCode != 200 {
				t.Fatalf("the BYE's retransmission: final %v, want 200", r)
			}
			const n = 40
			for i := 0; i < n; i++ {
				m := methodsAfterTheEnd[i%len(methodsAfterTheEnd)]
				req := inDialogOf(t, peer.caller(), h.udp, ok, m)
				req.CSeq().SeqNo = uint32(100 + i)
				peer.send(h.udp, withVia(req, peer.addr(), "z9hG4bK.after-"+strconv.Itoa(i)))
			}
			waitFor(t, func() bool { return sipErrors(h, "dialog_ended") == n }, "every request after the end refused")
			for _, m := range methodsAfterTheEnd {
				skip := 0
				if m == sipmsg.BYE {
					skip = 2
				}
				if r := finalOfRaw(peer, "ended", m, skip); r == nil || r.StatusCode != 481 {
					t.Fatalf("%s after the end: %v, want 481", m, r)
				}
			}
			var after []string
			car.mu.Lock()
			for _, r := range car.reqs {
				if r.CSeq().SeqNo >= 100 {
					after = append(after, string(r.Method))
				}
			}
			car.mu.Unlock()
			if len(after) != 0 {
				t.Fatalf("the carrier got %d requests after the dialog ended: %v", len(after), after)
			}
		})
	}
}

// TestInDialogRateBound: one direction of a dialog gets at most
// dialogBurst requests (refilled at dialogRate a second, nearly nothing
// here): the rest get 503 from the node, are counted dialog_rate and
// logged (at Warn, once here), and never reach the other leg; the other
// direction still passes. Both relays.
func TestInDialogRateBound(t *testing.T) {
	oldBurst, oldRate := dialogBurst, dialogRate
	dialogBurst, dialogRate = 6, 1e-9
	t.Cleanup(func() { dialogBurst, dialogRate = oldBurst, oldRate })
	for _, stateful := range []bool{false, true} {
		t.Run("stateful="+strconv.FormatBool(stateful), func(t *testing.T) {
			statefulOnly.Store(stateful)
			defer statefulOnly.Store(false)
			car := startUDPEnd(t, "127.0.0.1", nil)
			self := car.addr()
			invite := rawAnswerer(func() string { return self }, nil)
			car.mu.Lock()
			car.answer = invite
			car.mu.Unlock()
			adm, pacer := newFakes()
			cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
			var logs syncBuffer
			h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			peer := startUDPEnd(t, "127.0.0.2", func(req *sipmsg.Request) *sipmsg.Response {
				return sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
			})
			ok := rawAnsweredCall(t, peer, h.udp, "rate")
			// The call's ACK took one request of the peer's direction.
			pass := int(dialogBurst) - 1
			const sent = 10
			for i := 0; i < sent; i++ {
				req := inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.INFO)
				req.CSeq().SeqNo = uint32(10 + i)
				peer.send(h.udp, withVia(req, peer.addr(), "z9hG4bK.info-"+strconv.Itoa(i)))
				if r := finalOfRaw(peer, "rate", sipmsg.INFO, i); r == nil {
					t.Fatalf("INFO %d: no answer", i+1)
				}
			}
			codes := map[int]int{}
			for _, r := range peer.responses() {
				if r.CSeq().MethodName == sipmsg.INFO {
					codes[r.StatusCode]++
				}
			}
			if codes[200] != pass || codes[503] != sent-pass {
				t.Fatalf("INFO answers %v, want %d × 200 and %d × 503", codes, pass, sent-pass)
			}
			if n := len(car.requests(sipmsg.INFO)); n != pass {
				t.Fatalf("INFOs at the carrier = %d, want %d", n, pass)
			}
			if n := sipErrors(h, "dialog_rate"); n != float64(sent-pass) {
				t.Errorf("sip_errors_total{dialog_rate} = %v, want %d", n, sent-pass)
			}
			if n := strings.Count(logs.String(), "over the per-dialog rate"); n != 1 {
				t.Errorf("%d Warn lines about the rate, want 1 (rate-limited):\n%s", n, logs.String())
			}
			// The carrier's direction has its own bucket.
			info := calleeBye(t, car.caller(), h.udp, ok)
			info.Method = sipmsg.INFO
			info.CSeq().MethodName = sipmsg.INFO
			car.send(h.udp, withVia(info, car.addr(), "z9hG4bK.callee-info"))
			waitFor(t, func() bool { return len(car.responses()) == 1 }, "the answer to the carrier's INFO")
			if r := car.responses()[0]; r.StatusCode != 200 {
				t.Fatalf("the carrier's INFO: %s, want 200", r.StartLine())
			}
		})
	}
}

// TestTokenExpiresWithMaxCallDuration: a dialog token is dead once the
// call it was minted for is older than sip.max_call_duration: its
// requests get 481 (counted dialog_ended), whatever the dialog did.
func TestTokenExpiresWithMaxCallDuration(t *testing.T) {
	old := tokenGrace
	tokenGrace = 0
	t.Cleanup(func() { tokenGrace = old })
	car := startAnsweringEnd(t, nil)
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
	cfg.SIP.MaxCallDuration = time.Second
	h := startProxy(t, cfg, adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)
	ok := rawAnsweredCall(t, peer, h.udp, "expiring")
	// The mint time has a resolution of a second: after 2 s the token is
	// more than max_call_duration old.
	time.Sleep(2100 * time.Millisecond)
	peer.send(h.udp, withVia(inDialogOf(t, peer.caller(), h.udp, ok, sipmsg.INFO), peer.addr(), "z9hG4bK.late-info"))
	if r := finalOfRaw(peer, "expiring", sipmsg.INFO, 0); r == nil || r.StatusCode != 481 {
		t.Fatalf("INFO with an expired token: %v, want 481", r)
	}
	if n := len(car.requests(sipmsg.INFO)); n != 0 {
		t.Fatalf("INFOs at the carrier = %d, want 0", n)
	}
	if n := sipErrors(h, "dialog_ended"); n != 1 {
		t.Errorf("sip_errors_total{dialog_ended} = %v, want 1", n)
	}
}

// memEnds is an in-memory DialogEnds shared by the nodes of a test pool.
type memEnds struct {
	mu   sync.Mutex
	ends []string
}

func (m *memEnds) Sync(_ context.Context, cursor int64, ended []string, _ time.Duration) ([]string, int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ends = append(m.ends, ended...)
	return slices.Clone(m.ends[cursor:]), int64(len(m.ends)), false, nil
}

// TestDialogEndsSharedAcrossNodes: a dialog that ended through one node of
// a pool is dead on the others too (they share sip.dialog_secret and the
// advertised address, so each takes the other's tokens): the pool store
// carries the end to the second node, which refuses the dialog's request.
func TestDialogEndsSharedAcrossNodes(t *testing.T) {
	car := startUDPEnd(t, "127.0.0.1", nil)
	self := car.addr()
	car.mu.Lock()
	car.answer = rawAnswerer(func() string { return self }, nil)
	car.mu.Unlock()
	// A's port is fixed first: both nodes advertise it.
	l, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	aAddr := l.LocalAddr().String()
	l.Close()
	conf := func(listen string) *config.Config {
		c := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second})
		c.SIP.Listen = []string{"udp://" + listen}
		c.SIP.Advertise = aAddr
		c.SIP.DialogSecret = "pool-secret-0123456789"
		return c
	}
	ends := &memEnds{}
	start := func(cfg *config.Config) *harness {
		adm, pacer := newFakes()
		return startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer, DialogEnds: ends})
	}
	a := start(conf(aAddr))
	b := start(conf("127.0.0.1:0"))

	peer := startUDPEnd(t, "127.0.0.2", nil)
	ok := rawAnsweredCall(t, peer, a.udp, "pooled")
	peer.send(a.udp, withVia(inDialogOf(t, peer.caller(), a.udp, ok, sipmsg.BYE), peer.addr(), "z9hG4bK.pool-bye"))
	if r := finalOfRaw(peer, "pooled", sipmsg.BYE, 0); r == nil || r.StatusCode != 200 {
		t.Fatalf("BYE through node A: %v, want 200", r)
	}
	src := netip.MustParseAddrPort(peer.addr())
	d := dialogKeyOf(callKeyOf("pooled", msgpart.Tag(ok.From().Params), src), msgpart.Tag(ok.To().Params))
	waitFor(t, func() bool { return b.p.dialogs.IsEnded(d, time.Now()) }, "node B knows the dialog ended")
	info := inDialogOf(t, peer.caller(), a.udp, ok, sipmsg.INFO)
	peer.send(b.udp, withVia(info, peer.addr(), "z9hG4bK.pool-info"))
	if r := finalOfRaw(peer, "pooled", sipmsg.INFO, 0); r == nil || r.StatusCode != 481 {
		t.Fatalf("INFO of the ended dialog through node B: %v, want 481", r)
	}
	if n := len(car.requests(sipmsg.INFO)); n != 0 {
		t.Fatalf("INFOs at the carrier = %d, want 0", n)
	}
}
