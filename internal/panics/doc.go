// Package panics turns a panic in one handler or goroutine into a logged,
// counted error, so that nothing a peer, a carrier or a Redis server sends
// can stop the process. It owns no goroutines and no state of its own; a
// Reporter only logs (once per panic, with the stack) and increments
// cpsguard_panics_total{where}. Safe for concurrent use.
package panics
