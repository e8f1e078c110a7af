#!/usr/bin/python3
"""deploy/systemd/cluster run for real: three hosts' etcd and cgacctd, on
loopback.

  systemd_cluster_test.py CGACCTD ETCD STUBS SOURCE_DIR

For each host's file (deploy/systemd/cluster/node-{a,b,c}.env) starts
Debian's etcd with that file's ETCD_* variables as its environment (how
etcd-server's unit reads /etc/default/etcd: the names are etcd's own), and
cgacctd with the ExecStart= of the drop-in cgacctd.service.d/cluster.conf,
${VAR}s expanded from the same file and ${CREDENTIALS_DIRECTORY} a
directory holding what the unit's LoadCredential= lines name (a test CA's
server certificate, a token, a policy). The hosts' addresses are mapped to
free loopback ports (10.0.0.N:P consistently across the files; each host's
own 127.0.0.1:P apart), nothing else is changed. Then each node, over TLS
with the token, must report the cluster with its name and three live
nodes, and a group created at one node must be charged through another.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

CGACCTD, ETCD, STUBS, SOURCE = sys.argv[1:5]
del sys.argv[1:5]
sys.path.insert(0, STUBS)

import grpc  # noqa: E402
from cgacct.v1 import accounting_pb2 as pb  # noqa: E402
from cgacct.v1 import accounting_pb2_grpc as pb_grpc  # noqa: E402

DIR = os.path.join(SOURCE, "deploy", "systemd", "cluster")
HOSTS = ["a", "b", "c"]
TOKEN = "systemd-cluster-test-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, value = line.split("=", 1)
                env[key] = value
    return env


def exec_start(path):
    """The last non-empty ExecStart= of a unit file, as a list of words."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    commands = [m.group(1).strip() for m in re.finditer(r"^ExecStart=(.*)$", text, re.M)]
    commands = [c for c in commands if c]
    return commands[-1].split()


def make_certs(d):
    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = lambda name: os.path.join(d, name)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-days", "2", "-subj", "/CN=systemd-cluster-test-ca", "-addext",
        "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", p("ca.key"), "-out", p("clients-ca.pem"))
    with open(p("server.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-subj", "/CN=localhost", "-keyout", p("tls.key"), "-out", p("server.csr"))
    run("x509", "-req", "-days", "2", "-in", p("server.csr"), "-CA", p("clients-ca.pem"),
        "-CAkey", p("ca.key"), "-set_serial", "1", "-extfile", p("server.ext"),
        "-out", p("tls.crt"))
    with open(p("tokens"), "w") as f:
        f.write("admin %s\n" % TOKEN)
    with open(p("policy"), "w") as f:
        f.write("token:admin rw /\n")
    with open(p("metrics-token"), "w") as f:
        f.write("metrics-token-0123456789abcdef\n")


class SystemdCluster(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cgacct-systemd-cluster-")
        self.procs = []
        make_certs(self.dir)
        self.envs = {h: read_env(os.path.join(DIR, "node-%s.env" % h)) for h in HOSTS}
        self.ports = {}  # "10.0.0.N:P" and (host, "127.0.0.1:P") -> free port

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def mapped(self, host, value):
        def sub(m):
            addr = m.group(0)
            key = (host, addr) if addr.startswith("127.") else addr
            if key not in self.ports:
                self.ports[key] = free_port()
            return "127.0.0.1:%d" % self.ports[key]
        return re.sub(r"\b(?:10\.0\.0\.\d+|127\.0\.0\.1):\d+", sub, value)

    def start_etcd(self, host):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for key, value in self.envs[host].items():
            if key.startswith("ETCD_"):
                env[key] = self.mapped(host, value)
        env["ETCD_DATA_DIR"] = os.path.join(self.dir, "etcd-" + host)
        log = open(os.path.join(self.dir, "etcd-%s.log" % host), "w")
        self.procs.append(subprocess.Popen([ETCD], env=env, stdout=log, stderr=log))

    def start_cgacctd(self, host):
        words = exec_start(os.path.join(DIR, "cgacctd.service.d", "cluster.conf"))
        self.assertTrue(words[0].endswith("/cgacctd"), words[0])
        values = dict(self.envs[host], CREDENTIALS_DIRECTORY=self.dir)
        args = [CGACCTD]
        for word in words[1:]:
            word = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], word)
            if word.startswith("--listen="):
                # [::]:50051 on every host: this host's advertised address.
                args.append("--listen=" + self.mapped(
                    host, self.envs[host]["CGACCT_ADVERTISE_ADDRESS"]))
            else:
                args.append(self.mapped(host, word))
        args.append("--cpus=2")
        proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                stderr=open(os.path.join(self.dir, "cgacctd-%s.log" % host), "w"),
                                text=True)
        self.procs.append(proc)
        return proc, args

    def stub(self, host):
        with open(os.path.join(self.dir, "clients-ca.pem"), "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        target = self.mapped(host, self.envs[host]["CGACCT_ADVERTISE_ADDRESS"])
        channel = grpc.secure_channel(target, creds)
        return pb_grpc.AccountingStub(channel)

    def test_three_hosts_form_one_cluster(self):
        for host in HOSTS:
            self.start_etcd(host)
        nodes = {h: self.start_cgacctd(h) for h in HOSTS}
        for host, (proc, args) in nodes.items():
            line = proc.stdout.readline()  # once etcd answers
            if "listening on" not in line:
                with open(os.path.join(self.dir, "cgacctd-%s.log" % host)) as f:
                    log = f.read()[-2000:]
                self.fail("%s did not start (exit %s): %s\nits stderr: %s" % (
                    host, proc.poll(), args, log))
            self.assertIn('cluster node "node-%s"' % host, line)
        md = [("authorization", "Bearer " + TOKEN)]
        deadline = time.monotonic() + 30
        while True:
            infos = {h: self.stub(h).GetEngineInfo(pb.GetEngineInfoRequest(), metadata=md,
                                                   timeout=10) for h in HOSTS}
            if all(i.cluster.live_nodes == 3 for i in infos.values()) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for host, info in infos.items():
            self.assertEqual(info.cluster.node_name, "node-" + host)
            self.assertEqual(info.cluster.live_nodes, 3, host)
            self.assertTrue(info.cluster.has_lease, host)
        # The tree is shared: created at node-a, seen and charged elsewhere
        # (at its owner, which the refusal's cgacct-owner trailer names).
        self.stub("a").CreateGroup(pb.CreateGroupRequest(path=b"/web"), metadata=md, timeout=10)
        owner = None
        deadline = time.monotonic() + 30
        while owner is None and time.monotonic() < deadline:
            for host in HOSTS:
                if b"/web" in self.stub(host).GetEngineInfo(
                        pb.GetEngineInfoRequest(), metadata=md, timeout=10).cluster.owned_shards:
                    owner = host
            time.sleep(0.2)
        self.assertIsNotNone(owner, "no node owns /web")
        other = next(h for h in HOSTS if h != owner)
        charge = pb.ChargeRequest(path=b"/web", nr_pages=1, kind=pb.PAGE_KIND_ANON)
        with self.assertRaises(grpc.RpcError) as refused:
            self.stub(other).Charge(charge, metadata=md, timeout=10)
        trailers = dict(refused.exception.trailing_metadata() or ())
        self.assertEqual(trailers.get("cgacct-owner"),
                         self.mapped(owner, self.envs[owner]["CGACCT_ADVERTISE_ADDRESS"]))
        self.assertEqual(self.stub(owner).Charge(charge, metadata=md, timeout=10).nr_pages, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
