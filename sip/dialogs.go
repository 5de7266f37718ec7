package sip

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/fifo"
	"github.com/cpsguard/cpsguard/lua"
)

// What a dialog may still do, per node.
//
// A dialog token dies with its dialog: at max_call_duration (its mint
// time, token.go), or when the call ended (a BYE answered 2xx or 481, the
// carrier's answered at all but with a challenge, or not answered in time:
// ends.go). The second needs state: the dialogs that
// ended, each kept until its token would have expired anyway, in a
// node-local table (bounded: maxEndedDialogs, the oldest forgotten first;
// the ends of call attempts' tokens in one of their own, maxEndedTokens)
// that every in-dialog request is checked against. With a pool store
// (Options.DialogEnds) each node publishes the ends it saw and takes in the
// others' once every dialogSyncEvery, in store calls of a few hundred
// ends each (a call of a thousand held Redis, and every admission behind
// it, for milliseconds: BENCHMARKS.md, session 13): a dialog ended
// through one node is dead on all of them within a fraction of a second,
// and the check itself never waits on the network (the stateless relay
// runs in the read loop). A request of an ended dialog gets 481 and is counted
// dialog_ended, except a copy of the BYE that ended it, from the same
// side, on the node that saw the end, within byeTimeout of the end and at
// most maxEndedByeCopies times: it is relayed again, so that a sender
// whose answer was lost or late gets it (a real UAC retransmits a BYE no
// more often and no longer: RFC 3261 17.1.2.2; past that bound a copy,
// whose headers and body are its sender's choice, would be a relay that
// outlives its call). An ended dialog is named by its call key and the callee's
// tag (dialogKeyOf): a BYE naming a made-up callee tag ends nothing (the
// far leg refuses it, 481, and the call goes on). The call itself is over
// once its answered dialog ended (its BYE), an operator ended it or it
// reached max_call_duration (callOver, from the call places' end): then
// every request of a token minted before that end is refused, whatever
// callee tag it names (the token names the call by its Call-ID and
// caller's tag only, so a made-up To tag would otherwise make a dialog
// that never ended, relayed for the token's whole life), and the end is
// shared with the pool as a dialog's is. A call attempt's token, which its
// carrier got in the INVITE's Record-Route (and the caller maybe in a
// response), is ended by its ID (tokensOver), not the call key, when the
// call moves on from that carrier and when the call ends unanswered: a
// retry of the call with the same Call-ID and tag passes, and so do the
// requests of the carrier that holds the call.
//
// In-dialog requests are also bounded per dialog and direction: a token
// bucket of dialogBurst requests refilled at dialogRate a second, a rate
// a real user agent never reaches (a call's ACK, re-INVITEs, UPDATEs,
// PRACKs, DTMF as INFO, NOTIFYs of a transfer, its BYE). Past it a request
// gets 503 (an ACK is dropped), is counted dialog_rate, and the node logs
// it at Warn at most once every dialogRateLogEvery. The buckets of
// dialogs idle long enough to have refilled are swept every second, so
// the table holds the dialogs active in the last few seconds (at most
// maxDialogRates; past that new dialogs pass unbounded until the sweep).

// dialogKey names one dialog of a call: its call key and the callee's tag.
type dialogKey [8]byte

// dialogKeyOf returns the key of the dialog of call k answered with
// calleeTag (SHA-256: no made-up tag names another dialog).
func dialogKeyOf(k callKey, calleeTag string) dialogKey {
	var buf [128]byte // on the stack for the usual tag
	in := append(buf[:0], k[:]...)
	in = append(in, calleeTag...)
	sum := sha256.Sum256(in)
	return dialogKey(sum[:8])
}

// Bounds of the per-dialog state (see above).
const (
	// maxEndedDialogs bounds the ended dialogs and calls (callEndKey) a
	// node remembers: an answered call's end takes two places. About
	// 220 bytes each with the map and the FIFO (endedDialog is 80): some
	// 56 MB at the bound, measured.
	maxEndedDialogs = 1 << 18
	// maxEndedTokens bounds the ended call attempts' tokens
	// (tokenEndKey) a node remembers, in a table of their own: one per
	// carrier tried that did not take its call (a reroute, an unanswered
	// call). The same 220 bytes each: some 56 MB more at the bound,
	// measured.
	maxEndedTokens = 1 << 18
	// maxDialogRates bounds the dialogs whose rate is tracked at once.
	maxDialogRates = 1 << 18
	// dialogSyncEvery is how often a node exchanges ended dialogs with the
	// pool store: often enough that one exchange moves a few hundred ends
	// at a thousand calls a second, not a thousand.
	dialogSyncEvery = 100 * time.Millisecond
	// maxEndsPending bounds the ends waiting to be published (a store
	// that is down loses the oldest).
	maxEndsPending = 1 << 16
	// dialogRateLogEvery is the least time between two Warn lines about
	// dialogs over their rate.
	dialogRateLogEvery = 10 * time.Second
)

