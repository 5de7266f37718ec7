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
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
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
			statefulOnly.Store(stateful)
			defer statefulOnly.Store(false)
			var byeCode atomic.Int64
			byeCode.Store(200)
			h, _, car, _ := startRawCallsProxy(t, 0, &byeCode)
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
	d := dialogKeyOf(callKeyOf("pooled", tagOf(ok.From().Params), src), tagOf(ok.To().Params))
	waitFor(t, func() bool { return b.p.dialogs.isEnded(d, time.Now()) }, "node B knows the dialog ended")
	info := inDialogOf(t, peer.caller(), a.udp, ok, sipmsg.INFO)
	peer.send(b.udp, withVia(info, peer.addr(), "z9hG4bK.pool-info"))
	if r := finalOfRaw(peer, "pooled", sipmsg.INFO, 0); r == nil || r.StatusCode != 481 {
		t.Fatalf("INFO of the ended dialog through node B: %v, want 481", r)
	}
	if n := len(car.requests(sipmsg.INFO)); n != 0 {
		t.Fatalf("INFOs at the carrier = %d, want 0", n)
	}
}

// TestDialogGuardBounds: the ended dialogs are forgotten when they expire,
// and the oldest first when the table is full; idle rate buckets are swept.
func TestDialogGuardBounds(t *testing.T) {
	g := newDialogGuard()
	now := time.Now()
	key := func(i int) dialogKey { return dialogKeyOf(callKey{byte(i), byte(i >> 8), byte(i >> 16)}, "t") }
	for i := 0; i < maxEndedDialogs+10; i++ {
		g.end(key(i), now, now.Add(time.Hour+time.Duration(i)), 0, 0, false)
	}
	if n := len(g.ended.m); n != maxEndedDialogs {
		t.Fatalf("ended dialogs held = %d, want the bound %d", n, maxEndedDialogs)
	}
	if g.isEnded(key(0), now) || !g.isEnded(key(maxEndedDialogs+9), now) {
		t.Fatal("a full table forgot another dialog than the oldest")
	}
	g.sweep(now.Add(2 * time.Hour))
	if n := len(g.ended.m); n != 0 {
		t.Fatalf("ended dialogs after they expired = %d, want 0", n)
	}
	via := func(branch string) *sipmsg.ViaHeader {
		v := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP", Host: "127.0.0.1", Port: 5060, Params: sipmsg.NewParams()}
		v.Params.Add("branch", branch)
		return v
	}
	g.end(key(2), now, now.Add(time.Hour), byeID(7, via("z9hG4bK-a")), fromPeer, false)
	for _, c := range []struct {
		seq    uint32
		branch string
		dir    direction
		want   int
	}{
		{7, "z9hG4bK-a", fromPeer, dialogPass},     // a retransmission of the BYE that ended it
		{7, "z9hG4bK-a", fromCarrier, dialogEnded}, // from the other side
		{7, "z9hG4bK-b", fromPeer, dialogEnded},    // a new BYE with the same CSeq
		{8, "z9hG4bK-a", fromPeer, dialogEnded},
	} {
		if r := g.admit(key(2), callKey{2}, c.dir, byeID(c.seq, via(c.branch)), 0, now); r != c.want {
			t.Fatalf("after the BYE CSeq 7 branch a from the peer ended it, BYE %d %s from %d: admit = %d, want %d", c.seq, c.branch, c.dir, r, c.want)
		}
	}
	if r := g.admit(key(2), callKey{2}, fromPeer, 0, 0, now); r != dialogEnded {
		t.Fatalf("after the dialog ended, a request that is no BYE: admit = %d, want ended", r)
	}
	g.sweep(now.Add(2 * time.Hour))
	k := callKey{1}
	if r := g.admit(key(1), k, fromPeer, 0, 0, now); r != dialogPass {
		t.Fatalf("admit = %d, want pass", r)
	}
	g.sweep(now.Add(time.Hour))
	if n := len(g.rates); n != 0 {
		t.Fatalf("rate buckets after an idle hour = %d, want 0", n)
	}
}

// TestEndedByeCopiesWindow: a copy of the ending BYE passes only within
// byeTimeout of the end (a UAC stops retransmitting at Timer F), and only
// maxEndedByeCopies times.
func TestEndedByeCopiesWindow(t *testing.T) {
	g := newDialogGuard()
	now := time.Now()
	d, k := dialogKey{9}, callKey{9}
	g.end(d, now, now.Add(time.Hour), 77, fromPeer, false)
	if r := g.admit(d, k, fromPeer, 77, 0, now.Add(byeTimeout-time.Millisecond)); r != dialogPass {
		t.Fatalf("copy of the ending BYE within Timer F: admit = %d, want pass", r)
	}
	if r := g.admit(d, k, fromPeer, 77, 0, now.Add(byeTimeout)); r != dialogEnded {
		t.Fatalf("copy of the ending BYE at Timer F after the end: admit = %d, want ended", r)
	}
	d2 := dialogKey{10}
	g.end(d2, now, now.Add(time.Hour), 78, fromPeer, false)
	for i := 0; i < maxEndedByeCopies; i++ {
		if r := g.admit(d2, callKey{10}, fromPeer, 78, 0, now); r != dialogPass {
			t.Fatalf("copy %d of the ending BYE: admit = %d, want pass", i+1, r)
		}
	}
	if r := g.admit(d2, callKey{10}, fromPeer, 78, 0, now); r != dialogEnded {
		t.Fatalf("copy %d of the ending BYE: admit = %d, want ended", maxEndedByeCopies+1, r)
	}
}

