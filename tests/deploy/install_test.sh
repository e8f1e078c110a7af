#!/usr/bin/env bash
# `cmake --install BUILD_DIR --prefix TMP` into a fresh temporary prefix, then
# checks the installed tree: the three binaries (executable; the installed
# cgacctd and cgacctctl answer --version, exit 0), cgacctctl's manual page and
# bash completion (what it prints with --man, --completion=bash), the systemd unit (its
# ExecStart= names the installed cgacctd, and nothing else of it changed),
# and the scrape config, alert rules, dashboard and manifests under
# share/cgacct (byte-identical to deploy/); then the application library:
# the header, static libraries and package config are installed, and a tiny
# consumer project (tests/deploy/consumer: find_package(cgacct),
# cgacct::client) configures and builds against the prefix alone (offline)
# and runs against the installed cgacctd on loopback (charges through its
# stock, closes; deleting the group afterwards reparents 0 pages); the Python
# client package under lib/python3.X/dist-packages/cgacct (it imports).
# Then each component alone: "client" (the library, with a pkg-config file
# an application builds with, and the .proto protoc compiles), "server",
# "tools", "python".
#   install_test.sh BUILD_DIR SOURCE_DIR [CMAKE]
set -euo pipefail
build=$1
src=$2
cmake=${3:-cmake}
prefix=$(mktemp -d)
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$prefix"
}
trap cleanup EXIT
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

# cgacctctl's manual page and bash completion, as it prints them.
cmp -s "$prefix/share/man/man1/cgacctctl.1" <("$prefix/bin/cgacctctl" --man) ||
  fail "share/man/man1/cgacctctl.1 missing or not cgacctctl --man"
cmp -s "$prefix/share/bash-completion/completions/cgacctctl" \
  <("$prefix/bin/cgacctctl" --completion=bash) ||
  fail "share/bash-completion/completions/cgacctctl missing or not cgacctctl --completion=bash"

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
for f in include/cgacct/client.h include/cgacct/cluster_client.h include/cgacct/groups.h \
         include/cgacct/channel.h include/cgacct/status.h include/cgacct/v1/accounting.pb.h \
         include/cgacct/v1/accounting.grpc.pb.h lib/libcgacct_client.a lib/libcgacct_proto.a \
         lib/libcgacct_client.so.0.1 \
         lib/cmake/cgacct/cgacctConfig.cmake lib/cmake/cgacct/cgacctConfigVersion.cmake \
         lib/cmake/cgacct/cgacctTargets.cmake; do
  [ -f "$prefix/$f" ] || fail "$f missing"
done
# The public headers name no generated type, and no gRPC status: the
# library's own Status (cgacct/status.h).
for h in client.h cluster_client.h groups.h channel.h status.h; do
  ! grep -q 'cgacct/v1\|v1::' "$prefix/include/cgacct/$h" || fail "$h includes generated code"
  ! grep -qE 'grpc::Status([^C]|$)|grpcpp/support/status' "$prefix/include/cgacct/$h" ||
    fail "$h exposes grpc::Status"
done
# The shared library: its soname, and the generated code exported from it.
[ -L "$prefix/lib/libcgacct_client.so" ] || fail "lib/libcgacct_client.so (the link) missing"
soname=$(readelf -d "$prefix/lib/libcgacct_client.so.0.1" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libcgacct_client.so.0.1 ] || fail "libcgacct_client.so's soname is '$soname'"
stubs=$(nm -DC --defined-only "$prefix/lib/libcgacct_client.so.0.1" | grep -c 'cgacct::v1::Accounting::Stub::Stub' || true)
[ "$stubs" -gt 0 ] || fail "libcgacct_client.so does not export the cgacct.v1 stubs"

# A consumer built against the prefix only, with the compiler and the
# sanitizer instrumentation the installed static libraries were built with
# (the test suite also runs in the ASan+UBSan+fuzzer-coverage build).
cache=$build/CMakeCache.txt
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")
sanitize=$(sed -n 's/^CGACCT_SANITIZE:[A-Z]*=//p' "$cache")
fuzz=$(sed -n 's/^CGACCT_FUZZ:[A-Z]*=//p' "$cache")
sanflags=
[ -n "$sanitize" ] && sanflags="-fsanitize=$sanitize"
[ "$fuzz" = ON ] && sanflags="$sanflags -fsanitize=fuzzer-no-link"
cbuild=$prefix/consumer-build
"$cmake" -S "$src/tests/deploy/consumer" -B "$cbuild" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo ${cxx:+-DCMAKE_CXX_COMPILER="$cxx"} \
  -DCMAKE_CXX_FLAGS="$sanflags" -DCMAKE_EXE_LINKER_FLAGS="$sanflags" \
  >"$prefix/consumer.log" 2>&1 ||
  { cat "$prefix/consumer.log" >&2; fail "consumer: find_package(cgacct) configure failed"; }
"$cmake" --build "$cbuild" -j2 >>"$prefix/consumer.log" 2>&1 ||
  { cat "$prefix/consumer.log" >&2; fail "consumer: build against the installed cgacct::client failed"; }

