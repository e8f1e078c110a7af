#!/usr/bin/python3
"""deploy/front-proxy/haproxy.cfg, run (issue 22, finding 12's flood; the
receive guard's tenant isolation behind the proxy).

  front_proxy_test.py --cgacctd PATH --cgacctctl PATH --haproxy PATH
                      --stubs DIR --source DIR [--rounds N] [--seconds S]
                      [--split GAP] [--body] [--message-mb MB]
                      [--sanitized NAME]

Starts a real cgacctd with a tokens file (an operator and two tenants) and
a policy, plaintext on 127.0.0.1 (port 0, /metrics on another), and
Debian's HAProxy from the shipped deploy/front-proxy/haproxy.cfg, changed
only in its addresses (TLS on a free loopback port, the daemon's port), its
certificate (made now by the openssl CLI, certificate and key in one PEM)
and its log (stdout to a file, not /dev/log); its chroot, user and group
lines are commented out when the test does not run as root. Then, through
the proxy over TLS:
  - with cgacctctl: a call with a token names the token's identity (the
    `authorization` header passes through), one without a token is
    UNAUTHENTICATED (cgacctd's check, kept), a group is created and
    charged, and a server-streaming call (WatchEvents) answers;
  - tenant isolation (Python gRPC on the stubs in DIR): tenant B, on a
    client connection of its own, opens a ChargeStream and has it answer
    once (the server's next read is then pending); tenant A, on another,
    sends one Charge whose message is MB (64) MiB. Each client connection
    has a connection to cgacctd of its own (ss, on cgacctd's port: two
    new ones, HAProxy's); A's call fails RESOURCE_EXHAUSTED or is reset
    (HAProxy resets it, CANCELLED, when cgacctd ends it before the upload
    is done); cgacctd's receive guard names A's connection and no other,
    cgacct_oversized_reads_cancelled_total rose, cgacctd's RSS stayed
    below idle + MB (it never held the message: gRPC 1.51 alone takes it
    whole), and B's stream, asked again, answers on its connection;
  - quiet streams: two more HAProxys on copies of the config, one with
    `timeout client` and `timeout http-keep-alive` at 2 s (the shipped 1m
    would make the test slow), one with `timeout server` at 2 s too (the
    control); on each a WatchEvents and a ChargeStream say nothing for 5 s:
    through the first both still work (the ChargeStream answers, the watch
    ends NOT_FOUND when its group is deleted), through the control both
    were cut. The shipped `timeout server` is at least a day;
  - the per-source connection bounds (the config's `tcp-request
    connection` rules, read from the shipped file: 100 open, 50 new a
    second): from 127.0.0.3, 110 TLS connections opened at 30 a second and
    held: 100 complete their handshake; from 127.0.0.4, 80 opened at once:
    about 50 (40-60) do; meanwhile tenant B's unary calls
    from 127.0.0.1 (every 0.1 s) all answer;
  - N rounds (2) of the rapid-reset flood from 127.0.0.2 (tests/server/
    daemon/rapid_reset_flood.py --tls --reconnect --source: HEADERS +
    RST_STREAM pairs as fast as the proxy takes them, a new connection
    whenever the proxy ends one, for S seconds (8)). Round 1 the plain
    flood: no call reached cgacctd (HAProxy drops a stream reset in the
    write of its HEADERS: the config's wait-for-body waits for a body
    first). Round 2 the form HAProxy passes on (--split 0.001 --body: each
    stream's first body bytes in one write, its reset in the next): the
    proxy answered some of the flood RESOURCE_EXHAUSTED (its per-source
    request rate, grpc-status 8 counted by the flood) and at most the
    calls a second of it reached cgacctd (1,000: the bounds are read from
    the shipped file). In both, cgacctd's RSS, sampled
    every 0.1 s from the flood's start to 3 s after its end, stays under
    2x its idle RSS, tenant B's calls from 127.0.0.1 all answer during the
    flood, both processes are alive and a call with a token still answers
    after.
Prints the figures of each part: backend connections per client, A's
outcome, RSS idle and peak; per flood round the pairs sent and per second,
connections and GOAWAYs (HAProxy sends none: it keeps the connection and
drops the streams), calls that reached cgacctd (grpc_server_handled_total
of GetEngineInfo, the flood's method), and the RSS (idle, peak,
after) of cgacctd and of HAProxy.
--split GAP floods every round with rapid_reset_flood.py --split GAP
instead (100 streams opened in one write, reset GAP seconds later), --body
with a 5-byte DATA frame after each HEADERS (rapid_reset_flood.py --body):
the flood's forms deploy/README.md measures (no call reaching cgacctd is
checked only without them).
Exit 0 when every check holds, 1 when one does not, 77 (ctest's skip) when
HAProxy is not installed (deploy/install-deps.sh installs haproxy).
"""
import argparse
import json
import os
import queue
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

