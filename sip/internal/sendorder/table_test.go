package sendorder

import (
	"testing"
	"time"
)

// key is a test key: a call, the direction of its send, and a generation
// of the bound test.
type key struct {
	call int
	dir  bool
	gen  int
}

// TestWaitsForTheSendAhead: a request of a call waits for the ACK
// in flight of the same call and direction, not for another call's or
// the other direction's, and goes once the last of its ACKs is sent.
func TestWaitsForTheSendAhead(t *testing.T) {
	o := Table[key]{Limit: 4 * time.Second}
	a, b := key{call: 1}, key{call: 2}
	now := time.Now()
	o.Begin(a, now)
	o.Begin(a, now) // a copy of the ACK (the caller's again, for the 2xx sent again)
	done := make(chan struct{})
	go func() { o.Wait(a); close(done) }()

	o.Wait(b)                       // another call: no wait
	o.Wait(key{call: 1, dir: true}) // the other direction: no wait
	o.End(a)
	select {
	case <-done:
		t.Fatal("the request went with one of its call's two ACKs still in flight")
	case <-time.After(50 * time.Millisecond):
	}
	o.End(a)
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the request still waits after its call's ACKs were sent")
	}
	if n := o.Len(); n != 0 {
		t.Errorf("%d notes left after every ACK was sent, want 0", n)
	}
	o.End(b) // an end without a note (an ACK the screen did not note) is nothing
	if n := o.Len(); n != 0 {
		t.Errorf("%d notes after an end without a note, want 0", n)
	}
}

// TestBounded: a note nobody ends holds its call's requests at
// most its bound, and the call's next ACK replaces it; the table takes at
// most Max notes, sweeps the stale ones when full (not again
// within Sweep), and past that takes none (the requests are then
// not held back at all).
func TestBounded(t *testing.T) {
	returns := func(o *Table[key], k key) bool {
		done := make(chan struct{})
		go func() { o.Wait(k); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}
	noted := func(o *Table[key], k key) *flight {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.m[k]
	}

	// A note never ended: the wait ends at the bound.
	o := Table[key]{Limit: 100 * time.Millisecond}
	o.Begin(key{call: 1}, time.Now())
	if !returns(&o, key{call: 1}) {
		t.Fatal("a request still waits for an ACK never sent, past the bound")
	}

	// A stale note is not waited for, however long the bound is, and the
	// call's next ACK replaces it: its requests wait for that one again.
	long := Table[key]{Limit: time.Hour}
	long.Begin(key{call: 5}, time.Now().Add(-2*time.Hour))
	if !returns(&long, key{call: 5}) {
		t.Fatal("a request waits for a stale note")
	}
	long.Begin(key{call: 5}, time.Now())
	if f := noted(&long, key{call: 5}); f == nil || f.n != 1 || time.Since(f.at) > time.Minute {
		t.Fatalf("the call's next ACK after a stale note: note %+v, want a fresh one", f)
	}
	long.End(key{call: 5})
	if n := long.Len(); n != 0 {
		t.Errorf("%d notes after the fresh ACK was sent, want 0", n)
	}

	// The table's bound, and its sweep of the stale notes.
	full := Table[key]{Limit: 100 * time.Millisecond}
	old := time.Now().Add(-time.Second)
	for i := range Max {
		full.Begin(key{call: i, gen: 1}, old)
	}
	if n := full.Len(); n != Max {
		t.Fatalf("%d notes, want %d", n, Max)
	}
	now := time.Now()
	full.Begin(key{call: 999}, now)
	if n := full.Len(); n != 1 {
		t.Errorf("%d notes after a full table of stale ones took a new one, want 1 (the stale swept)", n)
	}
	for i := range Max - 1 {
		full.Begin(key{call: i, gen: 2}, now)
	}
	full.Begin(key{call: 777}, now)
	if n := full.Len(); n != Max {
		t.Errorf("%d notes, want at most %d", n, Max)
	}
	if noted(&full, key{call: 777}) != nil {
		t.Error("a full table of live notes took one more")
	}
	// Stale now, but swept less than Sweep ago: not swept again.
	full.Begin(key{call: 888}, now.Add(Sweep/2))
	if noted(&full, key{call: 888}) != nil || full.Len() != Max {
		t.Error("a full table swept again within Sweep")
	}
	full.Begin(key{call: 888}, now.Add(time.Second))
	if noted(&full, key{call: 888}) == nil || full.Len() != 1 {
		t.Errorf("a full table of stale notes, past Sweep: %d notes, want the new one alone", full.Len())
	}
}

// TestZeroLimitHoldsNothing: a Table without a Limit notes sends but
// holds no follower back.
func TestZeroLimitHoldsNothing(t *testing.T) {
	var o Table[key]
	o.Begin(key{call: 1}, time.Now())
	done := make(chan struct{})
	go func() { o.Wait(key{call: 1}); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a zero Limit held a follower back")
	}
	o.End(key{call: 1})
	if n := o.Len(); n != 0 {
		t.Errorf("%d notes after the send ended, want 0", n)
	}
}
