// Package procs starts and stops the processes of a benchmark run
// (redis-server, kamailio, cpsguard, SIPp) on free loopback ports, each one
// owned by the run and stopped by its own pid (the process group it leads),
// never by name; each is killed too when the benchmark dies. It also reads
// what a run measures of them: RSS and CPU time from /proc, and cpsguard's
// /metrics (Metric, Scrape).
//
// Failure: the Start functions return an error, with the tail of the
// process's log where there is one, and leave nothing of theirs running: a
// binary that cannot be started (kamailio: not found, naming the package to
// install), a process that exits at start, redis-server not accepting TCP
// within 5 s, cpsguard not answering /readyz 200 within 10 s (kamailio is
// only checked to be alive 700 ms after start). FreeUDP and FreeTCP panic
// when loopback has no port to give. Metric returns an error when /metrics
// cannot be read or holds no sample of the family, RSS when /proc cannot be
// read; Scrape returns "" and CPUTime 0 instead.
package procs
