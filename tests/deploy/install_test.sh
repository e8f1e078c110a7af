#!/usr/bin/env bash
# `cmake --install BUILD_DIR --prefix TMP` into a fresh temporary prefix, then
# checks the installed tree: the three binaries (executable; the installed
# cgacctd and cgacctctl answer --version, exit 0), the systemd unit (its
# ExecStart= names the installed cgacctd, and nothing else of it changed),
# and the scrape config, alert rules, dashboard and manifests under
# share/cgacct (byte-identical to deploy/).
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
echo "install_test: OK ($(find "$prefix" -type f | wc -l) files under the prefix)"
