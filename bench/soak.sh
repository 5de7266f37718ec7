#!/usr/bin/env bash
# Soak (issue 6): two cpsguard nodes sharing one private redis-server, offered
# 3 x the limits for SOAK_SECONDS (default 600 = 10 minutes). Records, per
# node, RSS (VmRSS), goroutines (go_goroutines) and call outcomes, and Redis
# used_memory and DBSIZE, every SOAK_SAMPLE seconds; prints start vs end and
# writes bench/out/soak-<UTC time>.csv. These figures must stay flat.
#
#   bench/soak.sh                          # 10 minutes
#   SOAK_SECONDS=90 bench/soak.sh          # a short proof run
#
# Knobs (environment): SOAK_SECONDS (600), SOAK_SAMPLE (30; 10 for runs under
# 5 min), SOAK_PEER_CPS (40: the peer limit for the pool), SOAK_CARRIER_CPS
# (30: the carrier's pace, max_wait 500ms), SOAK_IDLE (35: seconds after the
# load before the last, idle sample; sipgo's transaction timers are 32 s).
# The load is 3 x SOAK_PEER_CPS in total, half through each node, from
# 127.0.0.2; the carrier is SIPp (uas.xml).
# Everything listens on 127.0.0.1 only; everything started here is stopped on
# exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SOAK_SECONDS=${SOAK_SECONDS:-600}
SOAK_SAMPLE=${SOAK_SAMPLE:-$([ "$SOAK_SECONDS" -lt 300 ] && echo 10 || echo 30)}
PEER_CPS=${SOAK_PEER_CPS:-40}
CARRIER_CPS=${SOAK_CARRIER_CPS:-30}
RATE=$((3 * PEER_CPS / 2)) # per node
CALLS=$((RATE * SOAK_SECONDS))
SOAK_IDLE=${SOAK_IDLE:-35}

for c in redis-server redis-cli sipp curl go; do
  command -v "$c" >/dev/null || { echo "soak: $c not found (./scripts/install-deps.sh)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/cpsguard-soak.XXXXXX)
mkdir -p bench/out
stamp=$(date -u +%Y%m%dT%H%M%SZ)
csv=bench/out/soak-$stamp.csv
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# free_port: a TCP and UDP port on 127.0.0.1 that nobody listens on now.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    ss -Hlntu "( sport = :$p )" | grep -q . || { echo "$p"; return; }
  done
}

echo "soak: building cpsguard" >&2
CGO_ENABLED=0 go build -trimpath -o "$work/cpsguard" ./cmd/cpsguard

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$work" --daemonize no --protected-mode no --loglevel warning \
  --logfile "$work/redis.log" &
pids+=($!)
rcli() { redis-cli -h 127.0.0.1 -p "$redis_port" "$@"; }
for _ in $(seq 50); do rcli ping >/dev/null 2>&1 && break; sleep 0.1; done

carrier_port=$(free_port)
(cd "$work" && exec sipp -nostdin -sf "$OLDPWD/testdata/sipp/uas.xml" -i 127.0.0.1 -p "$carrier_port" \
  >"$work/carrier.out" 2>&1) &
pids+=($!)

declare -A sip http pid
for n in a b; do
  sip[$n]=$(free_port)
  http[$n]=$(free_port)
  cat >"$work/$n.yaml" <<EOF
