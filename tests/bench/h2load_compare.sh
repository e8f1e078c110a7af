#!/usr/bin/env bash
# cgacct-load's own overhead per call against h2load's (issue 12, item 8): the
# same GetStats load on the same cgacctd, in one run, alternating.
#
#   tests/bench/h2load_compare.sh [BUILD_DIR]     (default: build)
#
# h2load (Debian nghttp2-client) sends GetStats as a gRPC POST: -d FILE holds
# the 5-byte gRPC frame prefix (uncompressed flag 0, big-endian length) and
# the serialized GetStatsRequest {path: GROUP, flush: FLUSH_MODE_EXACT},
# headers content-type: application/grpc and te: trailers, -c C connections
# with one stream each (-m 1), one h2load thread. cgacct-load runs
# --scenario=stat-reader --threads=C (C connections, one call in flight on
# each, closed loop). Both run DURATION s after a WARMUP s warm-up. Before
# the runs the frame file is checked against the server: /usr/bin/python3's
# grpc sends the same bytes as a generic unary call and must get a
# GroupStats for GROUP back (h2load itself counts HTTP status only, and a
# gRPC error also comes with HTTP 200).
#
# The report: every run's mean latency, rate and the client's own CPU per
# call (user + system time of the client process from /usr/bin/time, over
# rate x (WARMUP + DURATION) calls, the same estimate for both), the medians
# of RUNS runs, and the ratios of the medians (cgacct-load / h2load; goal for
# the mean latency <= 1.20). On 2 cores shared with the server and with
# other work the latencies swing with the machine's load from run to run;
# the CPU per call is the client's overhead itself and moves much less.
#
# Environment: C (8), DURATION (5), WARMUP (1), RUNS (3), PORT (57431),
# CPUS (4), GROUP (/h2load-cmp), LOAD_ARGS (extra cgacct-load flags),
# OLD_LOAD (another cgacct-load binary, e.g. one built from an older commit,
# run as a third client in every round; it gets no --warmup, which older
# builds do not have, so its figures include its first second).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
C=${C:-8}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
RUNS=${RUNS:-3}
PORT=${PORT:-57431}
CPUS=${CPUS:-4}
GROUP=${GROUP:-/h2load-cmp}
LOAD_ARGS=${LOAD_ARGS:-}
SERVER="$BUILD/server/cgacctd"
LOAD="$BUILD/client/cgacct-load"
for bin in "$SERVER" "$LOAD"; do
  [ -x "$bin" ] || { echo "h2load_compare: $bin not built" >&2; exit 1; }
done
command -v h2load >/dev/null ||
  { echo "h2load_compare: needs h2load (Debian nghttp2-client)" >&2; exit 1; }

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
  { echo "h2load_compare: cgacctd did not start" >&2; cat "$tmp/server.err" >&2; exit 1; }

# The request, serialized by hand (proto3 wire format): field 1 (path,
# length-delimited) tag 0x0a, field 2 (flush, varint) tag 0x10 value 1.
frame="$tmp/getstats.grpc"
/usr/bin/python3 - "$GROUP" "$frame" <<'PY'
import struct, sys
path = sys.argv[1].encode()
assert len(path) < 128
msg = b"\x0a" + bytes([len(path)]) + path + b"\x10\x01"
open(sys.argv[2], "wb").write(b"\x00" + struct.pack(">I", len(msg)) + msg)
PY

# The group, created by a short cgacct-load run (which also warms the server).
"$LOAD" --target=127.0.0.1:"$PORT" --metrics_target= --group="$GROUP" \
  --threads=1 --duration=0.5s --warmup=0s >/dev/null 2>&1

# The frame file must be a GetStats the server answers.
/usr/bin/python3 - "127.0.0.1:$PORT" "$frame" "$GROUP" <<'PY'
import sys, grpc
target, frame, group = sys.argv[1], sys.argv[2], sys.argv[3]
body = open(frame, "rb").read()[5:]
with grpc.insecure_channel(target) as ch:
    call = ch.unary_unary("/cgacct.v1.Accounting/GetStats",
                          request_serializer=None, response_deserializer=None)
    resp = call(body, timeout=10)
# GroupStats field 1 (path) comes first: 0x0a, length, the path.
assert resp[0] == 0x0a and resp[2:2 + resp[1]] == group.encode(), resp[:40]
print("h2load_compare: frame file checked: GetStats %s answered (%d bytes)"
      % (group, len(resp)))
PY

