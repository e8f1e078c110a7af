#!/usr/bin/env bash
# netperf through the service (issue 4, item 3): cgacct-load
# --scenario=netperf against one cgacctd on loopback, for every
# --rpc (stream, batch, unary) in a root-level group and in the 3-level leaf
# with min/low on top, RUNS times with root and deep alternating (which goes
# first alternates too), medians, and the median of the per-run deep/root
# ratios.
#
#   tests/bench/netperf_table.sh [BUILD_DIR]     (default: build-rel)
#
# Environment: STREAMS (4), BATCH (64), DURATION (seconds per run, 10), RUNS
# (3), RPCS ("stream batch unary"), PORT (57431), SERVER_FLAGS (extra cgacctd
# flags, e.g. --stock_pool_buckets=0). Bounded: RPCS x 2 x RUNS x DURATION s;
# the server it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-rel}
STREAMS=${STREAMS:-4}
BATCH=${BATCH:-64}
DURATION=${DURATION:-10}
RUNS=${RUNS:-3}
RPCS=${RPCS:-"stream batch unary"}
PORT=${PORT:-57431}
SERVER_FLAGS=${SERVER_FLAGS:-}
SERVER="$BUILD/server/cgacctd"
LOAD="$BUILD/client/cgacct-load"
for bin in "$SERVER" "$LOAD"; do
  [ -x "$bin" ] || { echo "netperf_table: $bin not built (cmake --build $BUILD)" >&2; exit 1; }
done

pid=""
tmp=$(mktemp -d)
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$SERVER" --listen="127.0.0.1:$PORT" --metrics_listen="" $SERVER_FLAGS >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening "$tmp/server.log" && break; sleep 0.1; done
grep -q listening "$tmp/server.log" || { cat "$tmp/server.log" >&2; exit 1; }

json_num() { sed -n "s/.*\"$2\": \([0-9.e+-]*\).*/\1/p" "$1" | head -1; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "netperf_table: $(head -1 "$tmp/server.log"); $STREAMS streams, batch $BATCH, ${DURATION}s x $RUNS runs" >&2
printf '| rpc | group | ops per message | ops/s (median) | messages/s | latency/message p50 | p99 | p99.9 | runs (ops/s) |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
declare -A med_ops med_pair
for rpc in $RPCS; do
  declare -A ops msgs p50 p99 p999
  for h in root deep; do ops[$h]=""; msgs[$h]=""; p50[$h]=""; p99[$h]=""; p999[$h]=""; done
  pair_ratios=""
  for run in $(seq "$RUNS"); do
    # Alternate which hierarchy goes first, against drifting load.
    order="root deep"
    [ $((run % 2)) -eq 0 ] && order="deep root"
    for h in $order; do
      out="$tmp/$rpc-$h-$run.json"
      "$LOAD" --target="127.0.0.1:$PORT" --metrics_target="127.0.0.1:1" --scenario=netperf \
        --rpc="$rpc" --hierarchy="$h" --group="/np-$h" --streams="$STREAMS" \
        --batch="$BATCH" --duration="${DURATION}s" --json="$out" \
        >"$tmp/out.txt" 2>"$tmp/err.txt" || { cat "$tmp/out.txt" "$tmp/err.txt" >&2; exit 1; }
      ops[$h]+=" $(json_num "$out" ops_per_s)"
      msgs[$h]+=" $(json_num "$out" messages_per_s)"
      p50[$h]+=" $(json_num "$out" p50_us)"
      p99[$h]+=" $(json_num "$out" p99_us)"
      p999[$h]+=" $(json_num "$out" p99_9_us)"
    done
    pair_ratios+=" $(awk -v d="$(json_num "$tmp/$rpc-deep-$run.json" ops_per_s)" \
      -v r="$(json_num "$tmp/$rpc-root-$run.json" ops_per_s)" 'BEGIN {print d / r}')"
  done
  # shellcheck disable=SC2086
  med_pair[$rpc]=$(median $pair_ratios)
  for h in root deep; do
    # shellcheck disable=SC2086
    m=$(median ${ops[$h]})
    med_ops[$rpc-$h]=$m
    per_msg=$BATCH
    [ "$rpc" = unary ] && per_msg=1
    # shellcheck disable=SC2086
    printf '| %s | %s | %s | %.0f | %.0f | %.0f us | %.0f us | %.0f us | %s |\n' \
      "$rpc" "$h" "$per_msg" "$m" "$(median ${msgs[$h]})" "$(median ${p50[$h]})" \
      "$(median ${p99[$h]})" "$(median ${p999[$h]})" \
      "$(printf '%s' "${ops[$h]}" | awk '{for (i = 1; i <= NF; i++) printf "%s%.0f", (i > 1 ? ", " : ""), $i}')"
  done
done
echo
printf '| rpc | deep/root of the medians | median of the per-run deep/root ratios |\n|---|---|---|\n'
for rpc in $RPCS; do
  printf '| %s | %.3f | %.3f |\n' "$rpc" \
    "$(awk -v d="${med_ops[$rpc-deep]}" -v r="${med_ops[$rpc-root]}" 'BEGIN {print d / r}')" \
    "${med_pair[$rpc]}"
done
