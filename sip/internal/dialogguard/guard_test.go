package dialogguard

import (
	"strings"
	"testing"
	"time"
)

// The directions and limits of these tests (the sip package's, as it
// makes its guard).
const (
	fromPeer    Dir = 1
	fromCarrier Dir = 2
	burst           = 40.0
	rate            = 10.0
	copyFor         = 32 * time.Second
)

// TestDialogGuardBounds: the ended dialogs are forgotten when they expire,
// and the oldest first when the table is full; idle rate buckets are swept.
func TestDialogGuardBounds(t *testing.T) {
	g := New(burst, rate)
	now := time.Now()
	key := func(i int) Key { return DialogOf(Key{byte(i), byte(i >> 8), byte(i >> 16)}, "t") }
	for i := 0; i < MaxEndedDialogs+10; i++ {
		g.End(key(i), now, now.Add(time.Hour+time.Duration(i)), 0, 0, copyFor, false)
	}
	if n := len(g.ended.m); n != MaxEndedDialogs {
		t.Fatalf("ended dialogs held = %d, want the bound %d", n, MaxEndedDialogs)
	}
	if g.IsEnded(key(0), now) || !g.IsEnded(key(MaxEndedDialogs+9), now) {
		t.Fatal("a full table forgot another dialog than the oldest")
	}
	g.Sweep(now.Add(2 * time.Hour))
	if n := len(g.ended.m); n != 0 {
		t.Fatalf("ended dialogs after they expired = %d, want 0", n)
	}
	g.End(key(2), now, now.Add(time.Hour), ByeID(7, "z9hG4bK-a"), fromPeer, copyFor, false)
	for _, c := range []struct {
		seq    uint32
		branch string
		dir    Dir
		want   Verdict
	}{
		{7, "z9hG4bK-a", fromPeer, Pass},     // a retransmission of the BYE that ended it
		{7, "z9hG4bK-a", fromCarrier, Ended}, // from the other side
		{7, "z9hG4bK-b", fromPeer, Ended},    // a new BYE with the same CSeq
		{8, "z9hG4bK-a", fromPeer, Ended},
	} {
		if r := g.Admit(key(2), Key{2}, c.dir, ByeID(c.seq, c.branch), 0, now); r != c.want {
			t.Fatalf("after the BYE CSeq 7 branch a from the peer ended it, BYE %d %s from %d: admit = %d, want %d", c.seq, c.branch, c.dir, r, c.want)
		}
	}
	if r := g.Admit(key(2), Key{2}, fromPeer, 0, 0, now); r != Ended {
		t.Fatalf("after the dialog ended, a request that is no BYE: admit = %d, want ended", r)
	}
	g.Sweep(now.Add(2 * time.Hour))
	k := Key{1}
	if r := g.Admit(key(1), k, fromPeer, 0, 0, now); r != Pass {
		t.Fatalf("admit = %d, want pass", r)
	}
	g.Sweep(now.Add(time.Hour))
	if n := len(g.rates); n != 0 {
		t.Fatalf("rate buckets after an idle hour = %d, want 0", n)
	}
}

// TestEndedByeCopiesWindow: a copy of the ending BYE passes only within
// copyFor of the end (a UAC stops retransmitting at Timer F), and only
// MaxByeCopies times.
func TestEndedByeCopiesWindow(t *testing.T) {
	g := New(burst, rate)
	now := time.Now()
	d, k := Key{9}, Key{9}
	g.End(d, now, now.Add(time.Hour), 77, fromPeer, copyFor, false)
	if r := g.Admit(d, k, fromPeer, 77, 0, now.Add(copyFor-time.Millisecond)); r != Pass {
		t.Fatalf("copy of the ending BYE within Timer F: admit = %d, want pass", r)
	}
	if r := g.Admit(d, k, fromPeer, 77, 0, now.Add(copyFor)); r != Ended {
		t.Fatalf("copy of the ending BYE at Timer F after the end: admit = %d, want ended", r)
	}
	d2 := Key{10}
	g.End(d2, now, now.Add(time.Hour), 78, fromPeer, copyFor, false)
	for i := 0; i < MaxByeCopies; i++ {
		if r := g.Admit(d2, Key{10}, fromPeer, 78, 0, now); r != Pass {
			t.Fatalf("copy %d of the ending BYE: admit = %d, want pass", i+1, r)
		}
	}
	if r := g.Admit(d2, Key{10}, fromPeer, 78, 0, now); r != Ended {
		t.Fatalf("copy %d of the ending BYE: admit = %d, want ended", MaxByeCopies+1, r)
	}
}