run_h2load() {
  local out="$tmp/h2load.$1"
  /usr/bin/time -o "$tmp/h2load.$1.time" -f '%U %S' h2load -c "$C" -m 1 -t 1 -D "$DURATION" --warm-up-time="$WARMUP" \
    -d "$frame" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$PORT/cgacct.v1.Accounting/GetStats" >"$out" 2>&1 || {
      cat "$out" >&2; exit 1; }
  grep -q "succeeded, 0 failed, 0 errored" "$out" ||
    grep -Eq "[1-9][0-9]* succeeded, 0 failed, 0 errored" "$out" || {
      echo "h2load_compare: h2load had failures:" >&2; cat "$out" >&2; exit 1; }
  # "time for request:   385us   10.11ms   637us  ..." (min max mean sd)
  local mean rate
  mean=$(awk '/time for request:/ {print $6}' "$out")
  rate=$(awk '/^finished in/ {print $4}' "$out")
  echo "$(to_us "$mean") $rate $(cpu_us_per_call "$tmp/h2load.$1.time" "$rate")"
}

# Client CPU (user + system) per call in us, over rate x (WARMUP + DURATION).
cpu_us_per_call() {
  awk -v r="$2" -v t="$((WARMUP + DURATION))" \
    '{printf "%.1f", ($1 + $2) * 1e6 / (r * t)}' "$1"
}

# h2load prints 637us, 1.23ms or 2.00s.
to_us() {
  awk -v v="$1" 'BEGIN {
    if (v ~ /us$/) { sub(/us$/, "", v); print v + 0 }
    else if (v ~ /ms$/) { sub(/ms$/, "", v); print v * 1000 }
    else if (v ~ /s$/) { sub(/s$/, "", v); print v * 1e6 }
    else print "nan" }'
}

run_load() {
  local json="$tmp/load.$1.json" bin="${2:-$LOAD}" warm="--warmup=${WARMUP}s"
  [ "$bin" = "$LOAD" ] || warm="--duration=$((WARMUP + DURATION))s"
  # shellcheck disable=SC2086
  /usr/bin/time -o "$tmp/load.$1.time" -f '%U %S' "$bin" --target=127.0.0.1:"$PORT" --metrics_target= --group="$GROUP" \
    --scenario=stat-reader --threads="$C" --duration="${DURATION}s" \
    "$warm" --json="$json" $LOAD_ARGS >"$tmp/load.$1.out" 2>&1 || {
      cat "$tmp/load.$1.out" >&2; exit 1; }
  /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["reads"]
assert r["errors"] == 0, r["errors"]
print("%.1f %.1f" % (r["latency"]["mean_us"], r["per_s"]))' "$json" >"$tmp/load.$1.r"
  local mean rate
  read -r mean rate <"$tmp/load.$1.r"
  echo "$mean $rate $(cpu_us_per_call "$tmp/load.$1.time" "$rate")"
}

echo "h2load_compare: C=$C DURATION=${DURATION}s WARMUP=${WARMUP}s RUNS=$RUNS CPUS=$CPUS; uptime: $(uptime)"
h2_means=(); load_means=(); h2_cpus=(); load_cpus=(); old_means=(); old_cpus=()
for i in $(seq "$RUNS"); do
  # Alternate the order so a drift of the machine's load favours neither.
  if (( i % 2 )); then
    read -r lm lr lc < <(run_load "$i"); read -r hm hr hc < <(run_h2load "$i")
  else
    read -r hm hr hc < <(run_h2load "$i"); read -r lm lr lc < <(run_load "$i")
  fi
  printf 'run %d: h2load mean %8.1f us %9.0f req/s %5.1f us CPU/call | cgacct-load mean %8.1f us %9.0f req/s %5.1f us CPU/call\n' \
    "$i" "$hm" "$hr" "$hc" "$lm" "$lr" "$lc"
  h2_means+=("$hm"); load_means+=("$lm"); h2_cpus+=("$hc"); load_cpus+=("$lc")
  if [ -n "${OLD_LOAD:-}" ]; then
    read -r om or oc < <(run_load "old$i" "$OLD_LOAD")
    printf 'run %d: OLD_LOAD mean %8.1f us %9.0f req/s %5.1f us CPU/call\n' "$i" "$om" "$or" "$oc"
    old_means+=("$om"); old_cpus+=("$oc")
  fi
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
hmed=$(median "${h2_means[@]}")
lmed=$(median "${load_means[@]}")
ratio=$(awk -v l="$lmed" -v h="$hmed" 'BEGIN {printf "%.3f", l / h}')
hcpu=$(median "${h2_cpus[@]}")
lcpu=$(median "${load_cpus[@]}")
cratio=$(awk -v l="$lcpu" -v h="$hcpu" 'BEGIN {printf "%.2f", l / h}')
echo "median mean latency: h2load $hmed us, cgacct-load $lmed us; ratio cgacct-load/h2load $ratio (goal <= 1.20)"
echo "median client CPU per call: h2load $hcpu us, cgacct-load $lcpu us; ratio $cratio"
if [ -n "${OLD_LOAD:-}" ]; then
  echo "OLD_LOAD ($OLD_LOAD): median mean latency $(median "${old_means[@]}") us, CPU per call $(median "${old_cpus[@]}") us; ratio to h2load $(awk -v l="$(median "${old_means[@]}")" -v h="$hmed" 'BEGIN {printf "%.3f", l / h}')"
fi
echo "uptime: $(uptime)"
