package sip

import (
	"crypto/sha256"
	"encoding/hex"
	"github.com/cpsguard/cpsguard/records"
	"net/netip"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// How a call ends, as the proxy learns it.
//
// A BYE is relayed from one leg of its dialog to the other; the call is
// over when the far leg says so: a 2xx, or a 481 (it has no such dialog),
// or when the BYE gets no final answer before its transaction would time
// out (RFC 3261 15.1.1: the UAC then considers the dialog ended). A peer's
// BYE that its carrier answers otherwise leaves the call up (a stale CSeq,
// an unknown Require, a far proxy's 483 or 408), and so does a BYE never
// sent: a peer must not free its places while the carrier's call goes on.
// The carrier's BYE frees them on any final answer but a challenge: the
// carrier ended its session when it sent it. Only then are the max_calls
// places freed (CallPlaces.EndDialog, which also wants the BYE to name the
// callee's tag of the call's answer); see endsCall and challengedBye.
//
// The stateful relay learns the outcome from its client transaction. The
// stateless one (stateless.go) keeps no transaction: its Via branch
// carries the dialog's call key and the direction, under its MAC, so the
// far leg's response alone says which call it ends; a BYE waiting for its
// answer is held in pendingByes (bounded) so its timeout ends the call too.

// callKey names a call as the dialog token proves it: a hash of its
// Call-ID, the caller's From tag and the peer leg (IP and port). Two calls
// that share a Call-ID and tag from different peers are two keys; the
// hash is SHA-256 (no one can make up a Call-ID whose key is another
// call's).
type callKey [8]byte

// callKeyOf returns the call key of a call.
func callKeyOf(callID, callerTag string, peer netip.AddrPort) callKey {
	var buf [256]byte // on the stack for the usual Call-ID
	in := append(buf[:0], callID...)
	in = append(in, 0)
	in = append(in, callerTag...)
	in = append(in, 0)
	a := peer.Addr().Unmap().As16()
	in = append(in, a[:]...)
	in = append(in, byte(peer.Port()>>8), byte(peer.Port()))
	sum := sha256.Sum256(in)
	return callKey(sum[:8])
}

// peerCallKey is the call key of a peer's initial INVITE: its Call-ID,
// From tag (From must be there) and source leg.
func peerCallKey(req *sipmsg.Request) callKey {
	src, _ := netip.ParseAddrPort(req.Source())
	return callKeyOf(msgpart.CallID(req), msgpart.Tag(req.From().Params), netip.AddrPortFrom(src.Addr().Unmap(), src.Port()))
}

// String is the key as the call places tracker names the dialog (Bind,
// EndDialog).
func (k callKey) String() string { return hex.EncodeToString(k[:]) }

// dialogTags returns a request's caller and callee tags: From and To for
// the peer's, swapped for the carrier's.
func dialogTags(req sipmsg.Message, dir direction) (caller, callee string) {
	if f := req.From(); f != nil {
		caller = msgpart.Tag(f.Params)
	}
	if t := req.To(); t != nil {
		callee = msgpart.Tag(t.Params)
	}
	if dir == fromCarrier {
		caller, callee = callee, caller
	}
	return caller, callee
}

// byeTimeout is how long a BYE relayed statelessly waits for its final
// answer before the call counts as ended (RFC 3261 Timer F, 64·T1), as the
// stateful relay's client transaction does.
var byeTimeout = sipmsg.Timer_F

// maxPendingByes bounds the BYEs relayed statelessly that wait for their
// answer: one entry per call and callee tag, for byeTimeout at most. Past
// it a BYE still ends its call on its 2xx or 481, not on a timeout.
const maxPendingByes = 1 << 16

// pendingBye is a BYE relayed statelessly that has no final answer yet.
type pendingBye struct {
	key    callKey
	callee string
}

// pendingByes are the BYEs relayed statelessly waiting for a final answer,
// with the time each times out and who sent it. Safe for concurrent use.
type pendingByes struct {
	mu sync.Mutex
	m  map[pendingBye]byeWait
}

// byeWait is when a pending BYE times out, and its sender
// (records.ByCaller or records.ByCallee).
type byeWait struct {
	at time.Time
	by string
}

// expiredBye is a BYE that got no final answer in time.
type expiredBye struct {
	pendingBye
	by string
}

// add records a BYE sent at now by by unless one of the same call and
// callee tag waits already (a retransmission keeps the first deadline) or
// the table is full.
func (t *pendingByes) add(b pendingBye, by string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[pendingBye]byeWait)
	}
	if _, ok := t.m[b]; ok || len(t.m) >= maxPendingByes {
		return
	}
	t.m[b] = byeWait{at: now.Add(byeTimeout), by: by}
}

