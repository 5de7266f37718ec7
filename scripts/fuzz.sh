#!/usr/bin/env bash
# Runs every fuzz target of the product module for a short, bounded budget
# each: FUZZTIME, default 20000x (executions, not seconds; 2-15 s each on a
# 2-core box). bench/ is a module of its own (bench/go.mod)
# that `go test` from here cannot reach, and has no fuzz targets. Seeds in
# testdata/fuzz/ run as plain tests in `go test` anyway; this adds fresh
# inputs on every `make test`.
# A failing input is written to testdata/fuzz/<Target>/ by go test: commit it.
#
# Why a count and not a duration: with a duration (-fuzztime 3s) Go up to
# 1.26 can fail a target at the deadline with a bare "context deadline
# exceeded" and no input, a race in its fuzzing coordinator
# (https://go.dev/issue/75804, fixed in Go 1.27). On a busy CI machine it
# hit the same target twice in a row. A count has no deadline to race.
# A duration still works (make fuzz FUZZTIME=1m); the rerun below absorbs
# that race there.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-20000x}"
# go test's own limit, so a target that hangs fails instead of stalling CI.
timeout="${FUZZTIMEOUT:-10m}"
# Targets run FUZZJOBS at a time (default: the number of CPUs, at most 4),
# each with one fuzzing worker (-parallel 1): the same executions per
# second as one target with a worker per CPU, but the per-target build,
# start and corpus load overlap (on a 2-core CI box this halves the
# script's wall time). Each target's output is printed when it ends.
jobs="${FUZZJOBS:-$(nproc 2>/dev/null || echo 1)}"
[ "$jobs" -gt 4 ] && jobs=4
[ "$jobs" -lt 1 ] && jobs=1
parallel=""
[ "$jobs" -gt 1 ] && parallel="-parallel 1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fuzz_one PKG NAME: runs one target, and again when it fails (below);
# writes its report to $tmp/NAME.out and exits 1 on a real failure.
fuzz_one() {
  local pkg=$1 name=$2 out="$tmp/$2.out"
  # shellcheck disable=SC2086 # $parallel is one or no flag
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -timeout "$timeout" $parallel "$pkg" >"$tmp/$name.1" 2>&1; then
    # A real failure saves its input under testdata/fuzz/, which the rerun
    # replays as a seed and fails on again. The engine's deadline race
    # (above; durations only) saves nothing and passes on the rerun: it is
    # reported, not counted.
    # shellcheck disable=SC2086
    if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -timeout "$timeout" $parallel "$pkg" >"$tmp/$name.2" 2>&1; then
      { echo "fuzz: $pkg $name failed once without a reproducible input and passed on a rerun:"
        grep -m3 -E 'FAIL|deadline|hung' "$tmp/$name.1" || true; } >"$out"
    else
      cat "$tmp/$name.2" >"$out"
      return 1
    fi
  fi
}

status=0
running=0
while IFS=: read -r file _ line; do
  name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$line")
  pkg="$(dirname "$file")"
  echo "fuzz: $pkg $name ($fuzztime)"
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  fuzz_one "$pkg" "$name" &
  running=$((running + 1))
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . | grep -v '^./bench/' | sort)
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
cat "$tmp"/*.out 2>/dev/null || true
exit $status
