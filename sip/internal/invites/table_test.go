package invites

import (
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// count is a Bound as the sip package's inflight count is one: the units
// taken, Release giving one back.
type count struct{ atomic.Int64 }

func (c *count) Release() { c.Add(-1) }

// answeredLinger is the sip package's: how long an answered call's INVITE
// transactions last in sipgo after its 2xx.
const answeredLinger = 8 * time.Second

// TestInflightUnitOfAnAbsorbedInviteIsReturned: an INVITE sipgo absorbs
// (no handler claims its entry) gives its unit back on the sweep, and a
// finished INVITE's tombstone lets its late retransmission pass without a
// unit.
func TestInflightUnitOfAnAbsorbedInviteIsReturned(t *testing.T) {
	var ctr count
	tb := New()
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5060})
	via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP",
		Host: "127.0.0.2", Port: 5062, Params: sipmsg.NewParams()}
	via.Params.Add("branch", "z9hG4bK-1")
	req.AppendHeader(via)
	cid := sipmsg.CallIDHeader("absorbed")
	req.AppendHeader(&cid)
	req.SetSource("127.0.0.2:5062")
	acquire := func() bool { ctr.Add(1); return true }
	if got := tb.Register(req, acquire, &ctr); got != RegNew {
		t.Fatalf("register of a new INVITE with a unit to spare: got %d, want RegNew", got)
	}
	if got := tb.Register(req, func() bool { t.Error("a retransmission took a unit"); return false }, &ctr); got != RegLive {
		t.Fatalf("register of a retransmission: got %d, want RegLive", got)
	}
	now := time.Now()
	tb.Sweep(now)
	if got := ctr.Load(); got != 1 {
		t.Fatalf("units after a sweep at once: got %d, want 1", got)
	}
	tb.Sweep(now.Add(inflightOrphan + time.Millisecond))
	if got := ctr.Load(); got != 0 {
		t.Fatalf("units after the orphan age: got %d, want 0", got)
	}
	// A retransmission of an INVITE no handler took goes to sipgo again.
	tb.m[KeyOf(req)].created = now.Add(-inflightOrphan - time.Millisecond)
	if got := tb.Register(req, nil, &ctr); got != RegAnswered {
		t.Fatalf("register of a retransmission of an orphan: got %d, want RegAnswered (passed to sipgo)", got)
	}

	// Claimed and finished: a tombstone for TombstoneTTL.
	e, done := tb.Claim(req)
	done(false, false)
	if tb.Lookup(KeyOf(req)) != nil {
		t.Error("lookup found a finished INVITE (a CANCEL must go to sipgo)")
	}
	// A copy after the handler ended is decided again (the proxy ended
	// its refusals' transactions), so it asks for a unit like any new
	// INVITE: replaying refused INVITEs does not get past the bound.
	asked := false
	if got := tb.Register(req, func() bool { asked = true; return false }, &ctr); got != RegShed || !asked {
		t.Fatalf("register of a copy after the answer with no unit to spare: got %d (unit asked %v), want RegShed", got, asked)
	}
	tb.Sweep(e.finished.Add(TombstoneTTL + time.Millisecond))
	if got := tb.size(); got != 0 {
		t.Errorf("entries after the tombstone age: got %d, want 0", got)
	}

	// A forwarded call's handler leaves the transaction to sipgo: copies
	// of its INVITE, however late within Timer L, go to sipgo (which
	// absorbs them) and never take a unit or get shed as new calls.
	if got := tb.Register(req, acquire, &ctr); got != RegNew {
		t.Fatalf("register of the next call: got %d, want RegNew", got)
	}
	e, done = tb.Claim(req)
	done(true, false)
	for _, age := range []time.Duration{0, TombstoneTTL + time.Second, keptTTL - time.Second} {
		tb.Sweep(e.finished.Add(age))
		if got := tb.Register(req, func() bool { t.Errorf("a copy %v after a forwarded call's end asked for a unit", age); return false }, &ctr); got != RegAnswered {
			t.Fatalf("register of a copy %v after a forwarded call ended: got %d, want RegAnswered (sipgo absorbs it)", age, got)
		}
	}
	tb.Sweep(e.finished.Add(keptTTL + time.Millisecond))
	if got := tb.size(); got != 0 {
		t.Errorf("entries after keptTTL: got %d, want 0", got)
	}

	// An answered call's transaction lasts answeredLinger only: copies of
	// its INVITE are absorbed by the tombstone itself, at any age within
	// keptTTL (before and after the linger), never passed to sipgo, which
	// would make a new call of one once its transaction ended.
	if got := tb.Register(req, acquire, &ctr); got != RegNew {
		t.Fatalf("register of the next call: got %d, want RegNew", got)
	}
	e, done = tb.Claim(req)
	done(true, true)
	for _, age := range []time.Duration{0, answeredLinger + time.Second, keptTTL - time.Second} {
		tb.Sweep(e.finished.Add(age))
		if got := tb.Register(req, func() bool { t.Errorf("a copy %v after an answered call's end asked for a unit", age); return false }, &ctr); got != RegAbsorbed {
			t.Fatalf("register of a copy %v after an answered call ended: got %d, want RegAbsorbed", age, got)
		}
	}
	tb.Sweep(e.finished.Add(keptTTL + time.Millisecond))
	if got := tb.size(); got != 0 {
		t.Errorf("entries after keptTTL: got %d, want 0", got)
	}
}

