#!/usr/bin/env bash
# Runs every fuzz target of the project (bench/ excepted) for a short,
# bounded time each: FUZZTIME (default 3s). Seeds in testdata/fuzz/ run as
# plain tests in `go test` anyway; this adds fresh inputs on every `make test`.
# A failing input is written to testdata/fuzz/<Target>/ by go test: commit it.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-3s}"
status=0
while IFS=: read -r file _ line; do
  name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$line")
  pkg="$(dirname "$file")"
  echo "fuzz: $pkg $name ($fuzztime)"
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/cpsguard-fuzz.$$ 2>&1; then
    cat /tmp/cpsguard-fuzz.$$
    status=1
  fi
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . | grep -v '^./bench/' | sort)
rm -f /tmp/cpsguard-fuzz.$$
exit $status
