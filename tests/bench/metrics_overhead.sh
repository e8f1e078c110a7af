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
# every run, the median scrape time, the medians, overhead = 1 - median(on)
# / median(off), and the median of the per-pair ratios on/off. Within a pair
# the order alternates (off first, then on first) so a drift of the machine's
# load does not always favour the same mode. Goal: <= 3%.
#
# The throughput comparison goes through gRPC on 2 shared cores and moves by
# 10-25% from run to run, so the script also measures what the exporter adds
# directly: the CPU time cgacctd spends per scrape (utime + stime from
# /proc/PID/stat over SCRAPES back-to-back scrapes, after a netperf run left
# its groups and every metric family populated), and what that is at one
# scrape per second as a share of the CPU the server used per second under
# netperf. Nothing else differs between the modes: the hot path records
# into per-thread shards whether or not anyone scrapes (server/metrics.h).
#
# Environment: STREAMS (4), DURATION (10), RUNS (5), RPC (stream), PORT
# (57411), METRICS_PORT (57412), SCRAPES (200). Bounded: about
# 2 x RUNS x (DURATION + 1) s plus a few seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-rel}
STREAMS=${STREAMS:-4}
DURATION=${DURATION:-10}
RUNS=${RUNS:-5}
RPC=${RPC:-stream}
SCRAPES=${SCRAPES:-200}
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

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# Runs one mode; ops/s into $result. Not called in $(...): the server and the
# scraper must be children of this shell, so the EXIT trap can stop them.
one_run() {  # on|off run
  local mode=$1 run=$2 metrics=""
  [ "$mode" = on ] && metrics="127.0.0.1:$METRICS_PORT"
  "$SERVER" --listen="127.0.0.1:$PORT" --metrics_listen="$metrics" >"$tmp/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$tmp/server.log" && break; sleep 0.1; done
  grep -q listening "$tmp/server.log" || { echo "metrics_overhead: cgacctd did not start (run $run, $mode):" >&2; cat "$tmp/server.log" >&2; exit 1; }
  if [ "$mode" = on ]; then
    (
      n=0
      while sleep 1; do
        curl -sf -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$METRICS_PORT/metrics" \
          >>"$tmp/scrape_times" && n=$((n + 1))
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
  if [ "$mode" = on ] && [ ! -f "$tmp/scrape_cost" ]; then
    # Server CPU under netperf (ticks over the run) and per scrape (idle).
    local busy=$(cpu_ticks "$pid")
    local t0=$(cpu_ticks "$pid")
    for _ in $(seq "$SCRAPES"); do
      curl -sf -o /dev/null "http://127.0.0.1:$METRICS_PORT/metrics"
    done
    local t1=$(cpu_ticks "$pid")
    local hz=$(getconf CLK_TCK)
    echo "$busy $t0 $t1 $hz" >"$tmp/scrape_cost"
  fi
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  result=$(sed -n 's/.*"ops_per_s": \([0-9.e+]*\).*/\1/p' "$tmp/$mode-$run.json")
}

echo "metrics_overhead: netperf --rpc=$RPC --hierarchy=deep --streams=$STREAMS, ${DURATION}s x $RUNS runs per mode, alternating" >&2
printf '| run | exporter off: ops/s | exporter on, scraped every 1 s: ops/s | on / off |\n'
printf '|---|---|---|---|\n'
offs=()
ons=()
ratios=()
for run in $(seq "$RUNS"); do
  if [ $((run % 2)) -eq 1 ]; then
    one_run off "$run"; off=$result
    one_run on "$run"; on=$result
  else
    one_run on "$run"; on=$result
    one_run off "$run"; off=$result
  fi
  offs+=("$off")
  ons+=("$on")
  ratio=$(awk -v a="$on" -v b="$off" 'BEGIN {print a / b}')
  ratios+=("$ratio")
  printf '| %d | %.0f | %.0f | %.3f |\n' "$run" "$off" "$on" "$ratio"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
moff=$(median "${offs[@]}")
mon=$(median "${ons[@]}")
mratio=$(median "${ratios[@]}")
# shellcheck disable=SC2046
mscrape=$(median $(cat "$tmp/scrape_times"))
read -r busy t0 t1 hz <"$tmp/scrape_cost"
awk -v a="$mon" -v b="$moff" -v r="$mratio" -v t="$mscrape" -v busy="$busy" \
    -v t0="$t0" -v t1="$t1" -v hz="$hz" -v n="$SCRAPES" -v d="$DURATION" 'BEGIN {
  per_scrape_ms = (t1 - t0) * 1000 / hz / n
  server_ms_per_s = busy * 1000 / hz / d
  printf "\nmedian scrape (curl time_total) %.1f ms\n", t * 1000
  printf "cgacctd CPU per scrape: %.2f ms (%d scrapes, %d ticks at %d Hz); cgacctd CPU under netperf: %.0f ms per second; one scrape per second adds %.2f%% of that\n", per_scrape_ms, n, t1 - t0, hz, server_ms_per_s, 100 * per_scrape_ms / server_ms_per_s
  printf "median off %.0f ops/s, median on %.0f ops/s: overhead %.1f%%; median of the per-pair ratios on/off %.3f: overhead %.1f%% (goal <= 3%%)\n", b, a, (1 - a / b) * 100, r, (1 - r) * 100 }'
