// Package stats turns timestamps into the figures of the benchmark suite:
// sliding-window counts, per-second counts, percentiles, and CSV/table
// output. Pure functions, deterministic, but for the output. The most
// events in any sliding window, the figure the product's tests assert too,
// is siptest.MaxInWindowAt (internal/siptest of the product module).
//
// Failure: only WriteCSV and Table.WriteCSV return an error (the directory
// or file cannot be created or written); Table.Print ignores write errors.
// Empty input gives 0 or nil. Input is not checked: timestamps must be
// sorted (else the figures are wrong), and a window or step not above 0 is
// a bug (Sliding may panic, SlidingGrid never returns).
package stats
