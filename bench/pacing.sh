#!/usr/bin/env bash
# Experiment 4 (issue 7): pacing precision. One carrier at 50 CPS
# (max_wait 2s), offered 100 CPS for 10 s through cpsguard (Redis store).
# At the carrier: inter-arrival times vs 1/cps, the most calls in a sliding
# second, and the lateness of each INVITE vs its slot (the slot scores are
# read from the carrier's sorted set in Redis while the run goes on; Redis
# TIME and the kernel stamps share CLOCK_REALTIME). 3 runs, medians.
#   bench/pacing.sh [-runs 3] [-cps 50] [-offered 100] [-seconds 10]
# Out: bench/out/pacing.csv, bench/results/pacing-*.png
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server
build_tools
run_bench pacing "$@"
