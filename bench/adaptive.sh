#!/usr/bin/env bash
# Issue 12: an adaptive carrier (AIMD). Runs the e2e test in which a carrier
# that refuses (503) calls above 20 in any second is configured and offered
# at 40 CPS for 30 s (SIPp caller, sipgo carrier, real Redis, all loopback),
# records its curve, and plots it.
#   bench/adaptive.sh
# Out: bench/out/adaptive.csv, bench/results/adaptive-carrier.png
source "$(dirname "$0")/lib.sh"
need_pkgs redis-server:redis-server sipp:sip-tester
build_tools
mkdir -p bench/out
CPSGUARD_ADAPTIVE_SECONDS=30 CPSGUARD_ADAPTIVE_CSV="$PWD/bench/out/adaptive.csv" go test -count=1 -v \
  -run '^TestE2EAdaptiveCarrierSettlesUnderItsLimit$' ./sip/ | grep -E 'effective cps|^(--- |ok|FAIL)'
run_bench adaptive -csv bench/out/adaptive.csv
