#!/usr/bin/env bash
# Soak (issue 11 item 8; not in CI): a long mixed cgacct-load run against a
# Release cgacctd, reporting RSS growth, latency drift and errors.
#
#   tests/bench/soak.sh [DURATION_S] [WORKLOAD...]
#     DURATION_S  total load time in seconds (default 600)
#     WORKLOAD    cgacct-load flags (default: the mixed stat-reader + hog
#                 scenario, --scenario=seed-rstat --threads=4 --hogs=4)
#   env: BUILD  build directory with server/cgacctd and client/cgacct-load
#               (default build-rel; configure it with
#               -DCMAKE_BUILD_TYPE=Release)
#        SEGMENT_S  length of one cgacct-load run (default 60): the load is
#               DURATION_S / SEGMENT_S back-to-back runs on the same daemon,
#               each with its own JSON report, so that the first and the
#               last minute have their own percentiles
#        OUT    where the samples and reports go (default a mktemp dir)
#        CPUS   cgacctd --cpus (default 2)
#
# What it measures: cgacctd's VmRSS every 10 s (/proc/PID/status); the p99
# of reads (GetStats) and of charges (Charge/Uncharge) in the first and the
# last segment; every segment's RPC errors and exit status. Goals (issue
# 11): RSS growth < 5 % (last sample against the one at the end of the
# first segment: the first minute is warm-up), 0 errors, p99 drift < 20 %.
# Exit status 0 when all three goals are met, 1 otherwise.
# It wants a quiet-ish machine: p99 drift on a shared 2-core VM follows
# the other load more than cgacctd; the script prints `uptime` at start and
# end.
set -euo pipefail

DURATION_S=${1:-600}
shift || true
if [[ $# -gt 0 ]]; then
  WORKLOAD=("$@")
else
  WORKLOAD=(--scenario=seed-rstat --threads=4 --hogs=4)
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-rel}
SEGMENT_S=${SEGMENT_S:-60}
OUT=${OUT:-$(mktemp -d /tmp/cgacct-soak.XXXXXX)}
CPUS=${CPUS:-2}
mkdir -p "$OUT"
CGACCTD=$BUILD/server/cgacctd
LOAD=$BUILD/client/cgacct-load
[[ -x $CGACCTD && -x $LOAD ]] || { echo "soak: no $CGACCTD or $LOAD (build them)" >&2; exit 2; }

echo "soak: out=$OUT duration=${DURATION_S}s segment=${SEGMENT_S}s workload=${WORKLOAD[*]}"
echo "soak: start uptime: $(uptime)"
"$CGACCTD" --listen=127.0.0.1:0 --metrics_listen= --cpus="$CPUS" \
  >"$OUT/cgacctd.out" 2>"$OUT/cgacctd.err" &
PID=$!
SAMPLER=
cleanup() {
  [[ -n $SAMPLER ]] && kill "$SAMPLER" 2>/dev/null || true
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do
  grep -q listening "$OUT/cgacctd.out" 2>/dev/null && break
  sleep 0.1
done
PORT=$(grep -o '127\.0\.0\.1:[0-9]*' "$OUT/cgacctd.out" | head -1 | cut -d: -f2)
[[ -n $PORT ]] || { echo "soak: cgacctd did not start" >&2; cat "$OUT/cgacctd.err" >&2; exit 2; }

START=$(date +%s)
( while kill -0 "$PID" 2>/dev/null; do
    echo "$(( $(date +%s) - START )) $(awk '/^VmRSS:/ {print $2}' /proc/$PID/status)"
    sleep 10
  done ) >"$OUT/rss.tsv" &
SAMPLER=$!

SEGMENTS=$(( (DURATION_S + SEGMENT_S - 1) / SEGMENT_S ))
: >"$OUT/status.tsv"
for i in $(seq 1 "$SEGMENTS"); do
  rc=0
  "$LOAD" --target=127.0.0.1:$PORT "${WORKLOAD[@]}" --duration=${SEGMENT_S}s \
    --json="$OUT/seg-$i.json" >"$OUT/seg-$i.txt" 2>&1 || rc=$?
  echo "$i $rc" >>"$OUT/status.tsv"
done
# One more RSS sample after the load.
echo "$(( $(date +%s) - START )) $(awk '/^VmRSS:/ {print $2}' /proc/$PID/status)" >>"$OUT/rss.tsv"
echo "soak: end uptime: $(uptime)"

python3 - "$OUT" "$SEGMENTS" "$SEGMENT_S" <<'PY'
import json, sys
out, segments, segment_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rss = [tuple(map(int, l.split())) for l in open(f"{out}/rss.tsv") if len(l.split()) == 2]
status = [tuple(map(int, l.split())) for l in open(f"{out}/status.tsv")]
segs = [json.load(open(f"{out}/seg-{i}.json")) for i in range(1, segments + 1)]
base = [kb for t, kb in rss if t >= segment_s]
base_kb = base[0] if base else rss[0][1]
last_kb = rss[-1][1]
growth = (last_kb - base_kb) / base_kb * 100
errors = sum(s["reads"]["errors"] + s["charges"]["errors"] for s in segs)
bad_rc = [i for i, rc in status if rc != 0]
def p99(s, k): return s[k]["latency"]["p99_us"]
def drift(k):
    a, b = p99(segs[0], k), p99(segs[-1], k)
    return a, b, (b - a) / a * 100 if a else 0.0
print(f"RSS: first sample {rss[0][1]} KiB, after the first segment {base_kb} KiB, "
      f"peak {max(kb for _, kb in rss)} KiB, last {last_kb} KiB: growth {growth:+.1f} %")
print("RSS samples (s KiB): " + ", ".join(f"{t} {kb}" for t, kb in rss))
ok = growth < 5 and errors == 0 and not bad_rc
for k in ("reads", "charges"):
    a, b, d = drift(k)
    per_s = [round(s[k]["per_s"]) for s in segs]
    print(f"{k}: p99 first segment {a:.0f} us, last {b:.0f} us: drift {d:+.1f} %; "
          f"p99 per segment {[round(p99(s, k)) for s in segs]}; per second {per_s}")
    ok = ok and d < 20
print(f"errors: {errors} RPC errors; segments with a non-zero exit: {bad_rc or 'none'}")
print("soak: goals (RSS < 5 %, 0 errors, p99 drift < 20 %):", "met" if ok else "NOT met")
sys.exit(0 if ok else 1)
PY
