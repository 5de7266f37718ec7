#!/usr/bin/env bash
# Experiment 2 (issue 7): throughput. Non-binding limits; a SIPp ramp
# (-buff_size 4194304, UAS without 180) through cpsguard (Redis store) and
# through the Kamailio stateful relay; the highest CPS with every call
# completed and no retransmissions; 3 runs, median and ratio reported.
#   bench/throughput.sh [-runs 3] [-rates 500,1000,...] [-seconds 5]
# Out: bench/out/throughput.csv, bench/out/throughput-steps.csv
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server kamailio:kamailio sipp:sip-tester
build_tools
run_bench throughput "$@"
