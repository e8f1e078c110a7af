#!/usr/bin/python3
"""cgacct-load against the real cgacctd (label "load"): open loop with a
server stall (SIGSTOP) counted against every call it delayed, the warm-up
excluded, the reclaim scenario, --json and --chart (real gnuplot).

Usage: load_run_test.py CGACCTD CGACCT_LOAD
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

CGACCTD = sys.argv[1]
LOAD = sys.argv[2]


class LoadAgainstCgacctd(unittest.TestCase):
    def setUp(self):
        self.daemon = subprocess.Popen(
            [CGACCTD, "--listen=127.0.0.1:0", "--metrics_listen=", "--cpus=4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.daemon.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", line)
        if not m:
            self.daemon.kill()
            raise RuntimeError("no start line: %r" % line)
        self.target = "127.0.0.1:%s" % m.group(1)
        self.tmp = tempfile.mkdtemp(prefix="cgacct_load_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def tearDown(self):
        if self.daemon.poll() is None:
            os.kill(self.daemon.pid, signal.SIGCONT)
            self.daemon.terminate()
        self.daemon.wait(timeout=20)

    def load(self, *args, stall_at=None, stall_s=0.0):
        """Runs cgacct-load; with stall_at, SIGSTOPs the server stall_at s
        after the start for stall_s s. Returns (exit code, JSON report)."""
        out = os.path.join(self.tmp, "report.json")
        cmd = [LOAD, "--target=" + self.target, "--metrics_target=",
               "--json=" + out] + list(args)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        if stall_at is not None:
            time.sleep(stall_at)
            os.kill(self.daemon.pid, signal.SIGSTOP)
            time.sleep(stall_s)
            os.kill(self.daemon.pid, signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=120)
        self.assertTrue(os.path.exists(out), stdout + stderr)
        with open(out) as f:
            report = json.load(f)
        self.last_output = stdout + stderr
        return proc.returncode, report

    def test_open_loop_counts_a_stall_against_every_call_it_delayed(self):
        # 200 calls/s over 2 readers for 4 s; the server freezes for 0.6 s in
        # the middle. About 120 calls were due in the freeze: their latency
        # from the intended send time runs from ~600 ms down to ~0, so the
        # p99 (of ~800 calls) is hundreds of ms, and the calls sent after
        # their time are counted late.
        code, r = self.load("--scenario=stat-reader", "--threads=2",
                            "--rate=200", "--warmup=0.5s", "--duration=4s",
                            stall_at=2.0, stall_s=0.6)
        self.assertEqual(code, 0, self.last_output)
        self.assertEqual(r["mode"], "open")
        ol = r["open_loop"]
        self.assertEqual(ol["rate_per_s"], 200)
        # The schedule was kept up overall (the backlog is sent after the
        # freeze): 800 due, a few may be unsent at the end.
        self.assertGreater(ol["sent"], 700, r)
        self.assertLessEqual(ol["sent"], 802, r)
        self.assertGreater(ol["achieved_per_s"], 170, r)
        self.assertLess(ol["achieved_per_s"], 210, r)
        self.assertGreater(ol["late"], 60, r)          # ~120 due in the freeze
        self.assertGreater(ol["max_send_lag_us"], 400_000, r)
        lat = r["reads"]["latency"]
        self.assertGreater(lat["p99_us"], 300_000, r)
        self.assertGreater(lat["max_us"], 500_000, r)
        # The per-second series shows the freeze in one or two seconds.
        series = r["reads"]["time_series"]
        self.assertGreaterEqual(len(series), 3, series)
        self.assertTrue(any(s["max_us"] > 400_000 for s in series), series)
        self.assertTrue(any(s["p99_us"] < 100_000 for s in series), series)
        self.assertEqual(sum(s["count"] for s in series),
                         r["reads"]["total"])

    def test_closed_loop_hides_the_same_stall_in_its_percentiles(self):
        # The contrast: closed loop, each reader waits out the freeze with one
        # call, so the freeze is 2 samples among thousands: p99 stays low.
        code, r = self.load("--scenario=stat-reader", "--threads=2",
                            "--warmup=0.5s", "--duration=4s",
                            stall_at=2.0, stall_s=0.6)
        self.assertEqual(code, 0, self.last_output)
        self.assertEqual(r["mode"], "closed")
        self.assertIsNone(r["open_loop"])
        self.assertGreater(r["reads"]["total"], 1000, r)
        self.assertGreater(r["reads"]["latency"]["max_us"], 500_000, r)
        self.assertLess(r["reads"]["latency"]["p99_us"], 100_000, r)

    def test_warmup_is_excluded(self):
        # A freeze inside the 2 s warm-up: no measured call was due in it.
        code, r = self.load("--scenario=stat-reader", "--threads=2",
                            "--rate=200", "--warmup=2s", "--duration=2s",
                            stall_at=0.3, stall_s=0.8)
        self.assertEqual(code, 0, self.last_output)
        self.assertEqual(r["warmup_s"], 2)
        self.assertAlmostEqual(r["elapsed_s"], 2.0, delta=0.3)
        # 400 due in the measured 2 s (not 800).
        self.assertLessEqual(r["open_loop"]["sent"], 402, r)
        self.assertGreater(r["open_loop"]["sent"], 350, r)
        self.assertLess(r["reads"]["latency"]["max_us"], 400_000, r)

    def test_reclaim_scenario_with_chart(self):
        png = os.path.join(self.tmp, "reclaim.png")
        code, r = self.load("--scenario=reclaim", "--writers=2",
                            "--high_bytes=2M", "--write_chunk_pages=16",
                            "--reclaim_bytes=1M", "--reclaim_interval=50ms",
                            "--warmup=0.5s", "--duration=2s",
                            "--group=/load-reclaim", "--chart=" + png)
        self.assertEqual(code, 0, self.last_output)
        c, rec = r["charges"], r["reclaim"]
        self.assertGreater(c["total"], 100, r)
        self.assertEqual(c["errors"], 0, r)
        self.assertEqual(rec["writers"], 2)
        self.assertEqual(rec["high_bytes"], 2 << 20)
        # Two writers hold up to 2 MiB each under a 2 MiB memory.high: the
        # group goes over it, the server reclaims and throttles, and the
        # reclaimer reclaims too.
        self.assertGreater(rec["events_delta"]["high"], 0, r)
        self.assertEqual(rec["events_delta"]["oom"], 0, r)
        self.assertGreater(rec["reclaims"] + rec["reclaims_short"], 10, r)
        self.assertGreater(rec["reclaimed_pages"], 0, r)
        self.assertGreater(rec["pgsteal_delta"], 0, r)
        self.assertGreater(rec["latency"]["count"], 0, r)
        self.assertEqual(c["hog_groups_left"], 0, r)
        self.assertEqual(c["reparented_pages"], 0, r)
        self.assertGreater(len(c["time_series"]), 0, r)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_closed_loop_client_modes_agree(self):
        # The asynchronous driver on 1 and 2 threads and the blocking
        # thread per reader (--io_threads=0) all count what they did.
        for io in ("1", "2", "0"):
            code, r = self.load("--scenario=stat-reader", "--threads=4",
                                "--io_threads=" + io, "--warmup=0.2s",
                                "--duration=1s")
            self.assertEqual(code, 0, self.last_output)
            reads = r["reads"]
            self.assertGreater(reads["total"], 100, (io, r))
            self.assertEqual(reads["errors"], 0, (io, r))
            self.assertEqual(reads["latency"]["count"], reads["total"])
            self.assertEqual(sum(s["count"] for s in reads["time_series"]),
                             reads["total"], (io, reads["time_series"]))

    def test_server_killed_mid_run_is_counted_not_hung(self):
        # The asynchronous readers see UNAVAILABLE, pause 10 ms between
        # tries, and the run still ends on time with exit status 3.
        out = os.path.join(self.tmp, "killed.json")
        proc = subprocess.Popen(
            [LOAD, "--target=" + self.target, "--metrics_target=",
             "--json=" + out, "--scenario=stat-reader", "--threads=4",
             "--warmup=0.2s", "--duration=3s", "--rpc_timeout=1s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        self.daemon.kill()
        start = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
        self.assertLess(time.monotonic() - start, 20, stdout + stderr)
        self.assertEqual(proc.returncode, 3, stdout + stderr)
        with open(out) as f:
            r = json.load(f)
        self.assertGreater(r["reads"]["total"], 0, r)
        self.assertGreater(r["reads"]["errors"], 0, r)
        self.assertIn("UNAVAILABLE", r["first_error"])
        # 10 ms pauses: at most a few hundred tries per reader in ~1.5 s.
        self.assertLess(r["reads"]["errors"], 4 * 400, r)

    def test_netperf_json_has_the_series_and_draws_a_chart(self):
        png = os.path.join(self.tmp, "netperf.png")
        code, r = self.load("--scenario=netperf", "--streams=2",
                            "--duration=1.5s", "--chart=" + png)
        self.assertEqual(code, 0, self.last_output)
        self.assertGreater(r["messages"], 0, r)
        self.assertGreaterEqual(len(r["time_series"]), 1, r)
        self.assertEqual(sum(s["count"] for s in r["time_series"]),
                         r["messages"], r)
        self.assertEqual(r["latency"]["count"], r["messages"])
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_rate_without_readers_is_a_usage_error(self):
        proc = subprocess.run(
            [LOAD, "--target=" + self.target, "--scenario=reclaim",
             "--rate=100"], capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--rate paces the stat readers", proc.stderr)


class LibraryLoadAgainstCgacctd(unittest.TestCase):
    """netperf --rpc=library and session-churn (issue 13): a daemon with
    /metrics on, which both scenarios scrape."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cgacct_load_lib_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.start_daemon()

    def start_daemon(self, *flags):
        """cgacctd with /metrics on and `flags`; returns its start line."""
        self.daemon = subprocess.Popen(
            [CGACCTD, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             "--cpus=2"] + list(flags),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.daemon.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) \(metrics on "
                      r"127\.0\.0\.1:(\d+)", line)
        if not m:
            self.daemon.kill()
            raise RuntimeError("no start line: %r" % line)
        self.target = "127.0.0.1:%s" % m.group(1)
        self.metrics = "127.0.0.1:%s" % m.group(2)
        return line

    def tearDown(self):
        self.daemon.terminate()
        self.daemon.wait(timeout=20)

    def load(self, *args):
        out = os.path.join(self.tmp, "report.json")
        proc = subprocess.run(
            [LOAD, "--target=" + self.target,
             "--metrics_target=" + self.metrics, "--json=" + out] + list(args),
            capture_output=True, text=True, timeout=120)
        self.last_output = proc.stdout + proc.stderr
        self.assertTrue(os.path.exists(out), self.last_output)
        with open(out) as f:
            return proc.returncode, json.load(f)

    def test_netperf_library_hits_the_stock(self):
        code, r = self.load("--scenario=netperf", "--rpc=library",
                            "--streams=4", "--duration=1.5s")
        self.assertEqual(code, 0, self.last_output)
        self.assertEqual(r["rpc"], "library")
        self.assertEqual(r["op_errors"], 0, r)
        self.assertEqual(r["anon_pages_left"], 0, r)
        self.assertGreater(r["library_charges"], 100000, r)
        # Each charge and uncharge is an op; the resident charges add 4.
        self.assertEqual(r["library_charges"], r["ops"] // 2 + 4, r)
        self.assertGreater(r["library_stock_hits"],
                           r["library_charges"] * 0.99, r)
        self.assertIsNotNone(r["server_rpcs_per_charge"], r)
        self.assertLessEqual(r["server_rpcs_per_charge"], 1 / 32, r)
        self.assertIn("server RPCs/charge", self.last_output)

    def test_session_churn_pages_come_back_within_ttl_plus_one_second(self):
        code, r = self.load("--scenario=session-churn", "--churn_clients=2",
                            "--churn_rounds=2", "--churn_pages=200",
                            "--session_ttl_ms=500", "--group=/churn")
        self.assertEqual(code, 0, self.last_output)
        self.assertEqual(len(r["rounds"]), 2, r)
        for rnd in r["rounds"]:
            self.assertGreaterEqual(rnd["held_pages"], 2 * 200, r)
            self.assertTrue(rnd["within_bound"], r)
            self.assertGreaterEqual(rnd["to_zero_ms"], 0, r)
            self.assertLessEqual(rnd["to_zero_ms"], 1500, r)
            self.assertEqual(rnd["sessions_expired"], 2, r)
            self.assertEqual(rnd["returned_pages_expire"], rnd["held_pages"], r)


class GuardedLoadAgainstCgacctd(LibraryLoadAgainstCgacctd):
    """The same with access control (a bearer token; the receive guard on):
    session-churn's children get the parent's --token_file (they were
    refused UNAUTHENTICATED), and honest load of every kind is never taken
    for a flood: no read cancelled, no connection closed by the guard."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cgacct_load_guard_")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        token = "load-token-0123456789abcdef"
        with open(os.path.join(self.tmp, "tokens"), "w") as f:
            f.write("loader %s\n" % token)
        with open(os.path.join(self.tmp, "policy"), "w") as f:
            f.write("token:loader admin\n")
        self.token_file = os.path.join(self.tmp, "token")
        with open(self.token_file, "w") as f:
            f.write(token + "\n")
        line = self.start_daemon(
            "--tokens_file=" + os.path.join(self.tmp, "tokens"),
            "--authz_policy=" + os.path.join(self.tmp, "policy"))
        self.assertIn("access control", line)

    def load(self, *args):
        return super().load("--token_file=" + self.token_file, *args)

    def guard_counts(self):
        import urllib.request
        body = urllib.request.urlopen(
            "http://%s/metrics" % self.metrics, timeout=10).read().decode()
        counts = {}
        for name in ("cgacct_oversized_reads_cancelled_total",
                     "cgacct_flooding_connections_closed_total"):
            m = re.search(r"^%s (\S+)$" % name, body, re.M)
            self.assertIsNotNone(m, name)
            counts[name] = float(m.group(1))
        return counts

    def tearDown(self):
        # Whatever the test ran, the guard cut nothing.
        try:
            for name, value in self.guard_counts().items():
                self.assertEqual(value, 0, name)
        finally:
            super().tearDown()

    def test_netperf_streams_and_unary_calls(self):
        for rpc in ("stream", "unary"):
            code, r = self.load("--scenario=netperf", "--rpc=" + rpc,
                                "--streams=8", "--duration=1.5s")
            self.assertEqual(code, 0, self.last_output)
            self.assertEqual(r["op_errors"], 0, r)
            self.assertGreater(r["ops"], 1000, r)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
