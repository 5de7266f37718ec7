// Package testlog is a sink for the logs of code under test: a Buffer its
// goroutines write while the test reads what was written so far (String)
// or forgets it (Reset). Tests only.
//
// Failure: it never fails: Write returns no error (a bytes.Buffer's Write
// panics only on running out of memory). A Buffer is safe for concurrent
// writers and readers; its zero value is ready.
package testlog
