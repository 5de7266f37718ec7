#!/usr/bin/env bash
# Experiment 5 (issue 7): admission decisions per second, the store alone.
# admit.lua on one 100 CPS bucket of a private Redis, with 1, 64 and 256
# concurrent callers: admission.RedisStore (product client) vs raw go-redis
# EVALSHA vs redis-benchmark of the same EVALSHA (-P 1 and -P 16), in one run.
#   bench/decisions.sh [-runs 3] [-seconds 3] [-callers 1,64,256]
# Out: bench/out/decisions.csv, bench/out/decisions-runs.csv
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server redis-benchmark:redis-tools
build_tools
run_bench decisions "$@"
