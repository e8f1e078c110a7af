#!/usr/bin/python3
"""deploy/prometheus and deploy/grafana against a real Prometheus.

  prometheus_test.py CGACCTD STUBS_DIR SOURCE_DIR

Starts CGACCTD on loopback (ports chosen by the kernel) and Debian's
Prometheus (/usr/bin/prometheus, 2.42) on a free loopback port with a
temporary TSDB, configured by deploy/prometheus/prometheus.yml with this one
documented transformation (test_config below), nothing else changed:
  - the one static target "127.0.0.1:9464" becomes the test cgacctd's
    /metrics address;
  - scrape_interval/scrape_timeout/evaluation_interval become 1s (the test
    waits for scrapes; 5s/15s would only make it slower);
  - the alert rules file sits beside the copy, as beside the original.
Then, through Prometheus' HTTP API (/api/v1/query):
  - a group's memory.current (cgacct_group_memory_current_bytes{path=...})
    equals, exactly, what the test charged and what GetStats answers;
  - histogram_quantile over cgacct_rstat_flush_lock_hold_seconds_bucket is a
    finite number after stats reads that flushed;
  - EVERY PromQL expression of deploy/grafana/cgacct-dashboard.json (panels
    and template variables) and of deploy/prometheus/cgacct-alerts.yml
    evaluates without error or warning, every metric name they use is one
    the scrape has (a renamed metric fails here, not on a dashboard), and
    every selector in them, matchers included, selects a series (the test
    provokes an OOM, a rejected charge and stats reads first);
  - `promtool check metrics` finds nothing to say about a live scrape.
Grafana's variables are replaced by concrete values (substitute()).
Runs with Debian's python3-grpcio, python3-protobuf and python3-yaml
(deploy/install-deps.sh); STUBS_DIR holds the Python stubs generated from
the proto at build time (tests/python/CMakeLists.txt).
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import yaml

CGACCTD = sys.argv[1]
sys.path.insert(0, sys.argv[2])
SOURCE = sys.argv[3]
del sys.argv[1:4]

import grpc  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor  # noqa: E402

from cgacct.v1 import accounting_pb2 as pb  # noqa: E402
from cgacct.v1 import accounting_pb2_grpc as pb_grpc  # noqa: E402

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
PROM_DIR = os.path.join(SOURCE, "deploy", "prometheus")
DASHBOARD = os.path.join(SOURCE, "deploy", "grafana", "cgacct-dashboard.json")
SHIPPED_TARGET = "127.0.0.1:9464"
PAGE = 4096
# More than the per-CPU stock's batch (64 pages): the page counter is
# charged exactly this and the stock is not refilled, so memory.current is
# exactly CHARGED_PAGES pages (as try_charge() with nr_pages > batch).
CHARGED_PAGES = 128
# What $__rate_interval stands for here: at least 4 scrapes of 1 s, as
# Grafana computes it (max(4 x scrape interval, $__interval + scrape)).
RATE_INTERVAL = "4s"
WAIT_S = 30


def wire_path(path):
    field = pb.ChargeRequest.DESCRIPTOR.fields_by_name["path"]
    return path.encode() if field.type == FieldDescriptor.TYPE_BYTES else path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_config(shipped, target):
    """The shipped scrape config with the documented transformation: only the
    target address and the intervals change."""
    config = yaml.safe_load(shipped)
    jobs = [j for j in config["scrape_configs"] if j["job_name"] == "cgacct"]
    assert len(jobs) == 1, "deploy/prometheus/prometheus.yml: no single job cgacct"
    statics = jobs[0]["static_configs"]
    targets = [t for s in statics for t in s["targets"]]
    assert targets == [SHIPPED_TARGET], (
        "deploy/prometheus/prometheus.yml: expected the one target %s, got %s"
        % (SHIPPED_TARGET, targets))
    statics[0]["targets"] = [target]
    jobs[0]["scrape_interval"] = "1s"
    jobs[0]["scrape_timeout"] = "1s"
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    return yaml.safe_dump(config, sort_keys=False)


def dashboard_exprs(dashboard):
    """(where, expression) for every PromQL expression of the dashboard: each
    panel target's expr and each query variable's query."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append((where + "/expr", node["expr"]))
            for key, value in node.items():
                walk(value, "%s/%s" % (where, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, "%s/%d" % (where, i))

    walk(dashboard.get("panels", []), "panels")
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]
        if isinstance(query, dict):
            query = query["query"]
        found.append(("templating/%s" % var["name"], query))
    return found