// TestCallOverRefusesEveryTag: once a call is over (callOver), a request
// of a token minted before the end is refused whatever callee tag it
// names; a later call that reuses the Call-ID, tag and peer leg (a token
// minted after the end) is not.
func TestCallOverRefusesEveryTag(t *testing.T) {
	g := newDialogGuard()
	now := time.Now()
	k := callKey{7}
	tok := now.Unix() - 10
	if r := g.admit(dialogKeyOf(k, "made-up"), k, fromPeer, 0, tok, now); r != dialogPass {
		t.Fatalf("before the end: admit = %d, want pass", r)
	}
	g.end(callEndKey(k), now, now.Add(time.Hour), 0, 0, false)
	for _, tag := range []string{"callee", "made-up", "other"} {
		if r := g.admit(dialogKeyOf(k, tag), k, fromPeer, 0, tok, now); r != dialogEnded {
			t.Fatalf("after the call's end, callee tag %q: admit = %d, want ended", tag, r)
		}
	}
	if r := g.admit(dialogKeyOf(k, "new"), k, fromPeer, 0, now.Unix()+1, now.Add(2*time.Second)); r != dialogPass {
		t.Fatalf("a later call's token: admit = %d, want pass", r)
	}
	if r := g.admit(dialogKeyOf(callKey{8}, "x"), callKey{8}, fromPeer, 0, tok, now); r != dialogPass {
		t.Fatalf("another call: admit = %d, want pass", r)
	}
	// A token minted in the second the call ended (a call answered and
	// over at once: tokens count whole seconds) is the call's.
	if r := g.admit(dialogKeyOf(k, "same-second"), k, fromPeer, 0, now.Unix(), now); r != dialogEnded {
		t.Fatalf("a token minted in the second of the end: admit = %d, want ended", r)
	}
	// The later call ends too, while the first end is still remembered:
	// its tokens die with it.
	later := now.Add(5 * time.Second)
	g.end(callEndKey(k), later, later.Add(time.Hour), 0, 0, false)
	if r := g.admit(dialogKeyOf(k, "new"), k, fromPeer, 0, now.Unix()+1, later); r != dialogEnded {
		t.Fatalf("the later call's token after its own end: admit = %d, want ended", r)
	}
}

// TestTokenEndsKeepDialogEnds: every reroute and every unanswered call
// ends tokens (tokensOver), one end per carrier tried. A storm of them
// (a carrier failing every call) filled the one bounded ended table and
// pushed out the oldest ends of answered dialogs and calls, which then
// passed again on the nodes that did not mint their tokens. Token ends
// have a table of their own, as bounded: at its bound the oldest token
// end goes, never a dialog's or a call's.
func TestTokenEndsKeepDialogEnds(t *testing.T) {
	g := newDialogGuard()
	now := time.Now()
	exp := now.Add(time.Hour)
	d, k := dialogKeyOf(callKey{1}, "callee"), callKey{2}
	g.end(d, now, exp, 0, 0, false)
	g.end(callEndKey(k), now, exp, 0, 0, false)
	tok := func(i int) dialogKey { return tokenEndKey(tokenID{0xee, byte(i), byte(i >> 8), byte(i >> 16)}) }
	for i := 0; i < maxEndedTokens+10; i++ {
		g.endToken(tok(i), now, exp.Add(time.Duration(i)), false)
	}
	if !g.isEnded(d, now) || !g.isEnded(callEndKey(k), now) {
		t.Fatal("a storm of token ends pushed an ended dialog or call out of the table")
	}
	if g.isEnded(tok(0), now) || !g.isEnded(tok(maxEndedTokens+9), now) {
		t.Fatal("a full token table forgot another token end than the oldest")
	}
	if r := g.admitToken(tok(10), false, d, k, fromCarrier, 0, now.Unix(), now); r != dialogEnded {
		t.Fatalf("a request of an ended token: admit = %d, want ended", r)
	}
	if r := g.admitToken(tok(5), false, dialogKeyOf(callKey{3}, "x"), callKey{3}, fromCarrier, 0, now.Unix(), now); r != dialogPass {
		t.Fatalf("a request of a token whose end was forgotten (bound): admit = %d, want pass", r)
	}
	// A node of an earlier release publishes a token's end as a dialog's.
	old := tokenEndKey(tokenID{0xef})
	g.end(old, now, exp, 0, 0, false)
	if r := g.admitToken(old, false, dialogKeyOf(callKey{4}, "x"), callKey{4}, fromCarrier, 0, now.Unix(), now); r != dialogEnded {
		t.Fatalf("a request of a token ended by an earlier release's node: admit = %d, want ended", r)
	}
	g.sweep(exp.Add(time.Hour))
	if g.isEnded(tok(maxEndedTokens+9), now) || g.isEnded(d, now) {
		t.Fatal("ends kept past their expiry")
	}
}

