# Shared by the bench/*.sh experiment scripts (sourced, not run).
# Installs what a benchmark needs when missing (never from `make test`),
# builds cpsguard and the bench tools into bench/out/bin, and runs one
# cpsbench subcommand. Everything listens on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_pkgs() { # need_pkgs cmd:pkg ...
  local missing=()
  for cp in "$@"; do
    command -v "${cp%%:*}" >/dev/null 2>&1 || missing+=("${cp##*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "bench: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # policy-rc.d keeps packages from starting system-wide daemons
  # (kamailio, redis-server); the benchmarks start their own.
  if [ -z "$sudo" ] && [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_tools() {
  mkdir -p bench/out/bin
  # bench/ is its own module (bench/go.mod, the product through a replace
  # directive), so its commands build from inside it.
  (cd bench && go build -o out/bin/cpsbench ./cmd/cpsbench && go build -o out/bin/sink ./cmd/sink)
  # The node under test: this working tree; if it does not build (another
  # change in progress), the last commit.
  if ! CGO_ENABLED=0 go build -trimpath -o bench/out/bin/cpsguard ./cmd/cpsguard 2>bench/out/build.log; then
    echo "bench: working tree does not build (bench/out/build.log); benchmarking HEAD" >&2
    rm -rf bench/out/head && mkdir -p bench/out/head
    git archive HEAD | tar -x -C bench/out/head
    (cd bench/out/head && CGO_ENABLED=0 go build -trimpath -o ../bin/cpsguard ./cmd/cpsguard)
  fi
  echo "bench: cpsguard at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench' 2>/dev/null || echo '+dirty'); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}

run_bench() { # run_bench SUBCOMMAND [flags...]
  exec bench/out/bin/cpsbench "$@"
}
