package sip

import (
	"context"
	"strconv"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/sip/internal/dialogguard"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// What a dialog may still do, per node: package dialogguard keeps it
// (the ended dialogs, calls and call attempts, and each dialog's rate
// bucket); this file decides what it is told and what becomes of a
// request it refuses, and shares the ends with the pool.
//
// With a pool store (Options.DialogEnds) each node publishes the ends it
// saw and takes in the others' once every dialogSyncEvery, in store calls
// of a few hundred ends each (a call of a thousand held Redis, and every
// admission behind it, for milliseconds: BENCHMARKS.md, session 13): a
// dialog ended through one node is dead on all of them within a fraction
// of a second, and the check itself never waits on the network (the
// stateless relay runs in the read loop). A request of an ended dialog
// gets 481 and is counted dialog_ended; one over its dialog's rate gets
// 503 (an ACK is dropped), is counted dialog_rate, and the node logs it
// at Warn at most once every dialogRateLogEvery.

const (
	// dialogSyncEvery is how often a node exchanges ended dialogs with the
	// pool store: often enough that one exchange moves a few hundred ends
	// at a thousand calls a second, not a thousand.
	dialogSyncEvery = 100 * time.Millisecond
	// dialogRateLogEvery is the least time between two Warn lines about
	// dialogs over their rate.
	dialogRateLogEvery = 10 * time.Second
)

// The per-dialog rate bound, per direction, a proxy's guard is made with
// (variables: tests and the benchmark change them before they start one).
var (
	dialogBurst = 40.0
	dialogRate  = 10.0 // requests a second
)

// dialogKey names one dialog of a call (dialogguard.DialogOf), a whole
// call's end or a call attempt's token's end.
type dialogKey = dialogguard.Key

// dialogKeyOf returns the key of the dialog of call k answered with
// calleeTag.
func dialogKeyOf(k callKey, calleeTag string) dialogKey {
	return dialogguard.DialogOf(dialogguard.Key(k), calleeTag)
}

// byeID identifies a BYE transaction by its CSeq number and the branch of
// its sender's top Via (dialogguard.ByeID).
func byeID(seq uint32, via *sipmsg.ViaHeader) uint64 {
	var branch string
	if via != nil {
		branch, _ = via.Params.Get("branch")
	}
	return dialogguard.ByeID(seq, branch)
}

// DialogEnds shares the ends of dialogs among the nodes of a pool.
// *calls.RedisEnded satisfies it.
type DialogEnds interface {
	// Sync records ended (keys of dialogs that ended on this node), each
	// for ttl, and returns the keys any node recorded at or after cursor
	// (at most a page of them; more reports there are others), with the
	// cursor to pass next. Cursor 0 reads from the oldest kept. The keys
	// recorded by this call may be left out (the node has them).
	Sync(ctx context.Context, cursor int64, ended []string, ttl time.Duration) (keys []string, next int64, more bool, err error)
}

// endedTTL is how long an ended dialog is remembered: until its token has
// expired whatever its age (max_call_duration and tokenGrace).
func endedTTL(cfg *config.Config) time.Duration {
	d := callplaces.DefaultMaxDuration
	if cfg != nil && cfg.SIP.MaxCallDuration > 0 {
		d = cfg.SIP.MaxCallDuration
	}
	return d + tokenGrace
}

// dialogEnded records that the dialog of call k answered with calleeTag
// is over (its BYE, byeID bye from dir, was answered code, 0 for no
// answer in time; bye 0 when not known): its token is refused from now
// on, on this node at once, on the pool's others at their next sync,
// except to copies of that BYE on this node (to every BYE of the
// carrier's for refusedByeWindow when the peer refused the carrier's). A 481 or a timeout of a BYE
// naming another callee tag than the answer of the call this node holds
// records nothing: the far leg knows no such dialog, and the call goes
// on (recorded, a flood of BYEs with made-up tags would fill the ended
// table and push the ended calls' records out of it).
func (p *Proxy) dialogEnded(k callKey, calleeTag string, code int, bye uint64, dir direction) {
	if (code < 200 || code >= 300) && p.answeredOtherTag(k, calleeTag) {
		return
	}
	copyFor := byeTimeout
	if refusedCarrierBye(code, dir) {
		bye, copyFor = dialogguard.AnyBye, refusedByeWindow
	}
	now := time.Now()
	p.dialogs.End(dialogKeyOf(k, calleeTag), now, now.Add(endedTTL(p.cfg())), bye, dialogguard.Dir(dir), copyFor, p.dialogEnds != nil)
}

// refusedByeWindow is how long after the peer refused the carrier's BYE
// the carrier's BYEs (new transactions, at most
// dialogguard.MaxByeCopies) still reach the peer: a peer that answered
// 503 with Retry-After, or 500, ends its side when the BYE comes again.
const refusedByeWindow = 5 * time.Minute

// refusedCarrierBye reports whether code, the final answer to a BYE from
// dir, is the peer's refusal of the carrier's BYE (which ends the call at
// the node all the same: endsCall).
func refusedCarrierBye(code int, dir direction) bool {
	return dir == fromCarrier && code >= 300 && code != sipmsg.StatusCallTransactionDoesNotExists
}

// answeredOtherTag reports whether this node holds an answered call of
// key k, none of whose answers named calleeTag (no I/O: the read loop
// asks it).
func (p *Proxy) answeredOtherTag(k callKey, calleeTag string) bool {
	other := false
	for _, f := range p.calls.FindDialog(k.String()) {
		lc, ok := f.Data.(*liveCall)
		if !ok || lc == nil {
			continue
		}
		lc.mu.Lock()
		var to, tag string
		if lc.answered && lc.dlg != nil {
			to, tag = lc.dlg.calleeTo, lc.dlg.calleeTag
		}
		lc.mu.Unlock()
		if to == "" {
			continue
		}
		if tag == calleeTag {
			return false
		}
		other = true
	}
	return other
}

// callOver records that call k is over (its answered dialog ended, an
// operator ended it, or it reached max_call_duration): every request of a
// token minted until now is refused, on this node at once, on the pool's
// others at their next sync.
func (p *Proxy) callOver(k callKey) {
	now := time.Now()
	p.dialogs.End(dialogguard.CallEnd(dialogguard.Key(k)), now, now.Add(endedTTL(p.cfg())), 0, 0, 0, p.dialogEnds != nil)
}

// tokenEndKey is the key of the end of the call attempt that minted the
// token id (tokensOver) in the ended table: the token's ID itself (random,
// where the other keys are hashes: they meet but by a 64-bit chance).
func tokenEndKey(id tokenID) dialogKey { return dialogKey(id) }

// tokensOver records that the call attempts that minted the tokens ids
// are over without an answer: the call moved on from their carrier, or
// ended unanswered. No request of those tokens is relayed any more,
// whatever tags it names, on this node at once, on the pool's others at
// their next sync. Every carrier the INVITE reached holds its token (the
// Record-Route), and the caller may (a provisional response): a carrier
// the call moved on from could otherwise reach the caller as its callee
// through another node of the pool (one that never held the call, so
// ownTokenGone does not judge it), on the rate and re-INVITE budget of
// the callee side; and the caller could send requests of an unanswered
// call's dialog for the tokens' whole life, an INVITE among them, which a
// carrier may take for a new call (RFC 3261 12.2.2) that no admission,
// pacing slot or max_calls place granted. The call key is not what ends
// (callOver): the carrier that holds the call has a token of its own, and
// a caller retries a refused call with its Call-ID and From tag (after a
// 407, say), and the retry's own tokens must pass.
func (p *Proxy) tokensOver(ids []tokenID) {
	now := time.Now()
	exp := now.Add(endedTTL(p.cfg()))
	for _, id := range ids {
		p.dialogs.EndToken(tokenEndKey(id), now, exp, p.dialogEnds != nil)
	}
}

// admitInDialog applies the guard to a request prepareInDialog verified,
// once the caller is about to relay it, and returns 0, or the SIP code it
// gets: 481 for an ended dialog, 503 over the rate (both counted when
// count is set, the second logged now and then). req is the request as
// received (its top Via is its sender's).
func (p *Proxy) admitInDialog(hop *inDialogHop, count bool, req *sipmsg.Request) int {
	now := time.Now()
	var bye uint64
	if req.Method == sipmsg.BYE {
		if c := req.CSeq(); c != nil {
			bye = byeID(c.SeqNo, req.Via())
		}
	}
	r := p.dialogs.AdmitToken(tokenEndKey(hop.token.id), p.ownTokenGone(hop),
		dialogKeyOf(hop.key, hop.callee), dialogguard.Key(hop.key), dialogguard.Dir(hop.dir), bye, hop.minted, now)
	switch r {
	case dialogguard.Ended:
		if count {
			p.m.SIPErrors.WithLabelValues("dialog_ended").Inc()
		}
		return sipmsg.StatusCallTransactionDoesNotExists
	case dialogguard.OverRate:
		if count {
			p.m.SIPErrors.WithLabelValues("dialog_rate").Inc()
		}
		p.logOverRate(now, msgpart.CallID(req))
		return sipmsg.StatusServiceUnavailable
	}
	return 0
}

// ownTokenGone reports whether hop's token is one this proxy minted for a
// call it no longer holds (its Tracker has no live call of the token's
// call key: the call ended, answered or not). Such a token is refused
// unless the ended table still knows its dialog's end (dialogguard.Guard.AdmitToken: a copy
// of the BYE that ended it is judged there). The table is bounded
// (dialogguard.MaxEndedDialogs) and forgets the oldest ends first, at a few answered
// calls a second before their tokens expire (docs/security.md); a token of
// this process needs no memory of the end: its call is live here or it is
// over. Tokens of the pool's other nodes, or of an earlier process, keep
// the table's rule alone: this node never held their calls.
//
// A token of a call the node still holds is gone too when it is not the
// token of the call's current attempt: the call moved on from that
// token's carrier (it failed before ringing) to another, and the first
// carrier, which still holds the token its INVITE carried, is no leg of
// the call. Its requests would reach the caller as the callee's, taking
// the callee side's per-dialog rate and re-INVITE budget from the carrier
// that holds the call. The pool's other nodes, which never held the call,
// learn it from the token's end (tokensOver, when the call moved on).
func (p *Proxy) ownTokenGone(hop *inDialogHop) bool {
	if !hop.token.own {
		return false
	}
	found := hop.liveCalls(p)
	if len(found) == 0 {
		return true
	}
	for _, f := range found {
		lc, ok := f.Data.(*liveCall)
		if !ok || lc == nil {
			return false // not a call of this package's: not judged here
		}
		lc.mu.Lock()
		cur := lc.token
		lc.mu.Unlock()
		if cur == (tokenID{}) || cur == hop.token.id {
			return false
		}
	}
	return true
}

// liveCalls returns the calls this node holds bound to hop's dialog,
// looked up in the Tracker once per hop.
func (hop *inDialogHop) liveCalls(p *Proxy) []callplaces.Found {
	if !hop.looked {
		hop.live, hop.looked = p.calls.FindDialog(hop.key.String()), true
	}
	return hop.live
}

// logOverRate logs a dialog over its rate at Warn, at most once every
// dialogRateLogEvery, with how many were refused since the last line.
func (p *Proxy) logOverRate(now time.Time, callID string) {
	n, log := p.dialogs.NoteOverRate(now, dialogRateLogEvery)
	if !log {
		return
	}
	burst, rate := p.dialogs.Limits()
	p.log.Warn("in-dialog requests over the per-dialog rate refused (503)",
		"call_id", clip(callID), "refused", n,
		"limit", strconv.FormatFloat(rate, 'f', -1, 64)+"/s, burst "+strconv.FormatFloat(burst, 'f', -1, 64))
}

// runDialogs exchanges ended dialogs with the pool store, when there is
// one, every dialogSyncEvery until ctx ends (sweepOnce sweeps the
// per-dialog state).
func (p *Proxy) runDialogs(ctx context.Context) {
	if p.dialogEnds == nil {
		return
	}
	t := time.NewTicker(dialogSyncEvery)
	defer t.Stop()
	var cursor int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cursor = p.syncDialogs(ctx, cursor)
		}
	}
}

