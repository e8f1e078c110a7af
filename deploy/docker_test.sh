#!/usr/bin/env bash
# deploy/Dockerfile proven in a real container runtime, as a user runs the
# image (issue 26): Docker from Debian (docker.io), a base image made with
# debootstrap from Debian's archive and imported under the Dockerfile's FROM
# name (no registry is reachable here, so nothing is pulled), the image
# built from this checkout, then:
#   - Docker's HEALTHCHECK turns healthy, and cgacctctl on the host reads
#     health SERVING through the published port;
#   - a group created and charged through cgacctctl from the host;
#   - the state (--state_dir on a named volume, owned by the image's uid
#     65532 as the image creates it) survives a container restart: the
#     group and its memory.max are back, usage restarts at 0;
#   - `docker stop` (SIGTERM) exits 0;
#   - the image's OCI revision label and cgacctd --version in the image name
#     this checkout's revision.
# Prints the build time and the image size (deploy/README.md keeps them).
#   deploy/docker_test.sh [CGACCTCTL]
# Run as root from the repository (ctest label "docker", not in the default
# test command: the build takes ~10 min of a core). Installs docker.io and
# debootstrap with apt-get when missing, starts dockerd when none runs.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
ctl=${1:-$src/build/client/cgacctctl}
docker=/usr/bin/docker  # Debian's client, matching its daemon
image=cgacct/cgacctd:docker-test
name=cgacctd-docker-test
volume=cgacct-docker-test-state
tmp=$(mktemp -d)
dockerd_pid=
fail() { echo "docker_test: FAIL: $*" >&2; exit 1; }
cleanup() {
  "$docker" rm -f "$name" >/dev/null 2>&1 || true
  "$docker" volume rm -f "$volume" >/dev/null 2>&1 || true
  [ -n "$dockerd_pid" ] && kill "$dockerd_pid" 2>/dev/null && wait "$dockerd_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || fail "run as root (dockerd, debootstrap)"
[ -x "$ctl" ] || fail "no cgacctctl at $ctl (build it, or pass its path)"
missing=()
for p in docker.io debootstrap; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "docker_test: installing ${missing[*]} (Debian)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! "$docker" info >/dev/null 2>&1; then
  /usr/sbin/dockerd >"$tmp/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do "$docker" info >/dev/null 2>&1 && break; sleep 1; done
  "$docker" info >/dev/null 2>&1 || { tail -20 "$tmp/dockerd.log" >&2; fail "dockerd did not start"; }
fi

# The base image: the Dockerfile's FROM, made locally.
base=$(sed -n 's/^FROM \([^ ]*\) AS build$/\1/p' deploy/Dockerfile)
[ -n "$base" ] || fail "no 'FROM IMAGE AS build' in deploy/Dockerfile"
if ! "$docker" image inspect "$base" >/dev/null 2>&1; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  echo "docker_test: making $base with debootstrap from ${mirror:-http://deb.debian.org/debian}"
  t0=$(date +%s)
  debootstrap --variant=minbase bookworm "$tmp/rootfs" "${mirror:-http://deb.debian.org/debian}" \
    >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log" >&2; fail "debootstrap failed"; }
  tar -C "$tmp/rootfs" -c . | "$docker" import - "$base" >/dev/null
  rm -rf "$tmp/rootfs"
  echo "docker_test: base image in $(( $(date +%s) - t0 )) s"
fi

revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
t0=$(date +%s)
"$docker" build --build-arg CGACCT_REVISION="$revision" -f deploy/Dockerfile -t "$image" . \
  >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log" >&2; fail "docker build failed"; }
build_s=$(( $(date +%s) - t0 ))
size=$("$docker" image inspect -f '{{.Size}}' "$image")
echo "docker_test: image built in ${build_s} s, $(( size / 1000000 )) MB"

label=$("$docker" image inspect -f '{{index .Config.Labels "org.opencontainers.image.revision"}}' "$image")
[ "$label" = "$revision" ] || fail "the image's revision label is '$label', not $revision"
version=$("$docker" run --rm --entrypoint /usr/local/bin/cgacctd "$image" --version)
grep -q "$revision" <<<"$version" || fail "cgacctd --version in the image does not name $revision: $version"

port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$docker" volume create "$volume" >/dev/null
run() {
  "$docker" run -d --name "$name" -p "127.0.0.1:$port:50051" -v "$volume:/var/lib/cgacct" \
    "$image" --listen=0.0.0.0:50051 --insecure --metrics_listen=127.0.0.1:9464 \
    --state_dir=/var/lib/cgacct >/dev/null
}
healthy() {
  for _ in $(seq 60); do
    [ "$("$docker" inspect -f '{{.State.Health.Status}}' "$name")" = healthy ] && return 0
    [ "$("$docker" inspect -f '{{.State.Running}}' "$name")" = true ] ||
      { "$docker" logs "$name" >&2; fail "the container exited"; }
    sleep 1
  done
  "$docker" logs "$name" >&2
  fail "Docker's HEALTHCHECK did not turn healthy in 60 s"
}
c() { "$ctl" --target="127.0.0.1:$port" "$@"; }

run
healthy
[ "$(c health)" = SERVING ] || fail "cgacctctl health from the host: $(c health 2>&1)"
c create /docker --max=64M >/dev/null || fail "cgacctctl create from the host"
c charge /docker 8 anon >/dev/null || fail "cgacctctl charge from the host"
[ "$(c cat /docker memory.current)" -ge 32768 ] || fail "memory.current after the charge"

"$docker" restart -t 10 "$name" >/dev/null
healthy
[ "$(c cat /docker memory.max)" = 67108864 ] ||
  fail "after a restart /docker's memory.max is '$(c cat /docker memory.max 2>&1)', not 67108864 (state lost?)"
[ "$(c cat /docker memory.current)" = 0 ] || fail "usage is not persisted: memory.current should be 0"
"$docker" logs "$name" 2>&1 | grep -q "state /var/lib/cgacct: 1 groups" ||
  { "$docker" logs "$name" >&2; fail "the start line does not say it restored the group"; }

"$docker" stop -t 20 "$name" >/dev/null
code=$("$docker" inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || { "$docker" logs "$name" >&2; fail "docker stop (SIGTERM): exit $code, not 0"; }

echo "docker_test: OK (revision $revision; healthy, charged from the host, state kept across a restart on a named volume, SIGTERM exit 0; build ${build_s} s, image $(( size / 1000000 )) MB)"
