#!/bin/sh
# weft-train's live metrics ([train] metrics): the page parses as Prometheus' text format
# (promtool check metrics), and a real Prometheus on loopback scrapes it: its HTTP API
# returns the run's series. SKIP (77) where Debian's prometheus package is not installed.
#   usage: train-metrics.sh BUILD_DIR SOURCE_ROOT
set -eu
build=$(cd "$1" && pwd)
root=$(cd "$2" && pwd)
train="$build/apps/weft-train"
command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v curl >/dev/null ||
    { echo "train-metrics: prometheus, promtool or curl is not installed (make deps): SKIP"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-metrics.XXXXXX")
pids=""
trap 'rc=$?; set +e; for p in $pids; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; exit $rc' EXIT INT TERM
fail() { echo "train-metrics: $*"; cat "$tmp"/*.txt 2>/dev/null | tail -20; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
pport=$(free_port)

# A run that outlasts the test on any machine (50 epochs took 6 s on a quiet one, less than
# Prometheus' start): the exit trap stops it once Prometheus has the series.
"$train" "$root/configs/mnist-mlp.ini" --set train.epochs=100000 --set train.checkpoint="$tmp/m.safetensors" \
    --set train.log="$tmp/log.csv" --set train.metrics="127.0.0.1:$port" >"$tmp/train.txt" 2>&1 &
pids="$!"
i=0
until curl -sf "http://127.0.0.1:$port/metrics" -o "$tmp/page" && grep -q '^weft_train_loss ' "$tmp/page"; do
    i=$((i + 1)); [ "$i" -lt 300 ] || fail "no metrics page with a loss after 30 s"; sleep 0.1
done
promtool check metrics <"$tmp/page" >"$tmp/promtool.txt" 2>&1 || fail "promtool check metrics refused the page"
for s in weft_train_loss weft_train_learning_rate weft_train_throughput_per_second weft_train_step \
         weft_train_epoch weft_train_eta_seconds 'weft_memory_allocated_bytes{device="cpu"}' \
         'weft_memory_reserved_bytes{device="cpu"}' 'weft_memory_peak_allocated_bytes{device="cpu"}' \
         weft_dataloader_queue_depth weft_dataloader_wait_seconds_total; do
    grep -qF "$s " "$tmp/page" || fail "the page has no $s"
done
curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/other" | grep -qx 404 || fail "/other is not a 404"

cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: weft
    static_configs:
      - targets: ["127.0.0.1:$port"]
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address="127.0.0.1:$pport" >"$tmp/prometheus.txt" 2>&1 &
pids="$pids $!"
i=0
until curl -sf "http://127.0.0.1:$pport/api/v1/query?query=weft_train_step" -o "$tmp/q.json" &&
      /usr/bin/python3 -c 'import json,sys; r = json.load(open(sys.argv[1]))["data"]["result"]; sys.exit(0 if r and float(r[0]["value"][1]) > 0 else 1)' "$tmp/q.json"; do
    i=$((i + 1)); [ "$i" -lt 200 ] || fail "Prometheus did not scrape weft_train_step in 20 s"; sleep 0.1
done
curl -sf "http://127.0.0.1:$pport/api/v1/query?query=weft_memory_allocated_bytes" -o "$tmp/m.json" ||
    fail "query failed"
/usr/bin/python3 - "$tmp/q.json" "$tmp/m.json" <<'PY' || fail "Prometheus' answers"
import json, sys
step = json.load(open(sys.argv[1]))["data"]["result"][0]
mem = json.load(open(sys.argv[2]))["data"]["result"]
assert step["metric"]["job"] == "weft", step
assert mem and mem[0]["metric"]["device"] == "cpu" and float(mem[0]["value"][1]) > 0, mem
print(f"train-metrics: Prometheus scraped weft_train_step = {step['value'][1]}, "
      f"allocated {float(mem[0]['value'][1]) / 2**20:.1f} MiB")
PY
echo "train-metrics: ok"