// The per-dialog rate bound, per direction (variables: tests and the
// benchmark change them).
var (
	dialogBurst = 40.0
	dialogRate  = 10.0 // requests a second
)

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

// dialogRateBucket is one dialog direction's token bucket, kept by value
// with its last use in Unix nanoseconds: the map of up to 262,144 holds
// no pointer for the collector to scan, and a new dialog allocates none.
type dialogRateBucket struct {
	tokens float64
	last   int64
}

// rateKey is a dialog direction (the call key is the dialog's caller side,
// so a made-up callee tag does not give a fresh bucket).
type rateKey struct {
	key callKey
	dir direction
}

// rateAt is a queued rate bucket's key and the time it was queued at (the
// bucket's last use then).
type rateAt struct {
	k  rateKey
	at int64 // Unix nanoseconds
}

// endedDialog is what a node keeps of an ended dialog: until when, and
// the BYE that ended it here (byeID of its CSeq number and its sender's
// branch, and its direction; bye 0 when not known: a timeout, or an end
// learned from the pool), whose retransmissions are still relayed so that
// their sender gets the answer it is waiting for (RFC 3261 17.1.2: a UAC
// retransmits a BYE until a final answer reaches it), until copyUntil and
// while copies (those relayed since the end) stays below
// maxEndedByeCopies. A new BYE, even with the same CSeq, is another
// transaction and is refused.
//
// Its times are Unix nanoseconds (wall clock, as the token's mint times):
// with no pointer in it (a time.Time holds its Location's), the tables
// of up to 2×262,144 ends are memory the collector never scans.
type endedDialog struct {
	exp       int64
	copyUntil int64
	// before: for a call's end (callEndKey), the tokens minted at or
	// before it (Unix seconds) are dead; a later call that reuses the
	// Call-ID and tag has a token of its own.
	before int64
	bye    uint64
	dir    direction
	copies uint8
}

// callEndKey is the key of the end of the whole call k (callOver) in the
// ended table: the call key itself, which no dialogKeyOf (a SHA-256 of it
// and a tag) names but by a 64-bit chance.
func callEndKey(k callKey) dialogKey { return dialogKey(k) }

// maxEndedByeCopies bounds the copies of a dialog's ending BYE relayed
// after the end: a UAC sends a non-INVITE request at most 11 times within
// Timer F (T1 doubling to T2: RFC 3261 17.1.2.2), the first of which went
// before the end.
const maxEndedByeCopies = 10

// byeID identifies a BYE transaction of a dialog by its CSeq number seq
// and the branch of its sender's Via (RFC 3261 17.2.3); never 0, so 0
// stays "not a BYE / not known".
func byeID(seq uint32, via *sipmsg.ViaHeader) uint64 {
	var branch string
	if via != nil {
		branch, _ = via.Params.Get("branch")
	}
	h := fnv.New64a()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], seq)
	h.Write(b[:])
	h.Write([]byte(branch))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// endedRef is an ended dialog in the order it was recorded.
type endedRef struct {
	key dialogKey
	exp int64 // Unix nanoseconds
}

// endedSet is a bounded table of ends, each kept until its expiry; when
// full, the oldest recorded is forgotten first. Not safe for concurrent
// use (dialogGuard.mu guards it).
type endedSet struct {
	m     map[dialogKey]endedDialog
	order fifo.Queue[endedRef] // of m, for expiry and eviction
	max   int
}

func newEndedSet(max int) endedSet {
	return endedSet{m: make(map[dialogKey]endedDialog), max: max}
}

// live returns k's end when it is known and not expired at now.
func (s *endedSet) live(k dialogKey, now time.Time) (endedDialog, bool) {
	e, ok := s.m[k]
	return e, ok && now.UnixNano() < e.exp
}