// TestDialogRatesSweptInOrder: the sweep forgets a rate bucket once it has
// been idle long enough to have refilled, whatever order the buckets were
// made in, keeps one touched since (even if it was made first), and keeps
// no more queued keys than buckets: it pops expired keys from a queue
// instead of walking every bucket under the guard's lock.
func TestDialogRatesSweptInOrder(t *testing.T) {
	g := newDialogGuard()
	now := time.Unix(1_700_000_000, 0)
	full := time.Duration(dialogBurst / dialogRate * float64(time.Second))
	for i := range 100 {
		k := callKey{byte(i), byte(i >> 8)}
		if r := g.admit(dialogKeyOf(k, "t"), k, fromPeer, 0, 0, now); r != dialogPass {
			t.Fatalf("call %d: admit = %d, want pass", i, r)
		}
	}
	// The first bucket made is used again halfway; the rest stay idle.
	first := callKey{0, 0}
	later := now.Add(full / 2)
	if r := g.admit(dialogKeyOf(first, "t"), first, fromPeer, 0, 0, later); r != dialogPass {
		t.Fatalf("first call again: admit = %d, want pass", r)
	}
	g.sweep(now.Add(full - time.Millisecond))
	if n := len(g.rates); n != 100 {
		t.Fatalf("buckets before any has refilled = %d, want 100", n)
	}
	g.sweep(now.Add(full))
	if n := len(g.rates); n != 1 || !hasRate(g, rateKey{first, fromPeer}) {
		t.Fatalf("buckets once the idle ones refilled = %d, want only the one used since", n)
	}
	if n := g.rateQ.Len(); n != 1 {
		t.Fatalf("queued bucket keys = %d, want 1 (one per bucket)", n)
	}
	g.sweep(later.Add(full))
	if n, q := len(g.rates), g.rateQ.Len(); n != 0 || q != 0 {
		t.Fatalf("after the last one refilled: %d buckets, %d queued; want none", n, q)
	}
}

// hasRate reports whether g keeps a rate bucket for k.
func hasRate(g *dialogGuard, k rateKey) bool {
	_, ok := g.rates[k]
	return ok
}

// TestDialogRateWallClockStepBack: the rate buckets keep wall-clock times
// (Unix nanoseconds); when the wall clock steps back (NTP), a bucket used
// just before still refills at dialogRate from the step on, instead of
// staying empty until the clock is back where it was, and the sweep still
// forgets idle buckets, instead of stopping at the first one queued before
// the step (while the table fills to maxDialogRates, past which new
// dialogs get no bucket at all).
func TestDialogRateWallClockStepBack(t *testing.T) {
	t0 := time.Now().Round(0) // wall clock only, as the buckets keep it
	step := t0.Add(-time.Hour)
	t.Run("refill", func(t *testing.T) {
		g := newDialogGuard()
		d, k := dialogKey{1}, callKey{1}
		for i := 0; i < int(dialogBurst); i++ {
			if r := g.admit(d, k, fromPeer, 0, 0, t0); r != dialogPass {
				t.Fatalf("request %d of the burst: admit = %d, want pass", i+1, r)
			}
		}
		if r := g.admit(d, k, fromPeer, 0, 0, t0); r != dialogOverRate {
			t.Fatalf("past the burst: admit = %d, want over rate", r)
		}
		g.admit(d, k, fromPeer, 0, 0, step) // right after the step: no time passed
		if r := g.admit(d, k, fromPeer, 0, 0, step.Add(time.Second)); r != dialogPass {
			t.Fatalf("a second after the wall clock stepped back: admit = %d, want pass (refilled at %v a second)", r, dialogRate)
		}
	})
	t.Run("sweep", func(t *testing.T) {
		g := newDialogGuard()
		g.admit(dialogKey{1}, callKey{1}, fromPeer, 0, 0, t0)
		g.admit(dialogKey{2}, callKey{2}, fromPeer, 0, 0, step) // a dialog of after the step
		for i := 1; i <= 3; i++ {
			g.sweep(step.Add(time.Duration(i) * time.Hour / 8))
		}
		if n := len(g.rates); n != 0 {
			t.Fatalf("rate buckets idle for %v since the wall clock stepped back = %d, want 0", 3*time.Hour/8, n)
		}
	})
}
