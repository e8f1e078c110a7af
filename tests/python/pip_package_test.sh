#!/usr/bin/env bash
# The Python client as Python packages are used (issue 26, item 3), with no
# package index (none is reachable here): Debian's python3-venv, -pip,
# -setuptools and -wheel, and its python3-grpcio and python3-protobuf seen
# through --system-site-packages.
#   pip_package_test.sh SOURCE_DIR BUILD_DIR CGACCTD PROJECT_VERSION
# Checks: the stubs kept in client/python/cgacct/v1 are what the build
# generates from proto/ now; `pip install ./client/python` into a venv
# (from a copy of the directory: pip builds in place) imports cgacct from
# the venv, with __version__ = the project's version, py.typed and the
# stubs, and its Client charges against a real cgacctd, get_session()
# giving a typed SessionInfo; `pip wheel` builds a wheel that holds the
# stubs and py.typed and declares grpcio and protobuf, and the wheel
# installs into a second venv, where cgacct imports.
set -euo pipefail
src=$1
build=$2
cgacctd=$3
version=$4
py=/usr/bin/python3
tmp=$(mktemp -d)
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "pip_package_test: FAIL: $*" >&2; exit 1; }

for f in accounting_pb2.py accounting_pb2_grpc.py; do
  cmp -s "$src/client/python/cgacct/v1/$f" "$build/client/python/cgacct/v1/$f" ||
    fail "client/python/cgacct/v1/$f is not what protoc generates from proto/ now: run client/python/update_stubs.sh"
done

cp -r "$src/client/python" "$tmp/pkg"
rm -rf "$tmp/pkg/build" "$tmp/pkg"/*.egg-info
pip_flags=(--no-build-isolation --no-index --disable-pip-version-check --quiet)

"$py" -m venv --system-site-packages "$tmp/venv" || fail "python3 -m venv failed"
"$tmp/venv/bin/pip" install "${pip_flags[@]}" "$tmp/pkg" >"$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log" >&2; fail "pip install ./client/python failed"; }

out=$("$tmp/venv/bin/python" - "$version" <<'PY'
import os, sys
import cgacct, cgacct.v1.accounting_pb2_grpc
assert cgacct.__version__ == sys.argv[1], (cgacct.__version__, sys.argv[1])
assert "/venv/lib/" in cgacct.__file__, cgacct.__file__
here = os.path.dirname(cgacct.__file__)
assert os.path.exists(os.path.join(here, "py.typed")), "no py.typed"
assert cgacct.Client.charge.__annotations__["return"] is cgacct.ChargeResult
print(cgacct.__file__)
PY
) || fail "the installed package: $out"

out_file=$tmp/cgacctd.out
"$cgacctd" --listen=127.0.0.1:0 --metrics_listen= --cpus=2 >"$out_file" 2>&1 &
daemon_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out_file" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$out_file" >&2; fail "cgacctd did not start"; }

run=$("$tmp/venv/bin/python" - "127.0.0.1:$port" <<'PY'
import sys
import grpc
import cgacct
from cgacct.v1 import accounting_pb2 as pb, accounting_pb2_grpc as pb_grpc
stub = pb_grpc.AccountingStub(grpc.insecure_channel(sys.argv[1]))
stub.CreateGroup(pb.CreateGroupRequest(path=b"/pip"), timeout=10)
with cgacct.Client(sys.argv[1], client_name="pip-test") as c:
    r = c.charge("/pip", 3)
    assert isinstance(r, cgacct.ChargeResult) and r.nr_pages == 3, r
    info = c.get_session()
    assert isinstance(info, cgacct.SessionInfo), type(info)
    assert info.client_name == "pip-test", info
    assert info.holdings and isinstance(info.holdings[0], cgacct.Holding), info
    assert info.holdings[0].path == "/pip", info.holdings
    assert info.held_pages == 3 + c.stocked(), (info, c.stocked())
    c.uncharge("/pip", 3)
try:
    stub.GetStats(pb.GetStatsRequest(path=b"/nope"), timeout=10)
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.NOT_FOUND, e.code()
else:
    raise AssertionError("GetStats of a missing group answered")
print("charged and read back through the venv's cgacct: held_pages=%d" % info.held_pages)
PY
) || fail "the venv's cgacct against cgacctd: $run"

"$tmp/venv/bin/pip" wheel "${pip_flags[@]}" --no-deps -w "$tmp/dist" "$tmp/pkg" >"$tmp/wheel.log" 2>&1 ||
  { cat "$tmp/wheel.log" >&2; fail "pip wheel ./client/python failed"; }
wheel=$(ls "$tmp/dist"/cgacct-"$version"-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || fail "no wheel cgacct-$version-*.whl in $(ls "$tmp/dist")"
listing=$("$py" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")
for f in cgacct/__init__.py cgacct/client.py cgacct/cluster.py cgacct/py.typed \
         cgacct/v1/accounting_pb2.py cgacct/v1/accounting_pb2_grpc.py; do
  grep -qx "$f" <<<"$listing" || fail "the wheel has no $f"
done
metadata=$("$py" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print(z.read([n for n in z.namelist() if n.endswith(".dist-info/METADATA")][0]).decode())' "$wheel")
grep -q "^Requires-Dist: grpcio" <<<"$metadata" || fail "the wheel does not require grpcio"
grep -q "^Requires-Dist: protobuf" <<<"$metadata" || fail "the wheel does not require protobuf"

"$py" -m venv --system-site-packages "$tmp/venv2"
"$tmp/venv2/bin/pip" install "${pip_flags[@]}" "$wheel" >"$tmp/pip2.log" 2>&1 ||
  { cat "$tmp/pip2.log" >&2; fail "pip install of the wheel failed"; }
(cd / && "$tmp/venv2/bin/python" -c 'import cgacct, cgacct.v1.accounting_pb2; assert "/venv2/lib/" in cgacct.__file__') ||
  fail "cgacct from the wheel does not import"

echo "pip_package_test: $run"
echo "pip_package_test: OK ($(basename "$wheel"))"
