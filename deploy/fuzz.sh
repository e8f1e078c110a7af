#!/usr/bin/env bash
# Time-boxed libFuzzer runs of tests/fuzz's targets (docs/DESIGN.md §12).
#   deploy/fuzz.sh BUILD_DIR [SECONDS]   (SECONDS per target, default 30)
# BUILD_DIR is a clang build with -DCGACCT_FUZZ=ON (deploy/test.sh's
# build-asan: ASan + UBSan + LeakSanitizer). Each target starts from its seed
# corpus (tests/fuzz/corpus/NAME) copied into BUILD_DIR/fuzz/NAME/corpus, so
# the repository is not touched; a crash, leak, sanitizer report, invariant
# violation or timeout (25 s per input) fails the run and leaves the input
# in BUILD_DIR/fuzz/NAME/ (crash-*, leak-*, timeout-*). Add such an input to
# tests/fuzz/crashes/NAME/ with the fix: ctest replays it from then on.
# MERGE=1 merges what a run found back into tests/fuzz/corpus/NAME
# (minimised, -merge=1), for long runs that should grow the seeds.
# Each target's last line of statistics (execs, coverage, corpus) is
# printed as "cgacct-fuzz: NAME: ...".
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: deploy/fuzz.sh BUILD_DIR [SECONDS]}
seconds=${2:-30}
status=0
for name in engine_ops_fuzzer request_fuzzer; do
  bin=$build/tests/fuzz/$name
  [ -x "$bin" ] || { echo "cgacct-fuzz: $bin missing (configure with -DCGACCT_FUZZ=ON)" >&2; exit 1; }
  work=$build/fuzz/$name
  rm -rf "$work/corpus"
  mkdir -p "$work/corpus"
  cp tests/fuzz/corpus/$name/* "$work/corpus/" 2>/dev/null || true
  log=$work/log.txt
  # libFuzzer's per-input leak check stops the world and scans the heap
  # whenever an input's mallocs and frees do not pair up, which gRPC's
  # asynchronous frees make happen on most request_fuzzer inputs (its runs
  # slowed from ~130 to ~5 inputs/s). Its leaks are checked at exit instead
  # (LeakSanitizer, ASAN_OPTIONS below), here and in ctest's corpus replay.
  per_input_leaks=1
  [ "$name" = request_fuzzer ] && per_input_leaks=0
  # ASAN_OPTIONS: leaks are errors (LeakSanitizer), as in the ctest stage.
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$bin" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=3072 \
      -detect_leaks=$per_input_leaks \
      -max_len=16384 -print_final_stats=1 -artifact_prefix="$work/" \
      "$work/corpus" >"$log" 2>&1; then
    echo "cgacct-fuzz: $name FAILED; input and log in $work/" >&2
    grep -E "ERROR|violated|SUMMARY|Test unit written" "$log" | head -20 >&2 || true
    status=1
    continue
  fi
  echo "cgacct-fuzz: $name: $(grep -E '^#[0-9]+' "$log" | tail -1)" >&2
  grep -E "stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)" "$log" \
    | sed "s/^/cgacct-fuzz: $name: /" >&2 || true
  if [ "${MERGE:-0}" = 1 ]; then
    "$bin" -merge=1 -max_len=16384 "tests/fuzz/corpus/$name" "$work/corpus" >>"$log" 2>&1
  fi
done
exit $status
