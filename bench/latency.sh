#!/usr/bin/env bash
# Experiment 3 (issue 7): added latency at 1,000 CPS (non-binding limits).
# A Go caller stamps each INVITE as it sends it; the 100 Trying (caller) and
# the forwarded INVITE (measuring carrier) are stamped by the kernel on
# receipt, all on one clock. Systems: direct (caller -> carrier, the harness
# floor), cpsguard (Redis store), Kamailio stateful relay. 3 runs, medians.
#   bench/latency.sh [-runs 3] [-rate 1000] [-seconds 5]
# Out: bench/out/latency.csv, bench/out/latency/*/calls.csv
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server kamailio:kamailio
build_tools
run_bench latency "$@"
