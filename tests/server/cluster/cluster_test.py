#!/usr/bin/python3
"""Cluster mode against the real parts: a 3-member etcd (Debian's etcd-server)
and 3 cgacctd nodes on loopback (docs/DESIGN.md §4.18).

  cluster_test.py CGACCTD STUBS_DIR [--skip REASON | unittest's arguments]

Each test starts its own etcd members (free ports, temporary data
directories, --heartbeat-interval=200 --election-timeout=2000) and nodes,
and stops them after. The figures (failover times) are printed.
"""
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

CGACCTD = sys.argv[1]
sys.path.insert(0, sys.argv[2])
if len(sys.argv) > 4 and sys.argv[3] == "--skip":
    print("skipped: %s" % sys.argv[4])
    sys.exit(77)  # ctest's skip
del sys.argv[1:3]  # the rest (test names, -k PATTERN) is unittest's

import grpc  # noqa: E402

import cgacct  # noqa: E402
from cgacct.v1 import accounting_pb2 as pb  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from etcd_cluster import (Etcd, Node as ClusterNode, ProxiedEtcd, free_ports,  # noqa: E402
                          text, wait_for)
from holders import Holders  # noqa: E402

TTL_S = 3
PAGE = 4096
# cgacct-load (CMake passes it in the environment).
LOAD = os.environ.get("CGACCT_LOAD", "")
# tests/client/lib/cluster_client_probe: cgacct::client::ClusterClient (C++)
# driven from stdin.
PROBE = os.environ.get("CGACCT_CLUSTER_PROBE", "")
# cgacctctl of the same build (BUILD/server/cgacctd, BUILD/client/cgacctctl).
CGACCTCTL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(CGACCTD))),
                         "client", "cgacctctl")
FORWARDED = (("cgacct-forwarded", "1"),)
# The fault tests' held shard: its memory.max, in pages (Holders keep it
# there), and the takeover grace of their nodes.
HELD_MAX = 400
HELD_GRACE_S = 2


