// Package records owns the call records: one JSON object per call that
// reached a decision (forwarded and ended, refused for any reason,
// cancelled), built by the SIP front end and written here to the sinks
// the configuration names (records.*): a JSON-lines file rotated by size
// (gopkg.in/natefinch/lumberjack.v2), standard output, and syslog (RFC
// 5424 over UDP, or over TCP with octet-counted framing, RFC 6587; the
// encoder is syslog.go).
//
// # Failure
//
// A record never waits for a sink. Write encodes the record once and
// offers it to each sink's bounded queue (records.buffer records); a sink
// whose queue is full drops it. A sink that cannot write (a full disk, a
// syslog server that is down: TCP is redialled at most once a second, and
// records meanwhile are lost) drops the record too. Every record a sink
// writes is counted in cpsguard_records_written_total{sink}, every one it
// loses in cpsguard_records_dropped_total{sink}; the first failure of a
// sink, and then at most one a minute, is logged at warn. Records are not
// stored anywhere else: what a sink dropped is gone.
//
// # Reload and shutdown
//
// Apply makes the sinks follow a new configuration: a sink whose settings
// changed (the file's path or rotation, the syslog address, the buffer) is
// closed after writing what it holds and a new one opened; the others go
// on untouched. Close writes what the queues hold (within a bound) and
// closes every sink.
//
// # Concurrency
//
// A Writer is safe for concurrent use: Write from any number of call
// goroutines, Apply and Close from one place. Each sink writes from a
// goroutine of its own.
package records
