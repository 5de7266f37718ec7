package carriers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/pacing"
)

// One peer cannot slow down or pause a carrier that other peers use,
// wherever in the pool they call it: its overload answers (numbers the
// carrier refuses with 503) act fully only when a second peer gets one
// too, and a little (evidenceLone) when it is the carrier's only caller.
// The evidence is the store's, so calls through two nodes of a pool count
// together.
func TestOverloadEvidence(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	at := func(d time.Duration) { mu.Lock(); now = time.Unix(1000, 0).Add(d); mu.Unlock() }
	store := pacing.NewLocalSlots(clock)
	// Two nodes of one pool: two Pacers on one store.
	node1, node2 := pacing.NewPacer(store), pacing.NewPacer(store)
	solo, shared := pacing.Carrier{Key: "t:{carrier:solo}"}, pacing.Carrier{Key: "t:{carrier:shared}"}
	answered := func(n *pacing.Pacer, c pacing.Carrier, peer string, overload bool) evidenceScope {
		t.Helper()
		e, err := n.Evidence(context.Background(), c, peer, overload, evidenceWindows())
		if err != nil {
			t.Fatal(err)
		}
		return judge(e)
	}

	// A carrier one peer alone calls: its overload answers count, a little.
	if got := answered(node1, solo, "a", true); got != evidenceLone {
		t.Errorf("the only caller's overload answer: %v, want evidenceLone", got)
	}

	// Two peers call "shared", through two nodes; A dials numbers the
	// carrier refuses.
	answered(node2, shared, "b", false)
	for i := range 10 {
		at(time.Duration(i) * 100 * time.Millisecond)
		if got := answered(node1, shared, "a", true); got != evidenceNone {
			t.Fatalf("answer %d: one peer's overload answers acted (%v) for a carrier another peer uses on another node", i+1, got)
		}
	}
	// The carrier is over its limit for everyone: B gets one too.
	at(1500 * time.Millisecond)
	if got := answered(node2, shared, "b", true); got != evidencePool {
		t.Errorf("overload answers to two peers within 2 s: %v, want evidencePool", got)
	}
	// Later, A alone again (B's is older than 2 s): not enough.
	at(4 * time.Second)
	if got := answered(node1, shared, "a", true); got != evidenceNone {
		t.Errorf("A's overload answer with B's 2.5 s old: %v, want evidenceNone", got)
	}
	// B has not called for a minute: A is the only caller left.
	at(62 * time.Second)
	if got := answered(node1, shared, "a", true); got != evidenceLone {
		t.Errorf("the only caller left (the other stopped a minute ago): %v, want evidenceLone", got)
	}
}

// A node reports a peer as a caller of a carrier once per
// callerReportEvery, and again at once after a failed report.
func TestCallerReports(t *testing.T) {
	var r callerReports
	t0 := time.Unix(1000, 0)
	if !r.due("a", "p", t0) {
		t.Fatal("first call not reported")
	}
	if r.due("a", "p", t0.Add(callerReportEvery-time.Millisecond)) {
		t.Error("reported again within callerReportEvery")
	}
	if !r.due("a", "q", t0) || !r.due("b", "p", t0) {
		t.Error("another peer or carrier not reported")
	}
	if !r.due("a", "p", t0.Add(callerReportEvery)) {
		t.Error("not reported after callerReportEvery")
	}
	r.forget("a", "p")
	if !r.due("a", "p", t0.Add(callerReportEvery+time.Millisecond)) {
		t.Error("not reported again after a failed report")
	}
	// Entries of callers gone quiet are dropped.
	r.due("z", "z", t0.Add(2*evidenceCallers+callerReportEvery))
	if n := len(r.m); n != 1 {
		t.Errorf("%d entries after everyone else went quiet, want 1", n)
	}
}
