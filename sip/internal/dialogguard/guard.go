package dialogguard

import (
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

	"github.com/cpsguard/cpsguard/internal/fifo"
)

// Key names an end the guard keeps: a dialog's (DialogOf: its call key
// and the callee's tag), a whole call's (CallEnd) or a call attempt's
// token's (its ID); and a call, by its call key.
type Key [8]byte

// DialogOf returns the key of the dialog of call k answered with
// calleeTag (SHA-256: no made-up tag names another dialog).
func DialogOf(k Key, calleeTag string) Key {
	var buf [128]byte // on the stack for the usual tag
	in := append(buf[:0], k[:]...)
	in = append(in, calleeTag...)
	sum := sha256.Sum256(in)
	return Key(sum[:8])
}

// Bounds of the per-dialog state (see the package doc).
const (
	// MaxEndedDialogs bounds the ended dialogs and calls (CallEnd) a
	// node remembers: an answered call's end takes two places. About
	// 220 bytes each with the map and the FIFO (endedDialog is 80): some
	// 56 MB at the bound, measured.
	MaxEndedDialogs = 1 << 18
	// MaxEndedTokens bounds the ended call attempts' tokens
	// (EndToken) a node remembers, in a table of their own: one per
	// carrier tried that did not take its call (a reroute, an unanswered
	// call). The same 220 bytes each: some 56 MB more at the bound,
	// measured.
	MaxEndedTokens = 1 << 18
	// MaxRates bounds the dialogs whose rate is tracked at once.
	MaxRates = 1 << 18
	// MaxPending bounds the ends waiting to be published (a store
	// that is down loses the oldest).
	MaxPending = 1 << 16
)

// Dir is the side of a dialog a request came from (the sip package's
// direction); the guard only compares it.
type Dir int

// Verdict is what Admit and AdmitToken decide.
type Verdict int

// Verdicts.
const (
	// Pass: relay the request.
	Pass Verdict = iota
	// Ended: its dialog, call or call attempt is over (481).
	Ended
	// OverRate: its dialog's direction has no token left (503).
	OverRate
)

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
	key Key
	dir Dir
}

// rateAt is a queued rate bucket's key and the time it was queued at (the
// bucket's last use then).
type rateAt struct {
	k  rateKey
	at int64 // Unix nanoseconds
}

// endedDialog is what a node keeps of an ended dialog: until when, and
// the BYE that ended it here (ByeID of its CSeq number and its sender's
// branch, and its direction; bye 0 when not known: a timeout, or an end
// learned from the pool), whose retransmissions are still relayed so that
// their sender gets the answer it is waiting for (RFC 3261 17.1.2: a UAC
// retransmits a BYE until a final answer reaches it), until copyUntil and
// while copies (those relayed since the end) stays below
// MaxByeCopies. A new BYE, even with the same CSeq, is another
// transaction and is refused, unless anyBye (End with AnyBye: the far leg
// refused dir's BYE): then each new BYE from dir within copyUntil, up to
// MaxByeCopies of them (byes), becomes the one whose copies pass, up to
// MaxByeCopies datagrams each.
//
// Its times are Unix nanoseconds (wall clock, as the token's mint times):
// with no pointer in it (a time.Time holds its Location's), the tables
// of up to 2×262,144 ends are memory the collector never scans.
type endedDialog struct {
	exp       int64
	copyUntil int64
	// before: for a call's end (CallEnd), the tokens minted at or
	// before it (Unix seconds) are dead; a later call that reuses the
	// Call-ID and tag has a token of its own.
	before int64
	bye    uint64
	dir    Dir
	copies uint8
	byes   uint8
	anyBye bool
}

// CallEnd is the key of the end of the whole call k in the ended table:
// the call key itself, which no DialogOf (a SHA-256 of it and a tag)
// names but by a 64-bit chance.
func CallEnd(k Key) Key { return k }

// MaxByeCopies bounds the copies of a dialog's ending BYE relayed
// after the end: a UAC sends a non-INVITE request at most 11 times within
// Timer F (T1 doubling to T2: RFC 3261 17.1.2.2), the first of which went
// before the end.
const MaxByeCopies = 10

