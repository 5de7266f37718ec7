package fifo

import "testing"

// TestQueueOrderAndCompaction: values come out in the order they went in,
// across many compactions, and the slice stays within about twice the
// queue's length.
func TestQueueOrderAndCompaction(t *testing.T) {
	var q Queue[int]
	if _, ok := q.Front(); ok || q.Len() != 0 {
		t.Fatal("a zero Queue is not empty")
	}
	q.Pop() // no-op on an empty queue
	next := 0
	for i := range 100_000 {
		q.Push(i)
		if i%3 == 2 { // keep about a third queued... then drain two of three
			for range 2 {
				v, ok := q.Front()
				if !ok || v != next {
					t.Fatalf("front = %d, %v; want %d", v, ok, next)
				}
				q.Pop()
				next++
			}
		}
		if c := cap(q.q); q.Len() > 0 && c > 4*q.Len()+4096 {
			t.Fatalf("slice capacity %d for %d queued", c, q.Len())
		}
	}
	for q.Len() > 0 {
		v, _ := q.Front()
		if v != next {
			t.Fatalf("front = %d, want %d", v, next)
		}
		q.Pop()
		next++
	}
	if next != 100_000 {
		t.Fatalf("popped %d values, want 100000", next)
	}
}

// TestQueuePopZeroes: a popped pointer is not kept reachable by the
// queue's slice.
func TestQueuePopZeroes(t *testing.T) {
	var q Queue[*int]
	x := new(int)
	q.Push(x)
	q.Push(new(int))
	q.Pop()
	if q.q[0] != nil {
		t.Fatal("the popped slot still holds its pointer")
	}
}
