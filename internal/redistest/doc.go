// Package redistest starts private redis-server processes for tests: one
// server (Start, StartOnPort), one that also serves TLS with a test PKI
// (NewTLSFiles, StartTLS), a proxy that delays every byte to one (Delayed), a
// Redis Cluster (StartCluster), a master with replicas and sentinels
// (StartSentinel), and a hostile fake Redis whose replies no client can hold
// (StartHostile). Require finds any tool a test needs (redis-server,
// redis-cli, kamailio, ...) on PATH or in the sbin directories.
//
// Every server listens on a free loopback port, keeps nothing on disk and is
// stopped when the test ends. Tests never talk to a Redis they did not start.
//
// Failure: the helpers report through the testing.TB they are given, not by
// errors. When a tool is missing (Require: redis-server, redis-cli) the test
// is skipped, except under CI=true, where a missing component is a failure
// (t.Fatalf). A server that exits at start or does not answer PING within
// 10 s fails the test with the tail of its log (Start tries 5 free ports
// first); so does a cluster that is not ok, or a replica not in sync, within
// 30 s. Server.CLI alone returns an error (redis-cli missing or failing),
// with its output, for the test to judge.
//
// The helpers are safe for concurrent use by parallel tests.
package redistest