// answered forgets a BYE that got its final answer.
func (t *pendingByes) answered(b pendingBye) {
	t.mu.Lock()
	delete(t.m, b)
	t.mu.Unlock()
}

// expired removes and returns the BYEs whose deadline passed at now.
func (t *pendingByes) expired(now time.Time) []expiredBye {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []expiredBye
	for b, w := range t.m {
		if !now.Before(w.at) {
			out = append(out, expiredBye{pendingBye: b, by: w.by})
			delete(t.m, b)
		}
	}
	return out
}

// size is the number of BYEs waiting (tests).
func (t *pendingByes) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// endsCall reports whether the final outcome of a BYE relayed from dir's
// leg ends its call, its dialog and its places: a 2xx, a 481, or no final
// answer (code 0: a timeout); for the carrier's BYE any final answer but a
// challenge (401, 407: the BYE comes again with credentials; if it does
// not within Timer F, the call ends as for a BYE never answered: see
// challengedBye). The carrier ended its session when it sent its BYE (RFC
// 3261 15.1.1), and a peer that answered 500 held the carrier's max_calls
// places, which other customers' calls need, for max_call_duration (h67).
// The dialog's token
// dies with it, but for the carrier's BYEs: sent again after the peer's
// refusal (a 503 with Retry-After, say), each still reaches the peer for
// refusedByeWindow, at most dialogguard.MaxByeCopies of them (each with
// its retransmissions), on the pool's other nodes too once they learn the
// end, so that the peer's side of the call ends too (it kept it up until
// its own timers ended it, with the carrier's BYE answered 481: h69). A
// peer's BYE that its carrier refuses otherwise ends nothing, 408
// included: a peer could aim its BYE (its Request-URI, its Route) at a
// far proxy that answers 408, or 483, while the carrier's call goes on,
// and free its places (issue 22, A2; h69). Those calls end by hand
// (DELETE /api/v1/calls/{id}) or at max_call_duration.
func endsCall(code int, dir direction) bool {
	if code == 0 || (code >= 200 && code < 300) || code == sipmsg.StatusCallTransactionDoesNotExists {
		return true
	}
	return dir == fromCarrier && code >= 300 &&
		code != sipmsg.StatusUnauthorized && code != sipmsg.StatusProxyAuthRequired
}

// inDialogDone is told of the outcome of an in-dialog request the proxy
// relayed for the call k from dir's leg: code is the far leg's final
// status, 0 when it gave none in time. A BYE that ended the call ends its
// dialog (its token is refused from then on: dialogs.go), frees its places
// and writes its record (ended_by the BYE's sender). It may wait on the
// store: never call it from a read path worker.
func (p *Proxy) inDialogDone(method sipmsg.RequestMethod, k callKey, calleeTag string, dir direction, code int) {
	if method != sipmsg.BYE {
		return
	}
	p.challengedBye(k, calleeTag, dir, code)
	if !endsCall(code, dir) {
		return
	}
	p.dialogEnded(k, calleeTag, code, 0, dir)
	p.calls.EndDialog(p.base, k.String(), calleeTag, byOf(dir))
}

// challengedBye gives the carrier's BYE that the peer challenged (401,
// 407) Timer F for the BYE to come again with credentials: the call ends
// then, as for a BYE never answered (sweepByes), unless a BYE of the
// dialog ended it before. A peer that challenged every carrier BYE held
// the call, and the carrier's max_calls places, until max_call_duration
// (h70).
func (p *Proxy) challengedBye(k callKey, calleeTag string, dir direction, code int) {
	if dir == fromCarrier && (code == sipmsg.StatusUnauthorized || code == sipmsg.StatusProxyAuthRequired) {
		p.byes.add(pendingBye{key: k, callee: calleeTag}, byOf(dir), time.Now())
	}
}

// byOf names who sent a request from dir's leg, as a record says it.
func byOf(dir direction) string {
	if dir == fromCarrier {
		return records.ByCallee
	}
	return records.ByCaller
}

// dirOf is the direction of a BYE's sender named as byOf names it.
func dirOf(by string) direction {
	if by == records.ByCallee {
		return fromCarrier
	}
	return fromPeer
}

// sweepByes ends the calls whose stateless BYE timed out (sweepOnce).
func (p *Proxy) sweepByes(now time.Time) {
	exp := p.byes.expired(now)
	if len(exp) == 0 {
		return
	}
	go func() {
		defer p.panics.Recover("sip.bye_timeout", nil)
		for _, b := range exp {
			p.inDialogDone(sipmsg.BYE, b.key, b.callee, dirOf(b.by), 0)
		}
	}()
}
