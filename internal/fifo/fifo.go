package fifo

// Queue is a first-in, first-out queue of T on one slice: Push appends,
// Pop takes from the front and zeroes the slot it leaves (so the queue
// holds no reference to a popped value), and the slice is compacted once
// more than half of it (and over 1,024 slots) lies before the front, so a
// queue that keeps running never grows past about twice its length.
// The zero value is an empty queue. A Queue is not safe for concurrent
// use: its owner's lock guards it.
type Queue[T any] struct {
	q    []T
	head int
}

// Push appends v at the back.
func (q *Queue[T]) Push(v T) { q.q = append(q.q, v) }

// Front returns the value at the front, false when the queue is empty.
func (q *Queue[T]) Front() (T, bool) {
	if q.head >= len(q.q) {
		var zero T
		return zero, false
	}
	return q.q[q.head], true
}

// Pop removes the value at the front (none when the queue is empty).
func (q *Queue[T]) Pop() {
	if q.head >= len(q.q) {
		return
	}
	var zero T
	q.q[q.head] = zero
	q.head++
	if q.head > 1024 && q.head*2 > len(q.q) {
		n := copy(q.q, q.q[q.head:])
		clear(q.q[n:])
		q.q = q.q[:n]
		q.head = 0
	}
}

// Len is the number of values queued.
func (q *Queue[T]) Len() int { return len(q.q) - q.head }
