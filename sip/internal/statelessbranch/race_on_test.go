//go:build race

package statelessbranch

// raceEnabled: the race detector is on, under which sync.Pool drops
// items at random and allocation counts mean nothing.
const raceEnabled = true
