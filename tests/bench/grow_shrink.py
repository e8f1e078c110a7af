#!/usr/bin/python3
"""RPCs per library call when an application grows, then shrinks (issue 26,
item 10), beside pyclient_netperf.py's steady loop.

  grow_shrink.py CGACCTD PYTHONPATH_DIR CLIENT_GROW_SHRINK
                 [--pages 3] [--max-pages 20000] [--repeats 3]

Starts CGACCTD on 127.0.0.1 (port 0, --cpus=2, metrics on) and, per
repeat, on a fresh group with memory.max = --max-pages pages, grows it by
--pages pages a call to just under the max (6,666 calls with the
defaults) and shrinks it back by as many frees, one thread, three ways in
the same run:
  raw     Charge / Uncharge RPCs on the generated stub (one RPC a call: the
          baseline);
  python  cgacct.Client (client/python), defaults;
  cpp     cgacct::client::Client (CLIENT_GROW_SHRINK, tests/bench/
          client_grow_shrink.cc), defaults.
For each: calls/s and the server's Charge and Uncharge RPCs per call of
each phase (grpc_server_started_total from /metrics, before and after);
then the medians and each library's calls/s over raw's. The goal: at most
1/20 RPCs per library call in each phase.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cgacctd")
    ap.add_argument("pythonpath")
    ap.add_argument("client_grow_shrink")
    ap.add_argument("--pages", type=int, default=3)
    ap.add_argument("--max-pages", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, args.pythonpath)
    import grpc
    import cgacct
    from cgacct.v1 import accounting_pb2 as pb
    from cgacct.v1 import accounting_pb2_grpc as pb_grpc

    calls = (args.max_pages - 1) // args.pages
    daemon = subprocess.Popen(
        [args.cgacctd, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
         "--cpus=2"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"127\.0\.0\.1:(\d+) \(metrics on 127\.0\.0\.1:(\d+),",
                  daemon.stdout.readline())
    target, metrics = "127.0.0.1:" + m.group(1), "127.0.0.1:" + m.group(2)

    def rpcs(method):
        with urllib.request.urlopen("http://%s/metrics" % metrics,
                                    timeout=10) as r:
            text = r.read().decode()
        return sum(float(v) for v in re.findall(
            r'^grpc_server_started_total\{[^}]*grpc_method="%s"[^}]*\} (\S+)$'
            % method, text, re.M))

    results = {"raw": [], "python": [], "cpp": []}
    try:
        channel = grpc.insecure_channel(target)
        grpc.channel_ready_future(channel).result(timeout=20)
        stub = pb_grpc.AccountingStub(channel)
        n = 0

        def fresh_group():
            nonlocal n
            n += 1
            path = "/grow%d" % n
            stub.CreateGroup(pb.CreateGroupRequest(path=path.encode()),
                             timeout=10)
            stub.SetLimits(pb.SetLimitsRequest(
                path=path.encode(),
                limits=pb.Limits(max_bytes=args.max_pages * 4096)),
                timeout=10)
            return path

        def measure(name, grow, shrink):
            path = fresh_group()
            c0, u0 = rpcs("Charge"), rpcs("Uncharge")
            start = time.monotonic()
            grow(path)
            c1, u1 = rpcs("Charge"), rpcs("Uncharge")
            shrink(path)
            seconds = time.monotonic() - start
            c2, u2 = rpcs("Charge"), rpcs("Uncharge")
            r = {"calls_per_s": 2 * calls / seconds,
                 "grow_rpcs_per_call": (c1 - c0 + u1 - u0) / calls,
                 "shrink_rpcs_per_call": (c2 - c1 + u2 - u1) / calls}
            results[name].append(r)
            print("%-6s %6d calls each way: %8.0f calls/s, RPCs per call "
                  "growing %.4f (1/%.0f), shrinking %.4f (1/%.0f)" % (
                      name, calls, r["calls_per_s"], r["grow_rpcs_per_call"],
                      1 / max(r["grow_rpcs_per_call"], 1e-9),
                      r["shrink_rpcs_per_call"],
                      1 / max(r["shrink_rpcs_per_call"], 1e-9)), flush=True)

        def raw_grow(path):
            for _ in range(calls):
                stub.Charge(pb.ChargeRequest(path=path.encode(),
                                             nr_pages=args.pages,
                                             kind=pb.PAGE_KIND_ANON),
                            timeout=5)

        def raw_shrink(path):
            for _ in range(calls):
                stub.Uncharge(pb.UnchargeRequest(path=path.encode(),
                                                 nr_pages=args.pages,
                                                 kind=pb.PAGE_KIND_ANON),
                              timeout=5)

        for _ in range(args.repeats):
            measure("raw", raw_grow, raw_shrink)
            with cgacct.Client(target) as c:
                measure("python",
                        lambda p: [c.charge(p, args.pages)
                                   for _ in range(calls)],
                        lambda p: [c.uncharge(p, args.pages)
                                   for _ in range(calls)])
            out = {}

            def cpp_grow(path):
                # The binary does both phases: the shrink's RPCs are read
                # from its own counters.
                proc = subprocess.run(
                    [args.client_grow_shrink, target, path, str(args.pages),
                     str(calls), "1"], capture_output=True, text=True,
                    check=True)
                out.update(json.loads(proc.stdout))
            path = fresh_group()
            c0, u0 = rpcs("Charge"), rpcs("Uncharge")
            start = time.monotonic()
            cpp_grow(path)
            seconds = time.monotonic() - start
            r = {"calls_per_s": out["calls"] / out["seconds"],
                 "grow_rpcs_per_call": out["charge_rpcs"] / calls,
                 "shrink_rpcs_per_call": out["uncharge_rpcs"] / calls,
                 "server_rpcs": rpcs("Charge") - c0 + rpcs("Uncharge") - u0}
            results["cpp"].append(r)
            print("%-6s %6d calls each way: %8.0f calls/s, RPCs per call "
                  "growing %.4f (1/%.0f), shrinking %.4f (1/%.0f); %d server "
                  "RPCs in %.2f s with Open and Close" % (
                      "cpp", calls, r["calls_per_s"], r["grow_rpcs_per_call"],
                      1 / max(r["grow_rpcs_per_call"], 1e-9),
                      r["shrink_rpcs_per_call"],
                      1 / max(r["shrink_rpcs_per_call"], 1e-9),
                      r["server_rpcs"], seconds), flush=True)
        raw = statistics.median(r["calls_per_s"] for r in results["raw"])
        for name in ("python", "cpp"):
            med = {k: statistics.median(r[k] for r in results[name])
                   for k in ("calls_per_s", "grow_rpcs_per_call",
                             "shrink_rpcs_per_call")}
            print("median %-6s: %.0f calls/s (%.1fx raw's %.0f), RPCs per "
                  "call growing 1/%.0f, shrinking 1/%.0f" % (
                      name, med["calls_per_s"], med["calls_per_s"] / raw, raw,
                      1 / max(med["grow_rpcs_per_call"], 1e-9),
                      1 / max(med["shrink_rpcs_per_call"], 1e-9)))
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)


if __name__ == "__main__":
    main()
