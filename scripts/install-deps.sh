#!/usr/bin/env bash
# Installs what the test suite needs when it is missing: redis-server, SIPp
# (Debian's sip-tester), Kamailio (the interop test runs it in front of a
# node) and promtool (Debian's prometheus: the alert rules,
# their unit tests and the dashboard's PromQL are checked with it). Safe to run repeatedly; does nothing when all is there.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v sipp >/dev/null 2>&1 || need+=(sip-tester)
command -v kamailio >/dev/null 2>&1 || need+=(kamailio)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${need[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: need root (or sudo) to apt-get install ${need[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# policy-rc.d keeps the packages from starting a system-wide redis-server on
# :6379 or kamailio on :5060; the tests start their own private instances.
if [ -z "$sudo" ] && [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
