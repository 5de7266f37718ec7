#!/usr/bin/env bash
# Regenerates docs/img/dashboard.png from a live run (not part of make test;
# about five minutes):
#
#   1. builds cpsguard and starts it on the example configuration
#      (testdata/cpsguard.yaml), its ports moved to SIP_PORT, CARRIER_A_PORT,
#      CARRIER_B_PORT and HTTP_PORT;
#   2. starts the two SIPp carriers of the README's walkthrough and a private
#      Prometheus (PROM_PORT, a temporary data directory, 1 s scrapes) that
#      scrapes the node and nothing else;
#   3. offers a SIPp load in three phases of PHASE seconds: dialer-1 within
#      its customer's limit, then over it (CPS refusals, carrier-a full, calls
#      moving to carrier-b), then with carrier-a answering 503 (reroutes, then
#      carrier-a down); dialer-2 (127.0.0.2) over its burst all along;
#   4. draws the dashboard's panels (deploy/grafana/cpsguard.json) from that
#      Prometheus with scripts/dashboard (Grafana is not in Debian), and
#      screenshots the page with headless Chromium.
#
# Needs sipp, chromium (apt-get install chromium) and Go; Prometheus is taken
# from PATH, or else extracted from Debian's prometheus package into the
# temporary directory (no service is installed or started).
set -euo pipefail
cd "$(dirname "$0")/.."

SIP_PORT=${SIP_PORT:-25060}
CARRIER_A_PORT=${CARRIER_A_PORT:-25070}
CARRIER_B_PORT=${CARRIER_B_PORT:-25071}
HTTP_PORT=${HTTP_PORT:-29060}
PROM_PORT=${PROM_PORT:-29090}
PHASE=${PHASE:-75}
OUT=${OUT:-docs/img/dashboard.png}
case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac

for tool in sipp chromium go curl; do
  command -v "$tool" >/dev/null || { echo "dashboard-screenshot: $tool not found" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# --- cpsguard on the example configuration, ports moved
go build -o "$work/cpsguard" ./cmd/cpsguard
sed -e "s/127\.0\.0\.1:5060/127.0.0.1:$SIP_PORT/g" \
    -e "s/127\.0\.0\.1:5070/127.0.0.1:$CARRIER_A_PORT/g" \
    -e "s/127\.0\.0\.1:5071/127.0.0.1:$CARRIER_B_PORT/g" \
    -e "s/127\.0\.0\.1:9060/127.0.0.1:$HTTP_PORT/g" \
    testdata/cpsguard.yaml >"$work/cpsguard.yaml"

# --- Prometheus: from PATH, or out of Debian's package
prometheus=$(command -v prometheus || true)
if [ -z "$prometheus" ]; then
  sandbox=()
  [ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root)
  (cd "$work" && apt-get "${sandbox[@]}" download -qq prometheus >/dev/null)
  dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$work" ./usr/bin/prometheus
  prometheus=$work/usr/bin/prometheus
fi
cat >"$work/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: cpsguard
    static_configs: [{targets: ["127.0.0.1:$HTTP_PORT"]}]
EOF

sipp_carrier() { # scenario port [-t t1]
  "$(command -v sipp)" -sf "testdata/sipp/$1" -i 127.0.0.1 -p "$2" "${@:3}" -nostdin >/dev/null 2>&1 &
  echo $!
}

carrier_a=$(sipp_carrier uas.xml "$CARRIER_A_PORT"); pids+=("$carrier_a")
carrier_b=$(sipp_carrier uas.xml "$CARRIER_B_PORT" -t t1); pids+=("$carrier_b")
"$work/cpsguard" serve --config "$work/cpsguard.yaml" >"$work/cpsguard.log" 2>&1 & pids+=($!)
"$prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$work/prometheus.log" 2>&1 & pids+=($!)

for _ in $(seq 50); do
  "$work/cpsguard" probe --addr "127.0.0.1:$HTTP_PORT" 2>/dev/null && break
  sleep 0.2
done
"$work/cpsguard" probe --addr "127.0.0.1:$HTTP_PORT"
start=$(date +%s)
sleep 10 # a quiet start: every series at 0

dialer() { # source-ip rate calls
  sipp -sf testdata/sipp/uac.xml -i "$1" -s 100 -r "$2" -m "$3" "127.0.0.1:$SIP_PORT" -nostdin >/dev/null 2>&1
}

echo "dashboard-screenshot: load for $((3 * PHASE)) s" >&2
dialer 127.0.0.2 8 $((3 * PHASE * 8)) & pids+=($!)  # dialer-2 over its burst: initech refuses
dialer 127.0.0.1 15 $((PHASE * 15))                  # dialer-1 within acme's 20 CPS
dialer 127.0.0.1 30 $((PHASE * 30))                  # over it: refusals, carrier-a full
kill "$carrier_a"; wait "$carrier_a" 2>/dev/null || true
carrier_a=$(sipp_carrier uas_503.xml "$CARRIER_A_PORT"); pids+=("$carrier_a")
dialer 127.0.0.1 15 $((PHASE * 15))                  # carrier-a answers 503: reroutes, then down
end=$(date +%s)
sleep 5 # the last scrapes

go run ./scripts/dashboard --prometheus "http://127.0.0.1:$PROM_PORT" --from "$start" --to "$end" \
  --step 2s --rate-interval 10s --width 1600 --out "$work/dashboard.html" \
  --title "A live run: testdata/cpsguard.yaml under SIPp load (scripts/dashboard-screenshot.sh)" >"$work/height"
height=$(cat "$work/height")

mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
if ! chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size="1600,$height" --screenshot="$OUT" "file://$work/dashboard.html" >"$work/chromium.log" 2>&1 ||
  [ ! -s "$OUT" ]; then
  cat "$work/chromium.log" >&2
  echo "dashboard-screenshot: chromium wrote no $OUT" >&2
  exit 1
fi
[ -n "${KEEP_HTML:-}" ] && cp "$work/dashboard.html" "$KEEP_HTML"
echo "dashboard-screenshot: wrote $OUT (1600x$height)" >&2