// TestCallOverRefusesEveryTag: once a call is over (callOver), a request
// of a token minted before the end is refused whatever callee tag it
// names; a later call that reuses the Call-ID, tag and peer leg (a token
// minted after the end) is not.
func TestCallOverRefusesEveryTag(t *testing.T) {
	g := New(burst, rate)
	now := time.Now()
	k := Key{7}
	tok := now.Unix() - 10
	if r := g.Admit(DialogOf(k, "made-up"), k, fromPeer, 0, tok, now); r != Pass {
		t.Fatalf("before the end: admit = %d, want pass", r)
	}
	g.End(CallEnd(k), now, now.Add(time.Hour), 0, 0, copyFor, false)
	for _, tag := range []string{"callee", "made-up", "other"} {
		if r := g.Admit(DialogOf(k, tag), k, fromPeer, 0, tok, now); r != Ended {
			t.Fatalf("after the call's end, callee tag %q: admit = %d, want ended", tag, r)
		}
	}
	if r := g.Admit(DialogOf(k, "new"), k, fromPeer, 0, now.Unix()+1, now.Add(2*time.Second)); r != Pass {
		t.Fatalf("a later call's token: admit = %d, want pass", r)
	}
	if r := g.Admit(DialogOf(Key{8}, "x"), Key{8}, fromPeer, 0, tok, now); r != Pass {
		t.Fatalf("another call: admit = %d, want pass", r)
	}
	// A token minted in the second the call ended (a call answered and
	// over at once: tokens count whole seconds) is the call's.
	if r := g.Admit(DialogOf(k, "same-second"), k, fromPeer, 0, now.Unix(), now); r != Ended {
		t.Fatalf("a token minted in the second of the end: admit = %d, want ended", r)
	}
	// The later call ends too, while the first end is still remembered:
	// its tokens die with it.
	later := now.Add(5 * time.Second)
	g.End(CallEnd(k), later, later.Add(time.Hour), 0, 0, copyFor, false)
	if r := g.Admit(DialogOf(k, "new"), k, fromPeer, 0, now.Unix()+1, later); r != Ended {
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
	g := New(burst, rate)
	now := time.Now()
	exp := now.Add(time.Hour)
	d, k := DialogOf(Key{1}, "callee"), Key{2}
	g.End(d, now, exp, 0, 0, copyFor, false)
	g.End(CallEnd(k), now, exp, 0, 0, copyFor, false)
	tok := func(i int) Key { return Key{0xee, byte(i), byte(i >> 8), byte(i >> 16)} }
	for i := 0; i < MaxEndedTokens+10; i++ {
		g.EndToken(tok(i), now, exp.Add(time.Duration(i)), false)
	}
	if !g.IsEnded(d, now) || !g.IsEnded(CallEnd(k), now) {
		t.Fatal("a storm of token ends pushed an ended dialog or call out of the table")
	}
	if g.IsEnded(tok(0), now) || !g.IsEnded(tok(MaxEndedTokens+9), now) {
		t.Fatal("a full token table forgot another token end than the oldest")
	}
	if r := g.AdmitToken(tok(10), false, d, k, fromCarrier, 0, now.Unix(), now); r != Ended {
		t.Fatalf("a request of an ended token: admit = %d, want ended", r)
	}
	if r := g.AdmitToken(tok(5), false, DialogOf(Key{3}, "x"), Key{3}, fromCarrier, 0, now.Unix(), now); r != Pass {
		t.Fatalf("a request of a token whose end was forgotten (bound): admit = %d, want pass", r)
	}
	// A node of an earlier release publishes a token's end as a dialog's.
	old := Key{0xef}
	g.End(old, now, exp, 0, 0, copyFor, false)
	if r := g.AdmitToken(old, false, DialogOf(Key{4}, "x"), Key{4}, fromCarrier, 0, now.Unix(), now); r != Ended {
		t.Fatalf("a request of a token ended by an earlier release's node: admit = %d, want ended", r)
	}
	g.Sweep(exp.Add(time.Hour))
	if g.IsEnded(tok(MaxEndedTokens+9), now) || g.IsEnded(d, now) {
		t.Fatal("ends kept past their expiry")
	}
}

// TestDialogRatesSweptInOrder: the sweep forgets a rate bucket once it has
// been idle long enough to have refilled, whatever order the buckets were
// made in, keeps one touched since (even if it was made first), and keeps
// no more queued keys than buckets: it pops expired keys from a queue
// instead of walking every bucket under the guard's lock.
func TestDialogRatesSweptInOrder(t *testing.T) {
	g := New(burst, rate)
	now := time.Unix(1_700_000_000, 0)
	full := time.Duration(burst / rate * float64(time.Second))
	for i := range 100 {
		k := Key{byte(i), byte(i >> 8)}
		if r := g.Admit(DialogOf(k, "t"), k, fromPeer, 0, 0, now); r != Pass {
			t.Fatalf("call %d: admit = %d, want pass", i, r)
		}
	}
	// The first bucket made is used again halfway; the rest stay idle.
	first := Key{0, 0}
	later := now.Add(full / 2)
	if r := g.Admit(DialogOf(first, "t"), first, fromPeer, 0, 0, later); r != Pass {
		t.Fatalf("first call again: admit = %d, want pass", r)
	}
	g.Sweep(now.Add(full - time.Millisecond))
	if n := len(g.rates); n != 100 {
		t.Fatalf("buckets before any has refilled = %d, want 100", n)
	}
	g.Sweep(now.Add(full))
	if n := len(g.rates); n != 1 || !hasRate(g, rateKey{first, fromPeer}) {
		t.Fatalf("buckets once the idle ones refilled = %d, want only the one used since", n)
	}
	if n := g.rateQ.Len(); n != 1 {
		t.Fatalf("queued bucket keys = %d, want 1 (one per bucket)", n)
	}
	g.Sweep(later.Add(full))
	if n, q := len(g.rates), g.rateQ.Len(); n != 0 || q != 0 {
		t.Fatalf("after the last one refilled: %d buckets, %d queued; want none", n, q)
	}
}

// hasRate reports whether g keeps a rate bucket for k.
func hasRate(g *Guard, k rateKey) bool {
	_, ok := g.rates[k]
	return ok
}

// TestDialogRateWallClockStepBack: the rate buckets keep wall-clock times
// (Unix nanoseconds); when the wall clock steps back (NTP), a bucket used
// just before still refills at rate from the step on, instead of
// staying empty until the clock is back where it was, and the sweep still
// forgets idle buckets, instead of stopping at the first one queued before
// the step (while the table fills to maxDialogRates, past which new
// dialogs get no bucket at all).
func TestDialogRateWallClockStepBack(t *testing.T) {
	t0 := time.Now().Round(0) // wall clock only, as the buckets keep it
	step := t0.Add(-time.Hour)
	t.Run("refill", func(t *testing.T) {
		g := New(burst, rate)
		d, k := Key{1}, Key{1}
		for i := 0; i < int(burst); i++ {
			if r := g.Admit(d, k, fromPeer, 0, 0, t0); r != Pass {
				t.Fatalf("request %d of the burst: admit = %d, want pass", i+1, r)
			}
		}
		if r := g.Admit(d, k, fromPeer, 0, 0, t0); r != OverRate {
			t.Fatalf("past the burst: admit = %d, want over rate", r)
		}
		g.Admit(d, k, fromPeer, 0, 0, step) // right after the step: no time passed
		if r := g.Admit(d, k, fromPeer, 0, 0, step.Add(time.Second)); r != Pass {
			t.Fatalf("a second after the wall clock stepped back: admit = %d, want pass (refilled at %v a second)", r, rate)
		}
	})
	t.Run("sweep", func(t *testing.T) {
		g := New(burst, rate)
		g.Admit(Key{1}, Key{1}, fromPeer, 0, 0, t0)
		g.Admit(Key{2}, Key{2}, fromPeer, 0, 0, step) // a dialog of after the step
		for i := 1; i <= 3; i++ {
			g.Sweep(step.Add(time.Duration(i) * time.Hour / 8))
		}
		if n := len(g.rates); n != 0 {
			t.Fatalf("rate buckets idle for %v since the wall clock stepped back = %d, want 0", 3*time.Hour/8, n)
		}
	})
}

// TestAnyByeLetsTheSidesByesPass: a dialog ended by a BYE its far leg
// refused (End with AnyBye) still lets every BYE from that side pass, new
// transactions included, within the window and at most MaxByeCopies
// times; nothing else of the dialog passes, nor the other side's BYE.
func TestAnyByeLetsTheSidesByesPass(t *testing.T) {
	g := New(burst, rate)
	now := time.Now()
	d, k := DialogOf(Key{5}, "callee"), Key{5}
	g.End(d, now, now.Add(time.Hour), AnyBye, fromCarrier, time.Minute, false)
	if r := g.Admit(d, k, fromCarrier, 0, 0, now); r != Ended {
		t.Fatalf("the carrier's INFO after the end: %d, want ended", r)
	}
	if r := g.Admit(d, k, fromPeer, ByeID(9, "z9hG4bK-p"), 0, now); r != Ended {
		t.Fatalf("the peer's BYE after the end: %d, want ended", r)
	}
	if r := g.Admit(d, k, fromCarrier, ByeID(2, "z9hG4bK-2"), 0, now.Add(time.Minute)); r != Ended {
		t.Fatalf("the carrier's BYE past the window: %d, want ended", r)
	}
	for i := range MaxByeCopies {
		if r := g.Admit(d, k, fromCarrier, ByeID(uint32(2+i), "z9hG4bK-n"), 0, now.Add(time.Second)); r != Pass {
			t.Fatalf("the carrier's BYE %d after the refusal: %d, want pass", i+1, r)
		}
	}
	if r := g.Admit(d, k, fromCarrier, ByeID(99, "z9hG4bK-x"), 0, now.Add(time.Second)); r != Ended {
		t.Fatalf("BYE %d after the refusal: %d, want ended (the bound)", MaxByeCopies+1, r)
	}
	if ByeID(1, "") == AnyBye || ByeID(1, "") == 0 {
		t.Fatal("ByeID gave a reserved value")
	}
}

// TestLearnRoundTrip: what one node publishes, another learns into the
// same table: a dialog's or call's end as hex, a token's as "t"+hex; a key
// it cannot read is refused (h72). And NoteOverRate's Warn line counter.
func TestLearnRoundTrip(t *testing.T) {
	a, b := New(burst, rate), New(burst, rate)
	now := time.Now()
	d, tok := DialogOf(Key{1}, "x"), Key{7, 7, 7}
	a.End(d, now, now.Add(time.Hour), ByeID(1, "z9hG4bK-1"), fromPeer, copyFor, true)
	a.EndToken(tok, now, now.Add(time.Hour), true)
	keys := a.TakePending(10)
	if len(keys) != 2 || strings.HasPrefix(keys[0], TokenEndPrefix) || !strings.HasPrefix(keys[1], TokenEndPrefix) {
		t.Fatalf("published %q", keys)
	}
	for _, k := range keys {
		if !b.Learn(k, now, now.Add(time.Hour), time.Minute) {
			t.Fatalf("Learn(%q) = false", k)
		}
	}
	for _, bad := range []string{"", "t", "zz", "t0102", strings.ToUpper(keys[0]) + "00", "a:" + keys[0], "ax:" + keys[0], "a-1:" + keys[0], "a2:zz", "b2:" + keys[0]} {
		if b.Learn(bad, now, now.Add(time.Hour), time.Minute) {
			t.Fatalf("Learn(%q) = true", bad)
		}
	}
	if ends, toks, _ := b.Len(); ends != 1 || toks != 1 {
		t.Fatalf("learned ends %d tokens %d, want 1 1", ends, toks)
	}
	if r := b.AdmitToken(tok, false, DialogOf(Key{2}, "y"), Key{2}, fromPeer, 0, 0, now); r != Ended {
		t.Fatalf("learned token end: %d, want ended", r)
	}
	// A learned end knows no BYE: even a copy of the ending BYE is refused
	// on the node that learned it (as before the move).
	if r := b.Admit(d, Key{1}, fromPeer, ByeID(1, "z9hG4bK-1"), 0, now); r != Ended {
		t.Fatalf("copy of the ending BYE on a learning node: %d, want ended", r)
	}
	n1, log1 := b.NoteOverRate(now, 10*time.Second)
	n2, log2 := b.NoteOverRate(now.Add(time.Second), 10*time.Second)
	n3, log3 := b.NoteOverRate(now.Add(11*time.Second), 10*time.Second)
	if n1 != 1 || !log1 || n2 != 1 || log2 || n3 != 2 || !log3 {
		t.Fatalf("NoteOverRate: (%d %v) (%d %v) (%d %v)", n1, log1, n2, log2, n3, log3)
	}
}

// TestAnyByeReachesThePoolsOtherNodes: the peer refused the carrier's BYE
// on node A (AnyBye, 5 minutes). The carrier sends its BYE again a minute
// later (Retry-After: 60), and with a shared sip.advertise it lands on
// node B, which learned the end from the pool: it passes there too (h72:
// B learned it with no BYE, and answered 481). A plain key learned first
// takes AnyBye on when its marker comes; a node of an earlier release
// reads the plain key alone.
func TestAnyByeReachesThePoolsOtherNodes(t *testing.T) {
	a, b := New(burst, rate), New(burst, rate)
	now := time.Now()
	k := Key{3}
	d := DialogOf(k, "callee")
	a.End(d, now, now.Add(time.Hour), AnyBye, fromCarrier, 5*time.Minute, true)
	for _, key := range a.TakePending(10) {
		b.Learn(key, now, now.Add(time.Hour), 5*time.Minute)
	}
	later := now.Add(time.Minute)
	if r := a.Admit(d, k, fromCarrier, ByeID(2, "z9hG4bK-2"), 0, later); r != Pass {
		t.Fatalf("node A: %d, want pass", r)
	}
	if r := b.Admit(d, k, fromCarrier, ByeID(2, "z9hG4bK-2b"), 0, later); r != Pass {
		t.Fatalf("node B (learned the end from the pool): the carrier's BYE sent again = %d, want pass (CHANGELOG: reaches the peer for 5 minutes)", r)
	}
	if r := b.Admit(d, k, fromPeer, ByeID(9, "z9hG4bK-p"), 0, later); r != Ended {
		t.Fatalf("node B: the peer's BYE = %d, want ended", r)
	}
	// The marker before or after the plain key: the same.
	keys := []string{}
	a2 := New(burst, rate)
	a2.End(d, now, now.Add(time.Hour), AnyBye, fromCarrier, 5*time.Minute, true)
	keys = a2.TakePending(10)
	if len(keys) != 2 || !strings.HasPrefix(keys[1], AnyByePrefix) {
		t.Fatalf("published %q, want the plain key and the AnyBye marker", keys)
	}
	c := New(burst, rate)
	c.Learn(keys[1], now, now.Add(time.Hour), 5*time.Minute)
	c.Learn(keys[0], now, now.Add(time.Hour), 5*time.Minute)
	if r := c.Admit(d, k, fromCarrier, ByeID(2, "z9hG4bK-2c"), 0, later); r != Pass {
		t.Fatalf("node C (marker first): %d, want pass", r)
	}
}

// TestAnyByeBudgetIsPerTransaction: after the refusal, a BYE sent again
// and retransmitted (each copy a datagram over UDP) takes one of the
// MaxByeCopies BYEs, not one per copy (h72: ten copies of one BYE spent
// the whole budget, and the next BYE got 481); its copies are bounded as
// an ending BYE's are.
func TestAnyByeBudgetIsPerTransaction(t *testing.T) {
	g := New(burst, rate)
	now := time.Now()
	d, k := DialogOf(Key{6}, "callee"), Key{6}
	g.End(d, now, now.Add(time.Hour), AnyBye, fromCarrier, time.Minute, false)
	bye2 := ByeID(2, "z9hG4bK-2")
	for i := range MaxByeCopies {
		if r := g.Admit(d, k, fromCarrier, bye2, 0, now); r != Pass {
			t.Fatalf("copy %d of BYE 2: %d, want pass", i+1, r)
		}
	}
	if r := g.Admit(d, k, fromCarrier, bye2, 0, now); r != Ended {
		t.Fatalf("copy %d of BYE 2: %d, want ended", MaxByeCopies+1, r)
	}
	if r := g.Admit(d, k, fromCarrier, ByeID(3, "z9hG4bK-3"), 0, now); r != Pass {
		t.Fatalf("BYE 3 after BYE 2's copies: %d, want pass", r)
	}
}
