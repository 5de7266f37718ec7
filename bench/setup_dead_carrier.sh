#!/usr/bin/env bash
# Issue 12: call setup time when the first carrier of the route is down
# (nothing listens on its port). N calls one after another (SIPp -l 1) from
# a peer to one node whose route is [dead, live]; the wall time over N is
# the setup time each call pays for the dead carrier.
#   BIN=path/to/cpsguard bench/setup_dead_carrier.sh [calls] [wait]
# wait=probe (default when the build probes carriers): first wait until the
# node's probes mark the dead carrier down (cpsguard_carrier_up 0) and say
# how long that took, then place the calls; wait=none: place them at once
# (the first calls then pay setup_timeout until passive detection marks it
# down after down_after of them).
# Loopback only; bounded by the call count.
set -euo pipefail
calls=${1:-5}
wait=${2:-probe}
bin=${BIN:-}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
if [ -z "$bin" ]; then
  bin=$dir/cpsguard
  (cd "$(dirname "$0")/.." && CGO_ENABLED=0 go build -o "$bin" ./cmd/cpsguard)
fi
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sip=$(free); http=$(free); live=$(free); dead=$(free)
cat >"$dir/c.yaml" <<YAML
sip: {listen: ["udp://127.0.0.1:$sip"]}
http: {listen: "127.0.0.1:$http"}
log: {level: warn}
peers: [{name: dialer, sources: [127.0.0.1/32], cps: 100}]
carriers:
  - {name: dead, uri: "sip:127.0.0.1:$dead", cps: 100, max_wait: 1s}
  - {name: live, uri: "sip:127.0.0.1:$live", cps: 100, max_wait: 1s}
routes: {default: [dead, live]}
YAML
"$bin" serve --config "$dir/c.yaml" >"$dir/node.log" 2>&1 &
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$http/readyz" >/dev/null && break; sleep 0.1; done
sipp -sf "$(dirname "$0")/sipp/uas.xml" -i 127.0.0.1 -p "$live" >/dev/null 2>&1 &
sleep 0.3
if [ "$wait" = probe ]; then
  t0=$(date +%s.%N)
  for _ in $(seq 300); do
    curl -fs "http://127.0.0.1:$http/metrics" | grep -q '^cpsguard_carrier_up{carrier="dead"} 0' && break
    sleep 0.1
  done
  if curl -fs "http://127.0.0.1:$http/metrics" | grep -q '^cpsguard_carrier_up{carrier="dead"} 0'; then
    python3 -c "print(f'dead carrier marked down {$(date +%s.%N)-$t0:.1f}s after the node was ready')"
  else
    echo "dead carrier not marked down within 30 s (a build without probing?)"
  fi
fi
start=$(date +%s.%N)
sipp -sf "$(dirname "$0")/sipp/uac.xml" -i 127.0.0.1 -l 1 -m "$calls" -r 10 -timeout 120 -timeout_error -trace_err -error_file "$dir/err.log" "127.0.0.1:$sip" >"$dir/uac.log" 2>&1 || { echo "sipp failed"; tail -20 "$dir/uac.log"; exit 1; }
end=$(date +%s.%N)

python3 -c "print(f'calls={$calls} total={$end-$start:.2f}s per_call={($end-$start)/$calls:.2f}s')"
