// Package lograte bounds how many lines of one kind a node logs a second:
// a token bucket whose lines over the rate are counted, so that the count
// can be logged instead (a party that can make the node log something, a
// refused request or a refused call, must not be able to fill its disk).
// It owns no logger and never fails.
package lograte