TOKENS = {
    "operator": "operator-token-0123456789abcdef",
    "tenant-a": "tenant-a-token-0123456789abcdef",
    "tenant-b": "tenant-b-token-0123456789abcdef",
}
POLICY = ("token:operator admin\n"
          "token:tenant-a rw /tenant-a\n"
          "token:tenant-b rw /tenant-b\n")
FLOOD = os.path.join("tests", "server", "daemon", "rapid_reset_flood.py")
SHIPPED = os.path.join("deploy", "front-proxy", "haproxy.cfg")
QUIET_TIMEOUT = "2s"
QUIET_SECONDS = 5.0


def rss_kb(pid):
    """Resident set of `pid` in KiB (/proc/PID/statm), 0 once it is gone."""
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") //
                                               1024)
    except OSError:
        return 0


def process_tree(pid):
    """`pid` and its descendants."""
    pids = [pid]
    for p in pids:
        try:
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                pids.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return pids


def tree_rss_kb(pid):
    return sum(rss_kb(p) for p in process_tree(pid))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_certs(d):
    """CA ca.pem and the proxy's certificate server.pem/server.key for
    localhost and 127.0.0.1, by the openssl CLI; proxy.pem holds both (the
    one file HAProxy's `crt` reads)."""
    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = lambda name: os.path.join(d, name)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt",
        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
        "/CN=front-proxy-test-ca", "-addext",
        "basicConstraints=critical,CA:TRUE", "-addext",
        "keyUsage=critical,keyCertSign,cRLSign", "-keyout", p("ca.key"),
        "-out", p("ca.pem"))
    with open(p("server.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("req", "-new", "-newkey", "ec", "-pkeyopt",
        "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=localhost",
        "-keyout", p("server.key"), "-out", p("server.csr"))
    run("x509", "-req", "-days", "2", "-in", p("server.csr"), "-CA",
        p("ca.pem"), "-CAkey", p("ca.key"), "-set_serial", "1", "-extfile",
        p("server.ext"), "-out", p("server.pem"))
    with open(p("proxy.pem"), "w") as out:
        for name in ("server.pem", "server.key"):
            with open(p(name)) as f:
                out.write(f.read())
    os.chmod(p("proxy.pem"), 0o600)


def haproxy_seconds(value):
    """A HAProxy time ("24d", "1m", "500ms", "10": ms) in seconds."""
    m = re.fullmatch(r"(\d+)(us|ms|s|m|h|d)?", value)
    if not m:
        raise ValueError("not a HAProxy time: %r" % value)
    unit = {"us": 1e-6, "ms": 1e-3, None: 1e-3, "s": 1, "m": 60,
            "h": 3600, "d": 86400}[m.group(2)]
    return int(m.group(1)) * unit


def shipped_settings(shipped):
    """The shipped file's directives, by their first one or two words
    ("timeout server" -> "24d")."""
    settings = {}
    with open(shipped) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "timeout":
                settings["timeout " + words[1]] = words[2]
            elif len(words) >= 2:
                settings.setdefault(words[0], " ".join(words[1:]))
    return settings


def render_config(shipped, out, frontend_port, backend_port, crt,
                  timeouts=None, paths=None):
    """The shipped config with only its bind address and certificate, its
    server's port, its log (stdout, which the test sends to a file) and,
    when not root, its chroot/user/group lines changed; `timeouts`
    ({"client": "2s"}) replaces those timeouts' values (the quiet-stream
    copies); `paths` ({"/etc/cgacct/x.pem": "/tmp/x.pem"}) replaces those
    files' paths wherever they appear, each at least once. Every other line
    as shipped. Fails if the shipped file lacks a line changed (the test
    would no longer run the recipe)."""
    timeouts = dict(timeouts or {})
    paths = dict(paths or {})
    paths_seen = set()
    root = os.geteuid() == 0
    seen = set()
    lines = []
    with open(shipped) as f:
        for line in f:
            line = line.rstrip("\n")
            words = line.split("#", 1)[0].split()
            key = words[0] if words else ""
            if key == "bind":
                seen.add(key)
                if "alpn h2" not in line or " ssl " not in line:
                    raise RuntimeError("bind without ssl/alpn h2: " + line)
                line = re.sub(r"^(\s*bind\s+)\S+(\s+v4v6)?",
                              r"\g<1>127.0.0.1:%d" % frontend_port, line)
                line = re.sub(r"\bcrt\s+\S+", "crt " + crt, line)
            elif key == "server":
                seen.add(key)
                line = re.sub(r"\b127\.0\.0\.1:\d+\b",
                              "127.0.0.1:%d" % backend_port, line)
                if ("127.0.0.1:%d" % backend_port not in line or
                        "proto h2" not in line):
                    raise RuntimeError("server line not 127.0.0.1, h2: " +
                                       line)
            elif key == "log" and "/dev/log" in line:
                seen.add(key)
                line = line.replace("/dev/log", "stdout format raw")
            elif key in ("chroot", "user", "group") and not root:
                line = "    # (not root) " + line.strip()
            elif key == "timeout" and len(words) >= 3 and words[1] in timeouts:
                line = re.sub(r"^(\s*timeout\s+\S+\s+)\S+",
                              r"\g<1>" + timeouts.pop(words[1]), line)
            if key:
                for old, new in paths.items():
                    if re.search(r"(?<!\S)%s(?!\S)" % re.escape(old), line):
                        paths_seen.add(old)
                        line = re.sub(r"(?<!\S)%s(?!\S)" % re.escape(old),
                                      new, line)
            lines.append(line)
    missing = {"bind", "server", "log"} - seen
    if missing or timeouts or set(paths) - paths_seen:
        raise RuntimeError("%s has no %s line" % (
            shipped, sorted(missing) + ["timeout " + t for t in timeouts] +
            sorted(set(paths) - paths_seen)))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def start_cgacctd(binary, tokens, policy, stderr_path):
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(
            [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             "--cpus=2", "--tokens_file=" + tokens,
             "--authz_policy=" + policy],
            stdout=subprocess.PIPE, stderr=err, text=True)
    line = proc.stdout.readline()
    port = re.search(r"listening on 127\.0\.0\.1:(\d+) ", line)
    metrics = re.search(r"metrics on 127\.0\.0\.1:(\d+)", line)
    if not port or not metrics:
        proc.kill()
        raise RuntimeError("cgacctd did not start: %r" % line)
    return proc, int(port.group(1)), int(metrics.group(1))


def start_haproxy(binary, conf, log_path):
    """HAProxy in the foreground (no daemon, no pid file, no stats socket:
    nothing a system haproxy.service would share)."""
    with open(log_path, "w") as log:
        return subprocess.Popen([binary, "-f", conf], stdout=log,
                                stderr=subprocess.STDOUT)


def wait_tls(port, ca, seconds=10):
    """Waits until a TLS handshake (ALPN h2) with 127.0.0.1:port succeeds."""
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                with context.wrap_socket(s, server_hostname="localhost") as t:
                    return t.selected_alpn_protocol()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def metrics_text(metrics_port):
    with urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % metrics_port, timeout=10) as r:
        return r.read().decode()


