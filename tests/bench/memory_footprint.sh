#!/usr/bin/env bash
# Server memory footprint per group (issue 4, item 6): cgacctd's RSS with
# 10,000 and 100,000 idle groups at --cpus=2 and --cpus=400, and the cost of
# an active group's per-CPU blocks.
#
#   tests/bench/memory_footprint.sh [BUILD_DIR]     (default: build-rel)
#
# For each --cpus value and group count, a fresh cgacctd (metrics off, on a
# loopback port) is measured three times (VmRSS from /proc/PID/status):
#   rss0  after creating /fp (the server's own baseline at that --cpus);
#   rss1  after creating N idle children /fp/g0.. -> idle bytes per group;
#   rss2  after a warm-up (the same traffic on 20 groups under /fpw, so the
#         gRPC buffers it grows are not counted), creating ACTIVE more
#         groups under /fpa and charging and
#         uncharging one page in each on every per-CPU slot (each gets its
#         per-CPU blocks on all slots) -> bytes per active group per CPU,
#         after taking out the idle cost.
# Goal: <= 2 KiB per group plus <= 256 B per group per CPU, and idle groups
# cost no per-CPU memory.
#
# Environment: PORT (default 57391), ACTIVE (active groups, default 1000),
# COUNTS ("10000 100000"), CPUS ("2 400"). Bounded: at most a few hundred MB,
# a few minutes; the servers it starts are stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-rel}
PORT=${PORT:-57391}
ACTIVE=${ACTIVE:-1000}
COUNTS=${COUNTS:-"10000 100000"}
CPUS=${CPUS:-"2 400"}
SERVER="$BUILD/server/cgacctd"
POPULATE="$BUILD/tests/bench/populate_groups"
for bin in "$SERVER" "$POPULATE"; do
  [ -x "$bin" ] || { echo "memory_footprint: $bin not built (cmake --build $BUILD)" >&2; exit 1; }
done

pid=""
log=$(mktemp)
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$log"
}
trap cleanup EXIT

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

start_server() {
  "$SERVER" --listen="127.0.0.1:$PORT" --metrics_listen="" --cpus="$1" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    grep -q "listening" "$log" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "memory_footprint: cgacctd did not start" >&2
  exit 1
}

stop_server() {
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}

printf '| --cpus | idle groups | baseline RSS | RSS with idle groups | bytes / idle group | active groups | bytes / active group / CPU | bytes / active group | budget 2048 + 256 x cpus |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for cpus in $CPUS; do
  for n in $COUNTS; do
    start_server "$cpus"
    "$POPULATE" --target="127.0.0.1:$PORT" --parent=/fp --groups=0 >/dev/null
    rss0=$(rss_kib "$pid")
    "$POPULATE" --target="127.0.0.1:$PORT" --parent=/fp --groups="$n" >/dev/null
    rss1=$(rss_kib "$pid")
    # Warm-up: the same ChargeBatch traffic on a few groups first, so the
    # gRPC buffers it grows are not counted as per-group memory.
    "$POPULATE" --target="127.0.0.1:$PORT" --parent=/fpw --groups=20 \
      --active_groups=20 --charge_cpus=all >/dev/null
    rss1w=$(rss_kib "$pid")
    "$POPULATE" --target="127.0.0.1:$PORT" --parent=/fpa --groups="$ACTIVE" \
      --active_groups="$ACTIVE" --charge_cpus=all >/dev/null
    rss2=$(rss_kib "$pid")
    stop_server
    awk -v c="$cpus" -v n="$n" -v a="$ACTIVE" -v r0="$rss0" -v r1="$rss1" -v r1w="$rss1w" -v r2="$rss2" 'BEGIN {
      idle = (r1 - r0) * 1024 / n;
      active = ((r2 - r1w) * 1024 - a * idle) / (a * c);
      total = idle + active * c; budget = 2048 + 256 * c;
      printf "| %d | %d | %.1f MiB | %.1f MiB | %.0f | %d | %.0f | %.0f | %d (%s) |\n", c, n, r0 / 1024, r1 / 1024, idle, a, active, total, budget, total <= budget ? "met" : "NOT met"
    }'
  done
done
