#!/usr/bin/env bash
# `cmake --install BUILD_DIR --prefix TMP` into a fresh temporary prefix, then
# checks the installed tree: the three binaries (executable; the installed
# cgacctd and cgacctctl answer --version, exit 0), the systemd unit (its
# ExecStart= names the installed cgacctd, and nothing else of it changed),
# and the scrape config, alert rules, dashboard and manifests under
# share/cgacct (byte-identical to deploy/); the Python client package under
# lib/python3.X/dist-packages/cgacct (it imports).
#   install_test.sh BUILD_DIR SOURCE_DIR [CMAKE]
set -euo pipefail
build=$1
src=$2
cmake=${3:-cmake}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

"$cmake" --install "$build" --prefix "$prefix" >"$prefix.log" 2>&1 ||
  { cat "$prefix.log" >&2; rm -f "$prefix.log"; fail "cmake --install failed"; }
rm -f "$prefix.log"

for b in cgacctd cgacctctl cgacct-load; do
  [ -x "$prefix/bin/$b" ] || fail "bin/$b missing or not executable"
done
for b in cgacctd cgacctctl; do
  out=$("$prefix/bin/$b" --version 2>&1) || fail "installed $b --version exited $?: $out"
  grep -q "$b" <<<"$out" || fail "installed $b --version does not name $b: $out"
done

unit=$prefix/lib/systemd/system/cgacctd.service
[ -f "$unit" ] || fail "lib/systemd/system/cgacctd.service missing"
grep -q "^ExecStart=$prefix/bin/cgacctd " "$unit" ||
  fail "unit's ExecStart= does not name $prefix/bin/cgacctd: $(grep ExecStart= "$unit")"
# Apart from the binary's directory, the installed unit is the shipped one.
diff <(sed "s|$prefix/bin/|/usr/local/bin/|g" "$unit") "$src/deploy/systemd/cgacctd.service" >&2 ||
  fail "installed unit differs from deploy/systemd/cgacctd.service beyond ExecStart="

for f in prometheus/prometheus.yml prometheus/cgacct-alerts.yml \
         grafana/cgacct-dashboard.json kubernetes/daemonset.yaml \
         kubernetes/namespace.yaml kubernetes/service.yaml; do
  cmp -s "$prefix/share/cgacct/$f" "$src/deploy/$f" || fail "share/cgacct/$f missing or not deploy/$f"
done
# The Python client package, stubs included, importable by Debian's python3
# from the prefix's dist-packages (client/python/CMakeLists.txt).
pydir=$(find "$prefix/lib" -maxdepth 3 -type d -path '*/dist-packages/cgacct' | head -1)
[ -n "$pydir" ] || fail "the Python package cgacct is not under lib/python3.*/dist-packages"
for f in __init__.py client.py v1/accounting_pb2.py v1/accounting_pb2_grpc.py; do
  [ -f "$pydir/$f" ] || fail "${pydir#"$prefix"/}/$f missing"
done
out=$(cd / && PYTHONPATH=$(dirname "$pydir") /usr/bin/python3 -c \
  'import cgacct, cgacct.v1.accounting_pb2_grpc; print(cgacct.__file__)' 2>&1) ||
  fail "installed cgacct does not import: $out"
[ "$out" = "$pydir/__init__.py" ] || fail "imported cgacct from $out, not $pydir"

echo "install_test: OK ($(find "$prefix" -type f | wc -l) files under the prefix)"
