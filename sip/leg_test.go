package sip

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// fakeClientTx is a client transaction the test drives: responses are
// handed over one at a time (send blocks until the leg, or the goroutine
// abandon starts, takes one), end closes Done as Timer B or F would.
type fakeClientTx struct {
	res        chan *sipmsg.Response
	done       chan struct{}
	once       sync.Once
	mu         sync.Mutex
	terminated bool
	retrans    sipmsg.FnTxResponse
}

func newFakeClientTx() *fakeClientTx {
	return &fakeClientTx{res: make(chan *sipmsg.Response), done: make(chan struct{})}
}

func (f *fakeClientTx) Responses() <-chan *sipmsg.Response { return f.res }
func (f *fakeClientTx) Done() <-chan struct{}              { return f.done }
func (f *fakeClientTx) Err() error                         { return nil }
func (f *fakeClientTx) OnTerminate(sipmsg.FnTxTerminate) bool {
	return true
}

func (f *fakeClientTx) OnRetransmission(fn sipmsg.FnTxResponse) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retrans = fn
	return true
}

func (f *fakeClientTx) Terminate() {
	f.mu.Lock()
	f.terminated = true
	f.mu.Unlock()
	f.end()
}

func (f *fakeClientTx) end() { f.once.Do(func() { close(f.done) }) }

func (f *fakeClientTx) wasTerminated() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terminated
}

// legLog records, in order, what a leg did upstream ("relay 180", "own
// 503") and what it told its carrier hooks ("reached", "timedOut",
// "answering 200", "lost"). Hooks' failed takes 5xx as the carrier's
// failure, as carrierHooks does; relay fails for the codes in failRelay.
type legLog struct {
	mu        sync.Mutex
	got       []string
	failRelay int
}

func (g *legLog) add(s string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.got = append(g.got, s)
}

func (g *legLog) lines() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.got)
}

func (g *legLog) has(s string) bool { return slices.Contains(g.lines(), s) }

func (g *legLog) relay(r *sipmsg.Response) error {
	g.add("relay " + strconv.Itoa(r.StatusCode))
	if r.StatusCode == g.failRelay {
		return errors.New("caller gone")
	}
	return nil
}
func (g *legLog) respond(code int, _ string) { g.add("own " + strconv.Itoa(code)) }

func (g *legLog) response(int) {}
func (g *legLog) reached()     { g.add("reached") }
func (g *legLog) failed(r *sipmsg.Response) bool {
	return r.StatusCode >= 500
}
func (g *legLog) timedOut()                    { g.add("timedOut") }
func (g *legLog) answering(r *sipmsg.Response) { g.add("answering " + strconv.Itoa(r.StatusCode)) }
func (g *legLog) lost()                        { g.add("lost") }
func (g *legLog) relayed()                     {}

// legEnv is one leg under test, running in its own goroutine, sending its
// CANCELs, ACKs and BYEs through a real proxy to a raw carrier.
type legEnv struct {
	t      *testing.T
	leg    *relayLeg
	tx     *fakeClientTx
	log    *legLog
	raw    *rawCarrier
	stop   context.CancelCauseFunc // an initial INVITE's call context
	cancel chan struct{}           // an in-dialog INVITE's CANCEL
	down   chan struct{}           // an in-dialog leg's shutdown
	ended  chan struct{}
	base   int // CANCELs at the carrier before the case
	res    *sipmsg.Response
	retry  bool
}

// send hands the leg the next hop's response code (200 with a To tag).
func (e *legEnv) send(code int) {
	e.t.Helper()
	select {
	case e.tx.res <- e.response(code):
	case <-time.After(5 * time.Second):
		e.t.Fatalf("nobody took the %d", code)
	}
}

func (e *legEnv) response(code int) *sipmsg.Response {
	r := sipmsg.NewResponseFromRequest(e.leg.out, code, "Reason", nil)
	if code >= 200 && code < 300 {
		r.To().Params.Add("tag", "callee")
	}
	return r
}

// cancelled waits for a CANCEL the leg sent to reach the carrier: the leg
// has taken the sender's CANCEL before the next step.
func (e *legEnv) cancelled(n int) {
	e.t.Helper()
	waitFor(e.t, func() bool { return e.raw.count(sipmsg.CANCEL) >= n }, "the CANCEL at the carrier")
}