// AnyBye, as End's bye, lets every BYE from the end's side pass within
// its copy window, at most MaxByeCopies of them, not only copies of one:
// a BYE the far leg refused (503 with Retry-After, say) comes again as a
// new transaction, and must reach it for its side of the call to end.
const AnyBye uint64 = math.MaxUint64

// ByeID identifies a BYE transaction of a dialog by its CSeq number seq
// and the branch of its sender's Via (RFC 3261 17.2.3); never 0, so 0
// stays "not a BYE / not known", nor AnyBye.
func ByeID(seq uint32, branch string) uint64 {
	h := fnv.New64a()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], seq)
	h.Write(b[:])
	h.Write([]byte(branch))
	if id := h.Sum64(); id != 0 && id != AnyBye {
		return id
	}
	return 1
}

// endedRef is an ended dialog in the order it was recorded.
type endedRef struct {
	key Key
	exp int64 // Unix nanoseconds
}

// endedSet is a bounded table of ends, each kept until its expiry; when
// full, the oldest recorded is forgotten first. Not safe for concurrent
// use (Guard.mu guards it).
type endedSet struct {
	m     map[Key]endedDialog
	order fifo.Queue[endedRef] // of m, for expiry and eviction
	max   int
}

func newEndedSet(max int) endedSet {
	return endedSet{m: make(map[Key]endedDialog), max: max}
}

// live returns k's end when it is known and not expired at now.
func (s *endedSet) live(k Key, now time.Time) (endedDialog, bool) {
	e, ok := s.m[k]
	return e, ok && now.UnixNano() < e.exp
}

// add records e as k's end, forgetting the oldest end first when full.
func (s *endedSet) add(k Key, e endedDialog) {
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

// Guard is the node's per-dialog state: the ended dialogs and
// calls, the ended call attempts' tokens (apart, so that ends of tokens,
// one per carrier tried that did not take its call, never push a
// dialog's or a call's end out: each table forgets its own oldest) and
// the rate buckets. Safe for concurrent use.
type Guard struct {
	mu sync.Mutex
	// ended holds the ends of dialogs (DialogOf) and calls
	// (CallEnd), at most MaxEndedDialogs.
	ended endedSet
	// endedTokens holds the ends of call attempts' tokens (EndToken),
	// at most MaxEndedTokens.
	endedTokens endedSet
	// burst and rate are the token bucket of each dialog direction: burst
	// requests, refilled at rate a second.
	burst, rate float64
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

// New returns an empty guard whose dialogs may each send burst requests
// per direction, refilled at rate a second.
func New(burst, rate float64) *Guard {
	return &Guard{ended: newEndedSet(MaxEndedDialogs), endedTokens: newEndedSet(MaxEndedTokens),
		burst: burst, rate: rate, rates: make(map[rateKey]dialogRateBucket)}
}

// Limits returns the per-direction burst and rate New was given.
func (g *Guard) Limits() (burst, rate float64) { return g.burst, g.rate }

// Admit checks a verified in-dialog request of dialog d (call k,
// direction dir, its token minted at minted, Unix seconds) at now:
// Ended when its dialog or its call ended, OverRate when its
// direction has no token left (and takes one otherwise). bye is the
// request's ByeID when it is a BYE, else 0: a copy of the BYE that ended
// the dialog here, from the same side, is not refused while the sender
// may still be retransmitting it (endedDialog).
func (g *Guard) Admit(d Key, k Key, dir Dir, bye uint64, minted int64, now time.Time) Verdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.admitLocked(d, k, dir, bye, minted, now)
}

// AdmitToken is Admit for a request whose token's end key is tok, under
// one hold of the guard's lock: Ended when the call attempt that minted
// tok ended (EndToken), or when gone (the token is the node's own and its
// call no longer live there: the sip package's ownTokenGone) and the
// table knows nothing of d's end; else Admit's verdict.
func (g *Guard) AdmitToken(tok Key, gone bool, d Key, k Key, dir Dir, bye uint64, minted int64, now time.Time) Verdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.endedTokens.live(tok, now); ok {
		return Ended
	}
	if _, ok := g.ended.live(tok, now); ok {
		// A token's end published by a node of an earlier release, which
		// sends it as a dialog's (Learn).
		return Ended
	}
	if _, ok := g.ended.live(d, now); gone && !ok {
		return Ended
	}
	return g.admitLocked(d, k, dir, bye, minted, now)
}