def engine_info_calls(metrics_port):
    """GetEngineInfo calls cgacctd has handled, every code."""
    return sum(int(float(m.group(1))) for m in re.finditer(
        r'^grpc_server_handled_total\{[^}]*grpc_method="GetEngineInfo"'
        r'[^}]*\} (\S+)$', metrics_text(metrics_port), re.M))


def oversized_reads_cancelled(metrics_port):
    return sum(int(float(m.group(1))) for m in re.finditer(
        r'^cgacct_oversized_reads_cancelled_total(?:\{[^}]*\})? (\S+)$',
        metrics_text(metrics_port), re.M))


def backend_connections(cgacctd_port, proxy_pid):
    """Local ports of the established connections from the proxy (its
    processes) to cgacctd's port, by ss."""
    out = subprocess.run(
        ["ss", "-tnpH", "state", "established", "dst",
         "127.0.0.1:%d" % cgacctd_port],
        capture_output=True, text=True, check=True).stdout
    pids = set(process_tree(proxy_pid))
    ports = set()
    for line in out.splitlines():
        fields = line.split()
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            ports.add(int(fields[2].rsplit(":", 1)[1]))
    return ports


class Checks:
    def __init__(self):
        self.failed = []

    def expect(self, ok, what):
        print("%s: %s" % ("ok" if ok else "FAILED", what), flush=True)
        if not ok:
            self.failed.append(what)


def ctl(cgacctctl, port, ca, token_file, *command):
    """cgacctctl over TLS to 127.0.0.1:port, with the token in token_file
    if given."""
    cmd = [cgacctctl, "--target=127.0.0.1:%d" % port, "--tls_ca=" + ca,
           "--tls_server_name=localhost"]
    if token_file:
        cmd.append("--token_file=" + token_file)
    return subprocess.run(cmd + list(command), capture_output=True,
                          text=True, timeout=30)


class Grpc:
    """Python gRPC through the proxy; every channel its own TCP connection
    (no subchannel shared between channels)."""

    def __init__(self, stubs, port, ca):
        sys.path.insert(0, stubs)
        import grpc
        from cgacct.v1 import accounting_pb2, accounting_pb2_grpc
        self.grpc, self.pb = grpc, accounting_pb2
        self.pbg = accounting_pb2_grpc
        self.port = port
        with open(ca, "rb") as f:
            self.ca = f.read()

    def channel(self, port=None):
        return self.grpc.secure_channel(
            "127.0.0.1:%d" % (port or self.port),
            self.grpc.ssl_channel_credentials(self.ca),
            options=[("grpc.ssl_target_name_override", "localhost"),
                     ("grpc.use_local_subchannel_pool", 1),
                     ("grpc.max_send_message_length", -1)])

    def stub(self, channel):
        return self.pbg.AccountingStub(channel)

    @staticmethod
    def metadata(name):
        return (("authorization", "Bearer " + TOKENS[name]),)


