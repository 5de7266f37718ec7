// Package fifo owns a first-in, first-out queue on one slice (Queue),
// for the tables that forget their entries in the order they were made:
// the invite table's tombstones and the ended-dialog sets. It cannot
// fail; memory is at most about twice the queued values' slots, and a
// popped value is not kept reachable.
package fifo
