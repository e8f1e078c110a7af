#!/usr/bin/env bash
# Metrics stay off the hot path (issue 4, item 5): netperf through cgacctd
# with the Prometheus exporter off (--metrics_listen="") and on, scraped every
# second during the run, alternating, RUNS times each.
#
#   tests/bench/metrics_overhead.sh [BUILD_DIR]     (default: build-rel)
#
# Each run starts a fresh cgacctd on loopback and runs
#   cgacct-load --scenario=netperf --rpc=RPC --hierarchy=deep --streams=S
# for DURATION seconds; with the exporter on, `curl /metrics` runs every
# second meanwhile (a scrape builds every family from the engine, the flush
# observer and the RPC metrics, per-group series included). The report gives
# every run, the medians, and overhead = 1 - median(on) / median(off).
# Goal: <= 3%.
#
# Environment: STREAMS (4), DURATION (10), RUNS (5), RPC (stream), PORT
# (57411), METRICS_PORT (57412). Bounded: about 2 x RUNS x (DURATION + 1) s.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-rel}
STREAMS=${STREAMS:-4}
DURATION=${DURATION:-10}
RUNS=${RUNS:-5}
RPC=${RPC:-stream}
PORT=${PORT:-57411}
METRICS_PORT=${METRICS_PORT:-57412}
SERVER="$BUILD/server/cgacctd"
LOAD="$BUILD/client/cgacct-load"
for bin in "$SERVER" "$LOAD"; do
  [ -x "$bin" ] || { echo "metrics_overhead: $bin not built (cmake --build $BUILD)" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "metrics_overhead: needs curl (deploy/install-deps.sh)" >&2; exit 1; }

pid=""
scraper=""
tmp=$(mktemp -d)
cleanup() {
  for p in "$scraper" "$pid"; do
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p"
      wait "$p" 2>/dev/null || true
    fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

one_run() {  # on|off run -> ops/s
  local mode=$1 run=$2 metrics=""
  [ "$mode" = on ] && metrics="127.0.0.1:$METRICS_PORT"
  "$SERVER" --listen="127.0.0.1:$PORT" --metrics_listen="$metrics" >"$tmp/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$tmp/server.log" && break; sleep 0.1; done
  grep -q listening "$tmp/server.log" || { cat "$tmp/server.log" >&2; exit 1; }
  if [ "$mode" = on ]; then
    (
      n=0
      while sleep 1; do
        curl -sf -o /dev/null "http://127.0.0.1:$METRICS_PORT/metrics" && n=$((n + 1))
        echo "$n" >"$tmp/scrapes"
      done
    ) &
    scraper=$!
  fi
  "$LOAD" --target="127.0.0.1:$PORT" --metrics_target="127.0.0.1:1" --scenario=netperf \
    --rpc="$RPC" --hierarchy=deep --group=/metrics-overhead --streams="$STREAMS" \
    --duration="${DURATION}s" --json="$tmp/$mode-$run.json" \
    >"$tmp/$mode-$run.txt" 2>"$tmp/$mode-$run.err" || {
      cat "$tmp/$mode-$run.txt" "$tmp/$mode-$run.err" >&2; exit 1; }
  if [ -n "$scraper" ]; then
    kill -TERM "$scraper"; wait "$scraper" 2>/dev/null || true; scraper=""
    echo "metrics_overhead: run $run: $(cat "$tmp/scrapes" 2>/dev/null || echo 0) scrapes" >&2
  fi
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  sed -n 's/.*"ops_per_s": \([0-9.e+]*\).*/\1/p' "$tmp/$mode-$run.json"
}

echo "metrics_overhead: netperf --rpc=$RPC --hierarchy=deep --streams=$STREAMS, ${DURATION}s x $RUNS runs per mode, alternating" >&2
printf '| run | exporter off: ops/s | exporter on, scraped every 1 s: ops/s | on / off |\n'
printf '|---|---|---|---|\n'
offs=()
ons=()
for run in $(seq "$RUNS"); do
  off=$(one_run off "$run")
  on=$(one_run on "$run")
  offs+=("$off")
  ons+=("$on")
  printf '| %d | %.0f | %.0f | %.3f |\n' "$run" "$off" "$on" "$(awk -v a="$on" -v b="$off" 'BEGIN {print a / b}')"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
moff=$(median "${offs[@]}")
mon=$(median "${ons[@]}")
awk -v a="$mon" -v b="$moff" 'BEGIN {
  printf "\nmedian off %.0f ops/s, median on %.0f ops/s, overhead %.1f%% (goal <= 3%%)\n", b, a, (1 - a / b) * 100 }'
