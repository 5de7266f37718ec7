#!/usr/bin/env bash
# Experiment 6 (issue 7): memory. cpsguard's RSS idle and with 10,000 calls
# queued for slots (a 1 CPS carrier, max_wait 4h, calls offered at 2,000
# CPS); Redis MEMORY USAGE of one admission bucket holding a full window and
# of one carrier's slot set holding 1 s of slots, at 100 and 10,000 CPS.
#   bench/memory.sh [-runs 3] [-queued 10000]
# Out: bench/out/memory.csv
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server
build_tools
run_bench memory "$@"
