#!/usr/bin/env bash
# The test command: installs what is missing, builds everything once, runs
# the engine's concurrency tests under ThreadSanitizer (engine-only build),
# then the whole test suite with ctest in parallel. Benchmarks are built but
# not run (tests/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
jobs=$(nproc)

# 1. ThreadSanitizer: the engine and its tests only (no gRPC needed).
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGACCT_ENGINE_ONLY=ON \
  -DCGACCT_SANITIZE=thread >/dev/null
cmake --build build-tsan -j"$jobs" --target concurrency_test engine_test rstat_test stock_test stock_victim_test \
  reclaim_concurrency_test reclaim_test group_handle_test
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  ctest --test-dir build-tsan -j"$jobs" --output-on-failure \
  -R 'Concurrency|EngineTest|RstatTest|StockTest|StockVictim|Reclaim|GroupHandle'

# 2. Everything, then the full suite.
deploy/build.sh
ctest --test-dir build -j"$jobs" --output-on-failure --timeout 300