// An INVITE that reuses a live INVITE's branch and sent-by with a new
// Call-ID is one transaction to sipgo (absorbed as a retransmission), so
// it is one entry here: it takes no unit of the inflight bound that no
// handler would give back (review finding: a peer could pin the bound).
func TestInviteKeyFollowsSipgo(t *testing.T) {
	parse := func(raw string) *sipmsg.Request {
		t.Helper()
		m, err := sipmsg.ParseMessage([]byte(strings.ReplaceAll(raw, "\n", "\r\n")))
		if err != nil {
			t.Fatal(err)
		}
		return m.(*sipmsg.Request)
	}
	invite := func(branch, port, callID string) *sipmsg.Request {
		return parse("INVITE sip:100@127.0.0.1 SIP/2.0\nVia: SIP/2.0/UDP 127.0.0.2" + port + ";branch=" + branch +
			"\nFrom: <sip:a@x>;tag=1\nTo: <sip:100@127.0.0.1>\nCall-ID: " + callID + "\nCSeq: 1 INVITE\nContent-Length: 0\n\n")
	}
	a := KeyOf(invite("z9hG4bK-1", ":5060", "one"))
	if b := KeyOf(invite("z9hG4bK-1", "", "two")); a != b {
		t.Errorf("same branch and sent-by (default port), new Call-ID: keys %q and %q differ", a, b)
	}
	if b := KeyOf(invite("z9hG4bK-2", ":5060", "one")); a == b {
		t.Error("another branch: same key")
	}
	if x, y := KeyOf(invite("legacy", ":5060", "one")), KeyOf(invite("legacy", ":5060", "two")); x == y {
		t.Error("RFC 2543 branch: the Call-ID must stay in the key, as in sipgo's")
	}
}

