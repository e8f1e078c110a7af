#!/usr/bin/env bash
# Installs the Debian 12 packages cgacct builds, tests and benchmarks with,
# when any is missing. Nothing is downloaded from anywhere but Debian's
# archive.
#   - the libraries and code generators (gRPC, Protobuf, Abseil,
#     prometheus-cpp, GoogleTest/GoogleMock, Google Benchmark);
#   - cmake, g++, make: the build;
#   - curl: the scale test
#     (tests/server/metrics_scale_test) scrapes /metrics with it, plain and
#     gzip, at 10,000 and 100,000 groups;
#   - openssl: the access-control tests make their CA and certificates with
#     the real openssl CLI at test time (nothing is shipped or downloaded);
#   - clang-14 and libclang-rt-14-dev: the test command compiles the engine,
#     server and clients with clang too, whose -Wthread-safety analysis
#     checks the lock annotations (g++ ignores them), and runs the engine's
#     ThreadSanitizer build with clang (libclang-rt-14-dev is its TSan
#     runtime);
#   - libsqlite3-dev: cgacctd's state store under --state_dir (groups, limits,
#     request ids survive restarts); sqlite3: the tests check the store file
#     with SQLite's own integrity_check;
#   - python3-grpcio, python3-protobuf: the test command drives cgacctd from
#     Python over stubs it generates from the proto (tests/python); they are
#     also the runtime of the Python client package cgacct (client/python,
#     Debian's 1.51 / 3.21: the stubs protoc 3.21 generates need them, and
#     nothing comes from a package index);
#   - python3-venv, python3-pip, python3-setuptools, python3-wheel: the test
#     command installs that package as users do, with pip into a venv
#     (--system-site-packages, --no-index: no index is reachable) from
#     client/python/pyproject.toml, and builds its wheel
#     (tests/python/pip_package_test.sh);
#   - libcurl4-openssl-dev: cgacct-load's /metrics scrape and the tests' HTTP
#     GET (client/load/metrics_scrape.cc, tests/server/http_get.h) use libcurl
#     instead of a hand-written HTTP client;
#   - libssl-dev: OpenSSL's X.509 parser reads the client certificates a
#     trusted front proxy passes on (server/auth/forwarded_certificate.cc;
#     Debian's gRPC is built against the same OpenSSL 3);
#   - nlohmann-json3-dev: the clients' JSON (cgacct-load's reports, cgacctctl
#     --json for cat/ls/tree/top) instead of a hand-written JSON writer;
#   - prometheus (Debian's 2.42; Debian ships promtool only in it),
#     python3-yaml: `promtool check metrics` lints a live scrape of cgacctd
#     (tests/server/promtool_test); the test command checks deploy/prometheus
#     with promtool, starts a real
#     Prometheus on loopback scraping a test cgacctd through the shipped
#     scrape config and evaluates every dashboard/alert expression, and
#     parses the Kubernetes manifests (tests/deploy).
#   - gnuplot-nox: cgacct-load --chart draws its latency PNG with gnuplot (the
#     test command runs the real one: label "gnuplot"); -nox: no X11 needed.
#   - nghttp2-client: h2load, the reference client tests/bench/h2load_compare.sh
#     measures cgacct-load's own per-call overhead against.
#   - python3-h2: the HTTP/2 rapid-reset flood test writes its HEADERS +
#     RST_STREAM frames with the h2 library (tests/server/daemon/rapid_reset_flood.py).
#   - haproxy: the TLS front proxy of deploy/front-proxy/ for token-only
#     deployments (it keeps the rapid-reset flood, which gRPC 1.51 has no
#     defence against, from cgacctd, and gives each client connection a
#     connection to cgacctd of its own, as the receive guard needs: nghttpx
#     shares one); the proxy test runs the shipped config
#     (tests/deploy/front_proxy_test.py, label "proxy").
#   - etcd-server, etcd-client (3.4.23): cluster mode's tests start their own
#     3-member etcd on loopback (label "cluster"; never the system one).
#   - groff-base: the test command renders cgacctctl's manual page with
#     groff's man macros and fails on any warning (tests/client/ctl/
#     docs_test.py); man-db, which users read it with, depends on it.
# Cluster mode's etcd client is generated from etcd's own .proto files, which
# Debian ships only inside Go source packages: they are fetched from Debian's
# archive with `apt-get download` (golang-etcd-server-dev,
# golang-github-gogo-protobuf-dev, golang-github-grpc-ecosystem-grpc-gateway-dev,
# about 2 MB), and the seven files cgacct needs are unpacked with dpkg-deb
# into $CGACCT_ETCD_PROTO_ROOT (default /usr/local/share/cgacct/etcd-proto);
# installing those packages would pull 145 Go source packages.
# CGACCT_DEPS=build installs only what building the three binaries needs
# (no tests, benchmarks or tools): deploy/Dockerfile's build stage.
set -euo pipefail

# Building cgacctd, cgacctctl, cgacct-load (-DCGACCT_BUILD_TESTS=OFF).
build_packages=(
  cmake g++ make pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libsqlite3-dev
  libcurl4-openssl-dev nlohmann-json3-dev libssl-dev
)
packages=(
  "${build_packages[@]}"
  curl openssl clang-14 libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev sqlite3
  python3-grpcio python3-protobuf
  python3-venv python3-pip python3-setuptools python3-wheel
  prometheus python3-yaml
  gnuplot-nox nghttp2-client python3-h2 haproxy
  etcd-server etcd-client groff-base
)
case "${CGACCT_DEPS:-all}" in
  all) ;;
  build) packages=("${build_packages[@]}") ;;
  *) echo "cgacct: CGACCT_DEPS=${CGACCT_DEPS} (all or build)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
etcd_root=${CGACCT_ETCD_PROTO_ROOT:-/usr/local/share/cgacct/etcd-proto}
etcd_files=(
  etcd/etcdserver/etcdserverpb/rpc.proto
  etcd/mvcc/mvccpb/kv.proto
  etcd/auth/authpb/auth.proto
  etcd/etcdserver/api/v3election/v3electionpb/v3election.proto
  gogoproto/gogo.proto
  google/api/annotations.proto
  google/api/http.proto
)
need_etcd_protos=0
for f in "${etcd_files[@]}"; do
  [ -f "$etcd_root/$f" ] || need_etcd_protos=1
done
[ ${#missing[@]} -eq 0 ] && [ $need_etcd_protos -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "cgacct: need root (or sudo) to apt-get install ${missing[*]} and unpack etcd's protos into $etcd_root" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
updated=0
if [ ${#missing[@]} -gt 0 ]; then
  echo "cgacct: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  updated=1
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ $need_etcd_protos -eq 1 ]; then
  echo "cgacct: unpacking etcd's .proto files from Debian's archive into $etcd_root" >&2
  [ $updated -eq 1 ] || $SUDO apt-get update -qq
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"  # apt's _apt user writes the downloads
  (cd "$tmp" && apt-get download -qq golang-etcd-server-dev \
      golang-github-gogo-protobuf-dev golang-github-grpc-ecosystem-grpc-gateway-dev \
      2>/dev/null)
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/x"; done
  src="$tmp/x/usr/share/gocode/src"
  for f in "${etcd_files[@]}"; do
    case "$f" in
      etcd/*) from="$src/go.etcd.io/$f" ;;
      gogoproto/*) from="$src/github.com/gogo/protobuf/$f" ;;
      google/*) from="$src/github.com/grpc-ecosystem/grpc-gateway/third_party/googleapis/$f" ;;
    esac
    $SUDO install -D -m 644 "$from" "$etcd_root/$f"
  done
fi
