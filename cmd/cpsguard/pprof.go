//go:build cpsguardprof

package main

// The profiling build of the node, for the benchmark suite only
// (bench/profile.sh):
//
//	go build -tags cpsguardprof -o bench/out/bin/cpsguard-prof ./cmd/cpsguard
//
// is `cpsguard` with net/http/pprof under /debug/pprof/ on the HTTP
// listener, beside the operations API and outside its token check. The
// product build (no tag) links none of it.

import (
	"net/http"
	"net/http/pprof"
)

func init() { httpHandler = withPprof }

// withPprof serves /debug/pprof/ and hands every other path to api. A CPU
// profile or trace must be shorter than the server's WriteTimeout
// (httpapi.NewServer, 30 s).
func withPprof(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and the named profiles: heap, allocs, goroutine, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", api)
	return mux
}
