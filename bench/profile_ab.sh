#!/usr/bin/env bash
# A/B of two profiling builds of the node under bench/profile.sh's load
# (cpsbench profile: SIPp at -rate CPS for 20 s through the node on a
# private Redis, a 10 s CPU profile from 4 s in), alternating A and B,
# with the node's exact allocation counters (runtime.MemStats from
# /debug/pprof/allocs?debug=1) sampled 10 s apart during the load.
#   bench/profile_ab.sh A-BIN B-BIN [rate 1000] [rounds 2]
# Build the bins with: CGO_ENABLED=0 go build -trimpath -tags cpsguardprof
# -o bench/out/bin/cpsguard-prof-X ./cmd/cpsguard (in a checkout of X).
# Out: bench/out/ab-<A|B>-<round>/ (profiles, logs) and one summary per run.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1 B=$2 RATE=${3:-1000} ROUNDS=${4:-2}
(cd bench && go build -o out/bin/cpsbench ./cmd/cpsbench && go build -o out/bin/sink ./cmd/sink)
memstat() { curl -s "http://$1/debug/pprof/allocs?debug=1" | awk '/^# (TotalAlloc|Mallocs) = /{printf "%s ", $4}'; }
for i in $(seq 1 "$ROUNDS"); do
  for v in A B; do
    bin=$A; [ $v = B ] && bin=$B
    out=bench/out/ab-$v-$i
    rm -rf "$out"; mkdir -p "$out"
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    bench/out/bin/cpsbench profile -runs 1 -rate "$RATE" -queued 0 -prof-bin "$bin" -out "$out" >"$out/stdout.txt" 2>&1 &
    bp=$!
    y=$out/profile/node/cpsguard.yaml
    for _ in $(seq 100); do [ -s "$y" ] && grep -q '^http:' "$y" && break; sleep 0.1; done
    http=$(awk '/^http:/{f=1} f&&/listen:/{print $2; exit}' "$y")
    sleep 5; m0=$(memstat "$http"); sleep 10; m1=$(memstat "$http")
    wait $bp
    read -r ta0 ma0 <<<"$m0"; read -r ta1 ma1 <<<"$m1"
    echo "== $v ($bin) round $i, load $load0 -> $(cut -d' ' -f1-3 /proc/loadavg)"
    grep -E '^profile:' "$out/stdout.txt"
    grep -h 'Total samples' "$out/profile/cpu-top.txt"
    awk -v ta=$((ta1 - ta0)) -v ma=$((ma1 - ma0)) -v c=$((RATE * 10)) \
      'BEGIN{printf "node allocations over 10 s: %.1f KB and %.0f objects per call offered\n", ta/c/1024, ma/c}'
  done
done
