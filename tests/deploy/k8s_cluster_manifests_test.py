#!/usr/bin/python3
"""deploy/kubernetes/cluster checked against the daemons it runs.

  k8s_cluster_manifests_test.py CGACCTD ETCD SOURCE_DIR

Parses every YAML document of deploy/kubernetes/cluster/*.yaml
(python3-yaml) and checks: the namespace enforces Pod Security
"restricted", and every pod template passes the rules of the level it
enforces (pod_security.py, field by field: no host namespaces, ports or
paths; only the volume types restricted allows; non-root; no privilege
escalation; every capability dropped; a RuntimeDefault or Localhost seccomp
profile); every cgacctd
argument is a flag the real CGACCTD knows and every etcd argument one the
real ETCD (Debian's etcd-server) knows; cgacctd runs in cluster mode
without --state_dir (which cluster mode refuses), its --etcd_endpoints name
exactly the etcd StatefulSet's members on their client port, its
--advertise_address is the pod's own DNS name under its headless Service on
the grpc port, and $(POD_NAME) comes from the downward API; etcd's
--initial-cluster names each member once with its peer URL, and its data
directory is on the claim template's volume; the probes are native gRPC
probes on the health port; the NetworkPolicies admit etcd's client port to
cgacctd's pods and etcd's own, and cgacctd's grpc and metrics ports but not
its health port.
"""
import glob
import os
import re
import subprocess
import sys
import unittest

import yaml

import pod_security

CGACCTD = sys.argv[1]
ETCD = sys.argv[2]
SOURCE = sys.argv[3]
del sys.argv[1:4]

DIR = os.path.join(SOURCE, "deploy", "kubernetes", "cluster")
NAMESPACE = "cgacct-cluster"

def parse_args(args):
    """--name=value arguments as {name: value}; every one must have =."""
    flags = {}
    for arg in args:
        m = re.fullmatch(r"--([a-z0-9_-]+)=(.*)", arg)
        if not m:
            raise AssertionError("container argument %r is not --flag=value" % arg)
        flags[m.group(1)] = m.group(2)
    return flags


class ClusterManifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = []
        for path in sorted(glob.glob(os.path.join(DIR, "*.yaml"))):
            with open(path) as f:
                cls.docs += [d for d in yaml.safe_load_all(f) if d is not None]
        cls.by_kind = {}
        for doc in cls.docs:
            cls.by_kind.setdefault(doc["kind"], []).append(doc)
        cls.sets = {s["metadata"]["name"]: s for s in cls.by_kind["StatefulSet"]}
        cls.services = {s["metadata"]["name"]: s for s in cls.by_kind["Service"]}
        cls.cgacctd = cls.sets["cgacctd"]
        cls.etcd = cls.sets["etcd"]
        cls.cgacctd_container = cls.cgacctd["spec"]["template"]["spec"]["containers"][0]
        cls.etcd_container = cls.etcd["spec"]["template"]["spec"]["containers"][0]
        cls.cgacctd_flags = parse_args(cls.cgacctd_container["args"])
        cls.etcd_flags = parse_args(cls.etcd_container["args"])

    def container_port(self, container, name):
        for port in container["ports"]:
            if port["name"] == name:
                return port["containerPort"]
        self.fail("no container port %r" % name)

    def test_kinds_and_namespace(self):
        self.assertEqual(sorted(self.by_kind),
                         ["Namespace", "NetworkPolicy", "Service", "StatefulSet"])
        ns = self.by_kind["Namespace"][0]
        self.assertEqual(ns["metadata"]["name"], NAMESPACE)
        self.assertEqual(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
                         "restricted")
        for doc in self.docs:
            if doc["kind"] != "Namespace":
                self.assertEqual(doc["metadata"]["namespace"], NAMESPACE, doc["metadata"])

    def test_pods_pass_the_pod_security_level_the_namespace_enforces(self):
        level = pod_security.enforced_level(self.by_kind["Namespace"][0])
        self.assertEqual(level, "restricted")
        templates = pod_security.pod_templates(self.docs)
        self.assertEqual(sorted(name for name, _ in templates),
                         ["StatefulSet/cgacctd", "StatefulSet/etcd"])
        for name, template in templates:
            self.assertEqual(pod_security.violations(template, level), [], name)

    def test_statefulsets_select_their_pods_under_headless_services(self):
        for name, sts in self.sets.items():
            labels = sts["spec"]["template"]["metadata"]["labels"]
            for k, v in sts["spec"]["selector"]["matchLabels"].items():
                self.assertEqual(labels.get(k), v, name)
            service = self.services[sts["spec"]["serviceName"]]
            self.assertEqual(service["spec"]["clusterIP"], "None", name)
            self.assertEqual(service["spec"]["selector"], sts["spec"]["selector"]["matchLabels"])
            self.assertEqual(sts["spec"]["replicas"], 3, name)
            env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
            self.assertEqual(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
                             "metadata.name", name)

    def assert_flags_known(self, command, flags, sample):
        """Every name in `flags` is listed ("  --name ...") by `command`'s help."""
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
        known = set(re.findall(r"^\s+--([a-z0-9_-]+)", out.stdout + out.stderr, re.MULTILINE))
        self.assertIn(sample, known, command)
        for flag in flags:
            self.assertIn(flag, known, "%s has no --%s" % (command[0], flag))

    def test_every_cgacctd_argument_is_a_flag_of_cgacctd(self):
        self.assert_flags_known([CGACCTD, "--helpfull"], self.cgacctd_flags, "etcd_endpoints")

    def test_every_etcd_argument_is_a_flag_of_etcd(self):
        self.assert_flags_known([ETCD, "--help"], self.etcd_flags, "initial-cluster")

    def test_cgacctd_is_in_cluster_mode_on_every_member(self):
        f = self.cgacctd_flags
        self.assertNotIn("state_dir", f)  # cluster mode refuses it
        etcd_service = self.etcd["spec"]["serviceName"]
        client_port = self.container_port(self.etcd_container, "client")
        members = ["%s-%d.%s.%s.svc:%d" % (self.etcd["metadata"]["name"], i, etcd_service,
                                           NAMESPACE, client_port)
                   for i in range(self.etcd["spec"]["replicas"])]
        self.assertEqual(f["etcd_endpoints"].split(","), members)
        self.assertEqual(f["node_name"], "$(POD_NAME)")
        self.assertEqual(
            f["advertise_address"],
            "$(POD_NAME).%s.%s.svc:%d" % (self.cgacctd["spec"]["serviceName"], NAMESPACE,
                                          self.container_port(self.cgacctd_container, "grpc")))
        self.assertEqual(int(f["listen"].rsplit(":", 1)[1]),
                         self.container_port(self.cgacctd_container, "grpc"))
        self.assertEqual(int(f["health_listen"].rsplit(":", 1)[1]),
                         self.container_port(self.cgacctd_container, "health"))
        ttl = int(re.fullmatch(r"(\d+)s", f["cluster_lease_ttl"]).group(1))
        self.assertGreaterEqual(ttl, 3)
        # A SIGTERM resigns the shards, then drains for 5 s.
        self.assertGreater(self.cgacctd["spec"]["template"]["spec"]
                           ["terminationGracePeriodSeconds"], 5)
        # Off loopback: TLS and client authentication on.
        for flag in ("tls_cert", "tls_key", "tokens_file", "authz_policy", "metrics_token_file"):
            self.assertIn(flag, f)

    def test_etcd_members_name_each_other(self):
        f = self.etcd_flags
        self.assertEqual(f["name"], "$(POD_NAME)")
        service = self.etcd["spec"]["serviceName"]
        peer_port = self.container_port(self.etcd_container, "peer")
        expected = ",".join("etcd-%d=http://etcd-%d.%s.%s.svc:%d" %
                            (i, i, service, NAMESPACE, peer_port)
                            for i in range(self.etcd["spec"]["replicas"]))
        self.assertEqual(f["initial-cluster"], expected)
        self.assertEqual(f["initial-advertise-peer-urls"],
                         "http://$(POD_NAME).%s.%s.svc:%d" % (service, NAMESPACE, peer_port))
        self.assertEqual(self.services[service]["spec"].get("publishNotReadyAddresses"), True)
        mounts = {m["name"]: m["mountPath"] for m in self.etcd_container["volumeMounts"]}
        claims = [t["metadata"]["name"] for t in self.etcd["spec"]["volumeClaimTemplates"]]
        self.assertIn("data", claims)
        self.assertTrue(f["data-dir"].startswith(mounts["data"] + "/"), f["data-dir"])

    def test_probes_are_native_grpc_on_the_health_port(self):
        health = self.container_port(self.cgacctd_container, "health")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            p = self.cgacctd_container[probe]
            self.assertEqual(set(p) & {"tcpSocket", "exec", "httpGet"}, set(), probe)
            self.assertEqual(p["grpc"]["port"], health, probe)
        self.assertEqual(self.cgacctd_container["readinessProbe"]["grpc"]["service"],
                         "cgacct.v1.Accounting")

    def test_network_policies(self):
        policies = {p["metadata"]["name"]: p for p in self.by_kind["NetworkPolicy"]}
        etcd = policies["etcd"]["spec"]
        self.assertEqual(etcd["podSelector"]["matchLabels"],
                         self.etcd["spec"]["selector"]["matchLabels"])
        admitted = {}
        for rule in etcd["ingress"]:
            self.assertIn("from", rule, "etcd admits every pod")
            for peer in rule["from"]:
                name = peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
                admitted.setdefault(name, set()).update(p["port"] for p in rule["ports"])
        self.assertEqual(admitted, {"cgacctd": {"client"}, "etcd": {"client", "peer"}})
        cgacctd = policies["cgacctd"]["spec"]
        ports = {p["port"] for rule in cgacctd["ingress"] for p in rule["ports"]}
        self.assertEqual(ports, {"grpc", "metrics"})


if __name__ == "__main__":
    unittest.main(verbosity=2)
