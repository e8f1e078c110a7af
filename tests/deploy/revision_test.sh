#!/usr/bin/env bash
# The revision of a source tree without .git (a container build:
# .dockerignore keeps .git out of deploy/Dockerfile's context; issue 26, item
# 11: the image reported revision "unknown"). Copies SOURCE_DIR without .git
# and build trees, configures it (tests and benchmarks off: a second), and
# checks cgacct_build_info.h: -DCGACCT_REVISION=abcdef123456 is what it
# reports, nothing given is "unknown", and a value that is not hex is
# refused at configure.
#   revision_test.sh SOURCE_DIR [CMAKE]
set -euo pipefail
src=$1
cmake=${2:-cmake}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "revision_test: FAIL: $*" >&2; exit 1; }

mkdir "$tmp/src"
tar -C "$src" --exclude=./.git --exclude='./build*' --exclude='./bld*' \
  --exclude='./ci-*' -cf - . | tar -C "$tmp/src" -xf -
[ ! -e "$tmp/src/.git" ] || fail "the copy has .git"
configure() {
  "$cmake" -S "$tmp/src" -B "$tmp/$1" -DCGACCT_BUILD_TESTS=OFF \
    -DCGACCT_BUILD_BENCH=OFF "${@:2}" >"$tmp/$1.log" 2>&1
}
configure given -DCGACCT_REVISION=abcdef123456 ||
  { cat "$tmp/given.log" >&2; fail "configure with -DCGACCT_REVISION failed"; }
grep -q 'kCgacctGitRevision\[\] = "abcdef123456";' "$tmp/given/cgacct_build_info.h" ||
  fail "-DCGACCT_REVISION=abcdef123456 not reported: $(grep Revision "$tmp/given/cgacct_build_info.h")"
configure none || { cat "$tmp/none.log" >&2; fail "configure without it failed"; }
grep -q 'kCgacctGitRevision\[\] = "unknown";' "$tmp/none/cgacct_build_info.h" ||
  fail "no .git, no -DCGACCT_REVISION: not \"unknown\""
if configure bad '-DCGACCT_REVISION=not hex'; then
  fail "a revision that is not hex was accepted"
fi
grep -q 'CGACCT_REVISION: a hex git revision' "$tmp/bad.log" ||
  fail "the refusal does not name CGACCT_REVISION: $(cat "$tmp/bad.log")"
echo "revision_test: ok (given: abcdef123456; none: unknown; \"not hex\" refused)"
