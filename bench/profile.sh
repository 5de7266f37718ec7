#!/usr/bin/env bash
# Profile of the per-call path (issue 7, "Optimise"): the node built with
# net/http/pprof (cmd/cpsguard with -tags cpsguardprof, never shipped) on a
# private Redis, SIPp at 2,000 CPS with non-binding limits; a 10 s CPU
# profile and the allocations over the same 10 s; then a heap profile and
# the goroutine count with 10,000 calls queued for slots.
#   bench/profile.sh [-rate 2000] [-seconds 20] [-node-gogc 400]
# Out: bench/out/profile/*.pb.gz and *-top.txt (go tool pprof -top)
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server sipp:sip-tester
build_tools
# The node under test as lib.sh builds it, plus /debug/pprof/ (pprof.go).
CGO_ENABLED=0 go build -trimpath -tags cpsguardprof -o bench/out/bin/cpsguard-prof ./cmd/cpsguard
run_bench profile "$@"
