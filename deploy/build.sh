#!/usr/bin/env bash
# Configures and builds cgacct into ${BUILD_DIR:-build} (RelWithDebInfo):
# everything, or only BUILD_TARGETS (space-separated) when set. Warnings in
# the project's own code are errors when CGACCT_WERROR=ON (the test command
# sets it; off by default, and set on every configure so it does not stick
# in the cache). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCGACCT_WERROR="${CGACCT_WERROR:-OFF}" "$@" >/dev/null
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
echo "cgacct: building in $BUILD_DIR (a first build takes a few minutes)" >&2
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}" >&2