// TestTombstoneTellsCopiesFromOtherAttempts: a tombstone's key is the
// transaction's (top Via branch and sent-by, as sipgo matches them); an
// INVITE with that key but another Call-ID, From tag or CSeq is not a copy
// but another attempt reusing the branch. Before, a forwarded call's
// tombstone passed such an attempt to sipgo without a unit of the
// inflight bound (a peer reusing branches skipped the bound), and an
// answered call's absorbed it silently (the caller's new call never got an
// answer). Now it is registered as a new INVITE, with its unit; a real
// copy is still absorbed (answered) or passed to sipgo (forwarded).
func TestTombstoneTellsCopiesFromOtherAttempts(t *testing.T) {
	build := func(id, ftag string, cseq uint32) *sipmsg.Request {
		req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5060})
		via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP",
			Host: "127.0.0.2", Port: 5062, Params: sipmsg.NewParams()}
		via.Params.Add("branch", "z9hG4bK-reused")
		req.AppendHeader(via)
		from := &sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sip", User: "caller", Host: "127.0.0.2"}, Params: sipmsg.NewParams()}
		from.Params.Add("tag", ftag)
		req.AppendHeader(from)
		cid := sipmsg.CallIDHeader(id)
		req.AppendHeader(&cid)
		req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: cseq, MethodName: sipmsg.INVITE})
		req.SetSource("127.0.0.2:5062")
		return req
	}
	for _, tc := range []struct {
		name     string
		answered bool
		copyGets int
	}{
		{"answered", true, RegAbsorbed},
		{"forwarded, refused", false, RegAnswered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ctr count
			tb := New()
			first := build("call-1", "f1", 1)
			acquire := func() bool { ctr.Add(1); return true }
			if got := tb.Register(first, acquire, &ctr); got != RegNew {
				t.Fatalf("register of the first INVITE: got %d, want RegNew", got)
			}
			_, done := tb.Claim(first)
			done(true, tc.answered)
			if got := tb.Register(build("call-1", "f1", 1), func() bool { t.Error("a copy took a unit"); return false }, &ctr); got != tc.copyGets {
				t.Fatalf("register of a copy: got %d, want %d", got, tc.copyGets)
			}
			for _, other := range []*sipmsg.Request{build("call-2", "f1", 1), build("call-1", "f2", 1), build("call-1", "f1", 2)} {
				asked := false
				if got := tb.Register(other, func() bool { asked = true; return true }, &ctr); got != RegNew || !asked {
					t.Fatalf("register of another attempt on the branch (%s): got %d (unit asked %v), want RegNew with a unit",
						other.CallID().Value()+"/"+other.From().Params.GetOr("tag", "")+"/"+other.CSeq().Value(), got, asked)
				}
				_, done := tb.Claim(other)
				done(true, tc.answered)
			}

			// Another attempt that no handler claims (sipgo took it for a
			// copy of the old transaction) must not open the way to the
			// first call's copies once it is an orphan.
			tb = New()
			first = build("call-3", "f3", 1)
			if got := tb.Register(first, acquire, &ctr); got != RegNew {
				t.Fatalf("register of the first INVITE: got %d, want RegNew", got)
			}
			_, done = tb.Claim(first)
			done(true, tc.answered)
			reuse := build("call-4", "f4", 1)
			if got := tb.Register(reuse, acquire, &ctr); got != RegNew {
				t.Fatalf("register of another attempt on the branch: got %d, want RegNew", got)
			}
			tb.m[KeyOf(reuse)].created = time.Now().Add(-inflightOrphan - time.Second)
			if got := tb.Register(build("call-3", "f3", 1), func() bool { t.Error("a copy took a unit"); return false }, &ctr); got != tc.copyGets {
				t.Fatalf("register of a copy of the first after an orphan reused its branch: got %d, want %d", got, tc.copyGets)
			}
		})
	}
}

// TestTombstonesHoldNoPointer: the tombstones (a hundred thousand at 3,000
// CPS, each kept 32 s) are kept in a map and queues the garbage collector
// never has to walk. A string or pointer added to them brings that back.
func TestTombstonesHoldNoPointer(t *testing.T) {
	table := reflect.TypeFor[Table]()
	tombs, _ := table.FieldByName("tombs")
	queue, _ := table.FieldByName("kept")
	front := reflect.ValueOf(&tombQueue{}).MethodByName("Front").Type().Out(0)
	for name, typ := range map[string]reflect.Type{
		"the tombs map's key":     tombs.Type.Key(),
		"the tombs map's element": tombs.Type.Elem(),
		"a queue's element":       front,
	} {
		if p := pointerIn(typ); p != "" {
			t.Errorf("%s (%s) holds a pointer: %s", name, typ, p)
		}
	}
	if queue.Type != reflect.TypeFor[tombQueue]() {
		t.Errorf("the kept queue is a %s, not a tombQueue", queue.Type)
	}
}

