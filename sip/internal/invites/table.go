package invites

import (
	"encoding/binary"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/internal/fifo"
)

// Key identifies an INVITE server transaction as a CANCEL names it
// and as sipgo keys it (RFC 3261 9.2, 17.2.3): top Via branch and sent-by
// (the transport's default port when the Via names none). Two INVITEs that
// differ only in their Call-ID are one transaction to sipgo — the second
// is absorbed as a retransmission — so they must be one entry here too: a
// peer reusing a branch with new Call-IDs would otherwise take a unit of
// the inflight bound per INVITE that no handler ever gives back (review
// finding). A branch without RFC 3261's magic cookie (RFC 2543) keeps the
// Call-ID, as sipgo's key for it does.
type Key string

// KeyOf returns req's Key ("" when req has no Via).
func KeyOf(req *sipmsg.Request) Key {
	if req.Via() == nil {
		return ""
	}
	// Built in a stack buffer: one allocation, the key's.
	var buf [128]byte
	return Key(AppendKey(buf[:0], req))
}

// AppendKey appends req's Key to dst (nothing when req has no
// Via).
func AppendKey(dst []byte, req *sipmsg.Request) []byte {
	v := req.Via()
	if v == nil {
		return dst
	}
	branch, _ := v.Params.Get("branch")
	port := v.Port
	if port <= 0 {
		port = sipmsg.DefaultPort(v.Transport)
	}
	key := append(dst, branch...)
	key = append(key, 0)
	key = append(key, v.Host...)
	key = append(key, ':')
	key = strconv.AppendInt(key, int64(port), 10)
	if !strings.HasPrefix(branch, sipmsg.RFC3261BranchMagicCookie) || len(branch) == len(sipmsg.RFC3261BranchMagicCookie) {
		key = append(key, 0)
		key = append(key, callID(req)...)
	}
	return key
}

// Entry is one INVITE the proxy is handling, as a CANCEL finds it.
type Entry struct {
	Src       string // packet source ip:port of the INVITE
	Transport string // its transport
	created   time.Time
	claimed   bool // a handler owns the entry (and removes it when done)

	// finished is when the handler returned (zero while it runs); the
	// entry then leaves the table for a tombstone (tomb).
	finished time.Time
	// attempt: attemptOf the INVITE (its Call-ID, From tag and CSeq). A
	// tombstone's key is the transaction's, which a caller may reuse for
	// another call; only an INVITE of the same attempt is its copy.
	attempt uint64
	// A new initial INVITE's unit of the inflight bound (the sip
	// package's overload.go).
	inflightUnit
	// Trying: the screen answered this INVITE 100 Trying when it arrived
	// (set before the entry is published, read by its handler through
	// Claim), so the handler sends none: one 100 per INVITE transaction.
	Trying bool

	mu    sync.Mutex
	fired bool   // a CANCEL from src arrived
	fn    func() // the handler's reaction, called once
}

