"""A 3-member etcd (Debian's etcd-server) and cgacctd cluster nodes on
loopback, for the cluster test and the cluster benchmark (docs/DESIGN.md
§4.18): free ports, temporary data directories, never a system etcd.

The caller puts the generated Python stubs (tests/python's) on sys.path
before importing this module.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import grpc

from cgacct.v1 import accounting_pb2_grpc as pb_grpc

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def wait_for(predicate, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


class Etcd:
    """Three members on loopback."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cgacct-etcd-")
        ports = free_ports(6)
        self.client = ["127.0.0.1:%d" % p for p in ports[:3]]
        peer = ["127.0.0.1:%d" % p for p in ports[3:]]
        cluster = ",".join("e%d=http://%s" % (i, peer[i]) for i in range(3))
        self.procs = []
        self.args = []
        for i in range(3):
            args = [ETCD, "--name", "e%d" % i,
                    "--data-dir", os.path.join(self.dir, "e%d" % i),
                    "--listen-client-urls", "http://" + self.client[i],
                    "--advertise-client-urls", "http://" + self.client[i],
                    "--listen-peer-urls", "http://" + peer[i],
                    "--initial-advertise-peer-urls", "http://" + peer[i],
                    "--initial-cluster", cluster,
                    "--initial-cluster-state", "new",
                    "--initial-cluster-token", os.path.basename(self.dir),
                    "--heartbeat-interval=200", "--election-timeout=2000"]
            self.args.append(args)
            self.procs.append(self.start_member(i))

    def start_member(self, i):
        with open(os.path.join(self.dir, "e%d.log" % i), "a") as log:
            return subprocess.Popen(self.args[i], stdout=log, stderr=log)

    def endpoints(self):
        return ",".join(self.client)

    def stop_member(self, i):
        self.procs[i].send_signal(signal.SIGSTOP)

    def kill_member(self, i):
        self.procs[i].kill()
        self.procs[i].wait()

    def leader(self):
        """The index of the member that leads now, as the live members'
        `etcdctl endpoint status` says, or None."""
        out = subprocess.run(
            ["etcdctl", "--endpoints=" + self.endpoints(), "endpoint", "status",
             "-w", "json", "--command-timeout=2s"],
            capture_output=True, text=True, timeout=10, env=dict(os.environ, ETCDCTL_API="3"))
        try:
            statuses = json.loads(out.stdout)
        except ValueError:
            return None
        for st in statuses:
            s = st.get("Status", {})
            if s.get("leader") and s.get("leader") == s.get("header", {}).get("member_id"):
                return self.client.index(st["Endpoint"].replace("http://", ""))
        return None

    def resume_member(self, i):
        self.procs[i].send_signal(signal.SIGCONT)

    def close(self):
        for p in self.procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Node:
    """One cgacctd node of `etcd`'s cluster under `prefix`, on `port`;
    `metrics_port` (optional) serves its /metrics."""

    def __init__(self, cgacctd, etcd, prefix, port, ttl_s, extra=(),
                 metrics_port=None):
        self.address = "127.0.0.1:%d" % port
        self.metrics = "127.0.0.1:%d" % metrics_port if metrics_port else ""
        # Its stderr in a file (the node logs ownership changes there: a
        # pipe nobody reads would fill and stop it); stderr_text() reads it.
        err = tempfile.NamedTemporaryFile(prefix="cgacct-node-", suffix=".stderr",
                                          delete=False)
        self.err_path = err.name
        self.proc = subprocess.Popen(
            [cgacctd, "--listen=" + self.address,
             "--metrics_listen=" + self.metrics, "--cpus=2",
             "--etcd_endpoints=" + etcd.endpoints(), "--etcd_prefix=" + prefix,
             "--cluster_lease_ttl=%ds" % ttl_s] + list(extra),
            stdout=subprocess.PIPE, stderr=err, text=True)
        err.close()
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("node did not start: %r %s" %
                               (line, self.stderr_text()))
        self.start_line = line
        self.channel = grpc.insecure_channel(self.address)
        self.stub = pb_grpc.AccountingStub(self.channel)

    def stderr_text(self):
        """What the node wrote on stderr so far."""
        with open(self.err_path) as f:
            return f.read()

    def close(self):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        try:
            os.unlink(self.err_path)
        except OSError:
            pass


class BlackHoleProxy:
    """A TCP relay on loopback in front of `target` ("host:port") that can
    black-hole the link: while `black_holed` is set it relays nothing in
    either direction and answers nothing on new connections, and closes
    nothing (no RST, no FIN: the peers see silence, as behind a dropped
    route). Threads; `close()` ends them."""

    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.black_holed = threading.Event()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.closed = False
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self.socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._relay, args=(a, b), daemon=True).start()

    def _relay(self, src, dst):
        while not self.closed:
            while self.black_holed.is_set() and not self.closed:
                time.sleep(0.01)  # read nothing: the sender's data waits
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            while self.black_holed.is_set() and not self.closed:
                time.sleep(0.01)  # read before the hole: held, not sent
            try:
                dst.sendall(data)
            except OSError:
                break
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.closed = True
        self.listener.close()
        for sock in self.socks:
            try:
                sock.close()
            except OSError:
                pass


class ProxiedEtcd:
    """`etcd` as one node sees it: every member behind a BlackHoleProxy
    (Node takes it where it takes an Etcd)."""

    def __init__(self, etcd):
        self.proxies = [BlackHoleProxy(member) for member in etcd.client]

    def endpoints(self):
        return ",".join(p.address for p in self.proxies)

    def black_hole(self, on):
        for p in self.proxies:
            (p.black_holed.set if on else p.black_holed.clear)()

    def close(self):
        for p in self.proxies:
            p.close()