// settle gives the leg time to take a CANCEL it can only hold (no answer
// yet, nothing to see): else the next response may reach it first.
func (e *legEnv) settle() { time.Sleep(100 * time.Millisecond) }

// retransmit passes a 2xx retransmission as sipgo does, outside Responses.
func (e *legEnv) retransmit() {
	e.tx.mu.Lock()
	fn := e.tx.retrans
	e.tx.mu.Unlock()
	fn(e.response(200))
}

// wait waits for the leg to end.
func (e *legEnv) wait() {
	e.t.Helper()
	select {
	case <-e.ended:
	case <-time.After(5 * time.Second):
		e.t.Fatal("the leg did not end")
	}
}

// TestRelayLeg drives the one relay loop through the paths of an initial
// INVITE and of an in-dialog request, the ones the end-to-end tests cannot
// reach in reasonable time (timers, shutdown, a failed transaction, an
// unreachable caller) included.
func TestRelayLeg(t *testing.T) {
	raw := startRawCarrier(t)
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + raw.conn.LocalAddr().String(), CPS: 100, MaxWait: time.Second}), adm, pacer)

	const short, long = 30 * time.Millisecond, 5 * time.Second
	tests := []struct {
		name    string
		call    bool // an initial INVITE's leg (carrier hooks), else in-dialog
		invite  bool // in-dialog only: a re-INVITE (else BYE)
		setup   time.Duration
		ring    time.Duration
		cwait   time.Duration
		fail    int // a relay of this code fails
		script  func(e *legEnv)
		want    []string
		code    int // of the leg's result, 0 for none
		retry   bool
		term    bool // the leg terminated its transaction
		cancels int  // CANCELs at the carrier
		byes    int  // BYEs at the carrier (hung up)
	}{
		{
			name: "in-dialog relays provisionals above 100 and the final", invite: true, setup: long,
			script: func(e *legEnv) { e.send(100); e.send(180); e.send(200) },
			want:   []string{"relay 180", "relay 200"}, code: 200,
		},
		{
			name: "in-dialog 2xx retransmission is relayed", invite: true, setup: long,
			script: func(e *legEnv) { e.send(200); e.wait(); e.retransmit() },
			want:   []string{"relay 200", "relay 200"}, code: 200,
		},
		{
			name: "in-dialog CANCEL waits for a provisional response", invite: true, setup: long, cwait: long,
			script: func(e *legEnv) { close(e.cancel); e.settle(); e.send(180); e.send(487) },
			want:   []string{"relay 180", "relay 487"}, code: 487, cancels: 1,
		},
		{
			name: "in-dialog pending CANCEL is not sent after a final answer", invite: true, setup: long, cwait: long,
			script: func(e *legEnv) { close(e.cancel); e.settle(); e.send(486) },
			want:   []string{"relay 486"}, code: 486,
		},
		{
			name: "in-dialog CANCEL unanswered: 487", invite: true, setup: long, cwait: short,
			script: func(e *legEnv) { e.send(180); close(e.cancel) },
			want:   []string{"relay 180", "own 487"}, term: true, cancels: 1,
		},
		{
			name: "in-dialog INVITE past its bound: 408", invite: true, setup: short,
			script: func(e *legEnv) { e.send(180) },
			want:   []string{"relay 180", "own 408"}, term: true,
		},
		{
			name: "in-dialog transaction ends: 408, also after a CANCEL", invite: true, setup: long, cwait: long,
			script: func(e *legEnv) { e.send(180); close(e.cancel); e.cancelled(e.base + 1); e.tx.end() },
			want:   []string{"relay 180", "own 408"}, cancels: 1,
		},
		{
			name:   "in-dialog BYE on shutdown: 503, the transaction left to end",
			script: func(e *legEnv) { close(e.down) },
			want:   []string{"own 503"},
		},
		{
			name: "in-dialog BYE: a failed relay of its 2xx hangs nothing up",
			fail: 200, script: func(e *legEnv) { e.send(200) },
			want: []string{"relay 200"}, code: 200,
		},
		{
			name: "call: a 5xx before ringing passes the call on, unrelayed", call: true, setup: long,
			script: func(e *legEnv) { e.send(100); e.send(503) },
			code:   503, retry: true,
		},
		{
			name: "call: a 486 before ringing is the carrier's answer", call: true, setup: long,
			script: func(e *legEnv) { e.send(486) },
			want:   []string{"reached", "relay 486"}, code: 486,
		},
		{
			name: "call: answered after ringing", call: true, setup: long, ring: long,
			script: func(e *legEnv) { e.send(180); e.send(183); e.send(200) },
			want:   []string{"reached", "relay 180", "relay 183", "answering 200", "relay 200"}, code: 200,
		},
		{
			// Left to its own Timer B, not terminated: a late answer is
			// still cancelled or hung up (the next case).
			name: "call: a silent carrier times out for the next", call: true, setup: short,
			want: []string{"timedOut"}, retry: true,
		},
		{
			name: "call: a silent carrier's late 180 gets a CANCEL, its late 2xx is hung up", call: true, setup: short, cwait: long,
			script: func(e *legEnv) {
				e.wait() // the leg gave up: silent past setup
				e.send(180)
				e.send(200)
				waitFor(e.t, func() bool { return e.leg.hungUp.Load() != nil }, "the late 2xx hung up")
				e.retransmit()
			},
			want: []string{"timedOut"}, retry: true, cancels: 1, byes: 1,
		},
		{
			name: "call: a 100 alone past setup is cancelled and its late 2xx hung up", call: true, setup: short, cwait: long,
			script: func(e *legEnv) {
				e.send(100)
				e.wait()
				e.send(200) // to the goroutine abandon starts
				waitFor(e.t, func() bool { return e.leg.hungUp.Load() != nil }, "the late 2xx hung up")
				e.retransmit()
			},
			want: []string{"timedOut"}, retry: true, cancels: 1, byes: 1,
		},
		{
			name: "call: rang too long: CANCEL, 408, the late 2xx hung up", call: true, setup: long, ring: short, cwait: long,
			script: func(e *legEnv) {
				e.send(180)
				waitFor(e.t, func() bool { return e.log.has("own 408") }, "the 408")
				e.send(200)
				e.wait()
				e.retransmit()
			},
			want: []string{"reached", "relay 180", "own 408"}, code: 200, cancels: 1, byes: 1,
		},
		{
			name: "call: the caller's CANCEL reaches the carrier, its 487 is relayed", call: true, setup: long, ring: long, cwait: long,
			script: func(e *legEnv) { e.send(180); e.stop(errCallCanceled); e.cancelled(e.base + 1); e.send(487) },
			want:   []string{"reached", "relay 180", "relay 487"}, code: 487, cancels: 1,
		},
		{
			name: "call: a CANCEL before any answer waits for one (a final answer too)", call: true, setup: long, cwait: long,
			script: func(e *legEnv) { e.stop(errCallCanceled); e.settle(); e.send(200) },
			want:   []string{"reached", "answering 200", "relay 200"}, code: 200, cancels: 1,
		},
		{
			name: "call: unanswered CANCEL: 487", call: true, setup: long, ring: long, cwait: short,
			script: func(e *legEnv) { e.send(180); e.stop(errCallCanceled) },
			want:   []string{"reached", "relay 180", "own 487"}, term: true, cancels: 1,
		},
		{
			name: "call: shutdown: 503 upstream, CANCEL downstream, the 487 kept", call: true, setup: long, ring: long, cwait: long,
			script: func(e *legEnv) { e.send(180); e.stop(errProxyShutdown); e.cancelled(e.base + 1); e.send(487) },
			want:   []string{"reached", "relay 180", "own 503"}, code: 487, cancels: 1,
		},
		{
			name: "call: transaction ends before ringing: timed out, next carrier", call: true, setup: long,
			script: func(e *legEnv) { e.send(100); e.tx.end() },
			want:   []string{"timedOut"}, retry: true,
		},
		{
			name: "call: transaction ends after ringing: 408", call: true, setup: long, ring: long,
			script: func(e *legEnv) { e.send(180); e.tx.end() },
			want:   []string{"reached", "relay 180", "own 408"},
		},
		{
			name: "call: transaction ends after a CANCEL: 487", call: true, setup: long, ring: long, cwait: long,
			script: func(e *legEnv) { e.send(180); e.stop(errCallCanceled); e.cancelled(e.base + 1); e.tx.end() },
			want:   []string{"reached", "relay 180", "own 487"}, cancels: 1,
		},
		{
			name: "call: a 2xx the caller cannot get is hung up", call: true, setup: long, ring: long, fail: 200,
			script: func(e *legEnv) { e.send(180); e.send(200); e.wait(); e.retransmit() },
			want:   []string{"reached", "relay 180", "answering 200", "relay 200", "lost"}, code: 200, byes: 1,
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := sipmsg.BYE
			if tc.call || tc.invite {
				method = sipmsg.INVITE
			}
			before := map[sipmsg.RequestMethod]int{sipmsg.CANCEL: raw.count(sipmsg.CANCEL), sipmsg.BYE: raw.count(sipmsg.BYE), sipmsg.ACK: raw.count(sipmsg.ACK)}
			e := &legEnv{t: t, tx: newFakeClientTx(), log: &legLog{failRelay: tc.fail}, raw: raw, base: before[sipmsg.CANCEL],
				cancel: make(chan struct{}), down: make(chan struct{}), ended: make(chan struct{})}
			l := &relayLeg{p: h.p, up: e.log, out: legRequest(method, raw.conn.LocalAddr().String(), i),
				setup: tc.setup, ring: tc.ring, cancelWait: tc.cwait}
			if tc.call {
				ctx, stop := context.WithCancelCause(context.Background())
				defer stop(nil)
				l.ctx, l.carrier, l.fk, e.stop = ctx, e.log, &forkSet{}, stop
			} else {
				l.ctx, l.shutdown = context.Background(), e.down
				if tc.invite {
					l.cancelled = e.cancel
				}
			}
			e.leg = l
			l.attach(e.tx)
			go func() {
				defer close(e.ended)
				e.res, e.retry = l.run()
			}()
			if tc.script != nil {
				tc.script(e)
			}
			e.wait()
			code := 0
			if e.res != nil {
				code = e.res.StatusCode
			}
			if code != tc.code || e.retry != tc.retry {
				t.Errorf("run = %d, retry %v; want %d, retry %v", code, e.retry, tc.code, tc.retry)
			}
			if got := e.log.lines(); !slices.Equal(got, tc.want) {
				t.Errorf("leg did %q, want %q", got, tc.want)
			}
			if e.tx.wasTerminated() != tc.term {
				t.Errorf("transaction terminated = %v, want %v", e.tx.wasTerminated(), tc.term)
			}
			at := func(m sipmsg.RequestMethod) int { return raw.count(m) - before[m] }
			waitFor(t, func() bool { return at(sipmsg.CANCEL) >= tc.cancels && at(sipmsg.BYE) >= tc.byes }, "the carrier's CANCELs and BYEs")
			if tc.byes > 0 {
				// The ACK of the hung-up 2xx, and again for its retransmission.
				waitFor(t, func() bool { return at(sipmsg.ACK) >= 2 }, "two ACKs of the hung-up 2xx")
			}
			time.Sleep(20 * time.Millisecond) // nothing more on its way
			if at(sipmsg.CANCEL) != tc.cancels || at(sipmsg.BYE) != tc.byes {
				t.Errorf("at the carrier: %d CANCEL, %d BYE; want %d, %d", at(sipmsg.CANCEL), at(sipmsg.BYE), tc.cancels, tc.byes)
			}
		})
	}
}

// legRequest builds a request as the proxy forwards it, to the carrier at
// addr (the n-th of the test: its own branch and Call-ID).
func legRequest(method sipmsg.RequestMethod, addr string, n int) *sipmsg.Request {
	host, ps, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(ps)
	r := sipmsg.NewRequest(method, sipmsg.Uri{Scheme: "sip", User: "100", Host: host, Port: port})
	via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP", Host: "127.0.0.1", Port: 5060, Params: sipmsg.NewParams()}
	via.Params.Add("branch", sipmsg.RFC3261BranchMagicCookie+"-leg-"+strconv.Itoa(n))
	r.AppendHeader(via)
	mf := sipmsg.MaxForwardsHeader(70)
	r.AppendHeader(&mf)
	from := &sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: "127.0.0.2"}, Params: sipmsg.NewParams()}
	from.Params.Add("tag", "caller")
	r.AppendHeader(from)
	r.AppendHeader(&sipmsg.ToHeader{Address: r.Recipient, Params: sipmsg.NewParams()})
	id := sipmsg.CallIDHeader("leg-test-" + strconv.Itoa(n))
	r.AppendHeader(&id)
	r.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: method})
	r.SetTransport("UDP")
	r.SetDestination(addr)
	return r
}