class ChargeStream:
    """A ChargeStream of `name` on a channel of its own; ask() sends one
    message (charging a page of `path`) and waits for its answer: "ok",
    else what ended the stream."""

    def __init__(self, g, name, path, port=None):
        self.g, self.path = g, path
        self.channel = g.channel(port)
        self.requests = queue.Queue()

        def messages():
            while True:
                m = self.requests.get()
                if m is None:
                    return
                yield m
        self.answers = g.stub(self.channel).ChargeStream(
            messages(), metadata=g.metadata(name), timeout=120)
        self.n = 0

    def ask(self):
        self.n += 1
        self.requests.put(self.g.pb.ChargeBatchRequest(ops=[self.g.pb.ChargeOp(
            id=self.n, path=self.path, nr_pages=1,
            kind=self.g.pb.PAGE_KIND_ANON)]))
        try:
            r = next(self.answers)
        except StopIteration:
            return "ended"
        except self.g.grpc.RpcError as e:
            return "%s: %s" % (e.code().name, e.details())
        if len(r.results) == 1 and r.results[0].code == 0:
            return "ok"
        return "answered %s" % r

    def close(self):
        self.requests.put(None)
        self.channel.close()


def oversized_charge(megabytes):
    """A ChargeRequest whose path (field 1) is `megabytes` MiB: a message
    far over --max_message_bytes (content does not matter to the guard)."""
    n = megabytes << 20
    varint = bytearray()
    v = n
    while True:
        varint.append((v & 0x7f) | (0x80 if v > 0x7f else 0))
        v >>= 7
        if not v:
            break
    return b"\x0a" + bytes(varint) + b"/" * n


def isolation(g, cgacctd, cgacctd_port, metrics_port, proxy_pid, guard_log,
              megabytes):
    """Tenant B's ChargeStream, pending a read, while tenant A sends one
    oversized Charge, each on its own client connection: the figures."""
    r = {}
    before = backend_connections(cgacctd_port, proxy_pid)
    b = ChargeStream(g, "tenant-b", b"/tenant-b")
    r["b_first"] = b.ask()
    with_b = backend_connections(cgacctd_port, proxy_pid)
    a_channel = g.channel()
    a = g.stub(a_channel)
    a.GetEngineInfo(g.pb.GetEngineInfoRequest(),
                    metadata=g.metadata("tenant-a"), timeout=30)
    with_a = backend_connections(cgacctd_port, proxy_pid)
    r["b_ports"] = sorted(with_b - before)
    r["a_ports"] = sorted(with_a - with_b)
    r["ports_before"] = sorted(before)
    with open(guard_log) as f:
        guard_offset = len(f.read())
    cancelled = oversized_reads_cancelled(metrics_port)
    idle = rss_kb(cgacctd.pid)
    peak = [idle]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kb(cgacctd.pid))
            time.sleep(0.01)
    sampler = threading.Thread(target=sample)
    sampler.start()
    charge = a_channel.unary_unary("/cgacct.v1.Accounting/Charge",
                                   request_serializer=lambda m: m,
                                   response_deserializer=lambda m: m)
    message = oversized_charge(megabytes)
    start = time.monotonic()
    try:
        charge(message, metadata=g.metadata("tenant-a"), timeout=60)
        r["a"] = "OK"
    except g.grpc.RpcError as e:
        r["a"] = "%s: %s" % (e.code().name, e.details())
    r["a_seconds"] = time.monotonic() - start
    del message
    time.sleep(0.5)
    stop.set()
    sampler.join()
    r["idle_kb"], r["peak_kb"] = idle, peak[0]
    r["cancelled"] = oversized_reads_cancelled(metrics_port) - cancelled
    with open(guard_log) as f:
        guard = f.read()[guard_offset:]
    r["guard_ports"] = sorted({int(p) for p in re.findall(
        r"receive guard: .*? connection ipv4:127\.0\.0\.1:(\d+) ", guard)})
    r["b_after"] = b.ask()
    r["b_ports_after"] = sorted(set(r["b_ports"]) &
                                backend_connections(cgacctd_port, proxy_pid))
    b.close()
    a_channel.close()
    return r


