#!/usr/bin/env bash
# A/B of the service's charge paths between two builds (e.g. before and
# after a change to the handlers): cgacct-load --scenario=netperf
# --streams=4 against a cgacctd of each build on loopback, alternating old
# and new, RUNS runs of DURATION seconds per --rpc. Prints "rpc side run
# ops_per_s" lines; take medians.
#
#   OLD=build-old NEW=build tests/bench/drain_defer_ab.sh
#
# Environment: OLD, NEW (build dirs), RUNS (3), DURATION (5), RPCS
# ("unary batch stream"), OLD_FLAGS and NEW_FLAGS (extra cgacctd flags of
# each side, e.g. to give both the same engine options when the defaults
# changed in between), NICE (a nice level for both servers and the load,
# e.g. -20 on a shared machine). The servers it starts are stopped on exit.
set -euo pipefail
OLD=${OLD:?build dir of the old side}; NEW=${NEW:?build dir of the new side}
RUNS=${RUNS:-3}; DURATION=${DURATION:-5}; RPCS=${RPCS:-"unary batch stream"}
LOAD=$NEW/client/cgacct-load
tmp=$(mktemp -d)
NICE=${NICE:-0}
start() { nice -n "$NICE" "$1/server/cgacctd" --listen="127.0.0.1:$2" --metrics_listen="" $3 >"$tmp/$2.log" 2>&1 & echo $!; }
po=57501; pn=57502
pido=$(start $OLD $po "${OLD_FLAGS:-}"); pidn=$(start $NEW $pn "${NEW_FLAGS:-}")
trap 'kill $pido $pidn 2>/dev/null; wait 2>/dev/null; rm -rf $tmp' EXIT
for log in "$tmp/$po.log" "$tmp/$pn.log"; do
  for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
  grep -q listening "$log" || { cat "$log" >&2; exit 1; }
done
for rpc in $RPCS; do
  for run in $(seq $RUNS); do
    for side in old new; do
      port=$([ $side = old ] && echo $po || echo $pn)
      nice -n "$NICE" $LOAD --target=127.0.0.1:$port --metrics_target=127.0.0.1:1 --scenario=netperf --rpc=$rpc --streams=4 --duration=${DURATION}s --json=$tmp/r.json >/dev/null 2>&1 || true
      ops=$(sed -n 's/.*"ops_per_s": \([0-9.e+-]*\).*/\1/p' $tmp/r.json | head -1)
      echo "$rpc $side $run $ops"
    done
  done
done
