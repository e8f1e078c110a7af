#!/usr/bin/env bash
# cgacct against the alternative a user would pick (issue 4, item 4): the same
# hierarchical charge (check memory.max at every level, charge all levels or
# none) as a Redis Lua script (tests/bench/hier_charge.lua), driven by
# redis-benchmark with pipelining, on the same machine in the same run.
#
#   tests/bench/redis_compare.sh [BUILD_DIR]        (default: build-rel)
#
# Both sides run on loopback with the same client concurrency and the same
# operations in flight:
#   cgacct  cgacct-load --scenario=netperf --rpc=stream --hierarchy=deep
#           --streams=S --batch=64: S connections, each with one 64-op
#           ChargeStream message in flight (32 charges and 32 uncharges of
#           3 pages in GROUP/mid/leaf, min/low on GROUP);
#   Redis   two redis-benchmark processes at once, S/2 connections each,
#           -P 64 (64 EVALSHA in flight per connection): one charging 3 pages,
#           one uncharging 3 pages, on leaf/mid/top/root counters.
# and, for the client library (issue 13):
#   library cgacct-load --scenario=netperf --rpc=library --hierarchy=deep
#           --streams=S: S threads of one process charging and uncharging
#           3 pages through one cgacct::client session, its per-CPU stock
#           hitting; server RPCs per charge from cgacctd's /metrics
#           (grpc_server_handled_total of Charge and Uncharge, before/after);
#   INCRBY  the hand-rolled counter: two redis-benchmark processes at once,
#           S/2 connections each, -P 64 INCRBY of one key, +3 and -3.
# Every charge and every uncharge counts as one op on every side. The runs
# alternate (cgacct, Redis+Lua, library, INCRBY, cgacct, ...) RUNS times; the
# report gives each run and the medians of cgacct/Lua, library/Lua and
# library/INCRBY (goals: >= 5, >= 20, >= 1) and of RPCs per charge
# (goal <= 1/32).
#
# Environment: STREAMS (even, default 4), DURATION (seconds per run, default
# 10), RUNS (default 3), REDIS_PORT (57401), CGACCT_PORT (57402),
# CGACCT_METRICS_PORT (57403). Bounded: about 4 x RUNS x DURATION seconds. Installs Debian's redis-server and
# redis-tools with apt-get if missing (as root). Both servers are started on
# 127.0.0.1 by this script and stopped when it exits.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-rel}
STREAMS=${STREAMS:-4}
DURATION=${DURATION:-10}
RUNS=${RUNS:-3}
REDIS_PORT=${REDIS_PORT:-57401}
CGACCT_PORT=${CGACCT_PORT:-57402}
CGACCT_METRICS_PORT=${CGACCT_METRICS_PORT:-57403}
SERVER="$BUILD/server/cgacctd"
LOAD="$BUILD/client/cgacct-load"
LUA=tests/bench/hier_charge.lua
PAGES=3
BATCH=64

for bin in "$SERVER" "$LOAD"; do
  [ -x "$bin" ] || { echo "redis_compare: $bin not built (cmake --build $BUILD)" >&2; exit 1; }
done
if [ $((STREAMS % 2)) -ne 0 ] || [ "$STREAMS" -lt 2 ]; then
  echo "redis_compare: STREAMS must be even and >= 2" >&2
  exit 1