// Cancel records a CANCEL and tells the handler, once.
func (e *Entry) Cancel() {
	e.mu.Lock()
	if e.fired {
		e.mu.Unlock()
		return
	}
	e.fired = true
	fn := e.fn
	e.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// OnCancel sets the handler's reaction to a CANCEL; it runs at once when
// the CANCEL came first. fn runs at most once.
func (e *Entry) OnCancel(fn func()) {
	e.mu.Lock()
	e.fn = fn
	fired := e.fired
	e.mu.Unlock()
	if fired {
		fn()
	}
}

// Table holds the INVITEs in progress, registered by the screen as
// they arrive (so a CANCEL that follows at once finds them) and claimed by
// their handler. Entries no handler claims (an INVITE sipgo absorbed as a
// retransmission after its handler ended) are swept after unclaimedTTL.
// A finished INVITE leaves a tombstone (TombstoneTTL, keptTTL when its
// transaction lives on in sipgo). Tombstones are kept apart from the
// INVITEs in progress, in queues ordered by expiry, so the sweep pops the
// expired ones instead of walking tens of thousands of them under the lock
// the read loop takes for every INVITE. Safe for concurrent use.
//
// A tombstone is what a finished INVITE leaves for its copies, a hundred
// thousand of them at 3,000 CPS (keptTTL, 32 s): its key's hash, when it
// finished, its attempt and two flags, in a map and queues that hold no
// pointer, so the garbage collector never walks them. Kept as the finished
// Entry with its key and source strings, they were four in ten of the
// objects the collector marked at that rate, and a fifth of the live heap.
type Table struct {
	mu    sync.Mutex
	m     map[Key]*Entry   // in progress (handler running, or not yet claimed)
	tombs map[tombKey]tomb // finished
	short tombQueue        // tombstones of TombstoneTTL, in the order they finished
	kept  tombQueue        // tombstones of keptTTL, likewise
	// epoch is when the table was made: a tombstone's time is the
	// monotonic nanoseconds since.
	epoch time.Time
	seq   uint64 // the last tombstone's number
}

// tombKey names a tombstone: a 128-bit hash of its Key, keyed per process
// (tombSeeds), so a sender cannot make two keys meet; a chance meeting
// (2^-128) takes an INVITE for a copy only when its attempt hash meets
// too.
type tombKey struct{ a, b uint64 }

// tombSeeds key tombOf's two hashes, per process.
var tombSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// tombOf returns k's tombstone name.
func tombOf(k Key) tombKey {
	return tombKey{maphash.String(tombSeeds[0], string(k)), maphash.String(tombSeeds[1], string(k))}
}

// tomb is what a finished INVITE leaves: what Register needs to tell its
// copies and which tombstone it is.
type tomb struct {
	finished int64 // nanoseconds since the table's epoch
	seq      uint64
	// attempt: the INVITE's attemptOf; only an INVITE of the same attempt
	// is its copy (a caller may reuse a transaction key for another call).
	attempt uint64
	// kept: the handler left sipgo's server transaction alive (the call
	// was forwarded, so its final answer is the carrier's): sipgo absorbs
	// copies of the INVITE until Timer L or H (RFC 6026, RFC 3261 17.2.1),
	// and the tombstone lets them reach it for as long (keptTTL) instead of
	// deciding or shedding them as new calls.
	kept bool
	// answered: the call was answered (a 2xx relayed); its copies are
	// absorbed by the tombstone itself (Register: RegAbsorbed), since
	// sipgo's transaction lasts answeredLinger only.
	answered bool
}

// tombQueue is a FIFO of tombstones, appended as they finish, so in
// expiry order.
type tombQueue struct{ fifo.Queue[tombRef] }

type tombRef struct {
	k        tombKey
	finished int64
	seq      uint64
}

func (q *tombQueue) push(k tombKey, t tomb) { q.Push(tombRef{k, t.finished, t.seq}) }

// popExpired removes from tombs the queued tombstones finished more than
// ttl before now (nanoseconds since the epoch; a key since reused by a
// newer tombstone is left alone).
func (q *tombQueue) popExpired(tombs map[tombKey]tomb, now int64, ttl time.Duration) {
	for r, ok := q.Front(); ok && now > r.finished+int64(ttl); r, ok = q.Front() {
		if t, ok := tombs[r.k]; ok && t.seq == r.seq {
			delete(tombs, r.k)
		}
		q.Pop()
	}
}

func (q *tombQueue) len() int { return q.Len() }

// unclaimedTTL is how long an entry no handler claimed is kept (RFC 3261
// Timer H, the longest an INVITE server transaction absorbs retransmissions).
const unclaimedTTL = 32 * time.Second

// TombstoneTTL is how long the entry of a finished INVITE is kept: the
// callers' retransmissions sent before they saw the 100 Trying (Timer A:
// 0.5, 1, 2 s) then pass as such.
const TombstoneTTL = 2 * time.Second

// keptTTL is how long the tombstone of a forwarded INVITE is kept: sipgo's
// server transaction absorbs its copies that long (Timer L = Timer H =
// 64·T1 = 32 s). Copies read late (a socket buffer seconds deep under
// overload, a caller's retransmissions crossing its 100 Trying) would
// otherwise be new calls: a 503 to a caller whose call is up, or a second
// decision. It costs one small entry per forwarded call for 32 s.
const keptTTL = 32 * time.Second

// inflightOrphan is how long an unclaimed entry keeps its unit of the
// inflight bound: a handler usually claims its entry within milliseconds,
// but under heavy overload sipgo's goroutines wait seconds to run (the
// overload run saw INVITEs unread for 5 s), and giving units back early
// would loosen the bound exactly then. An entry still unclaimed after
// that belongs to an INVITE sipgo absorbed, whose unit would be lost.
const inflightOrphan = 5 * time.Second

// New returns an empty table.
func New() *Table {
	return &Table{m: map[Key]*Entry{}, tombs: map[tombKey]tomb{}, epoch: time.Now()}
}

// Results of Table.Register.
const (
	RegNew      = iota // a new entry (with its unit, when one was asked)
	RegLive            // a retransmission of an INVITE being handled
	RegAnswered        // an INVITE just answered (its tombstone), or one no handler took
	RegShed            // new, and acquire failed: nothing recorded
	RegAbsorbed        // a copy of an answered INVITE: dropped, no answer
)

// Register records req unless an entry for its key exists (a
// retransmission, or an INVITE just answered). For a new entry it first
// calls acquire, when not nil (a unit of the inflight bound, released
// through ctr): when that fails nothing is recorded (RegShed).
func (t *Table) Register(req *sipmsg.Request, acquire func() bool, ctr Bound) int {
	k := KeyOf(req)
	attempt, tk := attemptOf(req), tombOf(k)
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.tombs[tk]; ok && e.attempt == attempt {
		// A copy of a finished INVITE, looked at first: another attempt
		// reusing its key (below) must not open the way to its copies.
		if e.answered {
			// Answered: sipgo's transaction absorbs copies for
			// answeredLinger only; after it this copy would make a new
			// one, and a new call. Absorbed here, as RFC 6026's Accepted
			// state does: no answer.
			return RegAbsorbed
		}
		if e.kept {
			// Forwarded: sipgo's transaction absorbs the copy.
			return RegAnswered
		}
		// After its handler ended. The proxy ends the transactions of its
		// own refusals at once; a peer's copy of a refused attempt is
		// answered from the refused table before it gets here
		// (refused.go), so this is a copy the table forgot (or a
		// stranger's): sipgo makes a new transaction of it and a new
		// decision follows. It takes a unit like any new INVITE
		// (replaying refused INVITEs must not get past the bound). A copy
		// sipgo absorbs gives its unit back as an orphan does.
		delete(t.tombs, tk)
	}
	if e, ok := t.m[k]; ok {
		if e.claimed || time.Since(e.created) <= inflightOrphan {
			return RegLive
		}
		if e.attempt == attempt {
			// No handler took it in time: sipgo may never have made a
			// transaction of it (or absorbed it); let sipgo see this copy.
			// sipgo may make one of it now, and its handler claim this
			// entry: it holds a unit again (the sweep gave the orphan's
			// back), or the call would be decided outside the bound (h80).
			if acquire != nil && !e.held.Load() {
				if !acquire() {
					return RegShed
				}
				e.ctr = ctr
				e.held.Store(true)
				e.created = time.Now() // an orphan's again after inflightOrphan
			}
			return RegAnswered
		}
		// Another attempt on an orphan's key is a new INVITE (below), not
		// a copy of the orphan: passed to sipgo as one, it went without a
		// unit, and its call was decided outside the bound (h80). The
		// orphan's unit, if the sweep has not given it back yet, goes
		// back now.
		e.ReleaseInflight()
	}
	// Another attempt on a finished INVITE's transaction key (a caller
	// reusing a branch) is a new INVITE, with its unit of the inflight
	// bound, not a copy to absorb or to pass without one; the finished
	// one's tombstone stays for its own copies until this one finishes
	// (its tombstone then takes the key). sipgo may still take it for a
	// copy while the old transaction lasts: its unit then comes back as
	// an orphan's does.
	e := &Entry{Src: req.Source(), Transport: req.Transport(), created: time.Now(), attempt: attempt}
	if acquire != nil {
		if !acquire() {
			return RegShed
		}
		e.ctr = ctr
		e.held.Store(true)
		e.Trying = true // screenInvite answers 100 Trying to it now
	}
	t.m[k] = e
	return RegNew
}

// Claim returns req's entry for its handler (creating it when the screen
// did not register it) and the function the handler calls when it
// returns: the entry becomes a tombstone, kept keptTTL when kept (the
// handler left the server transaction alive), else TombstoneTTL.
func (t *Table) Claim(req *sipmsg.Request) (*Entry, func(kept, answered bool)) {
	k := KeyOf(req)
	t.mu.Lock()
	e, ok := t.m[k]
	if !ok || e.claimed {
		e = &Entry{Src: req.Source(), Transport: req.Transport(), created: time.Now(), attempt: attemptOf(req)}
		t.m[k] = e
	} else {
		// The INVITE sipgo made a transaction of is the attempt the
		// tombstone answers for, whichever attempt registered the entry
		// (an orphan's copy: h80).
		e.attempt = attemptOf(req)
	}
	e.claimed = true
	t.mu.Unlock()
	tk := tombOf(k)
	return e, func(kept, answered bool) {
		e.ReleaseInflight()
		// A tombstone lives up to keptTTL: it keeps none of the call's
		// state (the reaction closes over its context).
		e.mu.Lock()
		e.fn = nil
		e.mu.Unlock()
		t.mu.Lock()
		if t.m[k] == e {
			delete(t.m, k)
			e.finished = time.Now()
			t.seq++
			tb := tomb{finished: int64(e.finished.Sub(t.epoch)), seq: t.seq, attempt: e.attempt, kept: kept, answered: answered}
			t.tombs[tk] = tb
			if kept {
				t.kept.push(tk, tb)
			} else {
				t.short.push(tk, tb)
			}
		}
		t.mu.Unlock()
	}
}

// Lookup returns the entry of an INVITE being handled (not a tombstone).
func (t *Table) Lookup(k Key) *Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[k]; e != nil && e.finished.IsZero() {
		return e
	}
	return nil
}

