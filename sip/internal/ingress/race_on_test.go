//go:build race

package ingress

// raceEnabled: the race detector is on, under which allocation counts
// mean nothing.
const raceEnabled = true
