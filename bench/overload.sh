#!/usr/bin/env bash
# Issue 15: overload. One node on Redis (on_error: reject, store.redis.timeout
# 50ms), a SIPp caller offering 10,000 CPS for 3 s and a SIPp carrier, then a
# normal second (1,000 CPS). Reports whether cpsguard_store_up stayed 1, the
# share of calls that got a final answer (200 or 503) and whether the next
# second was served. Bounded: 31,000 calls and about 30 s per run.
#   bench/overload.sh [-runs 3] [-rate 10000] [-seconds 3] [-cpsguard BIN]
# Out: bench/out/overload.csv, bench/out/overload/run-N/ (logs, metrics)
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server sipp:sip-tester
build_tools
run_bench overload "$@"
