#!/bin/bash
# A/B of two cgacctd builds under cgacct-load's netperf scenario (4
# connections, one message in flight each), alternating which goes first;
# one line per run. Used for "Raw request parsing" in RESULTS.md.
#   BASE=dir NEW=dir tests/bench/raw_parse_ab.sh RPC RUNS DURATION
#   (dirs: build directories with server/cgacctd; the client is NEW's)
set -eu
rpc=$1; runs=$2; dur=$3
LOAD=$NEW/client/cgacct-load
for i in $(seq $runs); do
  if (( i % 2 )); then order="base new"; else order="new base"; fi
  for which in $order; do
    if [ $which = base ]; then b=$BASE; else b=$NEW; fi
    out=$(mktemp)
    $b/server/cgacctd --listen=127.0.0.1:0 --metrics_listen= --cpus=2 > $out 2>&1 & p=$!
    sleep 0.5; port=$(grep -o '127.0.0.1:[0-9]*' $out | head -1 | cut -d: -f2); rm -f $out
    line=$($LOAD --target=127.0.0.1:$port --scenario=netperf --rpc=$rpc --streams=4 --duration=$dur 2>&1 | grep -E "^  (ops  |latency/message|rpc errors)" | tr -s ' ' | tr '\n' ' ')
    echo "$rpc $i $which $line"
    kill $p; wait $p
  done
done
