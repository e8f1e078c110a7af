#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts cgacctd (400 modelled
# CPUs), runs cgacct-load on the default workload (seed-rstat: stat readers
# plus memory hogs charging until memory.max refuses them (64-page charges:
# a costly ENOMEM, not an OOM, as in the kernel), the shape of the kernel benchmark in
# "cgroup/rstat: avoid disabling irqs for O(num_cpu)"), prints its report and
# stops the server.
#
# Environment: POLICY (per_cpu|whole|batch:N|adaptive, default per_cpu),
# PREEMPT (the flush preempt model, none|full, default none: whole holds the
# flush lock across every CPU), HOLD_BUDGET (adaptive's --flush_hold_budget,
# a duration such as 50us; default 0: one CPU with updates per hold), CPUS (400),
# DURATION (10s), THREADS (8), HOGS (8), PORT (50051), METRICS_PORT (9464),
# JSON (a file for the --json report; unset = none), BUILD_DIR (build),
# STOCK_ADDITIONS (0: the kernel's per-CPU stock, cgacctd's default; 1: turn
# on the engine's opt-in additions, --uncharge_refills_stock
# --stock_victim_sets=64 --stock_pool_buckets=1024, and say so). Extra
# arguments go to cgacct-load.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
# What the job runs (the server and the load client) and what the README's
# tour runs after it (cgacctctl); the tests are the test command's.
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TARGETS="cgacctd cgacct-load cgacctctl" BUILD_DIR="$BUILD_DIR" deploy/build.sh

POLICY=${POLICY:-per_cpu}
PREEMPT=${PREEMPT:-none}
HOLD_BUDGET=${HOLD_BUDGET:-0}
CPUS=${CPUS:-400}
DURATION=${DURATION:-10s}
THREADS=${THREADS:-8}
HOGS=${HOGS:-8}
PORT=${PORT:-50051}
METRICS_PORT=${METRICS_PORT:-9464}
STOCK_ADDITIONS=${STOCK_ADDITIONS:-0}

stock_flags=()
if [ "$STOCK_ADDITIONS" = 1 ]; then
  stock_flags=(--uncharge_refills_stock --stock_victim_sets=64 --stock_pool_buckets=1024)
  echo "run.sh: the engine's opt-in stock additions are ON (${stock_flags[*]}): not the kernel's stock" >&2
else
  echo "run.sh: the kernel's per-CPU stock (no opt-in additions; STOCK_ADDITIONS=1 turns them on)" >&2
fi

# The server gets its own session, so a Ctrl-C reaches only the load
# client, which then stops, uncharges and prints its report; the trap stops
# the server after it.
# Its start line (stdout) goes to a file first: the server is ready once it
# has printed it, and only then (a /metrics or gRPC port that answers may be
# another program's: with a port taken, cgacctd exits and the load would
# have measured whatever holds it).
start_line=$(mktemp)
setsid "$BUILD_DIR"/server/cgacctd --listen=127.0.0.1:"$PORT" \
  --metrics_listen=127.0.0.1:"$METRICS_PORT" --cpus="$CPUS" \
  --flush_lock_policy="$POLICY" --flush_preempt_model="$PREEMPT" \
  --flush_hold_budget="$HOLD_BUDGET" "${stock_flags[@]}" >"$start_line" &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true; rm -f "$start_line"' EXIT

ready=0
for _ in $(seq 300); do
  if grep -q "listening on" "$start_line"; then ready=1; break; fi
  kill -0 $server 2>/dev/null || break
  sleep 0.1
done
cat "$start_line"
if [ "$ready" != 1 ]; then
  echo "run.sh: cgacctd did not start; see above (a port in use? set PORT= and METRICS_PORT=)" >&2
  exit 1
fi

args=(--target=127.0.0.1:"$PORT" --metrics_target=127.0.0.1:"$METRICS_PORT"
      --scenario=seed-rstat --duration="$DURATION" --threads="$THREADS" --hogs="$HOGS")
[ -n "${JSON:-}" ] && args+=(--json="$JSON")
"$BUILD_DIR"/client/cgacct-load "${args[@]}" "$@"
