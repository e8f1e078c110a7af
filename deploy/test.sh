#!/usr/bin/env bash
# The test command: installs what is missing, then builds and tests in three
# stages, each failing the run on the first error:
#   1. clang-14 + ThreadSanitizer, engine only (no gRPC): the engine and all
#      its tests, compiled with clang's thread-safety analysis and -Werror;
#      the engine tests then run under TSan.
#   2. clang-14 + AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer
#      on), everything but the benchmarks, with the libFuzzer targets
#      (-DCGACCT_FUZZ=ON): the project's own code through clang's
#      thread-safety analysis and -Werror; the whole test suite under the
#      sanitizers (any report fails its test), the fuzzers' seed corpora
#      replayed (ctest label "fuzz"), then a 30 s run of each fuzzer
#      (deploy/fuzz.sh; FUZZ_SECONDS overrides).
#   3. g++, everything (-Werror), then the whole test suite with ctest in
#      parallel. Benchmarks are built but not run (tests/bench).
# The suites of stages 2 and 3 include the deploy files' tests (tests/deploy,
# labels "prometheus" and "deploy": promtool, a real Prometheus on loopback,
# the Kubernetes manifests, cmake --install); deploy/README.md lists them.
# They also run cgacct-load against a real cgacctd (label "load": open loop
# under a SIGSTOP stall, warm-up, the reclaim scenario) and its --chart
# through the real gnuplot (label "gnuplot"). Not the image in a real Docker
# (label "docker", deploy/docker_test.sh: ~10 min of a core to build the
# image; run it with `ctest --test-dir build -L docker` as root).
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

stage "clang ASan+UBSan: build, ctest, fuzz"
# -O1 and line tables only: what the sanitizers' reports need, and the
# cheapest build that gives them.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
  -DCGACCT_BUILD_BENCH=OFF \
  -DCGACCT_SANITIZE=address,undefined -DCGACCT_FUZZ=ON -DCGACCT_WERROR=ON \
  -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
cmake --build build-asan -j"$jobs"
# detect_leaks: LeakSanitizer is part of the check; tests/lsan.supp lists
# the leaks that are not ours (with why).
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1" \
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ctest --test-dir build-asan -j"$jobs" --output-on-failure --timeout 300 -LE docker
LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0" \
  deploy/fuzz.sh build-asan "${FUZZ_SECONDS:-30}"

stage "g++ build and ctest"
CGACCT_WERROR=ON deploy/build.sh
ctest --test-dir build -j"$jobs" --output-on-failure --timeout 300 -LE docker
stage ""
