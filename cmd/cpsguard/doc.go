// Command cpsguard is the SIP call-admission controller's binary and the
// composition root of the program: it parses the command line, loads the
// configuration (package config) and wires the long-running parts together.
//
// Subcommands:
//
//	cpsguard serve   [--config FILE]   run (config from CPSGUARD_CONFIG or ./cpsguard.yaml)
//	cpsguard check   [--config FILE] [--quiet]
//	                                   validate; print a summary and warnings (exit 0) or every error (exit 1)
//	cpsguard status  [--addr URL | --config FILE] [--watch]
//	                                   a running node's limits, windows (the 1 s window,
//	                                   a burst's tokens, the extra windows) and queues
//	cpsguard probe   [--addr URL | --config FILE] [--timeout D]
//	                                   exit 0 when the node's /readyz answers 200, else 1
//	cpsguard drain   [--addr URL | --config FILE] [--token T] [--timeout D]
//	                                   take the node out of service (POST /api/v1/drain) and
//	                                   wait until its calls are done; a Kubernetes preStop
//	cpsguard limit set {peer|customer|carrier} NAME --cps N --ttl D [--burst N] [--token T]
//	cpsguard limit rm  {peer|customer|carrier} NAME [--token T]
//	cpsguard limit ls
//	                                   override one limit live for the pool (PUT/DELETE/GET /api/v1/limits)
//	cpsguard carrier unpause NAME [--token T]
//	                                   end a carrier's Retry-After pause for the pool
//	                                   (DELETE /api/v1/carriers/{name}/pause)
//	cpsguard calls [--peer P] [--carrier C]
//	                                   the pool's live calls (GET /api/v1/calls)
//	cpsguard calls end CALL_ID [--token T]
//	                                   end the calls of one Call-ID (DELETE /api/v1/calls/CALL_ID)
//	cpsguard version                   print version, commit and Go version
//
// status, probe, drain, limit, carrier and calls find the node from --addr,
// else CPSGUARD_HTTP_LISTEN, else the http.listen of the configuration
// file, else 127.0.0.1:9090; limit set and rm, drain, carrier unpause and
// calls end send the token of --token or CPSGUARD_HTTP_TOKEN.
//
// serve keeps the limit overrides (package limits) in the store's Redis, or
// in the process without one, and hands the same view to the proxy, the
// HTTP API and cpsguard_limit_cps. The proxy reads and ends carriers'
// pauses for the HTTP API (status, DELETE .../pause). serve keeps the
// pool's list of live calls (calls.Registry) in the same place as the
// overrides, writes the call records (package records; records.* reloads
// with the file, and the records of calls still up are written at
// shutdown before the sinks close), and polls this node's end queue
// (calls.Pool.Run) so another node's API can end its calls.
//
// Exit codes: 0 success, 1 failure (bad configuration, listener error),
// 2 usage error. serve exits 0 after a clean shutdown on SIGINT or SIGTERM;
// SIGHUP reloads the configuration, as does a change of the file. Under
// systemd (Type=notify, $NOTIFY_SOCKET) serve sends READY=1 once its SIP and
// HTTP listeners are bound and STOPPING=1 when SIGTERM starts the drain. A bad
// configuration at start-up is fatal; a bad one on reload is logged and the
// running one stays (see package config).
//
// Subcommands are registered in the commands map; a new one lives in its own
// file and adds itself from an init function.
//
// Built with -tags cpsguardprof (pprof.go), the node also serves
// net/http/pprof under /debug/pprof/ on its HTTP listener: the benchmark
// suite's profiling build (bench/profile.sh), never shipped.
package main