// TestSweepBeforeTheEpochKeepsTombstones (h77): a sweep given a time
// before the table was made (the zero time) expires nothing, as the
// pointer-based table did; the tombstones' ages must not wrap around.
func TestSweepBeforeTheEpochKeepsTombstones(t *testing.T) {
	tb := New()
	time.Sleep(time.Millisecond) // finished > 0 ns after the epoch
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5060})
	via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP",
		Host: "127.0.0.2", Port: 5062, Params: sipmsg.NewParams()}
	via.Params.Add("branch", "z9hG4bK-zero-time")
	req.AppendHeader(via)
	_, done := tb.Claim(req)
	done(true, true)
	tb.Sweep(time.Time{})
	if got := tb.size(); got != 1 {
		t.Fatalf("entries after a sweep at the zero time: %d, want 1", got)
	}
}

// pointerIn names a part of typ that is or holds a pointer ("" when none).
func pointerIn(typ reflect.Type) string {
	switch typ.Kind() {
	case reflect.Struct:
		for i := range typ.NumField() {
			if p := pointerIn(typ.Field(i).Type); p != "" {
				return typ.Field(i).Name + "." + p
			}
		}
		return ""
	case reflect.Array:
		return pointerIn(typ.Elem())
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	}
	return typ.Kind().String()
}

// TestReusedKeyKeepsItsNewerTombstone: when an attempt reusing a finished
// INVITE's key finishes too, its tombstone takes the key; the older one's
// expiry (a shorter TTL) must not remove it, or the newer call's copies
// would be taken for new calls.
func TestReusedKeyKeepsItsNewerTombstone(t *testing.T) {
	build := func(id string) *sipmsg.Request {
		req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5060})
		via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP",
			Host: "127.0.0.2", Port: 5062, Params: sipmsg.NewParams()}
		via.Params.Add("branch", "z9hG4bK-again")
		req.AppendHeader(via)
		cid := sipmsg.CallIDHeader(id)
		req.AppendHeader(&cid)
		req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.INVITE})
		req.SetSource("127.0.0.2:5062")
		return req
	}
	tb := New()
	old, done := tb.Claim(build("old"))
	done(false, false) // refused by the node: a short tombstone
	newer, done := tb.Claim(build("newer"))
	done(true, true) // answered: kept keptTTL
	if !tb.Has(KeyOf(build("x"))) {
		t.Fatal("no tombstone for the key")
	}
	tb.Sweep(old.finished.Add(TombstoneTTL + time.Millisecond))
	if got := tb.Register(build("newer"), func() bool { t.Error("a copy took a unit"); return false }, nil); got != RegAbsorbed {
		t.Fatalf("a copy of the newer call after the older tombstone's TTL: got %d, want RegAbsorbed", got)
	}
	tb.Sweep(newer.finished.Add(keptTTL + time.Millisecond))
	if got := tb.size(); got != 0 {
		t.Fatalf("entries after the newer tombstone's TTL: %d, want 0", got)
	}
}

// orphanInvite is an INVITE on branch z9hG4bK-orphan of the attempt id
// (its Call-ID and From tag).
func orphanInvite(id string) *sipmsg.Request {
	req := sipmsg.NewRequest(sipmsg.INVITE, sipmsg.Uri{Scheme: "sip", User: "100", Host: "127.0.0.1", Port: 5060})
	via := &sipmsg.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: "UDP",
		Host: "127.0.0.2", Port: 5062, Params: sipmsg.NewParams()}
	via.Params.Add("branch", "z9hG4bK-orphan")
	req.AppendHeader(via)
	from := &sipmsg.FromHeader{Address: sipmsg.Uri{Scheme: "sip", User: "a", Host: "127.0.0.2"}, Params: sipmsg.NewParams()}
	from.Params.Add("tag", "f-"+id)
	req.AppendHeader(from)
	cid := sipmsg.CallIDHeader(id)
	req.AppendHeader(&cid)
	req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.INVITE})
	req.SetSource("127.0.0.2:5062")
	return req
}