def quiet_streams(g, args, d, cgacctd_port, ca, ctl_as):
    """A WatchEvents and a ChargeStream quiet for QUIET_SECONDS through two
    HAProxys on copies of the shipped config: "quiet" (timeout client and
    http-keep-alive at QUIET_TIMEOUT) and "control" (timeout server too).
    What each stream did, per copy."""
    copies = {
        "quiet": {"client": QUIET_TIMEOUT, "http-keep-alive": QUIET_TIMEOUT},
        "control": {"client": QUIET_TIMEOUT,
                    "http-keep-alive": QUIET_TIMEOUT,
                    "server": QUIET_TIMEOUT},
    }
    procs, streams, results = {}, {}, {}
    try:
        for name, timeouts in copies.items():
            port = free_port()
            conf = os.path.join(d, "haproxy-%s.cfg" % name)
            render_config(os.path.join(args.source, SHIPPED), conf, port,
                          cgacctd_port, os.path.join(d, "proxy.pem"),
                          timeouts)
            procs[name] = start_haproxy(args.haproxy, conf, os.path.join(
                d, "haproxy-%s.log" % name))
            wait_tls(port, ca)
            group = "/tenant-b/quiet-" + name
            created = ctl_as("tenant-b", "create", group)
            if created.returncode != 0:
                raise RuntimeError("create %s: %s" % (group, created.stderr))
            watch = g.stub(g.channel(port)).WatchEvents(
                g.pb.WatchEventsRequest(path=group.encode()),
                metadata=g.metadata("tenant-b"), timeout=120)
            first = next(watch)
            stream = ChargeStream(g, "tenant-b", group.encode(), port)
            streams[name] = (group, watch, stream, first.path == group.encode(),
                             stream.ask())
        time.sleep(QUIET_SECONDS)
        for name, (group, watch, stream, watched, asked) in streams.items():
            again = stream.ask()
            ctl_as("tenant-b", "delete", group)
            try:
                for _ in watch:
                    pass
                ended = "OK"
            except g.grpc.RpcError as e:
                ended = "%s: %s" % (e.code().name, e.details())
            stream.close()
            results[name] = {"watch_first": watched, "charge_first": asked,
                             "charge_after": again, "watch_end": ended}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
    return results


FLOOD_SOURCE = "127.0.0.2"  # the flooding client's address (loopback)


def per_source_bounds(shipped):
    """The shipped config's per-source bounds: (connections open, new
    connections a second, requests a second), read from its `if { sc0_...
    gt N }` conditions."""
    with open(shipped) as f:
        text = f.read()

    def bound(counter):
        m = re.search(r"\{\s*sc0_%s\s+gt\s+(\d+)\s*\}" % counter, text)
        if not m:
            raise RuntimeError("%s has no sc0_%s bound" % (shipped, counter))
        return int(m.group(1))
    return bound("conn_cur"), bound("conn_rate"), bound("http_req_rate")