node_id: soak-$n
sip:
  listen: [udp://127.0.0.1:${sip[$n]}]
  record_route: true
  unknown_source: reject
  reject: {code: 503, reason: CPS Limit Exceeded}
store:
  redis: {addrs: [127.0.0.1:$redis_port], timeout: 50ms}
  key_prefix: soak
  on_error: local
http: {listen: 127.0.0.1:${http[$n]}}
log: {level: warn, format: json}
customers:
  - {name: acme, cps: 100000}
peers:
  - {name: dialer, sources: [127.0.0.2/32], cps: $PEER_CPS, customer: acme, customers: [acme]}
carriers:
  - {name: carrier, uri: "sip:127.0.0.1:$carrier_port", cps: $CARRIER_CPS, max_wait: 500ms}
routes:
  default: [carrier]
EOF
  "$work/cpsguard" serve --config "$work/$n.yaml" 2>"$work/$n.log" &
  pid[$n]=$!
  pids+=("${pid[$n]}")
done
for n in a b; do
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:${http[$n]}/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fs "http://127.0.0.1:${http[$n]}/readyz" >/dev/null || { echo "soak: node $n not ready" >&2; cat "$work/$n.log" >&2; exit 1; }
done

metric() { # metric NODE NAME [LABEL-FILTER]: sum of the series
  curl -fs "http://127.0.0.1:${http[$1]}/metrics" |
    awk -v name="$2" -v f="${3:-}" '$1 == name || index($1, name "{") == 1 { if (f == "" || index($1, f)) s += $2 } END { printf "%d", s }'
}

echo "elapsed_s,node,rss_kb,goroutines,forwarded,rejected,redis_used_memory,redis_dbsize" >"$csv"
sample() { # sample ELAPSED: one row per node
  local mem keys
  mem=$(rcli info memory | awk -F: '/^used_memory:/ { print $2 + 0 }')
  keys=$(rcli dbsize)
  for n in a b; do
    local rss gor fwd all
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/${pid[$n]}/status")
    gor=$(metric "$n" go_goroutines)
    fwd=$(metric "$n" cpsguard_calls_total 'outcome="forwarded"')
    all=$(metric "$n" cpsguard_calls_total)
    echo "$1,$n,$rss,$gor,$fwd,$((all - fwd)),$mem,$keys" >>"$csv"
  done
}

sample 0 # baseline: nodes up, no load yet

echo "soak: ${SOAK_SECONDS}s, peer limit $PEER_CPS cps, carrier $CARRIER_CPS cps, offered $((2 * RATE)) cps ($RATE per node); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
declare -A dialer
for n in a b; do
  (cd "$work" && exec sipp -nostdin -sf "$OLDPWD/testdata/sipp/uac.xml" -i 127.0.0.2 -s 100 \
    -r "$RATE" -m "$CALLS" -l 2000 -recv_timeout 10000 -timeout "$((SOAK_SECONDS + 60))s" \
    -trace_stat -stf "$work/sipp-$n.csv" -fd 5 "127.0.0.1:${sip[$n]}" >"$work/sipp-$n.out" 2>&1) &
  dialer[$n]=$!
  pids+=("${dialer[$n]}")
done

start=$(date +%s)
warm=$((SOAK_SAMPLE < 10 ? SOAK_SAMPLE : 10))
sleep "$warm"
sample "$warm"
next=$((warm + SOAK_SAMPLE))
while :; do
  now=$(($(date +%s) - start))
  if [ "$now" -ge $((SOAK_SECONDS - 2)) ]; then break; fi
  if [ "$now" -ge "$next" ]; then
    sample "$now"
    next=$((next + SOAK_SAMPLE))
  fi
  sleep 1
done
sample "$(($(date +%s) - start))" # end, still under load

rc=0
for n in a b; do
  if ! wait "${dialer[$n]}"; then
    echo "soak: SIPp against node $n exited non-zero" >&2
    rc=1
  fi
done
sleep 2
sample "$(($(date +%s) - start))" # just after the load
sleep "$SOAK_IDLE"
sample "$(($(date +%s) - start))" # idle: timers of the last calls expired

for n in a b; do
  kill -TERM "${pid[$n]}"
  if wait "${pid[$n]}"; then :; else
    echo "soak: node $n exited $? after SIGTERM" >&2
    rc=1
  fi
done

# Report: baseline and first rows under load, the last rows under load, just
# after it and idle.
echo
echo "Soak: ${SOAK_SECONDS}s, 2 nodes, offered $((2 * RATE)) cps (3 x peer limit $PEER_CPS), carrier $CARRIER_CPS cps"
awk -F, 'NR > 1 { rows[++n] = $0 }
  END {
    printf "%-10s %-5s %9s %11s %10s %10s %14s %7s\n", "elapsed_s", "node", "rss_kb", "goroutines", "forwarded", "rejected", "redis_used_mem", "dbsize"
    for (i = 1; i <= n; i++) {
      if (i <= 4 || i > n - 6) { split(rows[i], f, ","); printf "%-10s %-5s %9s %11s %10s %10s %14s %7s\n", f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8] }
      else if (i == 5) print "..."
    }
  }' "$csv"
echo
for n in a b; do
  awk -F';' 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next } { last = $0 }
    END { split(last, v, ";"); printf "SIPp via node %s: created %s, successful %s, failed %s (timeouts %s, unexpected %s)\n",
      n, v[h["TotalCallCreated"]], v[h["SuccessfulCall(C)"]], v[h["FailedCall(C)"]], v[h["FailedTimeoutOnRecv(C)"]], v[h["FailedUnexpectedMessage(C)"]] }' \
    n="$n" "$work/sipp-$n.csv"
done
echo "CSV: $csv"
exit $rc
