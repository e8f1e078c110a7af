"""The cluster fault tests' checker (docs/DESIGN.md §4.18, "Holders across a
failover"): session holders keep one shard's group at its memory.max
through the client libraries while the test does its fault, and a checker
whose truth follows the sessions samples them.

Four holders use the Python library (cgacct.ClusterClient), a fifth the
C++ one (tests/client/lib/cluster_client_probe, driven from stdin). Each
holder's truth is what it was acknowledged minus what it freed: a charge
counts once acknowledged, an uncharge before it is sent (the pages are
freed whatever the server answers), whatever a server later lost. The
checker sums them every 10 ms (`truth_max`, which must stay <= max). A
probe sends 1-page charges (each followed by its uncharge) straight to the
`watched` node (marked forwarded: never passed on), so that the test can
ask which of them that node acknowledged after a deadline (`late()`).

The caller puts the generated Python stubs on sys.path before importing
this module.
"""
import json
import random
import subprocess
import sys
import threading
import time

import grpc

import cgacct
from cgacct.v1 import accounting_pb2 as pb

FORWARDED = (("cgacct-forwarded", "1"),)


class Holders:
    """Holders of `shard` (max `max_pages`) entering the cluster at the node
    address `entry`; `watched` is the node the probe charges (the owner the
    fault is done to). `probe_binary`: cluster_client_probe."""

    PY_HOLDERS = 4
    PY_WANT = 120   # pages each Python holder aims at (4 x 120 > max)
    CPP_WANT = 80
    STEP = 8        # pages per charge / uncharge

    def __init__(self, shard, max_pages, entry, watched, probe_binary):
        self.shard = shard
        self.max_pages = max_pages
        self.entry = entry
        self.watched = watched
        self.probe_binary = probe_binary
        self.lock = threading.Lock()
        self.ledger = {}       # holder -> pages it holds (the truth)
        self.acks = []         # (monotonic time, owner the library had) of Python acks
        self.counts = {"refused": 0, "errors": 0, "acks": 0}
        self.truth_max = 0
        self.over_at = None
        self.probe_acks = []   # (send time, acknowledged) of probe charges
        self.probe_unreturned = 0  # probe pages acknowledged, uncharge not
        self.cpp_stats = {}
        self.events = []       # the Python holders' re-charge events
        self.clients = []
        self.stopping = threading.Event()
        self.threads = []
        self.cpp = None
        self.started_at = None

    # --- the load ---

    def _python_holder(self, i):
        def on_event(ev):
            if ev.type in ("recharge_failed", "recharge_deferred"):
                with self.lock:
                    self.events.append((time.monotonic(), i, ev.type, ev.nr_pages, ev.code,
                                        ev.details))
        cc = cgacct.ClusterClient([self.entry], failover_s=30, ttl_ms=3000, batch=0,
                                  deadline=1.0, retries=1, on_event=on_event)
        with self.lock:
            self.clients.append(cc)
            self.ledger[i] = 0
        rng = random.Random(i)
        while not self.stopping.is_set():
            held = self.ledger[i]
            try:
                if held < self.PY_WANT and (held == 0 or rng.random() < 0.6):
                    cc.charge(self.shard, self.STEP)  # used once acknowledged
                    delta = self.STEP
                else:
                    with self.lock:  # freed before the server is told
                        self.ledger[i] -= self.STEP
                    delta = 0
                    cc.uncharge(self.shard, self.STEP)
            except cgacct.Error as e:
                with self.lock:
                    self.counts["refused" if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                                else "errors"] += 1
                time.sleep(0.02)
                continue
            with self.lock:
                self.ledger[i] += delta
                self.counts["acks"] += 1
                self.acks.append((time.monotonic(), cc.owner(self.shard)))

    def _cpp_holder(self, i):
        def ask(line):
            self.cpp.stdin.write(line + "\n")
            self.cpp.stdin.flush()
            return json.loads(self.cpp.stdout.readline())
        with self.lock:
            self.ledger[i] = 0
        rng = random.Random(i)
        while not self.stopping.is_set():
            if self.ledger[i] < self.CPP_WANT and (self.ledger[i] == 0 or rng.random() < 0.6):
                if ask("charge %s %d" % (self.shard, self.STEP))["code"] == 0:
                    with self.lock:
                        self.ledger[i] += self.STEP
                else:
                    time.sleep(0.02)
            else:
                with self.lock:
                    self.ledger[i] -= self.STEP
                ask("uncharge %s %d" % (self.shard, self.STEP))
        self.cpp_stats.update(ask("stats"))
        ask("close")

    def _checker(self):
        while not self.stopping.is_set():
            with self.lock:
                truth = sum(self.ledger.values())
            if truth > self.max_pages and self.over_at is None:
                self.over_at = time.monotonic()
            self.truth_max = max(self.truth_max, truth)
            time.sleep(0.01)

    def _probe(self):
        path = self.shard.encode()
        while not self.stopping.is_set():
            t = time.monotonic()
            try:
                self.watched.stub.Charge(pb.ChargeRequest(path=path, nr_pages=1,
                                                          kind=pb.PAGE_KIND_ANON),
                                         timeout=1, metadata=FORWARDED)
            except grpc.RpcError:
                self.probe_acks.append((t, False))
                time.sleep(0.02)
                continue
            self.probe_acks.append((t, True))
            try:
                self.watched.stub.Uncharge(pb.UnchargeRequest(path=path, nr_pages=1,
                                                              kind=pb.PAGE_KIND_ANON),
                                           timeout=1, metadata=FORWARDED)
            except grpc.RpcError:
                self.probe_unreturned += 1  # given back by cleanup() if still there
            time.sleep(0.02)

    def start(self, warm_s=2.0):
        """Starts the holders, the checker and the probe, and lets them run
        `warm_s` seconds (the group reaches its max)."""
        self.cpp = subprocess.Popen([self.probe_binary, self.entry, "30000"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.threads = [threading.Thread(target=self._python_holder, args=(i,))
                        for i in range(self.PY_HOLDERS)]
        self.threads += [threading.Thread(target=self._cpp_holder, args=(self.PY_HOLDERS,)),
                         threading.Thread(target=self._checker),
                         threading.Thread(target=self._probe)]
        for t in self.threads:
            t.start()
        self.started_at = time.monotonic()
        time.sleep(warm_s)

    def stop(self):
        """Ends the load (the sessions stay open until close())."""
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=60)

    def abort(self):
        """The test's cleanup: the load stopped, the C++ holder killed if
        still running (nothing closed politely)."""
        self.stopping.set()
        if self.cpp is not None and self.cpp.poll() is None:
            self.cpp.kill()
            self.cpp.wait()
        for t in self.threads:
            t.join(timeout=60)

    def close(self):
        """stop(), then every holder's sessions closed."""
        self.stop()
        for cc in self.clients:
            cc.close()
        self.clients = []
        if self.cpp is not None:
            if self.cpp.poll() is None:
                try:
                    self.cpp.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.cpp.kill()
                    self.cpp.wait()
            self.cpp = None

    # --- what happened ---

    def first_ack(self, after, elsewhere=False):
        """The time of the first acknowledged holder call after `after` (at
        an owner other than `watched` if `elsewhere`), or None."""
        with self.lock:
            return next((t for t, owner in self.acks if t > after and
                         (not elsewhere or owner != self.watched.address)), None)

    def wait_served(self, after, timeout, elsewhere=False):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.first_ack(after, elsewhere)
            if t is not None:
                return t
            time.sleep(0.05)
        return self.first_ack(after, elsewhere)

    def longest_gap(self, after, until):
        """The longest time in [after, until] without an acknowledged holder
        call: how long the shard was not served."""
        with self.lock:
            times = [t for t, _ in self.acks if after < t < until]
        edges = [after] + times + [until]
        return max(b - a for a, b in zip(edges, edges[1:]))

    def late(self, after, before=float("inf")):
        """Probe charges sent to `watched` in (after, before) that it
        acknowledged."""
        return [t for t, ok in self.probe_acks if ok and after < t < before]

    def probe_refused(self, after, before=float("inf")):
        return len([t for t, ok in self.probe_acks if not ok and after < t < before])

    @property
    def over_pages(self):
        return max(0, self.truth_max - self.max_pages)

    def report(self, fault, **figures):
        """One line on stderr, `checker[FAULT]: name=value ...`, the figures
        the RESULTS table quotes."""
        line = " ".join("%s=%s" % (k, ("%.2f" % v) if isinstance(v, float) else v)
                        for k, v in figures.items())
        print("checker[%s]: %s truth_max=%d/%d over_pages=%d acks=%d refused_at_max=%d "
              "other_errors=%d" % (fault, line, self.truth_max, self.max_pages,
                                   self.over_pages, self.counts["acks"],
                                   self.counts["refused"], self.counts["errors"]),
              file=sys.stderr)
        print("checker[%s]: C++ holder %s" % (fault, self.cpp_stats), file=sys.stderr)
        for t, i, type_, n, code, details in self.events:
            print("checker[%s]: %.2f s holder %d %s %d pages %s %s" % (
                fault, t - self.started_at, i, type_, n, code, details), file=sys.stderr)
        if self.over_at is not None:
            print("checker[%s]: over max %.2f s after the start; clients %s" % (
                fault, self.over_at - self.started_at, [c.stats() for c in self.clients]),
                file=sys.stderr)

    def counted_losses(self):
        """Pages the holders' libraries said they could not charge again
        (recharge_failed_pages) or kept uncounted at a node that refused
        them (resume_deferred_pages, counted at each try), over every
        holder. Call after stop(), before close()."""
        total = 0
        for stats in [c.stats() for c in self.clients] + [self.cpp_stats]:
            total += stats.get("recharge_failed_pages", 0) + stats.get("resume_deferred_pages", 0)
        return total

    def assert_held(self, test, cpp_moved=False, known_over=0):
        """The invariants every fault keeps: the truth never above max (with
        `known_over`, a fault's documented bound for an open bug: never
        more than that above it), the group at its max at times (some
        charges refused), and with `cpp_moved` the C++ holder moved the
        shard at least once."""
        test.assertLessEqual(self.truth_max, self.max_pages + known_over,
                             "over-admitted: %d of %d pages (known bound %d over)" % (
                                 self.truth_max, self.max_pages, known_over))
        test.assertGreater(self.counts["refused"], 0)  # the group was at its max
        if cpp_moved:
            test.assertGreaterEqual(self.cpp_stats.get("moves", 0), 1, self.cpp_stats)

    def assert_all_returned(self, test, nodes, current_bytes):
        """After close(): every live node's counter of the shard is 0 (the
        probe's unreturned pages, if any, given back first). `current_bytes`
        (node, path) reads a node's own engine."""
        for n in nodes:
            if n.proc.poll() is not None:
                continue
            for _ in range(self.probe_unreturned):
                try:  # wherever the shard is now (forwarded); 0 pages: refused
                    n.stub.Uncharge(pb.UnchargeRequest(path=self.shard.encode(), nr_pages=1,
                                                       kind=pb.PAGE_KIND_ANON), timeout=2)
                except grpc.RpcError:
                    break
            self.probe_unreturned = 0
            deadline = time.monotonic() + 10
            while current_bytes(n, self.shard) != 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            test.assertEqual(current_bytes(n, self.shard), 0,
                             "%s still counts %s" % (n.address, self.shard))