// add records e as k's end, forgetting the oldest end first when full.
func (s *endedSet) add(k dialogKey, e endedDialog) {
	if len(s.m) >= s.max {
		s.evictAt(math.MinInt64, 1)
	}
	s.m[k] = e
	s.order.Push(endedRef{k, e.exp})
}

// evict drops, from the oldest recorded, the ends expired at now, and at
// least atLeast more.
func (s *endedSet) evict(now time.Time, atLeast int) { s.evictAt(now.UnixNano(), atLeast) }

// evictAt is evict at now in Unix nanoseconds (math.MinInt64: only the
// atLeast oldest).
func (s *endedSet) evictAt(now int64, atLeast int) {
	for r, ok := s.order.Front(); ok && (atLeast > 0 || now >= r.exp); r, ok = s.order.Front() {
		if e, ok := s.m[r.key]; ok && e.exp == r.exp {
			delete(s.m, r.key)
			atLeast--
		}
		s.order.Pop()
	}
}

// dialogGuard is the node's per-dialog state: the ended dialogs and
// calls, the ended call attempts' tokens (apart, so that ends of tokens,
// one per carrier tried that did not take its call, never push a
// dialog's or a call's end out: each table forgets its own oldest) and
// the rate buckets. Safe for concurrent use.
type dialogGuard struct {
	mu sync.Mutex
	// ended holds the ends of dialogs (dialogKeyOf) and calls
	// (callEndKey), at most maxEndedDialogs.
	ended endedSet
	// endedTokens holds the ends of call attempts' tokens (tokenEndKey),
	// at most maxEndedTokens.
	endedTokens endedSet
	rates       map[rateKey]dialogRateBucket
	// rateQ holds the key of each bucket in rates, in the order they were
	// made (or found in use by the sweep), with that time: the sweep pops
	// the ones idle long enough instead of walking the whole map under mu
	// (at 1,000 calls a second that walk held mu, and every in-dialog
	// request behind it, for milliseconds each second).
	rateQ fifo.Queue[rateAt]

	// pending are the ends to publish to the pool store.
	pending []string
	// lastLog is when a dialog over its rate was last logged (Unix ns);
	// overRate counts those since.
	lastLog  atomic.Int64
	overRate atomic.Int64
}

func newDialogGuard() *dialogGuard {
	return &dialogGuard{ended: newEndedSet(maxEndedDialogs), endedTokens: newEndedSet(maxEndedTokens),
		rates: make(map[rateKey]dialogRateBucket)}
}

// Outcomes of dialogGuard.admit.
const (
	dialogPass = iota
	dialogEnded
	dialogOverRate
)

// admit checks a verified in-dialog request of dialog d (call k,
// direction dir, its token minted at minted, Unix seconds) at now:
// dialogEnded when its dialog or its call ended, dialogOverRate when its
// direction has no token left (and takes one otherwise). bye is the
// request's byeID when it is a BYE, else 0: a copy of the BYE that ended
// the dialog here, from the same side, is not refused while the sender
// may still be retransmitting it (endedDialog).
func (g *dialogGuard) admit(d dialogKey, k callKey, dir direction, bye uint64, minted int64, now time.Time) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.admitLocked(d, k, dir, bye, minted, now)
}

// admitToken is admit for a request whose token is tok (tokenEndKey) under
// one hold of g.mu: dialogEnded when the call attempt that minted tok ended
// unanswered (tokensOver), or when gone (the token is this proxy's and its
// call no longer live here, ownTokenGone) and the table knows nothing of
// d's end; else admit's verdict.
func (g *dialogGuard) admitToken(tok dialogKey, gone bool, d dialogKey, k callKey, dir direction, bye uint64, minted int64, now time.Time) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.endedTokens.live(tok, now); ok {
		return dialogEnded
	}
	if _, ok := g.ended.live(tok, now); ok {
		// A token's end published by a node of an earlier release, which
		// sends it as a dialog's (syncDialogs).
		return dialogEnded
	}
	if _, ok := g.ended.live(d, now); gone && !ok {
		return dialogEnded
	}
	return g.admitLocked(d, k, dir, bye, minted, now)
}

