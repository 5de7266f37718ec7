//go:build !race

package msgpart

const raceEnabled = false