fi

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "redis_compare: installing Debian redis-server and redis-tools" >&2
  [ "$(id -u)" -eq 0 ] || { echo "redis_compare: need root to apt-get install redis-server redis-tools" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
  # The package may start its own service on 6379 (where services can
  # start); this script uses its own instance, so stop that one.
  if [ -x /etc/init.d/redis-server ]; then
    /etc/init.d/redis-server stop >/dev/null 2>&1 || true
  fi
fi

redis_pid=""
cgacct_pid=""
tmp=$(mktemp -d)
cleanup() {
  for p in "$cgacct_pid" "$redis_pid"; do
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p"
      wait "$p" 2>/dev/null || true
    fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- Redis ---------------------------------------------------------------
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode yes \
  --save "" --appendonly no --daemonize no --loglevel warning >"$tmp/redis.log" 2>&1 &
redis_pid=$!
rcli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
for _ in $(seq 50); do rcli PING >/dev/null 2>&1 && break; sleep 0.1; done
rcli PING >/dev/null || { cat "$tmp/redis.log" >&2; exit 1; }
sha=$(rcli SCRIPT LOAD "$(cat "$LUA")")
# Resident usage far above what the run moves (so uncharges never run dry),
# max far above usage (so charges never fail), like the cgacct side.
start_usage=1000000000
max=1125899906842624
keys=(u:leaf u:mid u:top u:root m:leaf m:mid m:top m:root)
rcli MSET u:leaf $start_usage u:mid $start_usage u:top $start_usage u:root $start_usage \
  m:leaf $max m:mid $max m:top $max m:root $max >/dev/null
redis_version=$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')

# rps of one redis-benchmark process (CSV "rps" column).
bench() {  # clients requests pages
  redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$1" -n "$2" -P "$BATCH" --csv \
    EVALSHA "$sha" 8 "${keys[@]}" "$3" | awk -F'","' 'NR == 2 {print $2}'
}
# rps of one pipelined INCRBY redis-benchmark process.
bench_incrby() {  # clients requests delta
  redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$1" -n "$2" -P "$BATCH" --csv \
    INCRBY u:counter "$3" | awk -F'","' 'NR == 2 {print $2}'
}

# Calibrate -n so a Redis run lasts about DURATION seconds.
cal=$(bench $((STREAMS / 2)) 200000 "$PAGES")
per_process=$(awk -v r="$cal" -v d="$DURATION" 'BEGIN {printf "%d", r * d}')
rcli MSET u:leaf $start_usage u:mid $start_usage u:top $start_usage u:root $start_usage >/dev/null
cal_incr=$(bench_incrby $((STREAMS / 2)) 2000000 3)
per_process_incr=$(awk -v r="$cal_incr" -v d="$DURATION" 'BEGIN {printf "%d", r * d}')
rcli SET u:counter $start_usage >/dev/null

# --- cgacct --------------------------------------------------------------
"$SERVER" --listen="127.0.0.1:$CGACCT_PORT" --metrics_listen="127.0.0.1:$CGACCT_METRICS_PORT" \
  >"$tmp/cgacctd.log" 2>&1 &
cgacct_pid=$!
for _ in $(seq 100); do grep -q listening "$tmp/cgacctd.log" && break; sleep 0.1; done
grep -q listening "$tmp/cgacctd.log" || { cat "$tmp/cgacctd.log" >&2; exit 1; }

run_cgacct() {  # run -> ops/s
  "$LOAD" --target="127.0.0.1:$CGACCT_PORT" --scenario=netperf --rpc=stream \
    --hierarchy=deep --group=/redis-compare --streams="$STREAMS" --batch="$BATCH" \
    --pages="$PAGES" --duration="${DURATION}s" --json="$tmp/cgacct-$1.json" \
    >"$tmp/cgacct-$1.txt" 2>"$tmp/cgacct-$1.err" || {
      cat "$tmp/cgacct-$1.txt" "$tmp/cgacct-$1.err" >&2; exit 1; }
  sed -n 's/.*"ops_per_s": \([0-9.e+]*\).*/\1/p' "$tmp/cgacct-$1.json"
}

run_library() {  # run -> "ops/s rpcs_per_charge"
  "$LOAD" --target="127.0.0.1:$CGACCT_PORT" --metrics_target="127.0.0.1:$CGACCT_METRICS_PORT" \
    --scenario=netperf --rpc=library --hierarchy=deep --group=/redis-compare-lib \
    --streams="$STREAMS" --batch="$BATCH" --pages="$PAGES" --duration="${DURATION}s" \
    --json="$tmp/lib-$1.json" >"$tmp/lib-$1.txt" 2>"$tmp/lib-$1.err" || {
      cat "$tmp/lib-$1.txt" "$tmp/lib-$1.err" >&2; exit 1; }
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["ops_per_s"], j["server_rpcs_per_charge"])' "$tmp/lib-$1.json"
}

run_incrby() {  # -> ops/s (both processes)
  bench_incrby $((STREAMS / 2)) "$per_process_incr" 3 >"$tmp/incr.rps" &
  local up=$!
  bench_incrby $((STREAMS / 2)) "$per_process_incr" -3 >"$tmp/decr.rps"
  wait "$up"
  awk '{s += $1} END {printf "%.0f", s}' "$tmp/incr.rps" "$tmp/decr.rps"
}

run_redis() {  # -> ops/s (both processes)
  bench $((STREAMS / 2)) "$per_process" "$PAGES" >"$tmp/charge.rps" &
  local charger=$!
  bench $((STREAMS / 2)) "$per_process" "-$PAGES" >"$tmp/uncharge.rps"
  wait "$charger"
  awk '{s += $1} END {printf "%.0f", s}' "$tmp/charge.rps" "$tmp/uncharge.rps"
}

echo "redis_compare: $STREAMS streams/connections, $BATCH ops in flight each, $PAGES pages per op, ${DURATION}s x $RUNS runs; Redis $redis_version; cgacctd $(nproc) CPUs" >&2
printf '| run | cgacct ops/s (ChargeStream, deep) | Redis+Lua ops/s (EVALSHA, -P %d) | cgacct / Redis | library ops/s (cgacct::client, deep) | Redis INCRBY ops/s (-P %d) | library / Lua | library / INCRBY | server RPCs per library charge |\n' "$BATCH" "$BATCH"
printf '|---|---|---|---|---|---|---|---|---|\n'
ratios=()
lib_lua=()
lib_incr=()
rpcs=()
for run in $(seq "$RUNS"); do
  c=$(run_cgacct "$run")
  r=$(run_redis)
  read -r l rpc < <(run_library "$run")
  i=$(run_incrby)
  ratio=$(awk -v c="$c" -v r="$r" 'BEGIN {printf "%.2f", c / r}')
  ll=$(awk -v c="$l" -v r="$r" 'BEGIN {printf "%.2f", c / r}')
  li=$(awk -v c="$l" -v r="$i" 'BEGIN {printf "%.2f", c / r}')
  ratios+=("$ratio"); lib_lua+=("$ll"); lib_incr+=("$li"); rpcs+=("$rpc")
  printf '| %d | %.0f | %.0f | %s | %.0f | %.0f | %s | %s | %.3g |\n' "$run" "$c" "$r" "$ratio" "$l" "$i" "$ll" "$li" "$rpc"
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo
echo "median cgacct / Redis: $(med "${ratios[@]}") (goal >= 5)"
echo "median library / Redis+Lua: $(med "${lib_lua[@]}") (goal >= 20)"
echo "median library / Redis INCRBY -P $BATCH: $(med "${lib_incr[@]}") (goal >= 1)"
echo "median server RPCs per library charge: $(med "${rpcs[@]}" | awk "{printf \"%.3g\", \$1}") (goal <= 1/32 = 0.03125)"

# Books: both Redis processes did the same number of +3 and -3 charges.
for k in u:leaf u:root u:counter; do
  v=$(rcli GET "$k")
  [ "$v" = "$start_usage" ] || echo "redis_compare: WARNING: $k is $v, expected $start_usage" >&2
done
