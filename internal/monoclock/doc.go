// Package monoclock owns the clock of cpsguard's in-process stores: time
// as a duration since the store was made, never going backwards. The
// admission and pacing in-process stores (and their fallbacks) read it
// under their own mutex; it has no lock of its own and no failure mode.
package monoclock