// admitLocked is Admit with g.mu held.
func (g *Guard) admitLocked(d Key, k Key, dir Dir, bye uint64, minted int64, now time.Time) Verdict {
	if e, ok := g.ended.live(d, now); ok {
		if e.anyBye && bye != 0 && bye != e.bye && e.dir == dir && now.UnixNano() < e.copyUntil && e.byes < MaxByeCopies {
			// A new BYE transaction of the side whose BYE was refused: its
			// copies pass from now on (over UDP each datagram is one). Like
			// an ending BYE's copies, it skips the call's end (below) and,
			// in AdmitToken, the own-token rule; a carrier the call moved
			// on from is still refused by its token's end (EndToken).
			e.byes++
			e.bye, e.copies = bye, 0
		}
		if bye == 0 || e.bye != bye || e.dir != dir || now.UnixNano() >= e.copyUntil || e.copies >= MaxByeCopies {
			return Ended
		}
		e.copies++
		g.ended.m[d] = e
	} else if c, ok := g.ended.live(CallEnd(k), now); ok && minted <= c.before {
		return Ended
	}
	rk, at := rateKey{k, dir}, now.UnixNano()
	b, ok := g.rates[rk]
	if !ok {
		if len(g.rates) >= MaxRates {
			return Pass
		}
		b = dialogRateBucket{tokens: g.burst, last: at}
		g.rateQ.Push(rateAt{rk, at})
	}
	if el := float64(at-b.last) / float64(time.Second); el > 0 {
		b.tokens = min(g.burst, b.tokens+el*g.rate)
		b.last = at
	} else if el < 0 {
		// The wall clock stepped back: it refills from now on, not from
		// when the clock is back at its last use.
		b.last = at
	}
	verdict := OverRate
	if b.tokens >= 1 {
		b.tokens--
		verdict = Pass
	}
	g.rates[rk] = b
	return verdict
}

// End records at now that dialog d ended (or, with d a CallEnd, its
// call), until exp, by the BYE bye (ByeID) from dir (0: not known), whose
// copies from dir (every BYE from dir, with AnyBye) pass for copyFor (at
// most MaxByeCopies of them);
// publish queues it for the pool store (with AnyBye, a second key that
// says so: anyByeKey). A dialog known to have ended keeps its first
// record (the pool store hands a node's own ends back to it), but for its
// before, which moves to now (a call that reused the key and ended again
// is over too), and for AnyBye, which it takes on.
func (g *Guard) End(d Key, now, exp time.Time, bye uint64, dir Dir, copyFor time.Duration, publish bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	until := now.Add(copyFor).UnixNano()
	if old, ok := g.ended.live(d, now); ok {
		old.before = max(old.before, now.Unix())
		if bye == AnyBye && !old.anyBye {
			old.anyBye, old.dir, old.copyUntil = true, dir, max(old.copyUntil, until)
		}
		g.ended.m[d] = old
		return
	}
	e := endedDialog{exp: exp.UnixNano(), before: now.Unix(), bye: bye, dir: dir}
	if bye == AnyBye {
		e.bye, e.anyBye = 0, true
	}
	if bye != 0 {
		e.copyUntil = until
	}
	g.ended.add(d, e)
	if publish {
		g.publishLocked(hex.EncodeToString(d[:]))
		if e.anyBye {
			g.publishLocked(anyByeKey(d, dir))
		}
	}
}

// AnyByePrefix marks, among the ends shared with the pool, that the BYEs
// of one side of an ended dialog still pass (End with AnyBye): "a", the
// side (Dir, in decimal), ":" and the dialog's key in hex. The end itself
// is published as well under its plain key, which is all a node of an
// earlier release reads (it ignores this one).
const AnyByePrefix = "a"

func anyByeKey(d Key, dir Dir) string {
	return AnyByePrefix + strconv.Itoa(int(dir)) + ":" + hex.EncodeToString(d[:])
}