class ClusterTest(unittest.TestCase):
    prefix_count = 0

    def setUp(self):
        self.etcd = Etcd()
        ClusterTest.prefix_count += 1
        self.prefix = "/t%d" % ClusterTest.prefix_count
        self.nodes = []

    def tearDown(self):
        for n in self.nodes:
            n.close()
        self.etcd.close()

    def start_nodes(self, count=3, extra=(), metrics=False):
        """`metrics`: each node serves /metrics too (Node.metrics)."""
        ports = free_ports(2 * count if metrics else count)
        for i in range(count):
            self.nodes.append(ClusterNode(CGACCTD, self.etcd, self.prefix, ports[i],
                                          TTL_S, extra,
                                          metrics_port=ports[count + i] if metrics else None))
        return self.nodes

    def engine_current_bytes(self, node, path):
        """cgacct_group_memory_current_bytes{path} at `node`: its own
        engine's memory.current of `path` (above the shard roots, GetStats
        answers sums over the owners instead)."""
        body = text(urllib.request.urlopen("http://%s/metrics" % node.metrics,
                                           timeout=5).read())
        m = re.search(r'^cgacct_group_memory_current_bytes\{path="%s"\} (\S+)$'
                      % re.escape(path), body, re.M)
        self.assertIsNotNone(m, "no cgacct_group_memory_current_bytes for %s" % path)
        return float(m.group(1))

    def create(self, node, path, max_bytes=None):
        limits = pb.Limits()
        if max_bytes is not None:
            limits.max_bytes = max_bytes
        return node.stub.CreateGroup(pb.CreateGroupRequest(path=path.encode(), limits=limits),
                                     timeout=10)

    def owners(self, node, metadata=()):
        m = node.stub.GetClusterMap(pb.GetClusterMapRequest(), timeout=5,
                                    metadata=metadata)
        return {text(s.shard_root): s.owner_address for s in m.shards}

    def balanced(self, shards, metadata=()):
        """Every shard owned, as every node sees it, about 1/N each."""
        maps = [self.owners(n, metadata) for n in self.nodes]
        if any(len([r for r in m if m[r]]) != len(shards) for m in maps):
            return None
        if any(m != maps[0] for m in maps):
            return None
        counts = {}
        for owner in maps[0].values():
            counts[owner] = counts.get(owner, 0) + 1
        per = len(shards) // len(self.nodes)
        if len(counts) != len(self.nodes) or min(counts.values()) < per:
            return None
        return maps[0]

    def current_bytes(self, node, path, forwarded_ok=True):
        md = () if forwarded_ok else FORWARDED
        return node.stub.GetStats(pb.GetStatsRequest(path=path.encode()), timeout=5,
                                  metadata=md).memory_current_bytes

    def start_library_shards(self, prefix, grace_s):
        """The library failover tests' cluster: 3 nodes with a takeover
        grace of grace_s, shards PREFIX0..2 (max 1000 pages) each with an
        "app" child, balanced over the nodes. Returns the shard roots."""
        self.start_nodes(extra=["--cluster_takeover_grace=%ds" % grace_s])
        shards = ["%s%d" % (prefix, i) for i in range(3)]
        for s in shards:
            self.create(self.nodes[0], s, max_bytes=1000 * PAGE)
            self.create(self.nodes[0], s + "/app")
        self.assertTrue(wait_for(lambda: self.balanced(shards), 10))
        return shards

    def cpp_probe(self):
        """cluster_client_probe (the C++ ClusterClient driven from stdin)
        entering at nodes[0], failover 30 s: (the process, ask(line) ->
        its JSON answer)."""
        self.assertTrue(PROBE and os.path.exists(PROBE), "CGACCT_CLUSTER_PROBE: %r" % PROBE)
        probe = subprocess.Popen([PROBE, self.nodes[0].address, "30000"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)

        def ask(line):
            probe.stdin.write(line + "\n")
            probe.stdin.flush()
            out = probe.stdout.readline()
            self.assertTrue(out, "cluster_client_probe ended at %r" % line)
            return json.loads(out)
        return probe, ask

    def node_at(self, address):
        return next(n for n in self.nodes if n.address == address)

    def holders(self, shard, watched, max_pages=HELD_MAX):
        """Holders (holders.py: the session-following checker) of `shard`
        entering at a node other than `watched`, the node the fault is done
        to and the probe charges."""
        self.assertTrue(PROBE and os.path.exists(PROBE), "CGACCT_CLUSTER_PROBE: %r" % PROBE)
        entry = next(n for n in self.nodes if n is not watched)
        h = Holders(shard, max_pages, entry.address, watched, PROBE)
        self.addCleanup(h.abort)
        return h

    def start_held_shards(self, prefix, count, grace_s=HELD_GRACE_S):
        """The fault tests' cluster: 3 nodes (/metrics on, takeover grace
        HELD_GRACE_S), shard roots PREFIX0.. of max HELD_MAX pages, every
        one owned as every node sees it: balanced when there are at least
        as many shards as nodes, else each on its own node (so that no
        rebalance moves them back). Returns (shards, owners)."""
        self.start_nodes(extra=["--cluster_takeover_grace=%ds" % grace_s], metrics=True)
        shards = ["%s%d" % (prefix, i) for i in range(count)]
        for s in shards:
            self.create(self.nodes[0], s, max_bytes=HELD_MAX * PAGE)

        def spread():
            maps = [self.owners(n) for n in self.nodes]
            m = maps[0]
            if any(x != m for x in maps) or not all(m.get(s) for s in shards):
                return None
            return m if len(set(m[s] for s in shards)) == count else None
        owners = wait_for(lambda: self.balanced(shards) if count >= len(self.nodes)
                          else spread(), 15)
        self.assertTrue(owners)
        return shards, owners

    # --- tests ---

    def test_tree_is_etcds_and_every_node_applies_it(self):
        a, b, c = self.start_nodes()
        self.create(a, "/x", max_bytes=1 << 20)
        self.create(b, "/x/y")
        for n in (a, b, c):
            paths = n.stub.ListGroups(pb.ListGroupsRequest(path=b"/", recursive=True),
                                      timeout=5).paths
            self.assertEqual([text(p) for p in paths], ["/x", "/x/y"])
        with self.assertRaises(grpc.RpcError) as e:
            self.create(c, "/x")
        self.assertEqual(e.exception.code(), grpc.StatusCode.ALREADY_EXISTS)
        with self.assertRaises(grpc.RpcError) as e:
            self.create(c, "/nope/z")
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn('parent "/nope"', e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            a.stub.DeleteGroup(pb.DeleteGroupRequest(path=b"/x"), timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        # A limit set at one node is the one every node holds.
        limits = pb.Limits(max_bytes=3 << 20)
        c.stub.SetLimits(pb.SetLimitsRequest(path=b"/x", limits=limits), timeout=5)
        # (GetStats answers from the owner's engine, which applies the
        # change from its watch: milliseconds behind at most.)
        for n in (a, b, c):
            self.assertTrue(wait_for(
                lambda: n.stub.GetStats(pb.GetStatsRequest(path=b"/x"), timeout=5)
                .limits.max_bytes == 3 << 20, 5))
        b.stub.DeleteGroup(pb.DeleteGroupRequest(path=b"/x/y"), timeout=5)
        a.stub.DeleteGroup(pb.DeleteGroupRequest(path=b"/x"), timeout=5)
        for n in (a, b, c):
            self.assertEqual(
                list(n.stub.ListGroups(pb.ListGroupsRequest(path=b"/"),
                                       timeout=5).paths), [])

    def test_cluster_metrics_time_txns_and_keepalives(self):
        port, metrics_port = free_ports(2)
        node = ClusterNode(CGACCTD, self.etcd, self.prefix, port, TTL_S, (),
                           metrics_port=metrics_port)
        self.nodes.append(node)
        self.create(node, "/x")

        def scrape():
            with urllib.request.urlopen("http://%s/metrics" % node.metrics,
                                        timeout=5) as r:
                return r.read().decode()

        def sample(body, name):
            m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), body,
                          re.M)
            return float(m.group(1)) if m else None

        # A keepalive every TTL/3 (1 s): a few within 3 s.
        self.assertTrue(wait_for(
            lambda: (sample(scrape(), "cgacct_cluster_keepalive_seconds_count")
                     or 0) >= 2, 10))
        body = scrape()
        txns = sample(body, 'cgacct_cluster_etcd_txns_total{result="ok"}')
        timed = sample(body, "cgacct_cluster_etcd_txn_seconds_count")
        # Every Txn counted is timed: the config, the registration, the
        # claim of /x and its creation at least.
        self.assertIsNotNone(timed)
        self.assertGreaterEqual(timed, 4)
        counted = txns + (sample(
            body, 'cgacct_cluster_etcd_txns_total{result="unavailable"}') or 0)
        # (A Txn is timed just before it is counted.)
        self.assertIn(timed - counted, (0, 1))
        self.assertGreater(sample(body, "cgacct_cluster_etcd_txn_seconds_sum"), 0)
        self.assertIn('cgacct_cluster_etcd_txn_seconds_bucket{le="+Inf"}', body)
        self.assertGreater(sample(body, "cgacct_cluster_keepalive_seconds_sum"), 0)
        print("etcd Txns %d (sum %.4f s), keepalives %d (sum %.4f s)" % (
            timed, sample(body, "cgacct_cluster_etcd_txn_seconds_sum"),
            sample(body, "cgacct_cluster_keepalive_seconds_count"),
            sample(body, "cgacct_cluster_keepalive_seconds_sum")))

    def test_shards_spread_and_any_node_answers(self):
        self.start_nodes()
        shards = ["/s%d" % i for i in range(6)]
        for s in shards:
            self.create(self.nodes[0], s, max_bytes=100 * 4096)
        owners = wait_for(lambda: self.balanced(shards), 10)
        self.assertTrue(owners, "shards not spread: %s" %
                        [self.owners(n) for n in self.nodes])
        # Any node answers a charge (forwarded, one hop) and the pages are
        # the owner's.
        for s in shards:
            for n in self.nodes:
                r = n.stub.Charge(pb.ChargeRequest(path=s.encode(), nr_pages=1,
                                                   kind=pb.PAGE_KIND_ANON), timeout=5)
                self.assertEqual(r.nr_pages, 1)
            owner = self.node_at(owners[s])
            self.assertGreaterEqual(
                self.current_bytes(owner, s, forwarded_ok=False), 3 * 4096)
        # Not forwarded (the metadata a forward carries): the owner's
        # address in the trailer, nothing applied.
        s = shards[0]
        other = next(n for n in self.nodes if n.address != owners[s])
        with self.assertRaises(grpc.RpcError) as e:
            other.stub.Charge(pb.ChargeRequest(path=s.encode(), nr_pages=1,
                                               kind=pb.PAGE_KIND_ANON),
                              timeout=5, metadata=FORWARDED)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        trailer = dict(e.exception.trailing_metadata())
        self.assertEqual(trailer.get("cgacct-owner"), owners[s])
        # memory.max holds at the owner, through any node.
        with self.assertRaises(grpc.RpcError) as e:
            other.stub.Charge(pb.ChargeRequest(path=s.encode(), nr_pages=200,
                                               kind=pb.PAGE_KIND_ANON), timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_load_client_spreads_over_the_nodes(self):
        """cgacct-load --target=A,B,C: its workers' connections go to the
        nodes in turn; every node answers its share (the owner itself,
        the others forwarding), and the run ends clean."""
        self.assertTrue(LOAD, "CGACCT_LOAD is not set")
        ports = free_ports(6)
        for i in range(3):
            self.nodes.append(ClusterNode(CGACCTD, self.etcd, self.prefix,
                                          ports[i], TTL_S,
                                          metrics_port=ports[3 + i]))
        self.create(self.nodes[0], "/load")

        def owned_everywhere():
            maps = [self.owners(n) for n in self.nodes]
            return all(m.get("/load") and m == maps[0] for m in maps)

        self.assertTrue(wait_for(owned_everywhere, 10))
        targets = ",".join(n.address for n in self.nodes)
        run = subprocess.run(
            [LOAD, "--target=" + targets, "--metrics_target=" + self.nodes[0].metrics,
             "--scenario=stat-reader", "--group=/load", "--threads=6",
             "--duration=2s", "--warmup=0s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        self.assertIn(targets, run.stdout)
        handled = []
        for n in self.nodes:
            scrape = urllib.request.urlopen("http://%s/metrics" % n.metrics,
                                            timeout=5).read().decode()
            m = re.search(r'^grpc_server_handled_total\{grpc_code="OK",'
                          r'grpc_method="GetStats",[^}]*\} (\d+)', scrape, re.M)
            handled.append(int(m.group(1)) if m else 0)
        print("cgacct-load over 3 nodes, 6 readers for 2 s: GetStats answered "
              "per node %s" % handled)
        self.assertTrue(all(h > 0 for h in handled), handled)

    def owned_by(self, address):
        return [r for r, o in self.owners(self.nodes[0]).items() if o == address]

    def serves_elsewhere(self, shard, gone, resume=True):
        """The node other than `gone` that admits a charge of `shard` (not
        forwarded: only its owner does), or None. `resume`: the re-charge a
        session holder sends after a failover (admitted in the new owner's
        takeover grace)."""
        for n in self.nodes:
            if n is gone or n.proc.poll() is not None:
                continue
            try:
                n.stub.Charge(pb.ChargeRequest(path=shard.encode(), nr_pages=1,
                                               kind=pb.PAGE_KIND_ANON,
                                               resume=resume),
                              timeout=2, metadata=FORWARDED)
                return n
            except grpc.RpcError:
                pass
        return None

    def fresh_charge(self, node, shard):
        """A charge not marked resume at `node`: None if admitted, else the
        RpcError."""
        try:
            node.stub.Charge(pb.ChargeRequest(path=shard.encode(), nr_pages=1,
                                              kind=pb.PAGE_KIND_ANON),
                             timeout=2, metadata=FORWARDED)
            return None
        except grpc.RpcError as err:
            return err

    def test_cgacctctl_cluster_prints_the_map(self):
        """cgacctctl cluster at any node: the nodes and each shard's owner;
        --json with paths as text and numbers as numbers (protobuf's mapping
        printed the bytes shard_root in base64: "L3Nh" for /sa, a fresh
        user's finding)."""
        shards = self.start_library_shards("/j", 2)
        owners = self.owners(self.nodes[0])
        run = subprocess.run([CGACCTCTL, "--target=" + self.nodes[1].address, "--json",
                              "cluster"], capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stderr)
        m = json.loads(run.stdout)
        self.assertTrue(m["cluster_mode"])
        self.assertEqual(m["node_address"], self.nodes[1].address)
        self.assertIsInstance(m["revision"], int)
        self.assertEqual(sorted(n["address"] for n in m["nodes"]),
                         sorted(n.address for n in self.nodes))
        got = {sh["shard_root"]: sh["owner_address"] for sh in m["shards"]}
        self.assertEqual(got, {sh: owners[sh] for sh in shards})
        self.assertTrue(all(isinstance(sh["epoch"], int) and sh["epoch"] > 0
                            for sh in m["shards"]))
        text_run = subprocess.run([CGACCTCTL, "--target=" + self.nodes[2].address, "cluster"],
                                  capture_output=True, text=True, timeout=30)
        self.assertEqual(text_run.returncode, 0, text_run.stderr)
        for sh in shards:
            self.assertRegex(text_run.stdout, r"(?m)^  %s \S+ %s epoch \d+$" % (
                re.escape(sh), re.escape(owners[sh])))

    def test_a_forward_to_a_dead_owner_says_which_node(self):
        """A unary call at a node that does not own the shard is forwarded
        to its owner; when that owner is dead (killed -9, its lease not yet
        run out), the caller gets UNAVAILABLE naming the owner and what
        happens next, not gRPC's channel error ("failed to connect to all
        addresses; last error: UNKNOWN: ipv4:...": a fresh user's run)."""
        shards = self.start_library_shards("/f", 2)
        owners = self.owners(self.nodes[0])
        victim = self.node_at(owners[shards[0]])
        other = next(n for n in self.nodes if n is not victim)
        victim.proc.kill()
        victim.proc.wait()
        try:
            other.stub.Charge(pb.ChargeRequest(path=(shards[0] + "/app").encode(),
                                               nr_pages=1, kind=pb.PAGE_KIND_ANON),
                              timeout=5)
            self.fail("charged through a dead owner")
        except grpc.RpcError as err:
            self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
            self.assertIn("the owner of this shard, node %s, did not answer" % victim.address,
                          err.details())
            self.assertIn("--cluster_lease_ttl", err.details())

    def test_a_joining_node_takes_its_share_and_no_more_moves(self):
        """5 shards on 3 nodes (2, 2, 1); a fourth node joins: one shard
        moves to it, and no other owner key changes (a fresh user's rejoin
        saw two nodes each give one back, and one of them take its own
        back with a new grace 11 ms later: each move a takeover grace and
        the shard's sessionless pages lost)."""
        self.start_nodes()
        shards = ["/j%d" % i for i in range(5)]
        for s in shards:
            self.create(self.nodes[0], s)
        self.assertTrue(wait_for(lambda: self.balanced(shards), 10))
        time.sleep(1.5)  # a few ownership rounds: settled
        before = {s: self.etcd_owner(s) for s in shards}
        self.nodes.append(ClusterNode(CGACCTD, self.etcd, self.prefix, free_ports(1)[0],
                                      TTL_S))
        self.assertTrue(wait_for(lambda: self.balanced(shards), 15))
        time.sleep(2)  # more rounds: nothing else moves
        after = {s: self.etcd_owner(s) for s in shards}
        moved = [s for s in shards if after[s] != before[s]]
        self.assertEqual(len(moved), 1, "before %s\nafter %s" % (before, after))
        self.assertIn("given back to balance", "".join(n.stderr_text() for n in self.nodes))

    def test_a_grace_goes_on_when_the_shard_moves_again(self):
        # An owner in its grace holds nothing yet (the holders have not
        # re-charged): handing the shard on must not end the grace (the
        # re-attack at 6e8ccb0: a second SIGTERM, or a joining node, gave
        # the next owner none).
        self.start_nodes(extra=["--cluster_takeover_grace=8s"])
        shards = ["/m%d" % i for i in range(3)]
        for s in shards:
            self.create(self.nodes[0], s)
        owners = wait_for(lambda: self.balanced(shards), 10)
        self.assertTrue(owners)
        shard = shards[0]
        first = self.node_at(owners[shard])
        self.assertIsNone(self.fresh_charge(first, shard))  # pages there
        first.proc.terminate()
        second = wait_for(lambda: self.serves_elsewhere(shard, first), TTL_S + 5)
        self.assertIsNotNone(second)
        self.assertIsNotNone(self.fresh_charge(second, shard))
        second.proc.terminate()
        third = wait_for(lambda: next((n for n in self.nodes
                                        if n not in (first, second) and
                                        self.owners(n).get(shard) == n.address),
                                       None), TTL_S + 5)
        self.assertIsNotNone(third)
        err = self.fresh_charge(third, shard)
        self.assertIsNotNone(err, "the grace ended when the shard moved again")
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertIn("--cluster_takeover_grace", err.details())
        for n in (first, second):
            self.assertEqual(n.proc.wait(timeout=10), 0)

    def test_require_sessions_refuses_charges_without_one(self):
        a, b, c = self.start_nodes(extra=["--cluster_require_sessions"])
        self.create(a, "/r")
        owner = self.node_at(wait_for(lambda: self.owners(a).get("/r"), 10))
        with self.assertRaises(grpc.RpcError) as cm:
            owner.stub.Charge(pb.ChargeRequest(path=b"/r", nr_pages=1,
                                               kind=pb.PAGE_KIND_ANON), timeout=5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("--cluster_require_sessions", cm.exception.details())
        batch = owner.stub.ChargeBatch(pb.ChargeBatchRequest(ops=[pb.ChargeOp(
            id=1, path=b"/r", nr_pages=1, kind=pb.PAGE_KIND_ANON)]), timeout=5)
        self.assertEqual(batch.results[0].code, grpc.StatusCode.FAILED_PRECONDITION.value[0])
        session = owner.stub.OpenSession(pb.OpenSessionRequest(ttl_ms=5000), timeout=5)
        sid = session.session_id
        owner.stub.Charge(pb.ChargeRequest(path=b"/r", nr_pages=2, kind=pb.PAGE_KIND_ANON,
                                           session_id=sid), timeout=5)
        self.assertGreaterEqual(self.current_bytes(owner, "/r"), 2 * 4096)
        # GetEngineInfo says which node this is and what it owns.
        info = owner.stub.GetEngineInfo(pb.GetEngineInfoRequest(), timeout=5)
        self.assertTrue(info.HasField("cluster"))
        self.assertEqual(info.cluster.node_address, owner.address)
        self.assertIn(b"/r", list(info.cluster.owned_shards))
        self.assertTrue(info.cluster.has_lease)
        self.assertGreater(info.cluster.fence_remaining_ms, 0)
        self.assertEqual(info.cluster.live_nodes, 3)
        self.assertTrue(info.cluster.require_sessions)
        self.assertEqual(info.cluster.takeover_grace_ms, 10000)
        self.assertGreater(info.cluster.applied_revision, 0)
        other = next(n for n in (a, b, c) if n is not owner)
        self.assertNotIn(b"/r", list(other.stub.GetEngineInfo(
            pb.GetEngineInfoRequest(), timeout=5).cluster.owned_shards))

    def test_a_takeover_admits_resumed_charges_before_fresh_ones(self):
        grace_s = 4
        self.start_nodes(extra=["--cluster_takeover_grace=%ds" % grace_s])
        shards = ["/h%d" % i for i in range(6)]
        for s in shards:
            self.create(self.nodes[0], s)
        owners = wait_for(lambda: self.balanced(shards), 10)
        self.assertTrue(owners)
        # A shard root that does not exist: NOT_FOUND (not "no owner").
        for missing in ("/nothere", "/nothere/x"):
            err = self.fresh_charge(self.nodes[0], missing)
            self.assertIsNotNone(err)
            self.assertEqual(err.code(), grpc.StatusCode.NOT_FOUND, err.details())
            self.assertIn("no such group", err.details())
        # A shard's first owner has no grace (nor has one that took a shard
        # over from a node that held nothing there): fresh charges at once.
        for s in shards:
            self.assertIsNone(self.fresh_charge(self.node_at(owners[s]), s))
        # A planned stop: the shard its owner held pages in moves with a
        # grace, the empty one without (its pages: none to re-charge).
        leaving = self.nodes[2]
        mine = [s for s in shards if owners[s] == leaving.address]
        self.assertGreaterEqual(len(mine), 2)
        held, empty = mine[0], mine[1]
        # (The fresh charge above left 1 page in each: give it back.)
        leaving.stub.Uncharge(pb.UnchargeRequest(
            path=empty.encode(), nr_pages=1, kind=pb.PAGE_KIND_ANON), timeout=5)
        leaving.proc.terminate()
        # (Its exit waits up to 5 s for connected clients: checked last.)
        heir_held = wait_for(lambda: self.serves_elsewhere(held, leaving), TTL_S + 5)
        self.assertIsNotNone(heir_held)
        t_taken = time.monotonic()
        err = self.fresh_charge(heir_held, held)
        self.assertIsNotNone(err, "a fresh charge admitted in the grace")
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertIn("--cluster_takeover_grace", err.details())
        heir_empty = wait_for(lambda: self.serves_elsewhere(empty, leaving,
                                                            resume=False), TTL_S + 5)
        self.assertIsNotNone(heir_empty, "the empty shard moved with a grace")
        # Past the grace, fresh charges again.
        self.assertTrue(wait_for(lambda: self.fresh_charge(heir_held, held) is None,
                                 grace_s + 3))
        took = time.monotonic() - t_taken
        print("fresh charges refused for %.2f s after the takeover (grace %d s)"
              % (took, grace_s), file=sys.stderr)
        self.assertGreater(took, grace_s - 1)
        self.assertEqual(leaving.proc.wait(timeout=10), 0)
        # kill -9: the dead node cannot say its shards were empty: a grace.
        victim = next(n for n in self.nodes[:2]
                      if any(self.owners(self.nodes[0]).get(s) == n.address
                             for s in shards))
        survivor = self.nodes[0] if victim is self.nodes[1] else self.nodes[1]
        lost = [s for s, o in self.owners(survivor).items() if o == victim.address]
        victim.proc.kill()
        self.assertIsNotNone(wait_for(lambda: self.serves_elsewhere(lost[0], victim),
                                      TTL_S + 8))
        err = self.fresh_charge(survivor, lost[0])
        self.assertIsNotNone(err)
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())

    def test_python_cluster_client_covers_the_api(self):
        """Issue 26, item 4: ClusterClient has Client's group, limit,
        statistics, reclaim and watch methods; unary calls at any node (it
        forwards to the owner), the watch at the shard's owner."""
        self.start_nodes()
        cc = cgacct.ClusterClient([self.nodes[1].address], failover_s=20, batch=0)
        try:
            g = cc.create_group("/api", max=1 << 20)
            self.assertEqual((g.path, g.limits.max_bytes), ("/api", 1 << 20))
            cc.create_group("/api/x")
            self.assertIn("/api", cc.list_groups("/"))
            self.assertEqual(cc.list_groups("/api"), ["/api/x"])
            self.assertEqual(cc.set_limits("/api", high=1 << 19).limits.high_bytes, 1 << 19)
            cc.charge("/api/x", 8, cgacct.FILE)  # reads the map: the owner is known
            updates = cc.watch_events("/api", timeout=30)
            self.assertEqual(next(updates).path, "/api")
            st = cc.group_stats("/api/x")
            # memory.current also counts the owner's own per-CPU stock.
            self.assertEqual(st.stat["file"], 8 * PAGE)
            self.assertGreaterEqual(st.memory_current_bytes, 8 * PAGE)
            self.assertGreaterEqual(cc.reclaim("/api/x", 4 * PAGE), 4 * PAGE)
            with self.assertRaises(cgacct.Error) as e:
                cc.charge("/api/x", 300)
            self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertGreater(next(updates).events["max"], 0)
            updates.close()
        finally:
            cc.close()

    def test_python_library_follows_its_shards_owner_through_a_failover(self):
        grace_s = 2
        shards = self.start_library_shards("/p", grace_s)
        # batch 0: no stock, so that memory.current is what the
        # application holds; short attempts, so that a dead owner is given
        # up well within the failover budget.
        cc = cgacct.ClusterClient([self.nodes[0].address], failover_s=30,
                                  ttl_ms=3000, batch=0, deadline=1.0, retries=1)
        try:
            for s in shards:
                cc.charge(s + "/app", 100)
                # (The map may still settle after balanced(): the client's
                # owner is the one that holds the pages.)
                self.assertEqual(self.current_bytes(self.node_at(cc.owner(s + "/app")),
                                                    s + "/app", forwarded_ok=False),
                                 100 * PAGE)
            victim = self.node_at(cc.owner(shards[0] + "/app"))
            victim.proc.kill()
            t0 = time.monotonic()
            # The first call after the kill waits for the new owner, charges
            # the 100 held pages there again (a resume, admitted in its
            # grace) and then its own 100 (fresh: after the grace). (Charges
            # of 64 pages or more: the engine's per-CPU stock keeps no
            # surplus in memory.current.)
            cc.charge(shards[0] + "/app", 100)
            took = time.monotonic() - t0
            heir = self.node_at(cc.owner(shards[0] + "/app"))
            self.assertIsNot(heir, victim)
            self.assertEqual(self.current_bytes(heir, shards[0] + "/app",
                                                forwarded_ok=False), 200 * PAGE)
            self.assertEqual(cc.held(shards[0] + "/app"), 200)
            self.assertEqual(cc.stats()["moves"], 1)
            print("library charge after kill -9 of its owner: %.2f s (TTL %d s, "
                  "grace %d s)" % (took, TTL_S, grace_s), file=sys.stderr)
            self.assertLess(took, TTL_S + grace_s + 10)
            # The other shards were not touched; everything goes back.
            for s in shards[1:]:
                cc.charge(s + "/app", 100)
                cc.uncharge(s + "/app", 200)
            cc.uncharge(shards[0] + "/app", 200)
            for s in shards:
                node = self.node_at(cc.owner(s + "/app"))
                self.assertEqual(self.current_bytes(node, s + "/app",
                                                    forwarded_ok=False), 0)
            # A refusal that is not routing's is the caller's at once.
            t0 = time.monotonic()
            with self.assertRaises(cgacct.Error) as e:
                cc.uncharge(shards[1] + "/app", 1)
            self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            with self.assertRaises(cgacct.Error) as e:
                cc.charge(shards[1] + "/app", 2000)
            self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            with self.assertRaises(cgacct.Error) as e:
                cc.charge("/nosuchshard/x", 1)
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertLess(time.monotonic() - t0, 10)
        finally:
            cc.close()

    def test_cpp_library_follows_its_shards_owner_through_a_failover(self):
        """cgacct::client::ClusterClient, as the Python library above: a
        Client per owner, the held pages charged again at the heir as a
        resume after kill -9 of their owner, refusals not routing's at
        once."""
        self.assertTrue(PROBE and os.path.exists(PROBE), "CGACCT_CLUSTER_PROBE: %r" % PROBE)
        grace_s = 2
        shards = self.start_library_shards("/q", grace_s)
        probe, ask = self.cpp_probe()

        def ok(line):
            r = ask(line)
            self.assertEqual(r["code"], 0, "%s: %s" % (line, r))
            return r

        try:
            for s in shards:
                ok("charge %s/app 100" % s)
                node = self.node_at(ask("owner %s/app" % s)["owner"])
                self.assertEqual(self.current_bytes(node, s + "/app", forwarded_ok=False),
                                 100 * PAGE)
                # ClusterClient::groups() (issue 26, item 4): GetStats at
                # any node, forwarded to the owner; CreateGroup through etcd.
                self.assertEqual(ok("current %s/app" % s)["current_bytes"], 100 * PAGE)
            ok("create %s/app/made %d" % (shards[0], 1 << 20))
            self.assertEqual(ask("create %s/app/made 0" % shards[0])["code"],
                             grpc.StatusCode.ALREADY_EXISTS.value[0])
            self.assertEqual(ask("current /nosuchshard")["code"],
                             grpc.StatusCode.NOT_FOUND.value[0])
            victim = self.node_at(ask("owner %s/app" % shards[0])["owner"])
            victim.proc.kill()
            took = ok("charge %s/app 100" % shards[0])["took_s"]
            heir = self.node_at(ask("owner %s/app" % shards[0])["owner"])
            self.assertIsNot(heir, victim)
            self.assertEqual(self.current_bytes(heir, shards[0] + "/app",
                                                forwarded_ok=False), 200 * PAGE)
            self.assertEqual(ask("held %s/app" % shards[0])["held"], 200)
            # Through groups() after the failover: the heir's count.
            self.assertEqual(ok("current %s/app" % shards[0])["current_bytes"], 200 * PAGE)
            stats = ask("stats")
            self.assertEqual(stats["moves"], 1, stats)
            self.assertEqual(stats["recharge_failed_pages"], 0, stats)
            print("C++ library charge after kill -9 of its owner: %.2f s (TTL %d s, "
                  "grace %d s)" % (took, TTL_S, grace_s), file=sys.stderr)
            self.assertLess(took, TTL_S + grace_s + 10)
            for s in shards[1:]:
                ok("charge %s/app 100" % s)
                ok("uncharge %s/app 200" % s)
            ok("uncharge %s/app 200" % shards[0])
            for s in shards:
                node = self.node_at(ask("owner %s/app" % s)["owner"])
                self.assertEqual(self.current_bytes(node, s + "/app",
                                                    forwarded_ok=False), 0)
            t0 = time.monotonic()
            codes = [ask("uncharge %s/app 1" % shards[1])["code"],
                     ask("charge %s/app 2000" % shards[1])["code"],
                     ask("charge /nosuchshard/x 1")["code"]]
            self.assertEqual(codes, [grpc.StatusCode.FAILED_PRECONDITION.value[0],
                                     grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                                     grpc.StatusCode.NOT_FOUND.value[0]])
            self.assertLess(time.monotonic() - t0, 10)
            self.assertEqual(ask("close")["code"], 0)
            self.assertEqual(probe.wait(timeout=30), 0)
        finally:
            if probe.poll() is None:
                probe.kill()
                probe.wait()

    def holdings_move_without_a_call(self, prefix, fault):
        """Both libraries hold pages in a shard and make no call while
        `fault` ("kill" or "term") is done to its owner; returns the seconds
        until the heir holds all of them (asserting it does, one watch move
        per library, and that everything goes back after). The Python
        client is the README's, with the default session lease (10 s: a
        keepalive every 3.3 s); the heir's grace is the faults' 2 s."""
        self.assertTrue(PROBE and os.path.exists(PROBE), "CGACCT_CLUSTER_PROBE: %r" % PROBE)
        shards = self.start_library_shards(prefix, HELD_GRACE_S)
        shard = shards[0] + "/app"
        cc = cgacct.ClusterClient([self.nodes[0].address], failover_s=20, batch=0)
        probe, ask = self.cpp_probe()
        try:
            # (Charges of 64 pages or more: the engine's per-CPU stock
            # keeps no surplus in memory.current.)
            cc.charge(shard, 100)
            self.assertEqual(ask("charge %s 80" % shard)["code"], 0)
            owner = cc.owner(shard)
            self.assertEqual(ask("owner %s" % shard)["owner"], owner)
            victim = self.node_at(owner)
            self.assertEqual(self.current_bytes(victim, shard, forwarded_ok=False),
                             180 * PAGE)
            if fault == "kill":
                victim.proc.kill()
            else:
                victim.proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            others = [n for n in self.nodes if n is not victim]

            def heir_holds_them():
                for n in others:
                    try:
                        if self.current_bytes(n, shard, forwarded_ok=False) == 180 * PAGE:
                            return n
                    except grpc.RpcError:
                        pass  # not its shard (yet)
                return None
            heir = wait_for(heir_holds_them, TTL_S + HELD_GRACE_S + 10, interval=0.02)
            took = time.monotonic() - t0
            self.assertTrue(heir, "no node holds the 180 pages without a call "
                                  "(python: %s; C++: %s)" % (cc.stats(), ask("stats")))
            print("holdings at the heir without a call: %.2f s after %s (TTL %d s, "
                  "grace %d s, Python session lease 10 s)" % (
                      took, "kill -9" if fault == "kill" else "SIGTERM", TTL_S,
                      HELD_GRACE_S), file=sys.stderr)
            self.assertEqual(cc.stats()["watch_moves"], 1)
            self.assertEqual(ask("stats")["watch_moves"], 1)
            self.assertEqual(cc.owner(shard), heir.address)
            self.assertEqual(cc.held(shard), 100)
            self.assertEqual(ask("held %s" % shard)["held"], 80)
            # The nodes say what happened on stderr (a fresh user: "nodes
            # log nothing on takeover, lease loss or rebalance").
            self.assertIn("cgacctd: cluster: owns %s (epoch " % shards[0],
                          heir.stderr_text())
            self.assertIn("taken over from another node: only resumed charges for "
                          "--cluster_takeover_grace (%ds)" % HELD_GRACE_S,
                          heir.stderr_text())
            if fault == "term":
                self.assertTrue(wait_for(lambda: victim.proc.poll() is not None, 10))
                said = victim.stderr_text()
                self.assertRegex(said, r"cgacctd: cluster: no longer admits for [^\n]*%s"
                                 "[^\n]*: given back at shutdown" % re.escape(shards[0]))
            # The calls after it go to the heir; everything goes back.
            cc.uncharge(shard, 100)
            self.assertEqual(ask("uncharge %s 80" % shard)["code"], 0)
            self.assertEqual(self.current_bytes(heir, shard, forwarded_ok=False), 0)
            self.assertEqual(ask("close")["code"], 0)
            self.assertEqual(probe.wait(timeout=30), 0)
            return took
        finally:
            cc.close()
            if probe.poll() is None:
                probe.kill()
                probe.wait()

    def test_libraries_move_holdings_to_a_new_owner_without_a_call(self):
        """kill -9 of the owner while both libraries hold pages there and
        make no call: their watch threads find its session streams broken,
        read the map until it names the heir and charge the holdings there
        as resumes, before the heir's takeover grace ends (TTL + grace after
        the kill at the latest), so that its fresh charges never take their
        room. Before the watch the holdings stayed with the dead owner's
        Client until the application called into the shard again (the heir
        at 0 pages, fresh charges admitted over them); with the watch
        finding only silence (a keepalive period plus a deadline: 5.3 s
        with the default lease) they came 5.3-5.4 s after the kill, past a
        2 s grace (a fresh user's run of the README's example)."""
        took = self.holdings_move_without_a_call("/w", "kill")
        self.assertLess(took, TTL_S + HELD_GRACE_S)

    def test_libraries_move_holdings_at_a_planned_stop_without_a_call(self):
        """SIGTERM of the owner: it gives its shards back at once and ends
        their sessions; the libraries' watch threads find the streams broken
        and move the holdings to the heir well within its grace (they came
        2.7 s after the SIGTERM, past a 2 s grace, when only silence
        counted: the stopping node took 2 s to exit)."""
        took = self.holdings_move_without_a_call("/v", "term")
        self.assertLess(took, HELD_GRACE_S)

    def test_kill9_owner_moves_its_shards_within_ttl(self):
        """kill -9 of an owner: its shards serve again elsewhere within TTL
        + slack (a resume admitted there), and under the session-following
        checker (holders.py) one of them held at its max by five holders:
        never above max, served elsewhere within TTL + grace + slack, every
        counter 0 once the sessions close."""
        shards, owners = self.start_held_shards("/k", 6)
        victim = self.nodes[1]
        lost = [s for s in shards if owners[s] == victim.address]
        self.assertGreaterEqual(len(lost), 2)
        h = self.holders(lost[0], victim)
        h.start()
        victim.proc.kill()
        t0 = time.monotonic()
        for s in lost[1:]:
            n = wait_for(lambda: self.serves_elsewhere(s, victim), TTL_S + 8)
            self.assertIsNotNone(n, "%s not served after kill -9" % s)
        took = time.monotonic() - t0
        served = h.wait_served(t0, TTL_S + HELD_GRACE_S + 10, elsewhere=True)
        self.assertTrue(served, "nobody else served %s: %s" % (lost[0], h.counts))
        time.sleep(1)
        h.stop()
        h.report("kill -9 owner", served_elsewhere_s=served - t0, resume_admitted_s=took,
                 bound_s=float(TTL_S + HELD_GRACE_S + 5))
        h.assert_held(self, cpp_moved=True)
        self.assertEqual(h.late(t0), [])
        self.assertLess(took, TTL_S + 2 + 3)  # slack for 2 loaded cores
        self.assertLess(served - t0, TTL_S + HELD_GRACE_S + 5)
        h.close()
        h.assert_all_returned(self, self.nodes, self.engine_current_bytes)
    def test_a_black_holed_etcd_link_fences_its_node(self):
        """One node's link to etcd black-holed (a TCP relay inside the test
        stops relaying, closing nothing) while session holders charge and
        uncharge its shard near memory.max through the Python library. A
        checker whose truth follows the sessions (charges acknowledged minus
        uncharges acknowledged, whatever the server later lost) samples it:
        never above max. The node acknowledges nothing sent after its fence
        deadline (at most TTL after the hole opened), another node serves
        the shard within TTL + grace + slack, and once the link is back the
        node has found out: its engine holds nothing of the shard, it
        refuses it. After every session closes, every node's counters of
        the shard are 0. Four holders use the Python library, a fifth the
        C++ one (cluster_client_probe). Before the libraries' fixes it found
        three ways past max, 1.02x-1.26x (DESIGN 4.18, "Holders across a
        failover")."""
        grace_s = HELD_GRACE_S
        extra = ["--cluster_takeover_grace=%ds" % grace_s]
        self.start_nodes(count=2, extra=extra, metrics=True)
        proxied = ProxiedEtcd(self.etcd)
        self.addCleanup(proxied.close)
        port, metrics_port = free_ports(2)
        victim = ClusterNode(CGACCTD, proxied, self.prefix, port, TTL_S, extra,
                             metrics_port=metrics_port)
        self.nodes.append(victim)
        max_pages = HELD_MAX
        shards = ["/bh%d" % i for i in range(3)]
        for sh in shards:
            self.create(self.nodes[0], sh, max_bytes=max_pages * PAGE)
        owners = wait_for(lambda: self.balanced(shards), 15)
        self.assertTrue(owners)
        shard = next(sh for sh in shards if owners[sh] == victim.address)
        h = self.holders(shard, victim)
        h.start()
        t_hole = time.monotonic()
        proxied.black_hole(True)
        taken = h.wait_served(t_hole, TTL_S + grace_s + 10, elsewhere=True)
        self.assertTrue(taken, "nobody else served %s after the black hole: %s %s %s" % (
            shard, h.counts, [c.stats() for c in h.clients], self.owners(self.nodes[0])))
        time.sleep(2)
        # The load goes on while the link comes back and for 6 s after: the
        # node owns nothing then, so the rebalance that follows may move a
        # shard back to it, under load (a second move for holders of this
        # one; 408 of 400 pages in about 1 run of 12 before the libraries'
        # watch threads, when the test stopped its load first to pass).
        before_back = {n.address: n.proc.pid for n in self.nodes}
        proxied.black_hole(False)
        t_back = time.monotonic()
        # It finds out: its engine drops the shard (unless the rebalance
        # gave the shard back to it already: then the shard's owner is the
        # victim again, a legitimate owner).
        self.assertTrue(wait_for(
            lambda: self.engine_current_bytes(victim, shard) == 0 or
            self.etcd_owner(shard)[0] == victim.address, 10))
        time.sleep(max(0.0, 6 - (time.monotonic() - t_back)))
        h.stop()
        owner_after = self.etcd_owner(shard)[0]
        print("black-holed etcd link: after the link came back the shard's owner "
              "is %s (the victim: %s)" % (owner_after, owner_after == victim.address),
              file=sys.stderr)
        if owner_after != victim.address:
            refusals = [self.fresh_charge(victim, shard) for _ in range(10)]
            self.assertTrue(all(r is not None for r in refusals),
                            "the victim admitted its lost shard after the link came back")
        self.assertEqual(before_back, {n.address: n.proc.pid for n in self.nodes})
        # (After the link is back the victim may own the shard again.)
        late = h.late(t_hole + TTL_S, before=t_back)
        h.report("black-holed etcd link", served_elsewhere_s=taken - t_hole,
                 bound_s=float(TTL_S + grace_s + 5), late_acks=len(late))
        h.assert_held(self, cpp_moved=True)
        self.assertEqual(late, [])
        self.assertLess(taken - t_hole, TTL_S + grace_s + 5)
        h.close()
        h.assert_all_returned(self, self.nodes, self.engine_current_bytes)

    def test_sigterm_gives_shards_back_at_once(self):
        """A planned SIGTERM: the owner's shards move before its TTL could
        have run out (a resume admitted elsewhere), and under the checker
        (holders.py) one of them held at its max: never above max, the
        node acknowledges nothing once another serves the shard, every
        counter 0 after; it exits 0."""
        shards, owners = self.start_held_shards("/t", 6)
        victim = self.nodes[2]
        moved = [s for s in shards if owners[s] == victim.address]
        self.assertGreaterEqual(len(moved), 2)
        h = self.holders(moved[0], victim)
        h.start()
        t0 = time.monotonic()
        victim.proc.terminate()
        for s in moved[1:]:
            self.assertIsNotNone(wait_for(lambda: self.serves_elsewhere(s, victim),
                                          TTL_S + 5))
        took = time.monotonic() - t0
        # The held shard had pages: its heir has a grace, in which it serves
        # the holders' resumes and uncharges, and their fresh charges after.
        served = h.wait_served(t0, TTL_S + HELD_GRACE_S + 10, elsewhere=True)
        self.assertTrue(served, "nobody else served %s: %s" % (moved[0], h.counts))
        time.sleep(1)
        h.stop()
        late = h.late(served)
        h.report("SIGTERM owner", served_elsewhere_s=served - t0, resume_admitted_s=took,
                 bound_s=float(HELD_GRACE_S + 2), late_acks=len(late))
        h.assert_held(self, cpp_moved=True)
        self.assertEqual(late, [])
        self.assertLess(took, TTL_S)
        # (The holders' fresh charges wait out the heir's grace.)
        self.assertLess(served - t0, HELD_GRACE_S + 2)
        self.assertEqual(victim.proc.wait(timeout=10), 0)
        h.close()
        h.assert_all_returned(self, self.nodes, self.engine_current_bytes)
    def etcd_owner(self, shard):
        """(owner node, epoch) of `shard` as etcd has it now, or (None, 0)."""
        out = subprocess.run(
            ["etcdctl", "--endpoints=" + self.etcd.endpoints(), "get",
             self.prefix + "/o" + shard, "-w", "json"],
            capture_output=True, text=True, timeout=10,
            env=dict(os.environ, ETCDCTL_API="3"))
        kvs = json.loads(out.stdout).get("kvs", [])
        if not kvs:
            return None, 0
        value = base64.b64decode(kvs[0]["value"])
        # OwnerRecord: field 1 (node) first, length-delimited.
        assert value[0] == 0x0A
        return value[2:2 + value[1]].decode(), int(kvs[0]["create_revision"])

    def test_a_paused_owner_admits_nothing_after_its_fence(self):
        """SIGSTOP of an owner past its TTL, then SIGCONT, under the checker
        (holders.py: its shard held at max by five holders, the load going
        on across the SIGCONT, so that calls queued while it was stopped
        reach it). Another node serves within TTL + grace + slack; the
        paused node acknowledges nothing sent after its fence deadline
        (before its pause + TTL), refuses from its first answer after it
        resumes, and finds out it lost the shard (its engine holds none of
        it). Two shards on three nodes: each owner has its fair share (one),
        so the paused node, once back, wins nothing back by rebalancing."""
        # The grace the other fault tests run. A stopped owner answers
        # nothing; the libraries' watch threads find its session streams
        # silent and move the holdings as soon as the map names the heir.
        # Before the watch a holder gave the owner up only after its call's
        # attempts (deadline 1 s x 2) and a map read, up to ~2.5 s after
        # the takeover: with a grace of 2 s such late resumes competed with
        # fresh charges and were refused at max while the holders still
        # held their pages (8-96 pages over in 5 runs of 5; 8-48 in 1 of 5
        # with a grace of 4 s).
        grace_s = HELD_GRACE_S
        shards, owners = self.start_held_shards("/p", 2, grace_s)
        shard = shards[0]
        victim = self.node_at(owners[shard])
        h = self.holders(shard, victim)
        h.start()
        victim.proc.send_signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        served = h.wait_served(t_stop, TTL_S + grace_s + 10, elsewhere=True)
        self.assertTrue(served, "nobody else served %s: %s" % (shard, h.counts))
        taken = self.etcd_owner(shard)
        self.assertNotEqual(taken[0], victim.address)
        victim.proc.send_signal(signal.SIGCONT)
        # From the first call after it resumes: refused, never applied here
        # on its old ownership (not forwarded: the metadata says so).
        admitted = refused = 0
        t0 = time.monotonic()
        first = None
        while time.monotonic() - t0 < 1.5:
            err = self.fresh_charge(victim, shard)
            if err is None:
                admitted += 1
            else:
                self.assertIn(err.code(), (grpc.StatusCode.FAILED_PRECONDITION,
                                           grpc.StatusCode.UNAVAILABLE), err.details())
                refused += 1
            if first is None:
                first = time.monotonic() - t0
        h.stop()
        late = h.late(t_stop + TTL_S)
        known_over = h.counted_losses()
        h.report("SIGSTOP owner", served_elsewhere_s=served - t_stop,
                 bound_s=float(TTL_S + grace_s + 5), late_acks=len(late),
                 after_sigcont_refused=refused, after_sigcont_admitted=admitted,
                 first_answer_s=first, counted_losses=known_over)
        h.assert_held(self, cpp_moved=True)
        self.assertEqual(late, [])
        self.assertEqual(admitted, 0)
        self.assertGreater(refused, 0)
        self.assertLess(served - t_stop, TTL_S + grace_s + 5)
        self.assertEqual(self.etcd_owner(shard), taken)
        # It found out: its engine holds nothing of the shard it lost (its
        # own engine's "/", which owns none now).
        self.assertTrue(wait_for(lambda: self.engine_current_bytes(victim, "/") == 0, 10))
        h.close()
        h.assert_all_returned(self, self.nodes, self.engine_current_bytes)
    def test_groups_above_the_shard_roots_are_read_not_charged(self):
        node = self.start_nodes(count=1, extra=["--shard_depth=2"])[0]
        self.create(node, "/tenants")
        self.create(node, "/tenants/acme")
        self.assertTrue(wait_for(lambda: self.owners(node).get("/tenants/acme"), 10))
        node.stub.Charge(pb.ChargeRequest(path=b"/tenants/acme", nr_pages=1,
                                          kind=pb.PAGE_KIND_ANON), timeout=5)
        # /tenants is above the shard roots: one node's alone if charged.
        for call in (lambda: node.stub.Charge(pb.ChargeRequest(
                         path=b"/tenants", nr_pages=1, kind=pb.PAGE_KIND_ANON),
                         timeout=5),
                     lambda: node.stub.Reclaim(pb.ReclaimRequest(
                         path=b"/tenants", nr_bytes=4096), timeout=5)):
            with self.assertRaises(grpc.RpcError) as e:
                call()
            self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("above the shard roots", e.exception.details())
        # Read: the sum over the shard roots below (it owns /tenants/acme;
        # the engine's per-CPU stock counts in memory.current).
        self.assertEqual(self.current_bytes(node, "/tenants"),
                         self.current_bytes(node, "/tenants/acme"))
        self.assertGreaterEqual(self.current_bytes(node, "/tenants"), 4096)

    def test_stats_above_the_shard_roots_sum_every_owner(self):
        """GetStats of / and of a group above the shard roots (--shard_depth=2)
        at any node: the sums over the shard roots below, each read at its
        owner (one GetStats per other owner), summed_shards naming them;
        after kill -9 of an owner its shards are in missing_shards and out
        of the sums, not an error."""
        self.start_nodes(extra=["--shard_depth=2"])
        node = self.nodes[0]
        self.create(node, "/tenants")
        self.create(node, "/infra")
        shards = ["/tenants/t%d" % i for i in range(5)] + ["/infra/i0"]
        for s in shards:
            self.create(node, s)
        owners = wait_for(lambda: self.balanced(shards), 15)
        self.assertTrue(owners)
        pages = {}
        for i, s in enumerate(shards):
            # 64 pages or more: the engine's per-CPU stock keeps no
            # surplus in memory.current.
            pages[s] = 64 * (i + 1)
            # At its owner (marked forwarded: not passed on elsewhere).
            self.node_at(owners[s]).stub.Charge(
                pb.ChargeRequest(path=s.encode(), nr_pages=pages[s], kind=pb.PAGE_KIND_ANON),
                timeout=5, metadata=FORWARDED)
        tenants = [s for s in shards if s.startswith("/tenants/")]

        def stats(n, path, **kw):
            return n.stub.GetStats(pb.GetStatsRequest(path=path.encode(), **kw), timeout=10)

        def anon(st):
            return next(e.value for e in st.stat if e.name == "anon")

        for n in self.nodes:
            for path, below in (("/", shards), ("/tenants", tenants)):
                st = stats(n, path)
                self.assertEqual(st.memory_current_bytes,
                                 sum(pages[s] for s in below) * PAGE, (n.address, path))
                self.assertEqual(anon(st), sum(pages[s] for s in below) * PAGE)
                self.assertEqual(sorted(map(text, st.summed_shards)), sorted(below))
                self.assertEqual(list(map(text, st.missing_shards)), [])
                self.assertTrue(st.flushed)
        # Asked for some shard roots only: those this node owns of them.
        mine = [s for s in tenants if owners[s] == node.address]
        st = stats(node, "/tenants", shard_roots=[s.encode() for s in tenants])
        self.assertEqual(sorted(map(text, st.summed_shards)), sorted(mine))
        self.assertEqual(sorted(map(text, st.missing_shards)), sorted(set(tenants) - set(mine)))
        self.assertEqual(st.memory_current_bytes, sum(pages[s] for s in mine) * PAGE)
        for bad in (b"/infra/i0", b"/tenants", b"/tenants/t0/x"):
            with self.assertRaises(grpc.RpcError) as e:
                stats(node, "/tenants", shard_roots=[bad])
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("shard_roots", e.exception.details())
        # kill -9 of an owner: its shards are missing, the others summed.
        victim = next(n for n in self.nodes[1:]
                      if any(owners[s] == n.address for s in shards))
        lost = [s for s in shards if owners[s] == victim.address]
        victim.proc.kill()
        victim.proc.wait()
        st = stats(node, "/")
        self.assertEqual(sorted(map(text, st.missing_shards)), sorted(lost))
        self.assertEqual(sorted(map(text, st.summed_shards)), sorted(set(shards) - set(lost)))
        self.assertEqual(st.memory_current_bytes,
                         sum(pages[s] for s in shards if s not in lost) * PAGE)

    def test_stats_fan_out_passes_the_callers_token_on(self):
        """With access control, the fan-out above the shard roots goes
        through the authenticated path and carries the caller's bearer
        token to each owner, which authorizes it again."""
        tmp = tempfile.mkdtemp(prefix="cgacct-cluster-auth-")
        self.addCleanup(shutil.rmtree, tmp, True)
        token = "a" * 24 + "-cluster"
        with open(os.path.join(tmp, "tokens"), "w") as f:
            f.write("reader %s\n" % token)
        with open(os.path.join(tmp, "policy"), "w") as f:
            f.write("token:reader rw /\n")
        os.chmod(os.path.join(tmp, "tokens"), 0o600)
        self.start_nodes(extra=["--tokens_file=" + os.path.join(tmp, "tokens"),
                                "--authz_policy=" + os.path.join(tmp, "policy")])
        md = (("authorization", "Bearer " + token),)
        node = self.nodes[0]
        shards = ["/a%d" % i for i in range(4)]
        for s in shards:
            node.stub.CreateGroup(pb.CreateGroupRequest(path=s.encode()), timeout=10,
                                  metadata=md)
        owners = wait_for(lambda: self.balanced(shards, md), 15)
        self.assertTrue(owners)
        for i, s in enumerate(shards):
            self.node_at(owners[s]).stub.Charge(
                pb.ChargeRequest(path=s.encode(), nr_pages=64 * (i + 1),
                                 kind=pb.PAGE_KIND_ANON),
                timeout=5, metadata=md + FORWARDED)
        for n in self.nodes:
            st = n.stub.GetStats(pb.GetStatsRequest(path=b"/"), timeout=10, metadata=md)
            self.assertEqual(st.memory_current_bytes, 64 * 10 * PAGE, n.address)
            self.assertEqual(sorted(map(text, st.summed_shards)), shards)
        with self.assertRaises(grpc.RpcError) as e:
            node.stub.GetStats(pb.GetStatsRequest(path=b"/"), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_etcd_quorum_lost_changes_fail_charges_stop_at_the_fence(self):
        """2 of 3 etcd members stopped (SIGSTOP), under the checker
        (holders.py: a shard held at max by five holders): group changes
        fail UNAVAILABLE naming etcd; the owner goes on serving the shard
        until its fence and acknowledges nothing sent after the bound
        below, nor can any other node own it; never above max. Once the
        members are back, the shard is served again (the bound below), and
        every counter is 0 after."""
        shards, owners = self.start_held_shards("/q", 3)
        shard = shards[0]
        owner = self.node_at(owners[shard])
        h = self.holders(shard, owner)
        h.start()
        self.etcd.stop_member(1)
        self.etcd.stop_member(2)
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as e:
            self.create(owner, "/q-new")
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("etcd", e.exception.details())
        # Charges go on until the fence (the last keepalive's send + TTL -
        # margin), then are refused. The member left may be the leader: it
        # renews leases on its own until it sees it has no quorum (an
        # election timeout, 2 s here), and etcd extends every lease by that
        # much at a new leader, so the fence may end up to TTL + 2 s after
        # the loss and no other node can own the shard before it.
        fence_bound = t0 + TTL_S + 2
        time.sleep(max(0, fence_bound + 1.5 - time.monotonic()))
        with h.lock:
            last_ack = max(t for t, _ in h.acks)
        late = h.late(fence_bound)
        refused_after = h.probe_refused(fence_bound)
        with self.assertRaises(grpc.RpcError) as e:
            owner.stub.Charge(pb.ChargeRequest(path=shard.encode(), nr_pages=1,
                                               kind=pb.PAGE_KIND_ANON), timeout=2)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.etcd.resume_member(1)
        self.etcd.resume_member(2)
        t_back = time.monotonic()
        served = h.wait_served(t_back, 25)
        self.assertTrue(served, "%s not served after etcd came back: %s" % (shard, h.counts))
        time.sleep(1)
        h.stop()
        # The owner dropped the shard's pages at its fence and the holders'
        # re-charges there were refused (no lease) and kept (deferred); once
        # etcd is back the same node owns the shard again (its keys were
        # still on its lease) in a takeover grace, and the libraries charge
        # the deferred pages again there before fresh charges are admitted.
        # (Before both: 104-120 pages over max in 5 of 6 runs.)
        h.report("2 of 3 etcd members stopped", last_ack_after_loss_s=last_ack - t0,
                 served_after_back_s=served - t_back, bound_s=20.0,
                 late_acks=len(late), probe_refused_after_fence=refused_after,
                 counted_losses=h.counted_losses())
        h.assert_held(self)
        self.assertEqual(late, [])
        self.assertGreater(refused_after, 0)
        self.assertLess(last_ack - t0, TTL_S + 2 + 1)
        # Back: etcd elects again (the two members were stopped for ~6 s),
        # the node renews or retakes its lease and the shard; measured
        # 3.5-11.7 s (the 11.7 s not analysed).
        self.assertLess(served - t_back, 20)
        h.close()
        h.assert_all_returned(self, self.nodes, self.engine_current_bytes)

    def test_kill9_of_the_etcd_leader_keeps_shards_served(self):
        """kill -9 of etcd's leader, under the checker (holders.py: a shard
        held at max by five holders): etcd elects another within an
        election timeout and group changes succeed again; the shard stays
        served (the longest time without an acknowledged call is within TTL
        + grace + slack, whether or not its owner fenced meanwhile); never
        above max; if the shard moved, its old owner acknowledged nothing
        once another served it; every counter 0 after."""
        shards, owners = self.start_held_shards("/e", 3)
        shard = shards[0]
        owner = self.node_at(owners[shard])
        h = self.holders(shard, owner)
        h.start()
        leader = wait_for(self.etcd.leader, 10, interval=0.2)
        self.assertIsNotNone(leader)
        self.etcd.kill_member(leader)
        t0 = time.monotonic()

        def created():
            try:
                self.create(owner, "/e-new")
                return time.monotonic()
            except grpc.RpcError as err:
                return err.code() == grpc.StatusCode.ALREADY_EXISTS and time.monotonic()
        writes_back = wait_for(created, 15, interval=0.1)
        self.assertTrue(writes_back, "group changes still fail after the leader's kill")
        time.sleep(max(0, t0 + TTL_S + HELD_GRACE_S + 1 - time.monotonic()))
        h.stop()
        t_end = time.monotonic()
        gap = h.longest_gap(t0, t_end)
        elsewhere = h.first_ack(t0, elsewhere=True)
        late = h.late(elsewhere) if elsewhere else []
        # The owner's keepalives may miss its fence while etcd elects: then
        # it drops the shard's pages and owns it again with the same lease,
        # in a takeover grace, where the holders charge their deferred
        # pages again first, as with quorum lost (above; before: 120 pages
        # over max in 4 of 6 runs).
        h.report("kill -9 etcd leader", longest_unserved_s=gap,
                 writes_back_s=writes_back - t0, moved=elsewhere is not None,
                 bound_s=float(TTL_S + HELD_GRACE_S + 5), late_acks=len(late),
                 counted_losses=h.counted_losses())
        h.assert_held(self)
        self.assertEqual(late, [])
        self.assertLess(gap, TTL_S + HELD_GRACE_S + 5)
        h.close()
        h.assert_all_returned(self, self.nodes, self.engine_current_bytes)
    def exits(self, *flags):
        p = subprocess.run([CGACCTD, "--listen=127.0.0.1:0", "--metrics_listen="]
                           + list(flags), capture_output=True, text=True, timeout=20)
        return p.returncode, p.stderr.strip()

    def test_invalid_combinations_exit_2_with_one_line(self):
        for flags, words in [
            (["--node_name=n1"], "--etcd_endpoints"),
            (["--cluster_require_sessions"], "--etcd_endpoints"),
            (["--etcd_endpoints=127.0.0.1:1", "--advertise_address=127.0.0.1:5",
              "--cluster_lease_ttl=2s"], "at least 3s"),
            (["--etcd_endpoints=127.0.0.1:1", "--advertise_address=127.0.0.1:5",
              "--cluster_lease_ttl=3500ms"], "whole seconds"),
            (["--etcd_endpoints=127.0.0.1:1"], "--advertise_address"),
            (["--etcd_endpoints=nohost", "--advertise_address=127.0.0.1:5"],
             "HOST:PORT"),
            (["--etcd_endpoints=127.0.0.1:1", "--advertise_address=127.0.0.1:5",
              "--state_dir=/tmp/x"], "--state_dir"),
            (["--etcd_endpoints=127.0.0.1:1", "--advertise_address=127.0.0.1:5",
              "--shard_depth=0"], "--shard_depth"),
            (["--etcd_endpoints=127.0.0.1:1", "--advertise_address=127.0.0.1:5",
              "--cluster_takeover_grace=11m"], "--cluster_takeover_grace"),
            (["--etcd_endpoints=127.0.0.1:1", "--advertise_address=127.0.0.1:5",
              "--etcd_cert_file=/x"], "--etcd_key_file"),
        ]:
            code, err = self.exits(*flags)
            self.assertEqual(code, 2, (flags, err))
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertIn(words, err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
