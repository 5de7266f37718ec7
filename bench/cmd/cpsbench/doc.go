// Command cpsbench runs the experiments of issue 7 (performance vs Kamailio
// and vs Redis's own ceiling). One subcommand per experiment; each prints a
// table, writes CSVs under -out and, where it has one, a PNG. Every run is
// bounded in calls and time and uses loopback only. The bench/*.sh scripts
// build the binaries and call these.
//
//	cpsbench accuracy   [-runs 3] [-limit 100] [-seconds 10]
//	cpsbench throughput [-runs 3] [-rates 500,1000,...] [-seconds 5]
//	cpsbench latency    [-runs 3] [-rate 1000] [-seconds 5] [-trace] (with -trace: what the node ran in each stall)
//	cpsbench pacing     [-runs 3] [-cps 50] [-offered 100] [-seconds 10]
//	cpsbench decisions  [-runs 3] [-seconds 3] [-callers 1,64,256]
//	cpsbench memory     [-queued 10000]
//	cpsbench held       [-rate 200] [-seconds 40] [-hold 90s] (live heap per answered call up; cpsguardprof build)
//	cpsbench profile    [-rate 2000] [-seconds 20] (pprof of the per-call path)
//	cpsbench adaptive   [-csv bench/out/adaptive.csv] (plot an adaptive carrier's curve)
//	cpsbench overload   [-runs 3] [-rate 10000] [-seconds 3] (issue 15: shedding, store_up, the next second)
//
// Exit status: 2 without a subcommand or with an unknown one (the usage on
// standard error), or on a flag that does not parse. 1 when the experiment
// fails, with "cpsbench <subcommand>: <error>" on standard error: a tool it
// needs is missing (sipp, redis-benchmark, kamailio; the message names the
// Debian package), a process it started exits at start or is not ready in
// time (the tail of its log is shown), a bad flag value, an output that
// cannot be written, or SIGINT/SIGTERM (context canceled). The processes it
// started are stopped on the way out, and killed with it if it dies.
// Figures that miss a target are reported, not failures.
package main
