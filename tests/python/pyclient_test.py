#!/usr/bin/python3
"""The Python client (client/python/cgacct) against a real cgacctd.

  pyclient_test.py CGACCTD PYTHONPATH_DIR

Starts CGACCTD on 127.0.0.1 (ports 0, metrics on) and drives it with
cgacct.Client from PYTHONPATH_DIR (build/client/python: the package and
the stubs generated at build time), with Debian's /usr/bin/python3,
python3-grpcio and python3-protobuf. Checks, each on the server's own
numbers (GetStats, GetSession, /metrics): a stock hit makes no RPC; close()
returns everything; a charge whose response is lost is retried with the
same request_id and applied once; the keepalive keeps a session past
several ttls; a client process killed with SIGKILL mid-charge leaves
nothing charged within ttl + 1 s; two clients holding stock answer the
drain so that a third charging at the group's max succeeds, and a stopped
client process delays it by the drain bound only; a cut
connection is re-attached and a lost session re-opened with what the
application holds charged again; bad input is a grpc status naming the
field; threads charging and uncharging concurrently leave the server's
view equal to the client's.
"""
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

CGACCTD = sys.argv[1]
PYPATH = sys.argv[2]
sys.path.insert(0, PYPATH)
del sys.argv[1:3]

import grpc  # noqa: E402

import cgacct  # noqa: E402
from cgacct.v1 import accounting_pb2 as pb  # noqa: E402
from cgacct.v1 import accounting_pb2_grpc as pb_grpc  # noqa: E402

PAGE = 4096
TTL_MS = 600  # short leases, so that expiry tests take about a second


def start_daemon(extra=()):
    """cgacctd with its own stock at its smallest (--charge_batch_pages=1,
    no victim table, no pool): the server's stock would keep up to 64
    surplus pages per group and CPU of every charge in memory.current (as
    the kernel's does), and the stock under test here is the client's (an
    Uncharge still parks up to a page per group and CPU); short leases; 500 ms for drain answers (the
    drain is what is tested, not how fast a loaded machine answers it)."""
    errors = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [CGACCTD, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--cpus=2",
         "--charge_batch_pages=1", "--stock_victim_sets=0", "--stock_pool_buckets=0",
         "--session_min_ttl_ms=100",
         "--session_drain_timeout_ms=500"] + list(extra),
        stdout=subprocess.PIPE, stderr=errors, text=True)
    proc.errors = errors  # its stderr, read if it does not start
    line = proc.stdout.readline()
    m = re.search(r"listening on 127\.0\.0\.1:(\d+) \(metrics on 127\.0\.0\.1:(\d+),", line)
    if not m:
        proc.kill()
        proc.wait()
        errors.seek(0)
        raise RuntimeError("cgacctd did not start: %r %s" % (line, errors.read()))
    return proc, "127.0.0.1:%s" % m.group(1), "127.0.0.1:%s" % m.group(2)


def stop_daemon(proc):
    proc.terminate()
    proc.wait(timeout=20)
    proc.stdout.close()
    proc.errors.close()


def stopped_state(pid, tid):
    """Whether thread tid of process pid is stopped (/proc state T)."""
    with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


class Proxy:
    """A TCP proxy on loopback in front of cgacctd: cut() closes every
    connection through it (the client sees its stream break); while
    paused, it closes every new connection at once (the server is
    unreachable)."""

    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []
        self.paused = False
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.paused:
                    a.close()
                    continue
                try:
                    b = socket.create_connection(self.target)
                except OSError:
                    a.close()
                    continue
                self.conns += [a, b]
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        peers = {a: b, b: a}
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    data = s.recv(1 << 16)
                    if not data:
                        return
                    peers[s].sendall(data)
        except OSError:
            return
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self):
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def pause(self):
        with self.lock:
            self.paused = True
        self.cut()

    def resume(self):
        with self.lock:
            self.paused = False

    def stop(self):
        self.stopped = True
        self.listener.close()
        self.cut()