// Sweep removes unclaimed entries older than unclaimedTTL and tombstones
// older than TombstoneTTL (keptTTL when kept), and gives back the inflight
// units of unclaimed entries older than inflightOrphan. It walks only the
// INVITEs in progress; expired tombstones are popped from their queues.
func (t *Table) Sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if e.claimed {
			continue
		}
		if age := now.Sub(e.created); age > unclaimedTTL {
			e.ReleaseInflight()
			delete(t.m, k)
		} else if age > inflightOrphan {
			e.ReleaseInflight()
		}
	}
	// On the table's monotonic clock whether or not now has a monotonic
	// reading (a wall clock stepped since the epoch moves no expiry).
	at := int64(time.Since(t.epoch) + now.Sub(time.Now()))
	t.short.popExpired(t.tombs, at, TombstoneTTL)
	t.kept.popExpired(t.tombs, at, keptTTL)
}

// Has reports whether k names an INVITE in progress or a tombstone.
func (t *Table) Has(k Key) bool {
	tk := tombOf(k)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[k]; ok {
		return true
	}
	_, ok := t.tombs[tk]
	return ok
}

// size returns the number of entries, tombstones included (tests).
func (t *Table) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m) + len(t.tombs)
}

// Bound is the bound a new INVITE's unit is taken from (the sip
// package's inflight count): Release gives one unit back.
type Bound interface {
	Release()
}