// orphaned registers req with a unit and lets it become an orphan whose
// unit the sweep gave back (sipgo absorbed it: no handler claimed it).
func orphaned(t *testing.T, tb *Table, ctr *count, req *sipmsg.Request) {
	t.Helper()
	if got := tb.Register(req, func() bool { ctr.Add(1); return true }, ctr); got != RegNew {
		t.Fatalf("register: got %d, want RegNew", got)
	}
	tb.m[KeyOf(req)].created = time.Now().Add(-inflightOrphan - time.Millisecond)
	tb.Sweep(time.Now())
	if ctr.Load() != 0 {
		t.Fatalf("units after the orphan's sweep: %d, want 0", ctr.Load())
	}
}

// TestOrphansKeyTakesAUnit (h80): after an orphan's unit went back, an
// INVITE on its key, a copy or another attempt, is one sipgo may now make
// a transaction of, whose handler claims the entry: it must hold a unit of
// the inflight bound. Before, both passed to sipgo without one, and a peer
// reusing the branches of its answered calls had calls decided outside
// the bound.
func TestOrphansKeyTakesAUnit(t *testing.T) {
	for _, tc := range []struct{ name, id string }{{"a copy of the orphan", "B"}, {"another attempt", "D"}} {
		t.Run(tc.name, func(t *testing.T) {
			var ctr count
			tb := New()
			orphaned(t, tb, &ctr, orphanInvite("B"))
			asked := false
			got := tb.Register(orphanInvite(tc.id), func() bool { asked = true; ctr.Add(1); return true }, &ctr)
			if got == RegShed || got == RegAbsorbed || !asked {
				t.Fatalf("register: got %d, unit asked %v; want it passed on with a unit", got, asked)
			}
			e, done := tb.Claim(orphanInvite(tc.id))
			if !e.held.Load() || ctr.Load() != 1 {
				t.Fatalf("the claimed entry holds a unit: %v (units %d), want one", e.held.Load(), ctr.Load())
			}
			done(true, true)
			if ctr.Load() != 0 {
				t.Fatalf("units after the handler: %d, want 0", ctr.Load())
			}
			if got := tb.Register(orphanInvite(tc.id), func() bool { t.Error("a copy took a unit"); return false }, &ctr); got != RegAbsorbed {
				t.Fatalf("a copy of the answered call: got %d, want RegAbsorbed", got)
			}
		})
	}
	// With the bound taken, the copy is shed, not passed on without a unit.
	var ctr count
	tb := New()
	orphaned(t, tb, &ctr, orphanInvite("B"))
	if got := tb.Register(orphanInvite("B"), func() bool { return false }, &ctr); got != RegShed {
		t.Fatalf("a copy of an orphan at the bound: got %d, want RegShed", got)
	}
}

// TestClaimTakesTheClaimedAttempt (h80): a handler that claims an entry
// another attempt on its key registered gives the tombstone its own
// attempt, so the copies of its call are told apart from new calls.
func TestClaimTakesTheClaimedAttempt(t *testing.T) {
	var ctr count
	tb := New()
	tb.Register(orphanInvite("B"), nil, &ctr)
	_, done := tb.Claim(orphanInvite("D"))
	done(true, true)
	if got := tb.Register(orphanInvite("D"), func() bool { t.Error("a copy took a unit"); return false }, &ctr); got != RegAbsorbed {
		t.Fatalf("a copy of the answered D: got %d, want RegAbsorbed", got)
	}
}
