// Command sink is the measuring carrier of the benchmark suite, on its own:
// a UDP UAS that answers every INVITE with 100 and 200 (no 180), takes the
// ACK, answers BYE, and records the kernel arrival time of every new INVITE.
//
//	(cd bench && go build -o out/bin/sink ./cmd/sink)   # bench/ is its own module
//	bench/out/bin/sink -listen 127.0.0.1:5070 -for 30s -out bench/out/sink.csv
//	bench/out/bin/sink -analyze bench/out/sink.csv [-cps 50]
//
// Paths are relative to the repository root, where the bench scripts run.
//
// On exit (after -for, or on SIGINT) it writes one row per INVITE
// (call_id, unix_ns) to -out and prints the analysis: calls, the most calls
// in any sliding 1 s window, calls per second, and inter-arrival times
// (compared with 1/cps when -cps is given).
//
// Exit status: 0 after a run or an analysis, also when no INVITE came (it
// prints "no INVITEs"); 2 on a flag that does not parse; 1, with
// "sink: <error>" on standard error, when it cannot listen on -listen,
// cannot write -out (no analysis is printed then), or, with -analyze, cannot
// read the CSV or finds a unix_ns that is not an integer (its first row is
// taken as the header; rows of fewer than two fields are skipped).
package main