// TokenEndPrefix marks a token's end (EndToken) among the ends shared
// with the pool, so that the other nodes keep it in their token table:
// "t" and the key in hex, where a dialog's or a call's is the hex alone.
const TokenEndPrefix = "t"

// EndToken records at now that the call attempt whose token's end key
// is t is over, until exp; publish queues it for the pool store. It goes
// in the token table (endedTokens): a storm of them forgets older token
// ends, never a dialog's or a call's.
func (g *Guard) EndToken(t Key, now, exp time.Time, publish bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.endedTokens.live(t, now); ok {
		return
	}
	g.endedTokens.add(t, endedDialog{exp: exp.UnixNano(), before: now.Unix()})
	if publish {
		g.publishLocked(TokenEndPrefix + hex.EncodeToString(t[:]))
	}
}

// publishLocked queues the end key for the pool store (the oldest go
// first past MaxPending); g.mu held.
func (g *Guard) publishLocked(key string) {
	if len(g.pending) >= MaxPending {
		g.pending = g.pending[1:]
	}
	g.pending = append(g.pending, key)
}

// IsEnded reports whether dialog d (or what another key of the ended
// tables names) is known to have ended at now.
func (g *Guard) IsEnded(d Key, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.ended.live(d, now); ok {
		return true
	}
	_, ok := g.endedTokens.live(d, now)
	return ok
}

// Sweep forgets the ended dialogs that expired and the rate buckets that
// have refilled (idle since).
func (g *Guard) Sweep(now time.Time) {
	full := time.Hour
	if s := g.burst / g.rate; s > 0 && s < full.Seconds() {
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

// TakePending returns the ends to publish (up to n) and forgets them.
func (g *Guard) TakePending(n int) []string {
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

// PendingLen is the number of ends waiting to be published.
func (g *Guard) PendingLen() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// Requeue puts back ends a failed store call did not publish.
func (g *Guard) Requeue(keys []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending = append(keys, g.pending...)
	if over := len(g.pending) - MaxPending; over > 0 {
		g.pending = g.pending[over:]
	}
}

// Learn records an end another node of the pool published (key as End
// and EndToken write it: a token's end with TokenEndPrefix, a side's BYEs
// still passing with AnyByePrefix, for anyByeFor from now), until exp,
// without publishing it again. It reports false for a key it cannot read.
func (g *Guard) Learn(key string, now, exp time.Time, anyByeFor time.Duration) bool {
	var d Key
	dir, anyBye := Dir(0), false
	h, token := strings.CutPrefix(key, TokenEndPrefix)
	if head, hx, ok := strings.Cut(key, ":"); ok {
		// Only an AnyBye key has a colon (a plain key is hex, which may
		// start with an "a").
		side, ok := strings.CutPrefix(head, AnyByePrefix)
		n, err := strconv.Atoi(side)
		if !ok || err != nil || n < 0 || len(side) > 3 {
			return false
		}
		dir, anyBye, h = Dir(n), true, hx
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != len(d) {
		return false
	}
	copy(d[:], b)
	switch {
	case token:
		g.EndToken(d, now, exp, false)
	case anyBye:
		g.End(d, now, exp, AnyBye, dir, anyByeFor, false)
	default:
		g.End(d, now, exp, 0, 0, 0, false)
	}
	return true
}

// NoteOverRate counts a request refused over its dialog's rate at now and
// reports whether to log it (at most once every every), with how many
// were refused since the last line.
func (g *Guard) NoteOverRate(now time.Time, every time.Duration) (refused int64, log bool) {
	n := g.overRate.Add(1)
	last := g.lastLog.Load()
	if now.UnixNano()-last < int64(every) || !g.lastLog.CompareAndSwap(last, now.UnixNano()) {
		return n, false
	}
	g.overRate.Add(-n)
	return n, true
}

// Len returns how many dialog and call ends, token ends and rate buckets
// the guard holds.
func (g *Guard) Len() (ends, tokens, rates int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.ended.m), len(g.endedTokens.m), len(g.rates)
}

// Forget drops every end the guard holds, as its bounds do to the oldest
// (tests of what a node that forgot an end still refuses).
func (g *Guard) Forget() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ended, g.endedTokens = newEndedSet(MaxEndedDialogs), newEndedSet(MaxEndedTokens)
}
