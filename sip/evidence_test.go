package sip

import (
	"testing"
	"time"
)

// One peer cannot slow down or pause a carrier that other peers use: its
// overload answers (numbers the carrier refuses with 503) act only when a
// second peer gets one too, or when it is the carrier's only caller.
func TestOverloadEvidence(t *testing.T) {
	var e overloadEvidence
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// A carrier one peer alone calls: its overload answers count.
	if !e.answered("solo", "a", true, t0) {
		t.Error("the only caller's overload answer did not count")
	}

	// Two peers call "shared"; A dials numbers the carrier refuses.
	e.answered("shared", "b", false, t0)
	for i := range 10 {
		if e.answered("shared", "a", true, at(time.Duration(i)*100*time.Millisecond)) {
			t.Fatalf("answer %d: one peer's overload answers acted for a carrier another peer uses", i+1)
		}
	}
	// The carrier is over its limit for everyone: B gets one too.
	if !e.answered("shared", "b", true, at(1500*time.Millisecond)) {
		t.Error("overload answers to two peers within 2 s did not count")
	}
	// Later, A alone again (B's is older than 2 s): not enough.
	if e.answered("shared", "a", true, at(4*time.Second)) {
		t.Error("A's overload answer counted with B's 2.5 s old")
	}
	// B has not called for a minute: A is the only caller left.
	if !e.answered("shared", "a", true, at(62*time.Second)) {
		t.Error("the only caller left (the other stopped a minute ago): its overload answer did not count")
	}
	// Ordinary answers never act.
	if e.answered("solo", "a", false, at(time.Second)) {
		t.Error("an ordinary answer acted")
	}
}