// admitLocked is admit with g.mu held.
func (g *dialogGuard) admitLocked(d dialogKey, k callKey, dir direction, bye uint64, minted int64, now time.Time) int {
	if e, ok := g.ended.live(d, now); ok {
		if bye == 0 || e.bye != bye || e.dir != dir || now.UnixNano() >= e.copyUntil || e.copies >= maxEndedByeCopies {
			return dialogEnded
		}
		e.copies++
		g.ended.m[d] = e
	} else if c, ok := g.ended.live(callEndKey(k), now); ok && minted <= c.before {
		return dialogEnded
	}
	rk, at := rateKey{k, dir}, now.UnixNano()
	b, ok := g.rates[rk]
	if !ok {
		if len(g.rates) >= maxDialogRates {
			return dialogPass
		}
		b = dialogRateBucket{tokens: dialogBurst, last: at}
		g.rateQ.Push(rateAt{rk, at})
	}
	if el := float64(at-b.last) / float64(time.Second); el > 0 {
		b.tokens = min(dialogBurst, b.tokens+el*dialogRate)
		b.last = at
	} else if el < 0 {
		// The wall clock stepped back: it refills from now on, not from
		// when the clock is back at its last use.
		b.last = at
	}
	verdict := dialogOverRate
	if b.tokens >= 1 {
		b.tokens--
		verdict = dialogPass
	}
	g.rates[rk] = b
	return verdict
}

// end records at now that dialog d ended (or, with d a callEndKey, its
// call), until exp, by the BYE bye (byeID) from dir (0: not known);
// publish queues it for the pool store. A dialog known to have ended
// keeps its first record (the pool store hands a node's own ends back to
// it), but for its before, which moves to now: a call that reused the
// key and ended again is over too.
func (g *dialogGuard) end(d dialogKey, now, exp time.Time, bye uint64, dir direction, publish bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if old, ok := g.ended.live(d, now); ok {
		old.before = max(old.before, now.Unix())
		g.ended.m[d] = old
		return
	}
	e := endedDialog{exp: exp.UnixNano(), before: now.Unix(), bye: bye, dir: dir}
	if bye != 0 {
		e.copyUntil = now.Add(byeTimeout).UnixNano()
	}
	g.ended.add(d, e)
	if publish {
		g.publishLocked(hex.EncodeToString(d[:]))
	}
}

// tokenEndPrefix marks a token's end (tokenEndKey) among the ends shared
// with the pool, so that the other nodes keep it in their token table:
// "t" and the key in hex, where a dialog's or a call's is the hex alone.
const tokenEndPrefix = "t"

// endToken records at now that the call attempt whose token's end key
// is t is over, until exp; publish queues it for the pool store. It goes
// in the token table (endedTokens): a storm of them forgets older token
// ends, never a dialog's or a call's.
func (g *dialogGuard) endToken(t dialogKey, now, exp time.Time, publish bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.endedTokens.live(t, now); ok {
		return
	}
	g.endedTokens.add(t, endedDialog{exp: exp.UnixNano(), before: now.Unix()})
	if publish {
		g.publishLocked(tokenEndPrefix + hex.EncodeToString(t[:]))
	}
}

// publishLocked queues the end key for the pool store (the oldest go
// first past maxEndsPending); g.mu held.
func (g *dialogGuard) publishLocked(key string) {
	if len(g.pending) >= maxEndsPending {
		g.pending = g.pending[1:]
	}
	g.pending = append(g.pending, key)
}

// isEnded reports whether dialog d (or what another key of the ended
// table names) is known to have ended at now (tests).
func (g *dialogGuard) isEnded(d dialogKey, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.ended.live(d, now); ok {
		return true
	}
	_, ok := g.endedTokens.live(d, now)
	return ok
}

