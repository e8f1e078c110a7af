#!/usr/bin/env bash
# Open-loop GetStats p99 at 50% and 90% of the closed-loop maximum rate
# (issue 12's acceptance figures).
#
#   tests/bench/open_loop_p99.sh [BUILD_DIR]     (default: build)
#
# One cgacctd on loopback. First the closed-loop maximum: cgacct-load
# --scenario=stat-reader --threads=C --io_threads=0 for DURATION s, RUNS
# times; its median rate is MAX. --io_threads=0 runs a blocking thread per
# reader, the client the open loop runs (client/load/stat_reader.cc), so that both
# modes are the same client and MAX is what the server gives that client (on
# 2 shared cores the client's own CPU is part of it). Then open loop at 50% and 90% of MAX (--rate, the same C
# readers, latency from each call's intended send time), RUNS times each,
# alternating the two. Every run has a WARMUP s warm-up excluded from its
# figures. Printed: each run's rate, achieved rate, p50/p99/p99.9/max, late
# calls and unsent calls, then the medians.
#
# Environment: C (8), DURATION (10), WARMUP (1), RUNS (3), PORT (57441),
# CPUS (4), GROUP (/open-loop), LOAD_ARGS (extra cgacct-load flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
C=${C:-8}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-1}
RUNS=${RUNS:-3}
PORT=${PORT:-57441}
CPUS=${CPUS:-4}
GROUP=${GROUP:-/open-loop}
LOAD_ARGS=${LOAD_ARGS:-}
SERVER="$BUILD/server/cgacctd"
LOAD="$BUILD/client/cgacct-load"
for bin in "$SERVER" "$LOAD"; do
  [ -x "$bin" ] || { echo "open_loop_p99: $bin not built" >&2; exit 1; }
done

tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$SERVER" --listen=127.0.0.1:"$PORT" --metrics_listen= --cpus="$CPUS" \
  >"$tmp/server.out" 2>"$tmp/server.err" &
pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$tmp/server.out" 2>/dev/null && break
  sleep 0.1
done
grep -q "listening on" "$tmp/server.out" ||
  { echo "open_loop_p99: cgacctd did not start" >&2; cat "$tmp/server.err" >&2; exit 1; }

# Prints "rate achieved p50 p99 p99.9 max late unsent" of one run.
run() {
  local json="$tmp/run.json"
  # shellcheck disable=SC2086
  "$LOAD" --target=127.0.0.1:"$PORT" --metrics_target= --group="$GROUP" \
    --scenario=stat-reader --threads="$C" --duration="${DURATION}s" \
    --warmup="${WARMUP}s" --json="$json" "$@" $LOAD_ARGS >"$tmp/run.out" 2>&1 || {
      cat "$tmp/run.out" >&2; exit 1; }
  /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
reads, ol = r["reads"], r["open_loop"]
assert reads["errors"] == 0, reads["errors"]
lat = reads["latency"]
print("%.0f %.0f %.1f %.1f %.1f %.1f %d %d" % (
    ol["rate_per_s"] if ol else 0, ol["achieved_per_s"] if ol else reads["per_s"],
    lat["p50_us"], lat["p99_us"], lat["p99_9_us"], lat["max_us"],
    ol["late"] if ol else 0, ol["unsent"] if ol else 0))' "$json"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "open_loop_p99: C=$C DURATION=${DURATION}s WARMUP=${WARMUP}s RUNS=$RUNS CPUS=$CPUS; uptime: $(uptime)"
rates=()
for i in $(seq "$RUNS"); do
  read -r _ achieved p50 p99 p999 max _ _ < <(run --io_threads=0)
  printf 'closed loop run %d: %8.0f calls/s  p50 %8.1f  p99 %9.1f  p99.9 %9.1f  max %9.1f us\n' \
    "$i" "$achieved" "$p50" "$p99" "$p999" "$max"
  rates+=("$achieved")
done
max_rate=$(median "${rates[@]}")
echo "closed-loop maximum (median): $max_rate calls/s"

p99_50=(); p99_90=()
for i in $(seq "$RUNS"); do
  for pct in 50 90; do
    rate=$(awk -v m="$max_rate" -v p="$pct" 'BEGIN {printf "%.0f", m * p / 100}')
    read -r _ achieved p50 p99 p999 max late unsent < <(run --rate="$rate")
    printf 'open loop %d%% run %d: rate %7.0f achieved %8.0f  p50 %8.1f  p99 %9.1f  p99.9 %9.1f  max %9.1f us  late %d unsent %d\n' \
      "$pct" "$i" "$rate" "$achieved" "$p50" "$p99" "$p999" "$max" "$late" "$unsent"
    if [ "$pct" = 50 ]; then p99_50+=("$p99"); else p99_90+=("$p99"); fi
  done
done
echo "open-loop p99 (median of $RUNS): at 50% of max $(median "${p99_50[@]}") us, at 90% of max $(median "${p99_90[@]}") us"
echo "uptime: $(uptime)"