class Victim:
    """Tenant B's unary calls (GetStats of /tenant-b: not the flood's
    method, whose count says what reached cgacctd) through the proxy every
    0.1 s from 127.0.0.1, on a channel connected before, while something
    else runs: how many answered, which failed, the median latency."""

    def __init__(self, g):
        self.g = g
        self.channel = g.channel()
        self.stub = g.stub(self.channel)
        self.request = g.pb.GetStatsRequest(path=b"/tenant-b")
        self.stub.GetStats(self.request, metadata=g.metadata("tenant-b"),
                           timeout=10)
        self.stop = threading.Event()
        self.latencies, self.failed = [], []
        self.thread = threading.Thread(target=self._loop)
        self.thread.start()

    def _loop(self):
        while not self.stop.wait(0.1):
            start = time.monotonic()
            try:
                self.stub.GetStats(self.request,
                                   metadata=self.g.metadata("tenant-b"),
                                   timeout=5)
                self.latencies.append(time.monotonic() - start)
            except self.g.grpc.RpcError as e:
                self.failed.append("%s: %s" % (e.code().name, e.details()))

    def finish(self):
        self.stop.set()
        self.thread.join()
        self.channel.close()
        lat = sorted(self.latencies)
        return {"answered": len(lat), "failed": self.failed,
                "p50_ms": 1000 * lat[len(lat) // 2] if lat else None}


def flood_round(source, proxy_port, ca, seconds, cgacctd, proxy,
                metrics_port, g, split=None, body=False):
    calls_before = engine_info_calls(metrics_port)
    time.sleep(1.0)
    idle = rss_kb(cgacctd.pid)
    proxy_idle = tree_rss_kb(proxy.pid)
    victim = Victim(g)
    flood = subprocess.Popen(
        [sys.executable, os.path.join(source, FLOOD), "127.0.0.1",
         str(proxy_port), str(seconds), "0", "--tls", ca, "--server-name",
         "localhost", "--reconnect", "--source", FLOOD_SOURCE] +
        (["--split", str(split)] if split is not None else []) +
        (["--body"] if body else []),
        stdout=subprocess.PIPE, text=True)
    peak, proxy_peak = idle, proxy_idle
    while flood.poll() is None:
        peak = max(peak, rss_kb(cgacctd.pid))
        proxy_peak = max(proxy_peak, tree_rss_kb(proxy.pid))
        time.sleep(0.1)
    b = victim.finish()
    out = flood.stdout.read().strip().splitlines()
    if flood.returncode != 0 or not out:
        raise RuntimeError("rapid_reset_flood.py failed (exit %d)" %
                           flood.returncode)
    result = json.loads(out[-1])
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        peak = max(peak, rss_kb(cgacctd.pid))
        proxy_peak = max(proxy_peak, tree_rss_kb(proxy.pid))
        time.sleep(0.1)
    return dict(result, idle_kb=idle, peak_kb=peak,
                after_kb=rss_kb(cgacctd.pid), proxy_idle_kb=proxy_idle,
                proxy_peak_kb=proxy_peak,
                proxy_after_kb=tree_rss_kb(proxy.pid),
                reached=engine_info_calls(metrics_port) - calls_before,
                b=b)


def per_source_connections(proxy_port, ca, conn_cur, conn_rate):
    """The shipped per-source connection bounds (conn_cur open, conn_rate
    new a second): from 127.0.0.3, conn_cur + 10 TLS connections opened at
    0.6 conn_rate a second and held; from 127.0.0.4, conn_rate + 30 opened
    as fast as they go. How many completed their handshake in each."""
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])

    def open_from(address, n, gap):
        held, refused = [], 0
        for _ in range(n):
            start = time.monotonic()
            try:
                sock = socket.create_connection(
                    ("127.0.0.1", proxy_port), timeout=5,
                    source_address=(address, 0))
                held.append(context.wrap_socket(sock,
                                                server_hostname="localhost"))
            except OSError:
                refused += 1
            time.sleep(max(0.0, gap - (time.monotonic() - start)))
        return held, refused

    slow, slow_refused = open_from("127.0.0.3", conn_cur + 10,
                                   1 / (0.6 * conn_rate))
    fast, fast_refused = open_from("127.0.0.4", conn_rate + 30, 0)
    result = {"slow_held": len(slow), "slow_refused": slow_refused,
              "fast_held": len(fast), "fast_refused": fast_refused}
    for sock in slow + fast:
        sock.close()
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cgacctd", required=True)
    parser.add_argument("--cgacctctl", required=True)
    parser.add_argument("--haproxy", default="")
    parser.add_argument("--stubs", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--split", type=float)
    parser.add_argument("--body", action="store_true")
    parser.add_argument("--message-mb", type=int, default=64)
    parser.add_argument("--sanitized", default="",
                        help="a sanitizer build: the RSS of a flood that "
                        "reaches cgacctd is not checked (ASan keeps what "
                        "the calls freed in its quarantine)")
    args = parser.parse_args()
    if not args.haproxy or not os.access(args.haproxy, os.X_OK):
        print("skipped: haproxy is not installed (apt-get install haproxy; "
              "deploy/install-deps.sh does)")
        return 77
    version = subprocess.run([args.haproxy, "-v"], capture_output=True,
                             text=True).stdout.splitlines()[0]
    print("proxy: %s" % version, flush=True)
    d = tempfile.mkdtemp(prefix="cgacct-front-proxy-")
    cgacctd = proxy = None
    checks = Checks()
    log = os.path.join(d, "haproxy.log")
    guard_log = os.path.join(d, "cgacctd.stderr")
    try:
        make_certs(d)
        ca = os.path.join(d, "ca.pem")
        tokens = os.path.join(d, "tokens")
        with open(tokens, "w") as f:
            f.writelines("%s %s\n" % kv for kv in TOKENS.items())
        token_files = {}
        for name, token in TOKENS.items():
            token_files[name] = os.path.join(d, "token-" + name)
            with open(token_files[name], "w") as f:
                f.write(token + "\n")
        policy = os.path.join(d, "policy")
        with open(policy, "w") as f:
            f.write(POLICY)
        cgacctd, port, metrics_port = start_cgacctd(args.cgacctd, tokens,
                                                    policy, guard_log)
        proxy_port = free_port()
        shipped = os.path.join(args.source, SHIPPED)
        conf = os.path.join(d, "haproxy.cfg")
        render_config(shipped, conf, proxy_port, port,
                      os.path.join(d, "proxy.pem"))
        proxy = start_haproxy(args.haproxy, conf, log)
        checks.expect(wait_tls(proxy_port, ca) == "h2",
                      "the proxy speaks TLS with ALPN h2 on 127.0.0.1:%d" %
                      proxy_port)

        def c(name, *command):
            return ctl(args.cgacctctl, proxy_port, ca,
                       token_files[name] if name else "", *command)
        info = c("tenant-a", "info", "--json")
        checks.expect(info.returncode == 0 and json.loads(info.stdout).get(
            "caller_identity") == "token:tenant-a",
            "a call through the proxy with a token is token:tenant-a's (%s)" %
            (info.stderr.strip() or "exit 0"))
        anonymous = c(None, "info")
        checks.expect(anonymous.returncode == 4 and
                      "UNAUTHENTICATED" in anonymous.stderr,
                      "without a token: %s" % anonymous.stderr.strip())
        roots = [c("operator", "create", p) for p in ("/tenant-a",
                                                       "/tenant-b")]
        created = c("tenant-a", "create", "/tenant-a/through-proxy")
        charged = c("tenant-a", "charge", "/tenant-a/through-proxy", "10",
                    "anon")
        checks.expect(all(r.returncode == 0 for r in roots + [created,
                                                               charged]) and
                      "nr_pages 10" in charged.stdout,
                      "create and charge through the proxy (%s)" % "".join(
                          r.stderr.strip() for r in roots + [created,
                                                             charged]))
        watch = c("tenant-a", "events", "/tenant-a/through-proxy", "--watch",
                  "-n", "1")
        checks.expect(watch.returncode == 0 and "oom 0" in watch.stdout,
                      "a WatchEvents stream through the proxy answers (%s)" %
                      (watch.stderr.strip() or "exit 0"))

        g = Grpc(args.stubs, proxy_port, ca)
        r = isolation(g, cgacctd, port, metrics_port, proxy.pid, guard_log,
                      args.message_mb)
        print("isolation: backend connections before %s, B's %s, A's %s; "
              "A's %d MiB Charge: %s (%.2f s); receive guard named %s; "
              "cancelled reads +%d; cgacctd RSS idle %d KiB, peak %d KiB "
              "(+%d KiB); B's stream after: %s" % (
                  r["ports_before"], r["b_ports"], r["a_ports"],
                  args.message_mb, r["a"], r["a_seconds"], r["guard_ports"],
                  r["cancelled"], r["idle_kb"], r["peak_kb"],
                  r["peak_kb"] - r["idle_kb"], r["b_after"]), flush=True)
        checks.expect(r["b_first"] == "ok",
                      "isolation: B's ChargeStream answers (%s)" %
                      r["b_first"])
        checks.expect(len(r["b_ports"]) == 1 and len(r["a_ports"]) == 1,
                      "isolation: B's and A's client connections each got a "
                      "connection to cgacctd of their own (%s, %s)" % (
                          r["b_ports"], r["a_ports"]))
        checks.expect(r["a"].split(":")[0] in ("RESOURCE_EXHAUSTED",
                                               "CANCELLED"),
                      "isolation: A's oversized Charge failed (%s)" % r["a"])
        checks.expect(r["guard_ports"] == r["a_ports"],
                      "isolation: the receive guard cancelled reads on A's "
                      "connection only (%s)" % r["guard_ports"])
        checks.expect(r["cancelled"] >= 1,
                      "isolation: cgacct_oversized_reads_cancelled_total "
                      "rose (+%d)" % r["cancelled"])
        checks.expect(r["peak_kb"] - r["idle_kb"] < args.message_mb << 10,
                      "isolation: cgacctd never held the message: RSS under "
                      "idle + %d MiB (+%d KiB)" % (
                          args.message_mb, r["peak_kb"] - r["idle_kb"]))
        checks.expect(r["b_after"] == "ok" and
                      r["b_ports_after"] == r["b_ports"],
                      "isolation: B's stream answers after A's failure, on "
                      "its connection (%s)" % r["b_after"])

        timeout_server = shipped_settings(shipped).get("timeout server", "")
        checks.expect(timeout_server and
                      haproxy_seconds(timeout_server) >= 86400,
                      "the shipped timeout server (%s) is at least a day" %
                      (timeout_server or "unset"))
        quiet = quiet_streams(
            g, args, d, port, ca,
            lambda name, *command: ctl(args.cgacctctl, proxy_port, ca,
                                       token_files[name], *command))
        for name, q in quiet.items():
            print("quiet streams (%s): %s" % (name, q), flush=True)
        q = quiet["quiet"]
        checks.expect(q["watch_first"] and q["charge_first"] == "ok" and
                      q["charge_after"] == "ok" and
                      q["watch_end"].startswith("NOT_FOUND"),
                      "quiet streams: a WatchEvents and a ChargeStream quiet "
                      "for %.0f s outlive timeout client and http-keep-alive "
                      "of %s (charge %s, watch %s)" % (
                          QUIET_SECONDS, QUIET_TIMEOUT, q["charge_after"],
                          q["watch_end"]))
        q = quiet["control"]
        checks.expect(q["charge_after"] != "ok" and
                      not q["watch_end"].startswith("NOT_FOUND"),
                      "quiet streams, control: with timeout server %s both "
                      "were cut (charge %s, watch %s)" % (
                          QUIET_TIMEOUT, q["charge_after"], q["watch_end"]))

        conn_cur, conn_rate, req_rate = per_source_bounds(shipped)
        victim = Victim(g)
        conns = per_source_connections(proxy_port, ca, conn_cur, conn_rate)
        b = victim.finish()
        print("per-source connections (bounds: %d open, %d new a second): "
              "from one address at %.0f/s, %d of %d held, %d refused; from "
              "another as fast as they go, %d of %d held, %d refused; B "
              "meanwhile: %d answered, p50 %s ms, failed %s" % (
                  conn_cur, conn_rate, 0.6 * conn_rate, conns["slow_held"],
                  conn_cur + 10, conns["slow_refused"], conns["fast_held"],
                  conn_rate + 30, conns["fast_refused"],
                             b["answered"], b["p50_ms"] and
                             "%.1f" % b["p50_ms"], b["failed"] or "none"),
              flush=True)
        checks.expect(conns["slow_held"] == conn_cur,
                      "per-source connections: %d held of %d opened slowly "
                      "from one address" % (conns["slow_held"], conn_cur + 10))
        checks.expect(conn_rate * 0.8 <= conns["fast_held"] <= conn_rate * 1.2,
                      "per-source connection rate: %d held of %d opened at "
                      "once from one address" % (conns["fast_held"],
                                                 conn_rate + 30))
        checks.expect(b["answered"] > 0 and not b["failed"],
                      "B's calls from another address answered all through")

        # The rounds: as given (--split, --body), else the plain flood then
        # the one HAProxy passes on (each stream's body first, its reset in
        # the next write), which the per-source request rate bounds.
        kinds = ([(args.split, args.body)] * args.rounds
                 if args.split is not None or args.body else
                 [(None, False), (0.001, True)][:args.rounds] +
                 [(None, False)] * max(0, args.rounds - 2))
        for i, (split, body) in enumerate(kinds):
            r = flood_round(args.source, proxy_port, ca, args.seconds,
                            cgacctd, proxy, metrics_port, g, split, body)
            print("round %d (%s): %d pairs in %.1f s (%d/s) over %d "
                  "connections (%d refused), %d GOAWAYs (last code %s); "
                  "answers by grpc-status %s; calls that reached cgacctd: "
                  "%d; cgacctd RSS idle %d KiB, peak %d KiB (%.2fx), 3 s "
                  "after %d KiB; haproxy RSS idle %d KiB, peak %d KiB, "
                  "after %d KiB; B from another address: %d answered, p50 "
                  "%s ms, failed %s" % (
                      i + 1, "split %s%s" % (split, " body" if body else "")
                      if split is not None or body else "plain",
                      r["pairs"], r["seconds"], r["pairs_per_s"],
                      r["connections"], r["refused"], r["goaways"],
                      r["goaway"], r["answers"], r["reached"], r["idle_kb"],
                      r["peak_kb"], r["peak_kb"] / r["idle_kb"],
                      r["after_kb"], r["proxy_idle_kb"], r["proxy_peak_kb"],
                      r["proxy_after_kb"], r["b"]["answered"],
                      r["b"]["p50_ms"] and "%.1f" % r["b"]["p50_ms"],
                      r["b"]["failed"] or "none"), flush=True)
            if args.sanitized and r["reached"] > 0:
                print("not checked: the RSS of round %d in a sanitizer "
                      "build (%s)" % (i + 1, args.sanitized), flush=True)
            else:
                checks.expect(r["peak_kb"] < 2 * r["idle_kb"],
                              "round %d: cgacctd's RSS under 2x idle" %
                              (i + 1))
            if split is None and not body:
                checks.expect(r["reached"] == 0,
                              "round %d: no flood call reached cgacctd" %
                              (i + 1))
            else:
                checks.expect(r["answers"].get("8", 0) > 0,
                              "round %d: the proxy answered the flood "
                              "RESOURCE_EXHAUSTED past its per-source rate "
                              "(%s)" % (i + 1, r["answers"]))
                checks.expect(r["reached"] <= req_rate * (r["seconds"] + 1),
                              "round %d: calls that reached cgacctd (%d) "
                              "within the per-source rate x %.0f s" % (
                                  i + 1, r["reached"], r["seconds"] + 1))
            checks.expect(r["b"]["answered"] > 0 and not r["b"]["failed"],
                          "round %d: B's calls from another address "
                          "answered all through the flood" % (i + 1))
            checks.expect(cgacctd.poll() is None and proxy.poll() is None,
                          "round %d: cgacctd and haproxy alive" % (i + 1))
            after = c("tenant-a", "info", "--json")
            checks.expect(after.returncode == 0,
                          "round %d: a call with a token answers after the "
                          "flood (%s)" % (i + 1,
                                          after.stderr.strip() or "exit 0"))
    finally:
        for proc in (proxy, cgacctd):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if checks.failed and os.path.exists(log):
            with open(log) as f:
                print("haproxy log (last lines):\n" +
                      "".join(f.readlines()[-20:]))
        shutil.rmtree(d, ignore_errors=True)
    print("checks: %s" % ("all met" if not checks.failed else
                          "NOT met: " + "; ".join(checks.failed)))
    return 0 if not checks.failed else 1


if __name__ == "__main__":
    sys.exit(main())