// sweep forgets the ended dialogs that expired and the rate buckets that
// have refilled (idle since).
func (g *dialogGuard) sweep(now time.Time) {
	full := time.Hour
	if s := dialogBurst / dialogRate; s > 0 && s < full.Seconds() {
		full = time.Duration(s * float64(time.Second))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ended.evict(now, 0)
	g.endedTokens.evict(now, 0)
	// Each key queued before this sweep is looked at once: one in use
	// since it was queued goes to the back with its last use, which is
	// later than now-full, so the loop stops when it comes round.
	// A key queued, or a bucket last used, after now (the wall clock
	// stepped back since) is taken as used now: the sweep goes on past it,
	// and forgets it once idle for full from now.
	at := now.UnixNano()
	for {
		e, ok := g.rateQ.Front()
		if !ok || (e.at <= at && at-e.at < int64(full)) {
			return
		}
		g.rateQ.Pop()
		b, ok := g.rates[e.k]
		switch {
		case !ok:
		case b.last > at:
			b.last = at
			g.rates[e.k] = b
			g.rateQ.Push(rateAt{e.k, at})
		case at-b.last >= int64(full):
			delete(g.rates, e.k)
		default:
			g.rateQ.Push(rateAt{e.k, b.last})
		}
	}
}

// takePending returns the ends to publish (up to n) and forgets them.
func (g *dialogGuard) takePending(n int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	n = min(n, len(g.pending))
	out := append([]string(nil), g.pending[:n]...)
	g.pending = g.pending[n:]
	if len(g.pending) == 0 {
		g.pending = nil
	}
	return out
}

// pendingLen is the number of ends waiting to be published.
func (g *dialogGuard) pendingLen() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// requeue puts back ends a failed store call did not publish.
func (g *dialogGuard) requeue(keys []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending = append(keys, g.pending...)
	if over := len(g.pending) - maxEndsPending; over > 0 {
		g.pending = g.pending[over:]
	}
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
// except to copies of that BYE on this node. A 481 or a timeout of a BYE
// naming another callee tag than the answer of the call this node holds
// records nothing: the far leg knows no such dialog, and the call goes
// on (recorded, a flood of BYEs with made-up tags would fill the ended
// table and push the ended calls' records out of it).
func (p *Proxy) dialogEnded(k callKey, calleeTag string, code int, bye uint64, dir direction) {
	if (code < 200 || code >= 300) && p.answeredOtherTag(k, calleeTag) {
		return
	}
	now := time.Now()
	p.dialogs.end(dialogKeyOf(k, calleeTag), now, now.Add(endedTTL(p.cfg())), bye, dir, p.dialogEnds != nil)
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
	p.dialogs.end(callEndKey(k), now, now.Add(endedTTL(p.cfg())), 0, 0, p.dialogEnds != nil)
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
		p.dialogs.endToken(tokenEndKey(id), now, exp, p.dialogEnds != nil)
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
	r := p.dialogs.admitToken(tokenEndKey(hop.token.id), p.ownTokenGone(hop),
		dialogKeyOf(hop.key, hop.callee), hop.key, hop.dir, bye, hop.minted, now)
	switch r {
	case dialogEnded:
		if count {
			p.m.SIPErrors.WithLabelValues("dialog_ended").Inc()
		}
		return sipmsg.StatusCallTransactionDoesNotExists
	case dialogOverRate:
		if count {
			p.m.SIPErrors.WithLabelValues("dialog_rate").Inc()
		}
		p.logOverRate(now, callID(req))
		return sipmsg.StatusServiceUnavailable
	}
	return 0
}

// ownTokenGone reports whether hop's token is one this proxy minted for a
// call it no longer holds (its Tracker has no live call of the token's
// call key: the call ended, answered or not). Such a token is refused
// unless the ended table still knows its dialog's end (admitToken: a copy
// of the BYE that ended it is judged there). The table is bounded
// (maxEndedDialogs) and forgets the oldest ends first, at a few answered
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
	g := p.dialogs
	n := g.overRate.Add(1)
	last := g.lastLog.Load()
	if now.UnixNano()-last < int64(dialogRateLogEvery) || !g.lastLog.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	g.overRate.Add(-n)
	p.log.Warn("in-dialog requests over the per-dialog rate refused (503)",
		"call_id", clip(callID), "refused", n,
		"limit", strconv.FormatFloat(dialogRate, 'f', -1, 64)+"/s, burst "+strconv.FormatFloat(dialogBurst, 'f', -1, 64))
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
		mine := p.dialogs.takePending(endsPublishBatch)
		sctx, cancel := context.WithTimeout(ctx, storeBudget)
		keys, next, more, err := p.dialogEnds.Sync(sctx, cursor, mine, ttl)
		cancel()
		if err != nil {
			p.dialogs.requeue(mine)
			p.log.Debug("sharing ended dialogs with the store failed; retried", "error", err)
			return cursor
		}
		now := time.Now()
		for _, k := range keys {
			var d dialogKey
			h, token := strings.CutPrefix(k, tokenEndPrefix)
			if b, err := hex.DecodeString(h); err == nil && len(b) == len(d) {
				copy(d[:], b)
				if token {
					p.dialogs.endToken(d, now, now.Add(ttl), false)
				} else {
					p.dialogs.end(d, now, now.Add(ttl), 0, 0, false)
				}
			}
		}
		cursor = next
		if !more && p.dialogs.pendingLen() == 0 {
			break
		}
	}
	return cursor
}