// maxSyncPages bounds the store calls of one sync (a node that starts
// reads the ended dialogs the pool keeps over its first syncs: 64 pages
// of calls.EndedPage a tick, some 650,000 ends a second).
const maxSyncPages = 64

// endsPublishBatch bounds the ends one store call publishes (at most
// lua.MaxEndsPerCall): each is a ZADD inside one script, during which
// Redis serves nothing else.
const endsPublishBatch = lua.MaxEndsPerCall

// syncDialogs is one exchange with the pool store; it returns the next
// cursor. A failed call keeps the ends for the next one.
func (p *Proxy) syncDialogs(ctx context.Context, cursor int64) int64 {
	defer p.panics.Recover("sip.dialog_sync", nil)
	if p.dialogEnds == nil {
		return cursor
	}
	ttl := endedTTL(p.cfg())
	for page := 0; page < maxSyncPages; page++ {
		mine := p.dialogs.TakePending(endsPublishBatch)
		sctx, cancel := context.WithTimeout(ctx, storeBudget)
		keys, next, more, err := p.dialogEnds.Sync(sctx, cursor, mine, ttl)
		cancel()
		if err != nil {
			p.dialogs.Requeue(mine)
			p.log.Debug("sharing ended dialogs with the store failed; retried", "error", err)
			return cursor
		}
		now := time.Now()
		for _, k := range keys {
			p.dialogs.Learn(k, now, now.Add(ttl), refusedByeWindow)
		}
		cursor = next
		if !more && p.dialogs.PendingLen() == 0 {
			break
		}
	}
	return cursor
}
