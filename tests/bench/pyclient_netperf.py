#!/usr/bin/python3
"""The netperf workload from Python: raw stubs against cgacct.Client.

  pyclient_netperf.py CGACCTD PYTHONPATH_DIR [--threads 4] [--seconds 5]
                      [--pages 3] [--repeats 3]

Starts CGACCTD on 127.0.0.1 (port 0, --cpus=2, metrics on), creates
/bench, then, per repeat, runs for --seconds with --threads threads each
looping charge(pages) + uncharge(pages) on /bench (the netperf workload of
tests/bench/RESULTS.md: 3 pages, 4 threads):
  raw     Charge + Uncharge RPCs on the generated stub (one round trip each,
          what an application without the client does);
  client  cgacct.Client (one session, per-thread stock, defaults).
Prints per run the pairs (charge + uncharge) per second, and for the client
the server's Charge/Uncharge RPCs per charge (grpc_server_started_total
from /metrics, before and after) and its stock hits; then the medians.
Both run in the same process, against the same daemon, one after the other.
"""
import argparse
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cgacctd")
    ap.add_argument("pythonpath")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--pages", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, args.pythonpath)
    import grpc
    import cgacct
    from cgacct.v1 import accounting_pb2 as pb
    from cgacct.v1 import accounting_pb2_grpc as pb_grpc

    daemon = subprocess.Popen(
        [args.cgacctd, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--cpus=2"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"127\.0\.0\.1:(\d+) \(metrics on 127\.0\.0\.1:(\d+),",
                  daemon.stdout.readline())
    target, metrics = "127.0.0.1:" + m.group(1), "127.0.0.1:" + m.group(2)

    def rpcs():
        with urllib.request.urlopen("http://%s/metrics" % metrics, timeout=10) as r:
            text = r.read().decode()
        return sum(float(v) for meth, v in re.findall(
            r'^grpc_server_started_total\{[^}]*grpc_method="(Charge|Uncharge)"[^}]*\} (\S+)$',
            text, re.M))

    try:
        channel = grpc.insecure_channel(target)
        grpc.channel_ready_future(channel).result(timeout=20)
        stub = pb_grpc.AccountingStub(channel)
        stub.CreateGroup(pb.CreateGroupRequest(path=b"/bench"), timeout=10)

        def run(op):
            counts = [0] * args.threads
            stop = time.monotonic() + args.seconds

            def worker(i):
                n = 0
                while time.monotonic() < stop:
                    op()
                    n += 1
                counts[i] = n
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
            start = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sum(counts), time.monotonic() - start

        def raw_pair():
            stub.Charge(pb.ChargeRequest(path=b"/bench", nr_pages=args.pages,
                                         kind=pb.PAGE_KIND_ANON), timeout=5)
            stub.Uncharge(pb.UnchargeRequest(path=b"/bench", nr_pages=args.pages,
                                             kind=pb.PAGE_KIND_ANON), timeout=5)

        results = {"raw": [], "client": []}
        for rep in range(args.repeats):
            pairs, secs = run(raw_pair)
            results["raw"].append(pairs / secs)
            print("raw     run %d: %8.0f pairs/s" % (rep + 1, pairs / secs), flush=True)
            with cgacct.Client(target) as c:
                def client_pair():
                    c.charge("/bench", args.pages)
                    c.uncharge("/bench", args.pages)
                before = rpcs()
                pairs, secs = run(client_pair)
                after = rpcs()
                st = c.stats()
            results["client"].append(pairs / secs)
            print("client  run %d: %8.0f pairs/s, %d server RPCs for %d charges (%.1e per "
                  "charge), %d of them from the stock"
                  % (rep + 1, pairs / secs, after - before, pairs, (after - before) / pairs,
                     st.get("stock_hits", 0)), flush=True)
        raw, cli = statistics.median(results["raw"]), statistics.median(results["client"])
        print("median: raw %.0f pairs/s, client %.0f pairs/s: %.1fx"
              % (raw, cli, cli / raw))
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)


if __name__ == "__main__":
    main()
