#!/usr/bin/env bash
# Installs what the test suite needs when it is missing: redis-server, SIPp
# (Debian's sip-tester), Kamailio (the interop test runs it in front of a
# node), baresip (Debian's baresip-core: a softphone calling through a node
# and one answering as its carrier), openssl (a TLS client test), gcc and
# the C library's headers (go test -race needs cgo, which Go turns off
# without a C compiler) and promtool (the alert rules, their unit tests and
# the dashboard's PromQL are checked with it). Safe to run repeatedly; does
# nothing when all is there.
#
# It never starts a service: Debian starts a package's service when it
# installs it (redis-server on :6379, prometheus on :9090, cpsguard's
# default http.listen, which a node then cannot bind). So:
#   * /usr/sbin/policy-rc.d answers 101 ("not allowed") while apt-get runs,
#     as root and under sudo alike, and is removed afterwards (a policy-rc.d
#     that was already there is left alone);
#   * promtool is taken out of Debian's prometheus package (apt-get download,
#     dpkg-deb) and installed alone in /usr/local/bin: the Prometheus server,
#     its user and its systemd unit are never installed.
# POLICY_RC_D and PROMTOOL_DIR move those two paths (for the script's test).
set -euo pipefail

policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}
promdir=${PROMTOOL_DIR:-/usr/local/bin}

# have NAME: on PATH, or in an sbin directory. Debian installs kamailio in
# /usr/sbin, which an ordinary user's PATH lacks; the tests look there too
# (internal/redistest.Require). SBIN_DIRS moves them (for the script's test).
sbin_dirs=${SBIN_DIRS:-/usr/local/sbin /usr/sbin /sbin}
have() {
  command -v "$1" >/dev/null 2>&1 && return 0
  local d
  for d in $sbin_dirs; do
    [ -x "$d/$1" ] && return 0
  done
  return 1
}

need=()
have redis-server || need+=(redis-server)
have redis-cli || need+=(redis-tools)
have sipp || need+=(sip-tester)
have kamailio || need+=(kamailio)
have baresip || need+=(baresip-core)
have openssl || need+=(openssl)
have gcc || need+=(gcc libc6-dev)
want_promtool=0
have promtool || want_promtool=1

if [ ${#need[@]} -eq 0 ] && [ $want_promtool -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${need[*]}$([ $want_promtool -eq 1 ] && echo ' promtool')" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: need root (or sudo) to apt-get install ${need[*]} promtool" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive

tmp=$(mktemp -d)
cleanup() {
  rm -rf "$tmp"
  if [ -n "${made_policy:-}" ]; then
    $sudo rm -f "$policy"
  fi
}
trap cleanup EXIT

if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# install-deps.sh: no service starts while it installs packages\nexit 101\n' >"$tmp/policy-rc.d"
  $sudo install -m 0755 "$tmp/policy-rc.d" "$policy"
  made_policy=1
fi

$sudo apt-get update -qq
if [ ${#need[@]} -gt 0 ]; then
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ $want_promtool -eq 1 ]; then
  # apt-get download needs no root: the .deb lands in the current directory
  # (as root, apt's sandbox user could not write to this private one).
  sandbox=()
  [ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root)
  (cd "$tmp" && apt-get "${sandbox[@]}" download -qq prometheus >/dev/null)
  deb=$(ls "$tmp"/prometheus_*.deb)
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" ./usr/bin/promtool
  $sudo install -m 0755 "$tmp/usr/bin/promtool" "$promdir/promtool"
fi
