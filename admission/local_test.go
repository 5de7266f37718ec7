package admission

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A bucket never holds more than its limit, and grows only as it fills.
func TestLocalMemoryBounded(t *testing.T) {
	clock := newFakeClock()
	s := NewLocalStore(clock.Now)
	small := Bucket{Key: "small", Limit: 5, Window: time.Second}
	big := Bucket{Key: "big", Limit: 100_000, Window: time.Second}
	for i := range 50 {
		clock.Advance(time.Millisecond)
		if _, err := s.Admit(context.Background(), fmt.Sprint(i), []Bucket{small}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Admit(context.Background(), fmt.Sprint(i), []Bucket{big}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(s.buckets["small"].at); got > 5 {
		t.Errorf("bucket of limit 5 has room for %d calls", got)
	}
	if got := len(s.buckets["big"].at); got > 64 {
		t.Errorf("bucket of limit 100000 holding 50 calls has room for %d", got)
	}
	if got := len(s.buckets["small"].members); got != 5 {
		t.Errorf("member set of a full bucket of 5 holds %d", got)
	}
}

// A clock that steps back is read as the latest reading: no call is counted
// in the past, the window never widens.
func TestLocalClockBackwards(t *testing.T) {
	clock := newFakeClock()
	s := NewLocalStore(clock.Now)
	bk := []Bucket{{Key: "p", Limit: 1, Window: time.Second}}
	first, _ := s.Admit(context.Background(), "a", bk)
	clock.Advance(-time.Hour)
	d, _ := s.Admit(context.Background(), "b", bk)
	if d.Admit || d.At.Before(first.At) || d.RetryAfter != time.Second {
		t.Fatalf("after the clock stepped back: got %+v, want refused at %v with RetryAfter 1s", d, first.At)
	}
}
