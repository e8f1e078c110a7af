#!/usr/bin/env bash
# Issue 5's seed reproduction: runs tests/bench/seed_rstat (engine level,
# every flush-lock policy, whole under both preempt models, hogs on every
# CPU, 400 modelled CPUs, fresh engine per row) in the
# exact and the threshold read modes, prints the tables, and draws the read
# latency distributions per policy (tests/bench/seed_rstat.png, gnuplot).
# Not part of the test run. Needs a Release build:
#   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2 --target seed_rstat
#   tests/bench/seed_rstat.sh [build-rel]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-rel}
OUT=${OUT:-/tmp/seed_rstat}
mkdir -p "$OUT"
command -v gnuplot >/dev/null || {
  echo "installing gnuplot-nox (Debian) for the chart" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null
}
for mode in exact threshold; do
  "$BUILD/tests/bench/seed_rstat" --flush="$mode" --json="$OUT/$mode.json" "${@:2}" | tee "$OUT/$mode.txt"
done
python3 - "$OUT/exact.json" "$OUT" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
out = sys.argv[2]
for scenario in ("readers", "readers+hogs"):
    sel = [r for r in rows if r["scenario"] == scenario]
    with open(f"{out}/{scenario.replace('+', '_')}.dat", "w") as f:
        f.write("bucket_us " + " ".join(r["policy"] for r in sel) + "\n")
        for k in range(0, 20):
            vals = []
            for r in sel:
                total = max(1, sum(r["pow2_counts"]))
                vals.append(100.0 * r["pow2_counts"][k] / total)
            f.write(f"{1 << k} " + " ".join(f"{v:.3f}" for v in vals) + "\n")
PY
gnuplot <<GP
set terminal pngcairo size 1100,450 noenhanced
set output "tests/bench/seed_rstat.png"
set multiplot layout 1,2 title "GetStats (exact) read latency, 400 modelled CPUs, by flush-lock policy (engine level)"
set logscale x 2
set xrange [1:16384]
set xlabel "read latency, power-of-2 bucket lower bound (us)"
set ylabel "% of reads"
set key top right
set grid
set title "stat readers alone"
plot for [i=2:*] "$OUT/readers.dat" using 1:i with linespoints title columnheader(i)
set title "stat readers + hogs charging until OOM"
plot for [i=2:*] "$OUT/readers_hogs.dat" using 1:i with linespoints title columnheader(i)
unset multiplot
GP
echo "chart: tests/bench/seed_rstat.png" >&2