class LoseFirstChargeResponse(grpc.UnaryUnaryClientInterceptor):
    """Sends the first Charge to the server for real, then answers the
    caller `code` (UNAVAILABLE; CANCELLED, as from a node shutting down) as
    if the response had been lost on the way back; records every Charge's
    request_id and whether it was replayed."""

    class _Lost:
        def __init__(self, code):
            self.code = code

        def result(self):
            raise cgacct.Error(self.code, "test: response lost")

    def __init__(self, code=grpc.StatusCode.UNAVAILABLE):
        self.seen = []  # (request_id, replayed)
        self.code = code

    def intercept_unary_unary(self, continuation, details, request):
        outcome = continuation(details, request)
        if not details.method.endswith("/Charge"):
            return outcome
        response = outcome.result()
        self.seen.append((request.request_id, response.replayed))
        if len(self.seen) == 1:
            return self._Lost(self.code)
        return outcome


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon, cls.target, cls.metrics = start_daemon()
        cls.channel = grpc.insecure_channel(cls.target)
        grpc.channel_ready_future(cls.channel).result(timeout=20)
        cls.stub = pb_grpc.AccountingStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_daemon(cls.daemon)

    # --- helpers ---

    def create(self, path, max_pages=None):
        limits = pb.Limits()
        if max_pages is not None:
            limits.max_bytes = max_pages * PAGE
        self.stub.CreateGroup(pb.CreateGroupRequest(path=path.encode(), limits=limits),
                              timeout=10)

    def current_pages(self, path):
        stats = self.stub.GetStats(pb.GetStatsRequest(path=path.encode()), timeout=10)
        return stats.memory_current_bytes // PAGE

    def drain_server_stock(self, path):
        """Writes memory.high below usage and back to max: the server drains
        its own per-CPU stock of the group (DESIGN §3.4), where its
        Uncharge parks pages (§3.3: up to charge_batch_pages per group and
        CPU, counted in memory.current as the kernel counts its stock). Only
        where nothing reclaimable is charged (it reclaims too)."""
        for high in (0, (1 << 64) - 1):
            self.stub.SetLimits(pb.SetLimitsRequest(
                path=path.encode(), limits=pb.Limits(high_bytes=high)), timeout=10)

    def session(self, session_id):
        return self.stub.GetSession(pb.GetSessionRequest(session_id=session_id), timeout=10)

    def metric(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        with urllib.request.urlopen("http://%s/metrics" % self.metrics, timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            m = re.match(r"(\w+)(\{[^}]*\})? (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def rpcs(self, method):
        return self.metric("grpc_server_started_total", grpc_method=method)

    def client(self, **kw):
        kw.setdefault("ttl_ms", TTL_MS)
        c = cgacct.Client(self.target, **kw)
        self.addCleanup(c.close)
        return c

    # --- tests ---

    def test_the_whole_api_with_typed_results(self):
        """Issue 26, item 4: groups, limits, statistics, events, reclaim and
        a watch through cgacct.Client (users fell back to raw stubs), typed
        results, cgacct.Error naming the field."""
        c = self.client()
        g = c.create_group("/api", max=1 << 20, low="max")
        self.assertIsInstance(g, cgacct.Group)
        self.assertEqual((g.path, g.limits.max_bytes, g.limits.high_bytes, g.limits.low_bytes),
                         ("/api", 1 << 20, None, None))
        c.create_group("/api/a")
        c.create_group("/api/a/x")
        c.create_group("/api/b")
        self.assertEqual(c.list_groups("/api"), ["/api/a", "/api/b"])
        self.assertEqual(c.list_groups("/api", recursive=True),
                         ["/api/a", "/api/a/x", "/api/b"])
        with self.assertRaises(cgacct.Error) as e:
            c.create_group("/api/a")
        self.assertEqual(e.exception.code(), grpc.StatusCode.ALREADY_EXISTS)
        with self.assertRaises(cgacct.Error) as e:
            c.list_groups("/api", recursive="yes")
        self.assertIn("recursive:", e.exception.details())
        with self.assertRaises(ValueError):
            cgacct.Client(None)
        with self.assertRaises(cgacct.Error) as e:
            c.set_limits("/api", high="lots")
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("high:", e.exception.details())
        g = c.set_limits("/api", high=512 * 1024, oom_group=True)
        self.assertEqual((g.limits.max_bytes, g.limits.high_bytes, g.limits.oom_group),
                         (1 << 20, 512 * 1024, True))

        updates = c.watch_events("/api", timeout=30)
        first = next(updates)
        self.assertIsInstance(first, cgacct.EventsUpdate)
        self.assertEqual((first.path, first.events["max"]), ("/api", 0))
        c.charge("/api/a/x", 16, cgacct.FILE)
        st = c.group_stats("/api/a")
        self.assertIsInstance(st, cgacct.GroupStats)
        # The client's stock is charged too (a batch of 64 on the miss).
        self.assertEqual(st.stat["file"], (16 + c.stocked("/api/a/x", cgacct.FILE)) * PAGE)
        self.assertTrue(st.flushed)
        self.assertGreaterEqual(st.memory_current_bytes, 16 * PAGE)
        self.assertEqual(c.group_stats("/api", flush="none").limits.max_bytes, 1 << 20)
        with self.assertRaises(cgacct.Error) as e:
            c.group_stats("/api", flush="sometimes")
        self.assertIn("flush:", e.exception.details())
        # A refused charge at /api's max raises memory.events max at /api
        # (the limiting group): the watch sees it.
        with self.assertRaises(cgacct.Error) as e:
            c.charge("/api/b", 300)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertGreater(next(updates).events["max"], 0)
        updates.close()

        c.uncharge("/api/a/x", 16, cgacct.FILE)
        c.drain()
        c.charge("/api/a/x", 8, cgacct.FILE)
        c.drain()  # the stock back: only the application's 8 pages stay
        self.assertGreaterEqual(c.reclaim("/api/a", 4 * PAGE), 4 * PAGE)  # may overshoot
        with self.assertRaises(cgacct.Error) as e:
            c.reclaim("/api/a", 1 << 30)  # more than it holds: EAGAIN
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        with self.assertRaises(cgacct.Error) as e:
            c.delete_group("/api/a")
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(c.delete_group("/api/b"), 0)
        with self.assertRaises(cgacct.Error) as e:
            c.group_stats("/api/b")
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_stock_hit_makes_no_rpc(self):
        self.create("/stock")
        c = self.client(batch=64)
        first = c.charge("/stock", 1)
        self.assertFalse(first.from_stock)
        self.assertEqual(self.current_pages("/stock"), 64)  # the batch: stocked pages count
        charges, uncharges = self.rpcs("Charge"), self.rpcs("Uncharge")
        for _ in range(63):
            self.assertTrue(c.charge("/stock", 1).from_stock)
        for _ in range(64):
            self.assertEqual(c.uncharge("/stock", 1), 0)  # into the stock (cap 256)
        self.assertEqual(self.rpcs("Charge"), charges)
        self.assertEqual(self.rpcs("Uncharge"), uncharges)
        self.assertEqual(c.stats()["charge_rpcs"], 1)
        self.assertEqual(c.stats()["stock_hits"], 63)
        self.assertEqual(self.current_pages("/stock"), 64)
        self.assertEqual(c.stocked("/stock"), 64)
        info = self.session(c.session_id)
        self.assertEqual(info.held_pages, 64)
        # A new thread has a slot of its own (empty: a miss); when it ends
        # it hands the slot, stock included, to the next new thread, whose
        # charge is a hit.
        hits = []
        for _ in range(2):
            t = threading.Thread(target=lambda: hits.append(c.charge("/stock", 1).from_stock))
            t.start()
            t.join()
        self.assertEqual(hits, [False, True])
        self.assertEqual(self.rpcs("Charge"), charges + 1)

    def test_cluster_client_against_a_single_node_is_one_client(self):
        # A node not in cluster mode answers GetClusterMap with an empty
        # map: it serves every path (a fresh user's trial had NOT_FOUND).
        self.create("/single")
        with cgacct.ClusterClient([self.target], failover_s=5, ttl_ms=TTL_MS,
                                  batch=0) as cc:
            self.assertEqual(cc.owner("/single"), self.target)
            cc.charge("/single", 70)
            self.assertEqual(cc.held("/single"), 70)
            self.assertEqual(self.current_pages("/single"), 70)
            cc.uncharge("/single", 70)
            with self.assertRaises(cgacct.Error) as e:
                cc.charge("/nosuch", 1)
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_a_shrinking_application_returns_its_stock_a_slot_at_a_time(self):
        # Issue 26, item 10: growth then shrink, 3 pages a call. Trimming the
        # slot's entry to stock_cap made every free past it an RPC (6,581
        # Uncharge RPCs for 6,666 uncharges); draining the whole entry once
        # it passes the cap (refill_stock()) lets the frees accumulate again.
        # The growth ends exactly at memory.max (2 + 2,000 x 3 pages), with
        # pages left in the stock, so the last charge needs the server's
        # drain of it: after that the first free goes back marked restock,
        # and the ones after it are stocked again.
        self.create("/shrink", max_pages=6002)
        c = self.client()
        charges, uncharges = self.rpcs("Charge"), self.rpcs("Uncharge")
        c.charge("/shrink", 2)
        for _ in range(2000):
            c.charge("/shrink", 3)
        grown = self.rpcs("Charge") - charges
        self.assertGreaterEqual(c.stats().get("drains", 0), 1)
        for _ in range(2000):
            c.uncharge("/shrink", 3)
        c.uncharge("/shrink", 2)
        shrunk = self.rpcs("Uncharge") - uncharges
        self.assertLessEqual(grown, 2000 // 20)
        self.assertLessEqual(shrunk, 2000 // 20)
        self.assertEqual(c.stats()["uncharge_rpcs"], shrunk)
        self.assertEqual(c.held("/shrink"), 0)
        self.assertLessEqual(c.stocked(), 256)
        self.assertEqual(self.session(c.session_id).held_pages, c.stocked())
        c.close()
        self.assertEqual(self.current_pages("/shrink"), 0)

    def test_adaptive_batch_and_stock_groups(self):
        self.create("/adapt")
        c = self.client(batch=64, stock_cap=256)
        for _ in range(1000):
            c.charge("/adapt", 1)
        # Misses within 100 ms double the batch: 64, 128, 256, 256, 256:
        # 5 RPCs for 1,000 pages where a fixed batch of 64 needs 16.
        self.assertLessEqual(c.stats()["charge_rpcs"], 6)
        self.assertLessEqual(c.stocked(), 256)
        self.assertEqual(self.session(c.session_id).held_pages, 1000 + c.stocked())
        # batch=0: no batching, no stock: every call is an RPC of exactly n.
        z = self.client(batch=0)
        self.assertFalse(z.charge("/adapt", 3).from_stock)
        self.assertFalse(z.charge("/adapt", 3).from_stock)
        self.assertEqual(self.session(z.session_id).held_pages, 6)
        self.assertEqual(z.uncharge("/adapt", 6), 6)
        self.assertEqual((z.stocked(), z.stats()["charge_rpcs"]), (0, 2))
        # A slot stocks at most stock_groups groups: stocking a third
        # returns the least recently used one's pages (as the kernel's stock drains the memcg
        # it replaces).
        for g in ("/sg", "/sg/a", "/sg/b", "/sg/c"):
            self.create(g)
        d = self.client(stock_groups=2)
        for g in ("/sg/a", "/sg/b", "/sg/c"):
            d.charge(g, 1)
        self.assertEqual(d.stocked("/sg/a"), 0)
        self.assertEqual(d.stocked(), 126)
        self.assertEqual(d.stats()["uncharge_rpcs"], 1)
        holdings = {h.path: h.nr_pages for h in self.session(d.session_id).holdings}
        self.assertEqual(holdings, {b"/sg/a": 1, b"/sg/b": 64, b"/sg/c": 64})
        self.assertEqual(self.current_pages("/sg"), 129)

    def test_close_returns_everything(self):
        for g in ("/close", "/close/a", "/close/b"):
            self.create(g)
        c = self.client()
        c.charge("/close/a", 5)
        c.charge("/close/b", 100, cgacct.FILE)
        c.charge("/close/a", 70)
        c.uncharge("/close/a", 3)
        self.assertGreater(self.current_pages("/close"), 0)
        held = self.session(c.session_id).held_pages
        self.assertEqual(held, self.current_pages("/close"))
        returned = c.close()
        self.assertEqual(returned, held)
        for g in ("/close", "/close/a", "/close/b"):
            self.assertEqual(self.current_pages(g), 0, g)
        with self.assertRaises(cgacct.Error) as e:
            c.charge("/close/a", 1)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)

    def test_retry_is_applied_once(self):
        # CANCELLED too: a node shutting down (SIGTERM) cancels the calls in
        # flight; a fresh user's failovers had ClusterClient.charge raise it.
        for i, code in enumerate((grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)):
            with self.subTest(code=code):
                group = "/retry%d" % i
                self.create(group)
                lose = LoseFirstChargeResponse(code)
                c = self.client(interceptors=[lose], batch=64)
                result = c.charge(group, 10)
                self.assertFalse(result.from_stock)
                self.assertEqual(len(lose.seen), 2)
                (rid1, replayed1), (rid2, replayed2) = lose.seen
                self.assertEqual(rid1, rid2)  # the retry carried the same request_id
                self.assertFalse(replayed1)
                self.assertTrue(replayed2)  # the server answered it from the first
                self.assertEqual(self.current_pages(group), 64)  # one batch, not two
                self.assertEqual(c.stats()["retries"], 1)
                self.assertEqual(self.session(c.session_id).held_pages, 64)

    def test_keepalive_keeps_session_past_several_ttls(self):
        self.create("/alive")
        c = self.client(ttl_ms=300)
        self.assertEqual(c.ttl_ms, 300)
        c.charge("/alive", 1)
        time.sleep(6 * 0.3)
        info = self.session(c.session_id)
        self.assertEqual(info.held_pages, 64)
        self.assertTrue(info.attached)
        self.assertGreaterEqual(c.stats()["keepalives"], 4)
        self.assertEqual(self.current_pages("/alive"), 64)
        self.assertTrue(c.charge("/alive", 1).from_stock)

    def test_sigkill_mid_charge_leaves_nothing_within_ttl(self):
        self.create("/killed")
        ttl_ms = 1000
        script = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
import cgacct
c = cgacct.Client(sys.argv[2], ttl_ms=%d, batch=16)
def work(i):
    n = 0
    while True:
        c.charge("/killed", 1 + (n + i) %% 7)
        n += 1
        if n == 50 and i == 0:
            print("ready", flush=True)
        if n %% 3 == 0:
            c.uncharge("/killed", 1)
for i in range(4):
    threading.Thread(target=work, args=(i,), daemon=True).start()
threading.Event().wait()
""" % ttl_ms
        expired_before = self.metric("cgacct_sessions_expired_total")
        child = subprocess.Popen([sys.executable, "-c", script, PYPATH, self.target],
                                 stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(child.stdout.readline().strip(), "ready")
            time.sleep(0.2)  # mid-charge: the threads are still charging
            self.assertGreater(self.current_pages("/killed"), 0)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
        killed = time.monotonic()
        while self.current_pages("/killed") and time.monotonic() - killed < 5:
            time.sleep(0.02)
        elapsed = time.monotonic() - killed
        self.assertEqual(self.current_pages("/killed"), 0)
        self.assertLessEqual(elapsed, ttl_ms / 1000 + 1, "nothing left only after %.2f s" % elapsed)
        self.assertEqual(self.metric("cgacct_sessions_expired_total"), expired_before + 1)

    def test_drain_lets_a_charge_at_max_succeed(self):
        self.create("/drain", max_pages=200)
        self.create("/drain/x")
        events = []
        a, b, c = self.client(on_event=events.append), self.client(), self.client()
        a.charge("/drain/x", 1)
        b.charge("/drain", 1)
        self.assertEqual(self.current_pages("/drain"), 128)  # 2 pages used, 126 stocked
        answered = self.metric("cgacct_session_drain_requests_total", result="answered")
        timeouts = self.metric("cgacct_session_drain_requests_total", result="timeout")
        # 190 + 128 > 200: without the drain this is RESOURCE_EXHAUSTED.
        start = time.monotonic()
        result = c.charge("/drain", 190)
        print("\n  charge at max with 2 Python clients draining: %.1f ms"
              % (1000 * (time.monotonic() - start)), end=" ", flush=True)
        self.assertEqual(self.metric("cgacct_session_drain_requests_total", result="answered"),
                         answered + 2)
        self.assertEqual(self.metric("cgacct_session_drain_requests_total", result="timeout"),
                         timeouts)
        self.assertEqual(result.nr_pages, 190)
        self.assertEqual(self.current_pages("/drain"), 192)
        self.assertEqual(a.stocked(), 0)
        self.assertEqual(b.stocked(), 0)
        self.assertEqual(a.stats().get("drained_pages", 0) + b.stats().get("drained_pages", 0), 126)
        self.assertEqual(self.session(a.session_id).held_pages, 1)
        self.assertEqual(self.session(b.session_id).held_pages, 1)
        drained = [e for e in events if e.type == "drained"]
        self.assertEqual(len(drained), 1)
        self.assertEqual((drained[0].group, drained[0].nr_pages), (b"/drain", 63))
        # After the drain took its stock, and until a charge refills it,
        # what the application frees goes back to the server (the server
        # takes a drain answer with less than asked as an empty stock).
        self.assertEqual(a.uncharge("/drain/x", 1), 1)
        self.assertEqual(a.stocked(), 0)
        self.assertEqual(self.current_pages("/drain"), 191)

    def test_a_stopped_client_delays_a_charge_at_max_by_the_bound(self):
        # A client process holding stock is stopped (SIGSTOP): it cannot
        # answer the drain. A charge that needs its stock waits the bound
        # (--session_drain_timeout_ms=500) and fails; once the process
        # runs again its late answer returns the stock, and the charge fits.
        self.create("/stopped", max_pages=100)
        script = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
import cgacct
c = cgacct.Client(sys.argv[2], ttl_ms=10000)
c.charge("/stopped", 1)
print("ready", flush=True)
threading.Event().wait()
"""
        child = subprocess.Popen([sys.executable, "-c", script, PYPATH, self.target],
                                 stdout=subprocess.PIPE, text=True)
        self.addCleanup(child.stdout.close)
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        self.assertEqual(child.stdout.readline().strip(), "ready")
        self.assertEqual(self.current_pages("/stopped"), 64)
        t = self.client()
        timeouts = self.metric("cgacct_session_drain_requests_total", result="timeout")
        child.send_signal(signal.SIGSTOP)
        # kill() returns before the stop takes effect: wait until every
        # thread of the child is stopped (state T), or it may still answer.
        while not all(stopped_state(child.pid, t)
                      for t in os.listdir("/proc/%d/task" % child.pid)):
            time.sleep(0.01)
        start = time.monotonic()
        with self.assertRaises(cgacct.Error) as e:
            t.charge("/stopped", 64)  # 64 + 64 > 100 without the child's 63
        elapsed = time.monotonic() - start
        print("\n  charge at max with a stopped client: %.1f ms (bound 500 ms)"
              % (1000 * elapsed), end=" ", flush=True)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertGreaterEqual(elapsed, 0.5)
        self.assertLess(elapsed, 0.5 + 1.0)
        self.assertEqual(self.metric("cgacct_session_drain_requests_total", result="timeout"),
                         timeouts + 1)
        self.assertEqual(self.current_pages("/stopped"), 64)  # nothing charged
        child.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 5
        while self.current_pages("/stopped") > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.current_pages("/stopped"), 1)  # the late answer
        self.assertEqual(t.charge("/stopped", 64).nr_pages, 64)

    def test_reconnect_and_resume(self):
        self.create("/resume")
        proxy = Proxy(self.target)
        self.addCleanup(proxy.stop)
        events = []
        c = cgacct.Client(proxy.address, ttl_ms=TTL_MS, deadline=1.0,
                          on_event=lambda e: events.append(e.type))
        self.addCleanup(c.close)
        c.charge("/resume", 10)
        first = c.session_id
        # A cut connection: the stream re-attaches, the session lives on.
        proxy.cut()
        time.sleep(3 * TTL_MS / 1000)
        self.assertEqual(c.session_id, first)
        self.assertEqual(self.session(first).held_pages, 64)
        self.assertGreaterEqual(c.stats()["reattached_streams"], 1)
        self.assertTrue(c.charge("/resume", 1).from_stock)
        # Unreachable past the ttl: the server expires the session and
        # uncharges everything; when the client gets through again it opens
        # a new session and charges again the 11 pages the application holds.
        proxy.pause()
        deadline = time.monotonic() + 5
        while self.current_pages("/resume") and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.current_pages("/resume"), 0)
        proxy.resume()
        resumed = time.monotonic()
        while c.session_id == first and time.monotonic() < resumed + 10:
            time.sleep(0.05)
        print("\n  session re-opened %.1f s after the proxy let connections through again"
              % (time.monotonic() - resumed), end=" ", flush=True)
        self.assertNotEqual(c.session_id, first)
        # The new session id is set before the pages are charged again in
        # its name (the resume holds the client's gate meanwhile): wait for
        # the re-charge, as a loaded machine may still be making it (CI at
        # 86b38df saw 0 pages right after the id changed).
        deadline = time.monotonic() + 10
        while (self.current_pages("/resume") != 11 and "recharge_failed" not in events
               and time.monotonic() < deadline):
            time.sleep(0.05)
        self.assertEqual(c.stats()["reopened_sessions"], 1)
        self.assertIn("stream_broken", events)
        self.assertEqual(events.count("session_reopened"), 1)
        self.assertNotIn("recharge_failed", events)
        self.assertEqual(self.current_pages("/resume"), 11)
        self.assertEqual(self.session(c.session_id).held_pages, 11)
        self.assertEqual(c.held("/resume"), 11)
        self.assertEqual(c.stocked(), 0)
        c.uncharge("/resume", 11)
        c.close()
        self.assertEqual(self.current_pages("/resume"), 0)

    def test_bad_input_is_a_status_naming_the_field(self):
        self.create("/bad")
        c = self.client()
        cases = [
            (lambda: c.charge("/bad/../x", 1), grpc.StatusCode.INVALID_ARGUMENT, "path"),
            (lambda: c.charge("no-slash", 1), grpc.StatusCode.INVALID_ARGUMENT, "path"),
            (lambda: c.charge("/missing", 1), grpc.StatusCode.NOT_FOUND, "/missing"),
            (lambda: c.charge("/bad", 0), grpc.StatusCode.INVALID_ARGUMENT, "nr_pages"),
            (lambda: c.charge("/bad", -3), grpc.StatusCode.INVALID_ARGUMENT, "nr_pages"),
            (lambda: c.charge("/bad", 1, kind="swap"), grpc.StatusCode.INVALID_ARGUMENT, "kind"),
            (lambda: c.charge(7, 1), grpc.StatusCode.INVALID_ARGUMENT, "path"),
            (lambda: c.uncharge("/bad", 1), grpc.StatusCode.FAILED_PRECONDITION, "nr_pages"),
            (lambda: cgacct.Client(self.target, ttl_ms=10), grpc.StatusCode.INVALID_ARGUMENT,
             "ttl_ms"),
        ]
        for call, code, field in cases:
            with self.assertRaises(grpc.RpcError) as e:
                call()
            self.assertEqual(e.exception.code(), code, e.exception.details())
            self.assertIn(field, e.exception.details())
        self.assertEqual(self.current_pages("/bad"), 0)
        self.assertEqual(self.session(c.session_id).held_pages, 0)
        with self.assertRaises(ValueError) as e:
            cgacct.Client(self.target, throttle="ignore")
        self.assertIn("throttle", str(e.exception))

    def test_throttle_sleep_or_return(self):
        # memory.high 32 pages of anon (never reclaimed): a charge past it
        # gets the kernel's memory.high delay as throttle_us.
        self.create("/thr")
        self.stub.SetLimits(pb.SetLimitsRequest(
            path=b"/thr", limits=pb.Limits(high_bytes=32 * PAGE)), timeout=10)
        r = self.client(throttle="return").charge("/thr", 200)
        self.assertGreater(r.throttle_us, 0)
        s = self.client(throttle="sleep")
        start = time.monotonic()
        r = s.charge("/thr", 200)
        elapsed = time.monotonic() - start
        self.assertEqual(r.throttle_us, 0)  # slept, nothing left to the caller
        slept = s.stats()["throttled_us"]
        self.assertGreater(slept, 0)
        self.assertGreaterEqual(elapsed, slept / 1e6)

    def test_threads_agree_with_the_server(self):
        self.create("/threads")
        self.create("/threads/a")
        self.create("/threads/b")
        c = self.client(batch=8, stock_cap=32)
        errors = []
        kept = [0] * 8

        def work(i):
            try:
                mine = []
                for n in range(300):
                    g = "/threads/a" if (n + i) % 2 else "/threads/b"
                    pages = 1 + (n * 7 + i) % 5
                    c.charge(g, pages)
                    mine.append((g, pages))
                    if n % 3 == 2:
                        g, pages = mine.pop(0)
                        c.uncharge(g, pages)
                kept[i] = sum(p for _, p in mine)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        held = c.held("/threads/a") + c.held("/threads/b")
        self.assertEqual(held, sum(kept))
        info = self.session(c.session_id)
        self.assertEqual(info.held_pages, held + c.stocked())
        # memory.current also counts what the server's uncharges parked in
        # its own per-CPU stock (DESIGN §3.6): at least the session's pages,
        # at most a page per CPU (2) and group (3) more.
        self.assertGreaterEqual(self.current_pages("/threads"), held + c.stocked())
        self.assertLessEqual(self.current_pages("/threads"), held + c.stocked() + 6)
        self.assertGreater(c.stats()["stock_hits"], c.stats()["charge_rpcs"])
        c.close()
        with self.assertRaises(grpc.RpcError) as e:
            self.session(info.session_id)  # bytes, as the request takes it
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        # The client's Uncharge RPCs (stock over its cap) parked up to a page
        # per group and CPU in the server's stock: drained, nothing is left.
        self.drain_server_stock("/threads")
        self.assertEqual(self.current_pages("/threads"), 0)


class BearerTokenTest(unittest.TestCase):
    """A server with access control (--tokens_file): the client's metadata
    goes with every call, the SessionStream's included."""

    def test_token_on_every_call_and_the_stream(self):
        tmp = tempfile.mkdtemp(prefix="cgacct-pyclient-")
        self.addCleanup(shutil.rmtree, tmp)
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            f.write("app app-token-0123456789abcdef\nother other-token-0123456789ab\n")
        daemon, target, _ = start_daemon(["--tokens_file=" + tokens])
        self.addCleanup(stop_daemon, daemon)
        app = [("authorization", "Bearer app-token-0123456789abcdef")]
        other = [("authorization", "Bearer other-token-0123456789ab")]
        channel = grpc.insecure_channel(target)
        self.addCleanup(channel.close)
        stub = pb_grpc.AccountingStub(channel)
        stub.CreateGroup(pb.CreateGroupRequest(path=b"/tok", limits=pb.Limits(
            max_bytes=100 * PAGE)), timeout=10, metadata=app)

        with self.assertRaises(grpc.RpcError) as e:
            cgacct.Client(target)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

        a = cgacct.Client(target, ttl_ms=300, metadata=app)
        self.addCleanup(a.close)
        b = cgacct.Client(target, ttl_ms=300, metadata=app)
        self.addCleanup(b.close)
        a.charge("/tok", 1)
        time.sleep(1.2)  # 4 ttls: the keepalives on the stream carry the token
        info = stub.GetSession(pb.GetSessionRequest(session_id=a.session_id),
                               timeout=10, metadata=app)
        self.assertEqual(info.held_pages, 64)
        self.assertTrue(info.attached)
        # The drain request reaches a's stream: b's 90 pages fit once a's
        # 63 stocked pages are back.
        self.assertEqual(b.charge("/tok", 90).nr_pages, 90)
        self.assertEqual(a.stocked(), 0)
        # Another identity does not see the session.
        with self.assertRaises(grpc.RpcError) as e:
            stub.GetSession(pb.GetSessionRequest(session_id=a.session_id),
                            timeout=10, metadata=other)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(a.close() + b.close(), 91)


if __name__ == "__main__":
    unittest.main(verbosity=2)
