package sip

import (
	"testing"
	"time"
)

// TestAckOrderWaitsForTheAckAhead: a request of a call waits for the ACK
// in flight of the same call and direction, not for another call's or
// the other direction's, and goes once the last of its ACKs is sent.
func TestAckOrderWaitsForTheAckAhead(t *testing.T) {
	var o ackOrder
	a, b := callKey{1}, callKey{2}
	now := time.Now()
	o.begin(a, fromPeer, now)
	o.begin(a, fromPeer, now) // a copy of the ACK (the caller's again, for the 2xx sent again)
	done := make(chan struct{})
	go func() { o.wait(a, fromPeer); close(done) }()

	o.wait(b, fromPeer)    // another call: no wait
	o.wait(a, fromCarrier) // the other direction: no wait
	o.end(a, fromPeer)
	select {
	case <-done:
		t.Fatal("the request went with one of its call's two ACKs still in flight")
	case <-time.After(50 * time.Millisecond):
	}
	o.end(a, fromPeer)
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the request still waits after its call's ACKs were sent")
	}
	if n := o.len(); n != 0 {
		t.Errorf("%d notes left after every ACK was sent, want 0", n)
	}
	o.end(b, fromPeer) // an end without a note (an ACK the screen did not note) is nothing
	if n := o.len(); n != 0 {
		t.Errorf("%d notes after an end without a note, want 0", n)
	}
}

// TestAckOrderBounded: a note nobody ends holds its call's requests at
// most its bound, and the call's next ACK replaces it; the table takes at
// most ackOrderMax notes, sweeps the stale ones when full (not again
// within ackOrderSweep), and past that takes none (the requests are then
// not held back at all).
func TestAckOrderBounded(t *testing.T) {
	returns := func(o *ackOrder, k callKey) bool {
		done := make(chan struct{})
		go func() { o.wait(k, fromPeer); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}
	noted := func(o *ackOrder, k callKey) *ackFlight {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.m[ackOrderKey{k, fromPeer}]
	}

	// A note never ended: the wait ends at the bound.
	o := ackOrder{limit: 100 * time.Millisecond}
	o.begin(callKey{1}, fromPeer, time.Now())
	if !returns(&o, callKey{1}) {
		t.Fatal("a request still waits for an ACK never sent, past the bound")
	}

	// A stale note is not waited for, however long the bound is, and the
	// call's next ACK replaces it: its requests wait for that one again.
	long := ackOrder{limit: time.Hour}
	long.begin(callKey{5}, fromPeer, time.Now().Add(-2*time.Hour))
	if !returns(&long, callKey{5}) {
		t.Fatal("a request waits for a stale note")
	}
	long.begin(callKey{5}, fromPeer, time.Now())
	if f := noted(&long, callKey{5}); f == nil || f.n != 1 || time.Since(f.at) > time.Minute {
		t.Fatalf("the call's next ACK after a stale note: note %+v, want a fresh one", f)
	}
	long.end(callKey{5}, fromPeer)
	if n := long.len(); n != 0 {
		t.Errorf("%d notes after the fresh ACK was sent, want 0", n)
	}

	// The table's bound, and its sweep of the stale notes.
	full := ackOrder{limit: 100 * time.Millisecond}
	old := time.Now().Add(-time.Second)
	for i := range ackOrderMax {
		full.begin(callKey{byte(i), byte(i >> 8), 1}, fromPeer, old)
	}
	if n := full.len(); n != ackOrderMax {
		t.Fatalf("%d notes, want %d", n, ackOrderMax)
	}
	now := time.Now()
	full.begin(callKey{9, 9, 9}, fromPeer, now)
	if n := full.len(); n != 1 {
		t.Errorf("%d notes after a full table of stale ones took a new one, want 1 (the stale swept)", n)
	}
	for i := range ackOrderMax - 1 {
		full.begin(callKey{byte(i), byte(i >> 8), 2}, fromPeer, now)
	}
	full.begin(callKey{7, 7, 7}, fromPeer, now)
	if n := full.len(); n != ackOrderMax {
		t.Errorf("%d notes, want at most %d", n, ackOrderMax)
	}
	if noted(&full, callKey{7, 7, 7}) != nil {
		t.Error("a full table of live notes took one more")
	}
	// Stale now, but swept less than ackOrderSweep ago: not swept again.
	full.begin(callKey{8, 8, 8}, fromPeer, now.Add(ackOrderSweep/2))
	if noted(&full, callKey{8, 8, 8}) != nil || full.len() != ackOrderMax {
		t.Error("a full table swept again within ackOrderSweep")
	}
	full.begin(callKey{8, 8, 8}, fromPeer, now.Add(time.Second))
	if noted(&full, callKey{8, 8, 8}) == nil || full.len() != 1 {
		t.Errorf("a full table of stale notes, past ackOrderSweep: %d notes, want the new one alone", full.len())
	}
}