out=$prefix/cgacctd.out
"$prefix/bin/cgacctd" --listen=127.0.0.1:0 --metrics_listen= --cpus=2 >"$out" 2>&1 &
daemon_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$out" >&2; fail "installed cgacctd did not start"; }
ctl() { "$prefix/bin/cgacctctl" --target=127.0.0.1:$port "$@"; }
ctl create /app >/dev/null || fail "cgacctctl create /app"
res=$("$cbuild/consumer" 127.0.0.1:$port /app 2>&1) || fail "consumer run failed: $res"
grep -q "consumer: OK" <<<"$res" || fail "consumer did not report OK: $res"
# The same against the shared library (cgacct::client_shared): it is what
# the binary loads, from the prefix (CMake's install RPATH is the build's).
# (Read whole first: grep -q stops reading, and with pipefail readelf's
# SIGPIPE on a long dynamic section, the sanitizer build's, failed the test.)
dyn=$(readelf -d "$cbuild/consumer-shared")
grep -q 'NEEDED.*libcgacct_client\.so\.0\.1' <<<"$dyn" ||
  fail "consumer-shared does not load libcgacct_client.so.0.1"
res=$(LD_LIBRARY_PATH=$prefix/lib "$cbuild/consumer-shared" 127.0.0.1:$port /app 2>&1) ||
  fail "consumer-shared run failed: $res"
grep -q "consumer: OK" <<<"$res" || fail "consumer-shared did not report OK: $res"
loaded=$(LD_LIBRARY_PATH=$prefix/lib ldd "$cbuild/consumer-shared" | grep libcgacct_client)
grep -q "$prefix/lib/libcgacct_client.so.0.1" <<<"$loaded" ||
  fail "consumer-shared loaded another libcgacct_client: $loaded"
# Deleting the group drains the server's own per-CPU stock first (css
# offline): what is still charged is reparented, and must be nothing.
rep=$(ctl delete /app) || fail "cgacctctl delete /app"
grep -qx "reparented_pages 0" <<<"$rep" ||
  fail "/app still held pages after the consumer closed: $rep"
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


# The library alone (issue 26, item 6): `cmake --install --component
# client` puts the libraries, headers, CMake package, pkg-config file and
# the service's .proto in a prefix of their own, and nothing of the
# server or the tools; an application builds with pkg-config alone and
# runs; protoc compiles the installed .proto.
lib_prefix=$prefix/client-only
"$cmake" --install "$build" --prefix "$lib_prefix" --component client >"$prefix/client.log" 2>&1 ||
  { cat "$prefix/client.log" >&2; fail "cmake --install --component client failed"; }
for f in include/cgacct/client.h include/cgacct/v1/accounting.grpc.pb.h lib/libcgacct_client.a \
         lib/libcgacct_client.so.0.1 \
         lib/libcgacct_proto.a lib/cmake/cgacct/cgacctConfig.cmake lib/pkgconfig/cgacct.pc \
         share/cgacct/proto/cgacct/v1/accounting.proto; do
  [ -f "$lib_prefix/$f" ] || fail "component client: $f missing"
done
others=$(cd "$lib_prefix" && find . -type f | grep -v -e '^./include/cgacct/' -e '^./lib/lib' \
  -e '^./lib/cmake/cgacct/' -e '^./lib/pkgconfig/cgacct.pc$' -e '^./share/cgacct/proto/' || true)
[ -z "$others" ] || fail "component client installed more than the library: $others"
cmp -s "$lib_prefix/share/cgacct/proto/cgacct/v1/accounting.proto" \
  "$src/proto/cgacct/v1/accounting.proto" || fail "the installed .proto is not proto/'s"
mkdir "$prefix/protoc-out"
protoc -I "$lib_prefix/share/cgacct/proto" --cpp_out="$prefix/protoc-out" \
  cgacct/v1/accounting.proto || fail "protoc does not compile the installed .proto"
pc_flags=$(PKG_CONFIG_PATH=$lib_prefix/lib/pkgconfig pkg-config --cflags --libs cgacct) ||
  fail "pkg-config --cflags --libs cgacct failed"
grep -q -- "-lcgacct_client" <<<"$pc_flags" || fail "pkg-config cgacct: no -lcgacct_client: $pc_flags"
# shellcheck disable=SC2086 # the flags are words
"${cxx:-c++}" -std=c++17 $sanflags "$src/tests/deploy/consumer/main.cc" -o "$prefix/consumer-pc" \
  $pc_flags >"$prefix/consumer-pc.log" 2>&1 ||
  { cat "$prefix/consumer-pc.log" >&2; fail "consumer: build with pkg-config --cflags --libs cgacct failed"; }
dyn=$(readelf -d "$prefix/consumer-pc")
grep -q 'NEEDED.*libcgacct_client\.so\.0\.1' <<<"$dyn" ||
  fail "pkg-config's -lcgacct_client did not link the shared library"
ctl create /app-pc >/dev/null || fail "cgacctctl create /app-pc"
res_pc=$(LD_LIBRARY_PATH=$lib_prefix/lib "$prefix/consumer-pc" 127.0.0.1:$port /app-pc 2>&1) ||
  fail "pkg-config consumer run failed: $res_pc"
grep -q "consumer: OK" <<<"$res_pc" || fail "pkg-config consumer did not report OK: $res_pc"
for component in server tools python; do
  "$cmake" --install "$build" --prefix "$prefix/only-$component" --component "$component" \
    >/dev/null 2>&1 || fail "cmake --install --component $component failed"
done
[ -x "$prefix/only-server/bin/cgacctd" ] && [ ! -e "$prefix/only-server/bin/cgacctctl" ] &&
  [ ! -d "$prefix/only-server/include" ] || fail "component server is not cgacctd alone"
[ -x "$prefix/only-tools/bin/cgacctctl" ] && [ ! -e "$prefix/only-tools/bin/cgacctd" ] ||
  fail "component tools is not cgacctctl and cgacct-load"

echo "install_test: $res"
echo "install_test: built with pkg-config alone: $res_pc"
echo "install_test: OK ($(find "$prefix" -path "$cbuild" -prune -o -type f -print | wc -l) files under the prefix)"
