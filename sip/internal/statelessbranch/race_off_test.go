//go:build !race

package statelessbranch

const raceEnabled = false
