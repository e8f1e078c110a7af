"""A 3-member etcd (Debian's etcd-server) and cgacctd cluster nodes on
loopback, for the cluster test and the cluster benchmark (docs/DESIGN.md
§4.18): free ports, temporary data directories, never a system etcd.

The caller puts the generated Python stubs (tests/python's) on sys.path
before importing this module.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
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
        self.proc = subprocess.Popen(
            [cgacctd, "--listen=" + self.address,
             "--metrics_listen=" + self.metrics, "--cpus=2",
             "--etcd_endpoints=" + etcd.endpoints(), "--etcd_prefix=" + prefix,
             "--cluster_lease_ttl=%ds" % ttl_s] + list(extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError("node did not start: %r %s" %
                               (line, self.proc.stderr.read()))
        self.start_line = line
        self.channel = grpc.insecure_channel(self.address)
        self.stub = pb_grpc.AccountingStub(self.channel)

    def close(self):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
