#!/usr/bin/env bash
# Experiment 1 (issue 7): accuracy. 3 x a 100 CPS limit for 10 s through
# cpsguard (Redis store, private redis-server) and through Kamailio
# pipelimit (TAILDROP 100, timer_interval 1); at the carrier: the most calls
# in any sliding 1 s window, CPS, utilisation. 3 runs each, median reported.
# -pattern onoff offers the same rate in 1 s bursts every 2.3 s instead,
# which exposes fixed-interval limiters (pipelimit's timer tick).
#   bench/accuracy.sh [-runs 3] [-limit 100] [-seconds 10] [-pattern onoff]
# Out: bench/out/accuracy*.csv, bench/results/accuracy*-sliding-window.png
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server kamailio:kamailio
build_tools
run_bench accuracy "$@"