def alert_exprs(rules):
    return [("%s/%s" % (g["name"], r.get("alert") or r.get("record")), r["expr"])
            for g in rules["groups"] for r in g["rules"]]


def substitute(expr, variables):
    """A Grafana query as PromQL Prometheus can evaluate: the template
    functions label_values(M, L) / label_values(L) / metrics(RE) / query_result(Q)
    become the query they run, $__rate_interval/$__interval/$__range
    concrete durations, and every dashboard variable ($v, ${v}, [[v]]) its
    "All" value (allValue, else .*)."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", expr, re.S)
    if m:
        expr = m.group(1)
    elif re.fullmatch(r"\s*label_values\(\s*\w+\s*\)\s*", expr):
        expr = "up"
    m = re.fullmatch(r"\s*query_result\((.*)\)\s*", expr, re.S)
    if m:
        expr = m.group(1)
    m = re.fullmatch(r"\s*metrics\((.*)\)\s*", expr, re.S)
    if m:
        expr = '{__name__=~"%s"}' % m.group(1).strip()
    for name, value in (("__rate_interval", RATE_INTERVAL), ("__interval", "1s"),
                        ("__range", "1m")):
        expr = expr.replace("${%s}" % name, value).replace("$" + name, value)
    for name, value in variables.items():
        for form in ("${%s}" % name, "[[%s]]" % name):
            expr = expr.replace(form, value)
        expr = re.sub(r"\$%s\b" % re.escape(name), value, expr)
    return expr


class PrometheusAgainstCgacctd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cgacct-prom-")
        cls.daemon = subprocess.Popen(
            [CGACCTD, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             "--cpus=2", "--flush_lock_policy=whole"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cls.prometheus = None
        line = cls.daemon.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) \(metrics on 127\.0\.0\.1:(\d+),", line)
        if not m:
            cls.daemon.kill()
            raise RuntimeError("no start line: %r %s" % (line, cls.daemon.stderr.read()))
        cls.channel = grpc.insecure_channel("127.0.0.1:%s" % m.group(1))
        grpc.channel_ready_future(cls.channel).result(timeout=20)
        cls.stub = pb_grpc.AccountingStub(cls.channel)
        cls.metrics_target = "127.0.0.1:%s" % m.group(2)

        with open(os.path.join(PROM_DIR, "prometheus.yml")) as f:
            config = test_config(f.read(), cls.metrics_target)
        cls.config_path = os.path.join(cls.tmp, "prometheus.yml")
        with open(cls.config_path, "w") as f:
            f.write(config)
        shutil.copy(os.path.join(PROM_DIR, "cgacct-alerts.yml"), cls.tmp)
        cls.web = "127.0.0.1:%d" % free_port()
        cls.prom_log = open(os.path.join(cls.tmp, "prometheus.log"), "w+")
        cls.prometheus = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + cls.config_path,
             "--storage.tsdb.path=" + os.path.join(cls.tmp, "data"),
             "--web.listen-address=" + cls.web],
            stdout=cls.prom_log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with urllib.request.urlopen("http://%s/-/ready" % cls.web, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if cls.prometheus.poll() is not None or time.monotonic() > deadline:
                log = cls.prometheus_log()
                cls.tearDownClass()
                raise RuntimeError("prometheus did not get ready:\n" + log)
            time.sleep(0.2)

    @classmethod
    def prometheus_log(cls):
        cls.prom_log.flush()
        cls.prom_log.seek(0)
        return cls.prom_log.read()[-4000:]

    @classmethod
    def tearDownClass(cls):
        if cls.prometheus is not None and cls.prometheus.poll() is None:
            cls.prometheus.terminate()
            cls.prometheus.wait(timeout=30)
        cls.channel.close()
        cls.daemon.terminate()
        cls.daemon.wait(timeout=20)
        cls.prom_log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def api(self, path, **params):
        url = "http://%s/api/v1/%s?%s" % (self.web, path, urllib.parse.urlencode(params))
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # 400/422: the body says why
            return json.load(e)

    def query(self, expr):
        return self.api("query", query=expr)

    def wait_for(self, expr, accept, what):
        """Polls an instant query until accept(result list) holds."""
        deadline = time.monotonic() + WAIT_S
        while True:
            answer = self.query(expr)
            self.assertEqual(answer["status"], "success", (expr, answer))
            if accept(answer["data"]["result"]):
                return answer["data"]["result"]
            if time.monotonic() > deadline:
                self.fail("%s: %s still %s after %d s\nprometheus log:\n%s" % (
                    what, expr, answer["data"]["result"], WAIT_S, self.prometheus_log()))
            time.sleep(0.3)

    def charge_and_flush(self):
        """Creates /prom/job, charges it CHARGED_PAGES, provokes an OOM and a
        rejected charge (so the OOM and result series exist), and reads stats
        with exact flushes across several scrapes (flush-lock holds)."""
        if getattr(type(self), "charged", False):
            return
        type(self).charged = True
        stub = self.stub
        stub.CreateGroup(pb.CreateGroupRequest(path=wire_path("/prom")), timeout=10)
        stub.CreateGroup(pb.CreateGroupRequest(path=wire_path("/prom/job")), timeout=10)
        stub.Charge(pb.ChargeRequest(path=wire_path("/prom/job"), nr_pages=CHARGED_PAGES,
                                     kind=pb.PAGE_KIND_ANON), timeout=10)
        limits = pb.Limits()
        limits.max_bytes = PAGE
        stub.CreateGroup(pb.CreateGroupRequest(path=wire_path("/prom/oom"), limits=limits),
                         timeout=10)
        stub.Charge(pb.ChargeRequest(path=wire_path("/prom/oom"), nr_pages=1,
                                     kind=pb.PAGE_KIND_ANON), timeout=10)
        with self.assertRaises(grpc.RpcError) as err:  # a 1-page charge at max: oom
            stub.Charge(pb.ChargeRequest(path=wire_path("/prom/oom"), nr_pages=1,
                                         kind=pb.PAGE_KIND_ANON), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        with self.assertRaises(grpc.RpcError) as err:  # a charge of a missing group
            stub.Charge(pb.ChargeRequest(path=wire_path("/prom/none"), nr_pages=1,
                                         kind=pb.PAGE_KIND_ANON), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
        # Stats reads that flush, over more than RATE_INTERVAL of scrapes.
        end = time.monotonic() + 6
        while time.monotonic() < end:
            stub.GetStats(pb.GetStatsRequest(path=wire_path("/prom"),
                                             flush=pb.FLUSH_MODE_EXACT), timeout=10)
            time.sleep(0.05)

    def test_a_target_up_and_memory_current_exact(self):
        self.charge_and_flush()
        up = self.wait_for('up{job="cgacct"}', lambda r: len(r) == 1 and r[0]["value"][1] == "1",
                           "the shipped job scraping the test cgacctd")
        self.assertEqual(up[0]["metric"]["instance"], self.metrics_target)
        self.assertEqual(up[0]["metric"]["service"], "cgacctd")  # the shipped label

        stats = self.stub.GetStats(pb.GetStatsRequest(path=wire_path("/prom/job"),
                                                      flush=pb.FLUSH_MODE_EXACT), timeout=10)
        self.assertEqual(stats.memory_current_bytes, CHARGED_PAGES * PAGE)
        want = str(CHARGED_PAGES * PAGE)
        result = self.wait_for('cgacct_group_memory_current_bytes{path="/prom/job"}',
                               lambda r: len(r) == 1 and r[0]["value"][1] == want,
                               "memory.current of /prom/job")
        self.assertEqual(result[0]["metric"]["job"], "cgacct")

    def test_b_flush_lock_hold_quantile_is_a_number(self):
        self.charge_and_flush()
        expr = ("histogram_quantile(0.99, sum by (le) "
                "(rate(cgacct_rstat_flush_lock_hold_seconds_bucket[%s])))" % RATE_INTERVAL)

        def finite(result):
            return (len(result) == 1 and result[0]["value"][1] not in ("NaN", "+Inf", "-Inf")
                    and math.isfinite(float(result[0]["value"][1])))

        # The rate window may have slid past the reads: read again until a
        # window holds them.
        deadline = time.monotonic() + WAIT_S
        while True:
            self.stub.GetStats(pb.GetStatsRequest(path=wire_path("/prom"),
                                                  flush=pb.FLUSH_MODE_EXACT), timeout=10)
            result = self.query(expr)
            self.assertEqual(result["status"], "success", result)
            if finite(result["data"]["result"]):
                break
            self.assertLess(time.monotonic(), deadline, (expr, result))
            time.sleep(0.2)
        quantile = float(result["data"]["result"][0]["value"][1])
        self.assertGreater(quantile, 0.0)
        self.assertLess(quantile, 60.0)  # seconds: a hold, not a unit slip
        count = self.wait_for("sum(cgacct_rstat_flush_lock_hold_seconds_count)",
                              lambda r: len(r) == 1 and float(r[0]["value"][1]) > 0,
                              "flush-lock holds counted")
        self.assertGreater(float(count[0]["value"][1]), 0)

    def test_c_every_dashboard_and_alert_expression_evaluates(self):
        self.charge_and_flush()
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        with open(os.path.join(PROM_DIR, "cgacct-alerts.yml")) as f:
            rules = yaml.safe_load(f)
        variables = {}
        for var in dashboard.get("templating", {}).get("list", []):
            if var.get("type") in ("query", "custom", "textbox", "constant"):
                variables[var["name"]] = var.get("allValue") or ".*"
        exprs = dashboard_exprs(dashboard) + alert_exprs(rules)
        self.assertGreaterEqual(len(dashboard_exprs(dashboard)), 10)
        self.assertGreaterEqual(len(alert_exprs(rules)), 5)

        # Every metric the expressions name, from the scrape (wait until the
        # OOM and rejected-charge series have been scraped).
        self.wait_for('cgacct_charges_total{result="rejected"}', lambda r: len(r) == 1,
                      "the rejected charge scraped")
        self.wait_for("cgacct_oom_total", lambda r: len(r) >= 1, "the OOM scraped")
        names = self.api("label/__name__/values")
        self.assertEqual(names["status"], "success", names)
        scraped = set(names["data"])

        errors = []
        selectors = set()
        for where, expr in exprs:
            promql = substitute(expr, variables)
            if "$" in promql or "[[" in promql:
                errors.append("%s: a Grafana variable left in %r" % (where, promql))
                continue
            answer = self.query(promql)
            if answer.get("status") != "success" or answer.get("warnings"):
                errors.append("%s: %r: %s %s" % (where, promql, answer.get("errorType"),
                                                  answer.get("error") or answer.get("warnings")))
            # Metric names: identifiers followed by a selector, a range or
            # the end, that are not PromQL keywords/functions (followed by
            # "(") nor label names (inside {...} or by/without (...)).
            bare = re.sub(r"\{[^}]*\}", "{}", promql)
            bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "",
                          bare)
            bare = re.sub(r'"[^"]*"', '""', bare)
            metrics = set()
            for name in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", bare):
                if name in ("and", "or", "unless", "offset", "bool", "inf", "nan") or \
                        re.fullmatch(r"\d+[smhdwy]|[a-z]", name):
                    continue
                metrics.add(name)
                if name not in scraped:
                    errors.append("%s: metric %s is not in the scrape" % (where, name))
            # Each selector with its matchers, e.g. a bucket le="0.001"
            # that is not one of the histogram's bounds.
            for m in re.finditer(r"(?<![\w\"{,=~!])([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?",
                                 promql):
                if m.group(1) in metrics:
                    selectors.add((where, m.group(0)))
        self.assertGreaterEqual(len(selectors), len(exprs))
        for where, selector in sorted(selectors):
            answer = self.query(selector)
            if answer.get("status") != "success" or not answer["data"]["result"]:
                errors.append("%s: selector %s selects no series: %s" % (where, selector, answer))
        self.assertEqual(errors, [], "\n".join(errors))

    def test_d_promtool_check_metrics_on_a_live_scrape(self):
        self.charge_and_flush()
        with urllib.request.urlopen("http://%s/metrics" % self.metrics_target,
                                    timeout=10) as r:
            body = r.read()
        self.assertIn(b'cgacct_group_memory_current_bytes{path="/prom/job"}', body)
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=body,
                               capture_output=True, timeout=60)
        self.assertEqual((check.returncode, check.stdout, check.stderr), (0, b"", b""))


if __name__ == "__main__":
    unittest.main(verbosity=2)
