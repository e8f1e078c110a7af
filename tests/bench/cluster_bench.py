#!/usr/bin/python3
"""Cluster mode's figures (issue 23; docs/DESIGN.md §4.18), against the real
parts on loopback: a 3-member etcd (Debian's etcd-server) and 3 cgacctd
nodes, and a single-node cgacctd as the baseline measured in the same run.

  cluster_bench.py CGACCTD CGACCT_LOAD STUBS_DIR [--rounds=3] [--seconds=5]

Prints, as medians over the rounds (one value per round):
  - charge latency (cgacct-load --scenario=netperf --rpc=unary, 2 streams):
    p50/p99 at the shard's owner and through a forwarding node, each divided
    by the single node's;
  - etcd Txns per charge at steady state (every node's
    cgacct_cluster_etcd_txns_total over the runs), and lease keepalives;
  - failover: kill -9 of an owner, and SIGTERM, until a re-charge (resume)
    of its shard is admitted elsewhere;
  - CreateGroup latency in cluster mode divided by single-node mode with
    --state_dir (SQLite), the same Python client for both;
  - library charges/s: one cgacct::client::ClusterClient, 4 threads each
    charging and uncharging 1 page of 6 groups in turn (6 shards spread over
    the 3 nodes; the same 6 groups on the single node), with batching off
    (every call an RPC at its shard's owner) and at batch 64, against 3
    nodes divided by against one (tests/bench/cluster_client_throughput).
Not part of the test run (tests/bench/README in RESULTS.md).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

CGACCTD, LOAD, STUBS = sys.argv[1:4]
ROUNDS = 3
SECONDS = 5
THROUGHPUT = os.path.join(os.path.dirname(os.path.abspath(LOAD)), "..", "tests",
                          "bench", "cluster_client_throughput")
LIB_GROUPS = ["/lib%d" % i for i in range(6)]
for arg in sys.argv[4:]:
    if arg.startswith("--throughput="):
        THROUGHPUT = arg.split("=", 1)[1]
    elif arg.startswith("--rounds="):
        ROUNDS = int(arg.split("=", 1)[1])
    elif arg.startswith("--seconds="):
        SECONDS = int(arg.split("=", 1)[1])
sys.path.insert(0, STUBS)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "server", "cluster"))

import grpc  # noqa: E402

from cgacct.v1 import accounting_pb2 as pb  # noqa: E402
from cgacct.v1 import accounting_pb2_grpc as pb_grpc  # noqa: E402
from etcd_cluster import Etcd, Node, free_ports, text, wait_for  # noqa: E402

TTL_S = 3
GROUP = "/cgacct-load"


def netperf(target, metrics):
    out = tempfile.mktemp(suffix=".json")
    subprocess.run([LOAD, "--scenario=netperf", "--rpc=unary", "--streams=2",
                    "--warmup=1s", "--duration=%ds" % SECONDS,
                    "--target=" + target, "--metrics_target=" + metrics,
                    "--json=" + out], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(out) as f:
        report = json.load(f)
    os.unlink(out)
    if report["rpc_errors"] or report["op_errors"]:
        raise RuntimeError("netperf errors at %s: %s" % (target, report["first_error"]))
    return report


def library_pairs_per_s(target, batch):
    out = subprocess.run([THROUGHPUT, target, ",".join(LIB_GROUPS), "4", str(SECONDS),
                          str(batch)], check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    if r["errors"]:
        raise RuntimeError("library errors at %s: %s" % (target, out.stderr))
    return r["pairs_per_s"]


def metric(metrics, name, labels=""):
    body = urllib.request.urlopen("http://%s/metrics" % metrics, timeout=5).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name) and labels in line and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def med(values):
    return statistics.median(values)


class Single:
    def __init__(self, extra=()):
        port, mport = free_ports(2)
        self.address = "127.0.0.1:%d" % port
        self.metrics = "127.0.0.1:%d" % mport
        self.proc = subprocess.Popen(
            [CGACCTD, "--listen=" + self.address, "--metrics_listen=" + self.metrics,
             "--cpus=2"] + list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.proc.stdout.readline()
        self.channel = grpc.insecure_channel(self.address)
        self.stub = pb_grpc.AccountingStub(self.channel)

    def close(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait()


def create_latencies_ms(stub, base, n=200):
    stub.CreateGroup(pb.CreateGroupRequest(path=base.encode()), timeout=10)
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        stub.CreateGroup(pb.CreateGroupRequest(path=("%s/g%d" % (base, i)).encode()),
                         timeout=10)
        lat.append((time.perf_counter() - t0) * 1e3)
    return lat


def owners(node):
    m = node.stub.GetClusterMap(pb.GetClusterMapRequest(), timeout=5)
    return {text(s.shard_root): s.owner_address for s in m.shards}


def resume_admitted(nodes, shard, gone):
    for n in nodes:
        if n is gone or n.proc.poll() is not None:
            continue
        try:
            n.stub.Charge(pb.ChargeRequest(path=shard.encode(), nr_pages=1,
                                           kind=pb.PAGE_KIND_ANON, resume=True),
                          timeout=2, metadata=(("cgacct-forwarded", "1"),))
            return n
        except grpc.RpcError:
            pass
    return None


def main():
    results = {}
    # --- single node: the baseline, and SQLite's CreateGroup ---
    single = Single()
    base = [netperf(single.address, single.metrics) for _ in range(ROUNDS)]
    for g in LIB_GROUPS:
        single.stub.CreateGroup(pb.CreateGroupRequest(path=g.encode()), timeout=10)
    lib_single = {b: [library_pairs_per_s(single.address, b) for _ in range(ROUNDS)]
                  for b in (0, 64)}
    single.close()
    state = tempfile.mkdtemp(prefix="cgacct-bench-state-")
    single = Single(["--state_dir=" + state])
    sqlite_create = [med(create_latencies_ms(single.stub, "/c%d" % r)) for r in range(ROUNDS)]
    single.close()
    subprocess.run(["rm", "-rf", state])

    # --- cluster ---
    etcd = Etcd()
    nodes = []
    try:
        ports = free_ports(6)
        for i in range(3):
            nodes.append(Node(CGACCTD, etcd, "/bench", ports[i], TTL_S,
                              metrics_port=ports[3 + i]))
        nodes[0].stub.CreateGroup(pb.CreateGroupRequest(path=GROUP.encode()), timeout=10)
        owner_address = wait_for(lambda: owners(nodes[0]).get(GROUP), 10)
        owner = next(n for n in nodes if n.address == owner_address)
        other = next(n for n in nodes if n is not owner)
        txns0 = sum(metric(n.metrics, "cgacct_cluster_etcd_txns_total") for n in nodes)
        keep0 = sum(metric(n.metrics, "cgacct_cluster_keepalives_total") for n in nodes)
        t0 = time.monotonic()
        at_owner = [netperf(owner.address, owner.metrics) for _ in range(ROUNDS)]
        forwarded = [netperf(other.address, other.metrics) for _ in range(ROUNDS)]
        elapsed = time.monotonic() - t0
        txns = sum(metric(n.metrics, "cgacct_cluster_etcd_txns_total") for n in nodes) - txns0
        keeps = sum(metric(n.metrics, "cgacct_cluster_keepalives_total") for n in nodes) - keep0
        charges = sum(r["ops"] for r in at_owner + forwarded) / 2  # charge+uncharge pairs
        cluster_create = [med(create_latencies_ms(other.stub, "/c%d" % r)) for r in range(ROUNDS)]
        for g in LIB_GROUPS:
            nodes[0].stub.CreateGroup(pb.CreateGroupRequest(path=g.encode()), timeout=10)

        def spread():
            m = owners(nodes[0])
            mine = [m.get(g) for g in LIB_GROUPS]
            return all(mine) and len(set(mine)) == 3
        if not wait_for(spread, 20):
            raise RuntimeError("the library's 6 shards did not spread over 3 nodes")
        lib_cluster = {b: [library_pairs_per_s(nodes[0].address, b) for _ in range(ROUNDS)]
                       for b in (0, 64)}

        # Failovers: each round kills the shard's owner and starts a node in
        # its place (three nodes again).
        kill9, sigterm = [], []
        for r in range(2 * ROUNDS):
            shard = "/f%d" % r
            nodes[0].stub.CreateGroup(pb.CreateGroupRequest(path=shard.encode()), timeout=10)
            address = wait_for(lambda: owners(nodes[0]).get(shard), 10)
            victim = next(n for n in nodes if n.address == address)
            t = time.monotonic()
            if r % 2 == 0:
                victim.proc.kill()
            else:
                victim.proc.terminate()
            heir = wait_for(lambda: resume_admitted(nodes, shard, victim), TTL_S + 10)
            took = time.monotonic() - t
            if heir is None:
                raise RuntimeError("%s not served after the owner stopped" % shard)
            (kill9 if r % 2 == 0 else sigterm).append(took)
            victim.close()
            nodes.remove(victim)
            port, mport = free_ports(2)
            nodes.insert(0, Node(CGACCTD, etcd, "/bench", port, TTL_S, metrics_port=mport))
    finally:
        for n in nodes:
            n.close()
        etcd.close()

    def p(reports, key):
        return med([r["latency"][key] for r in reports])

    results = {
        "single_p50_us": p(base, "p50_us"), "single_p99_us": p(base, "p99_us"),
        "owner_p50_us": p(at_owner, "p50_us"), "owner_p99_us": p(at_owner, "p99_us"),
        "forwarded_p50_us": p(forwarded, "p50_us"),
        "forwarded_p99_us": p(forwarded, "p99_us"),
        "single_ops_per_s": med([r["ops_per_s"] for r in base]),
        "owner_ops_per_s": med([r["ops_per_s"] for r in at_owner]),
        "forwarded_ops_per_s": med([r["ops_per_s"] for r in forwarded]),
        "charges": charges, "etcd_txns": txns, "keepalives": keeps,
        "seconds": elapsed,
        "kill9_failover_s": kill9, "sigterm_failover_s": sigterm,
        "create_ms_cluster": cluster_create, "create_ms_sqlite": sqlite_create,
        "library_pairs_per_s_single": lib_single, "library_pairs_per_s_cluster": lib_cluster,
    }
    print(json.dumps(results, indent=1))
    print("charge p50 at the owner / single node: %.2fx (%.1f / %.1f us); p99 %.2fx"
          % (results["owner_p50_us"] / results["single_p50_us"], results["owner_p50_us"],
             results["single_p50_us"], results["owner_p99_us"] / results["single_p99_us"]))
    print("charge p50 through a forwarding node / single node: %.2fx (%.1f us); p99 %.2fx"
          % (results["forwarded_p50_us"] / results["single_p50_us"],
             results["forwarded_p50_us"],
             results["forwarded_p99_us"] / results["single_p99_us"]))
    print("etcd Txns per charge: %.6f (%d Txns over %d charges in %.0f s; %d keepalives)"
          % (txns / max(1, charges), txns, charges, elapsed, keeps))
    print("failover after kill -9: median %.2f s %s; after SIGTERM: median %.2f s %s (TTL %d s)"
          % (med(kill9), [round(x, 2) for x in kill9], med(sigterm),
             [round(x, 2) for x in sigterm], TTL_S))
    for b in (0, 64):
        print("library charge+uncharge pairs/s, batch %d: 3 nodes / 1: %.2fx (%.0f / %.0f)"
              % (b, med(lib_cluster[b]) / med(lib_single[b]), med(lib_cluster[b]),
                 med(lib_single[b])))
    print("CreateGroup p50, cluster / SQLite: %.2fx (%.2f / %.2f ms)"
          % (med(cluster_create) / med(sqlite_create), med(cluster_create),
             med(sqlite_create)))


if __name__ == "__main__":
    main()
