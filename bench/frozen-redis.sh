#!/usr/bin/env bash
# Frozen Redis: how long one call waits when Redis hangs (SIGSTOP) right
# after it answered a call, so the node has not switched to its fallback
# yet (it switches after 5 x store.redis.timeout without an answer). The
# contract: a Redis call never blocks a call longer than
# store.redis.timeout (50 ms here). Each run: a node on a private
# redis-server with a SIPp carrier; one call with Redis up, then Redis
# frozen and one more call, timed from INVITE to its final answer.
#
#   bench/frozen-redis.sh                       # this tree, 3 runs
#   CPSGUARD=/path/to/cpsguard RUNS=5 bench/frozen-redis.sh
#
# Everything listens on 127.0.0.1 (ports 25060, 25070, 25081, 26379,
# 29060) and everything started here is stopped on exit.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_pkgs redis-server:redis-server sipp:sip-tester python3:python3
if [ -z "${CPSGUARD:-}" ]; then
  build_tools
  CPSGUARD=bench/out/bin/cpsguard
fi
RUNS=${RUNS:-3}
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
cat >"$dir/cfg.yaml" <<'YAML'
node_id: frozen-1
sip:
  listen: [udp://127.0.0.1:25060]
  dialog_secret: "0123456789abcdef0123456789abcdef"
store:
  key_prefix: frozen
  on_error: local
  redis: {addrs: ["127.0.0.1:26379"], timeout: 50ms}
http: {listen: 127.0.0.1:29060}
log: {level: warn}
peers:
  - {name: dialer-1, sources: [127.0.0.1/32], cps: 50, customer: acme, customers: [acme]}
customers:
  - {name: acme, cps: 50, max_calls: 100}
carriers:
  - {name: carrier-a, uri: "sip:127.0.0.1:25070", cps: 100, max_wait: 2s, max_calls: 100}
routes:
  default: [carrier-a]
YAML
for run in $(seq "$RUNS"); do
  pids=()
  redis-server --port 26379 --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
  rp=$!; pids+=("$rp")
  sleep 0.3
  "$CPSGUARD" serve --config "$dir/cfg.yaml" >"$dir/node.log" 2>&1 &
  pids+=("$!")
  sipp -sn uas -i 127.0.0.1 -p 25070 -nostdin >/dev/null 2>&1 &
  pids+=("$!")
  sleep 1
  python3 - "$rp" <<'PY'
import os, signal, socket, sys, time, uuid
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 25081))
s.settimeout(5)
def call(freeze):
    cid = uuid.uuid4().hex
    inv = ("INVITE sip:1000@127.0.0.1:25060 SIP/2.0\r\n"
           "Via: SIP/2.0/UDP 127.0.0.1:25081;branch=z9hG4bK" + cid + "\r\nMax-Forwards: 70\r\n"
           "From: <sip:a@127.0.0.1>;tag=t" + cid[:6] + "\r\nTo: <sip:1000@127.0.0.1>\r\n"
           "Call-ID: " + cid + "\r\nCSeq: 1 INVITE\r\nContact: <sip:a@127.0.0.1:25081>\r\nContent-Length: 0\r\n\r\n")
    if freeze:
        os.kill(int(sys.argv[1]), signal.SIGSTOP)
    t = time.time()
    s.sendto(inv.encode(), ("127.0.0.1", 25060))
    while True:
        d, _ = s.recvfrom(65535)
        line = d.split(b"\r\n", 1)[0].decode()
        if not line.startswith("SIP/2.0 1"):
            return line, (time.time() - t) * 1000
up, frozen = call(False), call(True)
print("redis up: %s in %.1f ms; frozen: %s in %.1f ms" % (up[0], up[1], frozen[0], frozen[1]))
PY
  cleanup_run() { for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
  cleanup_run
done