// inflightUnit is an Entry's unit of the bound.
type inflightUnit struct {
	held atomic.Bool
	ctr  Bound
}

// ReleaseInflight gives the unit back once.
func (u *inflightUnit) ReleaseInflight() {
	if u.held.CompareAndSwap(true, false) {
		u.ctr.Release()
	}
}

// callID is m's Call-ID, "" without one.
func callID(m sipmsg.Message) string {
	if h := m.CallID(); h != nil {
		return h.Value()
	}
	return ""
}

// attemptSeed keys attemptOf's hash, per process.
var attemptSeed = maphash.MakeSeed()

// attemptOf hashes what tells two INVITEs of one transaction key apart as
// two attempts: the Call-ID, the From tag and the CSeq number (no
// allocation). A chance collision makes a new attempt look like a copy,
// as every attempt reusing a branch did before.
func attemptOf(req *sipmsg.Request) uint64 {
	var h maphash.Hash
	h.SetSeed(attemptSeed)
	var buf [8]byte
	if id := req.CallID(); id != nil {
		v := id.Value()
		h.Write(binary.BigEndian.AppendUint32(buf[:0], uint32(len(v))))
		h.WriteString(v)
	}
	if f := req.From(); f != nil {
		tag, _ := f.Params.Get("tag")
		h.Write(binary.BigEndian.AppendUint32(buf[:0], uint32(len(tag))))
		h.WriteString(tag)
	}
	if c := req.CSeq(); c != nil {
		h.Write(binary.BigEndian.AppendUint32(buf[:0], c.SeqNo))
	}
	return h.Sum64()
}
