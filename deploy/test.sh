#!/usr/bin/env bash
# The test command: installs what is missing, then builds and tests in three
# stages, each failing the run on the first error:
#   1. clang-14 + ThreadSanitizer, engine only (no gRPC): the engine and all
#      its tests, compiled with clang's thread-safety analysis and -Werror;
#      the engine tests then run under TSan.
#   2. clang-14, server and clients (no tests, no benchmarks, no
#      optimisation: clang's warnings do not depend on -O): the rest of the
#      project's own code through the thread-safety analysis and -Werror.
#   3. g++, everything (-Werror), then the whole test suite with ctest in
#      parallel. Benchmarks are built but not run (tests/bench).
# Each stage prints its wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
jobs=$(nproc)
stage() {  # stage NAME: prints the previous stage's time, starts a new one
  local now=$SECONDS
  [ -n "${stage_name:-}" ] && echo "cgacct: stage '$stage_name' took $((now - stage_start)) s" >&2
  stage_name=$1
  stage_start=$now
  [ -n "$stage_name" ] && echo "cgacct: stage '$stage_name'" >&2
  return 0
}

stage "clang TSan engine"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGACCT_ENGINE_ONLY=ON \
  -DCGACCT_SANITIZE=thread -DCGACCT_WERROR=ON -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
cmake --build build-tsan -j"$jobs"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  ctest --test-dir build-tsan -j"$jobs" --output-on-failure

stage "clang server+clients"
cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=None -DCGACCT_BUILD_TESTS=OFF \
  -DCGACCT_BUILD_BENCH=OFF -DCGACCT_WERROR=ON -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
cmake --build build-clang -j"$jobs"

stage "g++ build and ctest"
CGACCT_WERROR=ON deploy/build.sh
ctest --test-dir build -j"$jobs" --output-on-failure --timeout 300
stage ""
