//go:build !race

package dialogtoken

const raceEnabled = false
