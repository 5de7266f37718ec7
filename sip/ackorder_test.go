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
	o.begin(a, fromPeer, now) // a second ACK of the call (a 2xx retransmission's)
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

// TestAckOrderBounded: a note nobody ends (an ACK sipgo absorbed) holds
// its call's requests at most connectTimeout; the table takes at most
// ackOrderMax notes, sweeps the stale ones when full, and past that takes
// none (the requests are then not held back at all).
func TestAckOrderBounded(t *testing.T) {
	saved := connectTimeout
	t.Cleanup(func() { connectTimeout = saved })
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

	// A note never ended: the wait ends at connectTimeout.
	connectTimeout = 100 * time.Millisecond
	var o ackOrder
	o.begin(callKey{1}, fromPeer, time.Now())
	if !returns(&o, callKey{1}) {
		t.Fatal("a request still waits for an ACK never sent, past connectTimeout")
	}

	// A stale note is not waited for, however long connectTimeout is now.
	connectTimeout = time.Hour
	var stale ackOrder
	stale.begin(callKey{5}, fromPeer, time.Now().Add(-2*time.Hour))
	if !returns(&stale, callKey{5}) {
		t.Fatal("a request waits for a stale note")
	}

	// The table's bound, and its sweep of the stale notes.
	connectTimeout = 100 * time.Millisecond
	var full ackOrder
	old := time.Now().Add(-time.Second)
	for i := range ackOrderMax {
		full.begin(callKey{byte(i), byte(i >> 8), 1}, fromPeer, old)
	}
	if n := full.len(); n != ackOrderMax {
		t.Fatalf("%d notes, want %d", n, ackOrderMax)
	}
	full.begin(callKey{9, 9, 9}, fromPeer, time.Now())
	if n := full.len(); n != 1 {
		t.Errorf("%d notes after a full table of stale ones took a new one, want 1 (the stale swept)", n)
	}
	for i := range ackOrderMax - 1 {
		full.begin(callKey{byte(i), byte(i >> 8), 2}, fromPeer, time.Now())
	}
	full.begin(callKey{7, 7, 7}, fromPeer, time.Now())
	if n := full.len(); n != ackOrderMax {
		t.Errorf("%d notes, want at most %d", n, ackOrderMax)
	}
	full.mu.Lock()
	noted := full.m[ackOrderKey{callKey{7, 7, 7}, fromPeer}] != nil
	full.mu.Unlock()
	if noted {
		t.Error("a full table of live notes took one more")
	}
}
