#!/usr/bin/python3
"""deploy/kubernetes checked structurally against the daemon it runs.

  k8s_manifests_test.py CGACCTD SOURCE_DIR

Parses every YAML document of deploy/kubernetes/*.yaml (python3-yaml) and
checks: the kinds (Namespace, DaemonSet, Service, NetworkPolicy) and their
namespace; the NetworkPolicy admitting the grpc and metrics ports and not
the health port; the
DaemonSet's selector against its pod labels; every container argument is a
flag the real CGACCTD knows (its --helpfull); the container ports match the
ports of --listen, --metrics_listen and --health_listen; the probes are
native gRPC probes (no tcpSocket/exec/httpGet) on the health port,
readiness asking for service cgacct.v1.Accounting and liveness for "";
the security flags the README's Security section asks for off loopback
(--tls_cert, --tls_key, --client_ca, --tokens_file, --authz_policy, and
--metrics_token_file for a non-loopback /metrics) name files on mounted
Secret volumes; the Service's ports target named container ports (not the
health port); and no prometheus.io/* annotations, which the shipped scrape
config does not read. And deploy/Dockerfile's shape (DockerfileShape: it is
not built in CI, which has no docker daemon).
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
SOURCE = sys.argv[2]
del sys.argv[1:3]

K8S = os.path.join(SOURCE, "deploy", "kubernetes")
NAMESPACE = "cgacct"


def load_documents():
    docs = []
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc is not None:
                    docs.append((os.path.basename(path), doc))
    return docs


def parse_args(args):
    """--name=value arguments as {name: value}; every one must have =."""
    flags = {}
    for arg in args:
        m = re.fullmatch(r"--([a-z_]+)=(.*)", arg)
        if not m:
            raise AssertionError("container argument %r is not --flag=value" % arg)
        flags[m.group(1)] = m.group(2)
    return flags


def port_of(listen):
    return int(listen.rsplit(":", 1)[1])


def is_loopback(listen):
    host = listen.rsplit(":", 1)[0]
    return host.startswith("127.") or host in ("[::1]", "localhost")


class KubernetesManifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load_documents()
        cls.by_kind = {}
        for name, doc in cls.docs:
            cls.by_kind.setdefault(doc["kind"], []).append(doc)
        ds = cls.by_kind["DaemonSet"][0]
        cls.pod = ds["spec"]["template"]
        cls.container = cls.pod["spec"]["containers"][0]
        cls.flags = parse_args(cls.container["args"])
        cls.ports = {p["name"]: p["containerPort"] for p in cls.container["ports"]}

    def test_kinds_and_namespace(self):
        self.assertEqual(sorted(k for k in self.by_kind),
                         ["DaemonSet", "Namespace", "NetworkPolicy", "Service"])
        for name, doc in self.docs:
            self.assertIn("apiVersion", doc, name)
            self.assertIn("name", doc["metadata"], name)
            if doc["kind"] == "Namespace":
                self.assertEqual(doc["metadata"]["name"], NAMESPACE)
            else:
                self.assertEqual(doc["metadata"].get("namespace"), NAMESPACE, name)
        self.assertEqual(self.by_kind["DaemonSet"][0]["apiVersion"], "apps/v1")
        self.assertEqual(len(self.pod["spec"]["containers"]), 1)

    def test_selector_matches_pod_labels(self):
        ds = self.by_kind["DaemonSet"][0]
        labels = self.pod["metadata"]["labels"]
        for key, value in ds["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(key), value, key)
        svc = self.by_kind["Service"][0]
        for key, value in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(key), value, key)

    def test_every_argument_is_a_flag_of_cgacctd(self):
        # --helpfull lists every flag as "--name (help)"; Abseil exits 1.
        helpfull = subprocess.run([CGACCTD, "--helpfull"], capture_output=True, text=True,
                                  timeout=30)
        known = set(re.findall(r"^\s+--([a-z_0-9]+)", helpfull.stdout + helpfull.stderr,
                               re.M))
        self.assertIn("listen", known, helpfull.stdout[:2000])
        for flag in self.flags:
            self.assertIn(flag, known, "--%s is not a cgacctd flag" % flag)

    def test_container_ports_match_the_flags(self):
        self.assertEqual(self.ports["grpc"], port_of(self.flags["listen"]))
        self.assertEqual(self.ports["metrics"], port_of(self.flags["metrics_listen"]))
        self.assertEqual(self.ports["health"], port_of(self.flags["health_listen"]))
        self.assertEqual(len(set(self.ports.values())), len(self.ports), self.ports)
        # Reached from the kubelet and the Service: not loopback in the pod.
        for flag in ("listen", "metrics_listen", "health_listen"):
            self.assertFalse(is_loopback(self.flags[flag]), flag)

    def test_probes_are_native_grpc_on_the_health_port(self):
        health_port = self.ports["health"]
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = self.container.get(kind)
            if probe is None and kind == "startupProbe":
                continue
            self.assertIsNotNone(probe, kind)
            for other in ("tcpSocket", "exec", "httpGet"):
                self.assertNotIn(other, probe, kind)
            self.assertIn("grpc", probe, kind)
            # The kubelet's grpc probe takes a port number only.
            self.assertIsInstance(probe["grpc"]["port"], int, kind)
            self.assertEqual(probe["grpc"]["port"], health_port, kind)
        self.assertEqual(self.container["readinessProbe"]["grpc"]["service"],
                         "cgacct.v1.Accounting")
        self.assertEqual(self.container["livenessProbe"]["grpc"].get("service", ""), "")

    def test_security_flags_on_mounted_secrets(self):
        # README "Security": off loopback, gRPC needs TLS and client
        # authentication; /metrics off loopback needs the token.
        for flag in ("tls_cert", "tls_key", "client_ca", "tokens_file", "authz_policy",
                     "metrics_token_file"):
            self.assertIn(flag, self.flags, "--%s missing" % flag)
        self.assertNotIn("insecure", self.flags)
        volumes = {v["name"]: v for v in self.pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: m for m in self.container["volumeMounts"]}
        for flag in ("tls_cert", "tls_key", "client_ca", "tokens_file", "authz_policy",
                     "metrics_token_file"):
            path = self.flags[flag]
            mount = [m for p, m in mounts.items() if path.startswith(p.rstrip("/") + "/")]
            self.assertEqual(len(mount), 1, "--%s=%s is on no mount" % (flag, path))
            self.assertTrue(mount[0].get("readOnly"), path)
            self.assertIn("secret", volumes[mount[0]["name"]], path)
        state = self.flags.get("state_dir")
        if state:
            self.assertIn(state, mounts)
            self.assertFalse(mounts[state].get("readOnly", False))

    def test_pod_hardening_matches_the_image(self):
        spec = self.pod["spec"]
        self.assertTrue(spec["securityContext"]["runAsNonRoot"])
        csc = self.container["securityContext"]
        self.assertTrue(csc["readOnlyRootFilesystem"])
        self.assertFalse(csc["allowPrivilegeEscalation"])
        self.assertEqual(csc["capabilities"]["drop"], ["ALL"])
        # The image's USER (deploy/Dockerfile) is the pod's uid:gid.
        with open(os.path.join(SOURCE, "deploy", "Dockerfile")) as f:
            users = re.findall(r"^USER\s+(\d+):(\d+)\s*$", f.read(), re.M)
        self.assertEqual(users[-1:], [(str(spec["securityContext"]["runAsUser"]),
                                       str(spec["securityContext"]["runAsGroup"]))])

    def test_pods_pass_the_pod_security_level_the_namespace_enforces(self):
        # The namespace enforces "restricted": a pod it refuses never runs
        # (the DaemonSet's hostPath state volume was refused even by
        # "baseline").
        level = pod_security.enforced_level(self.by_kind["Namespace"][0])
        self.assertEqual(level, "restricted")
        templates = pod_security.pod_templates(doc for _, doc in self.docs)
        self.assertEqual([name for name, _ in templates], ["DaemonSet/cgacctd"])
        for name, template in templates:
            self.assertEqual(pod_security.violations(template, level), [], name)

    def test_state_is_an_empty_dir_with_a_size_limit(self):
        # No hostPath: the state lives as long as the pod (it survives the
        # container's restarts), bounded so the kubelet accounts for it.
        volumes = {v["name"]: v for v in self.pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in self.container["volumeMounts"]}
        state = volumes[mounts[self.flags["state_dir"]]]
        self.assertEqual(set(state) - {"name"}, {"emptyDir"})
        self.assertIn("sizeLimit", state["emptyDir"])
        self.assertIn("ephemeral-storage", self.container["resources"]["requests"])


    def test_service_targets_named_ports_not_health(self):
        svc = self.by_kind["Service"][0]
        targets = [p["targetPort"] for p in svc["spec"]["ports"]]
        self.assertEqual(sorted(targets), ["grpc", "metrics"])
        for p in svc["spec"]["ports"]:
            self.assertEqual(p["port"], self.ports[p["targetPort"]], p)

    def test_network_policy_admits_grpc_and_metrics_not_health(self):
        # The health-only port is plaintext and unauthenticated: no pod
        # reaches it (the kubelet's probes come from the node).
        policy = self.by_kind["NetworkPolicy"][0]
        self.assertEqual(policy["apiVersion"], "networking.k8s.io/v1")
        labels = self.pod["metadata"]["labels"]
        for key, value in policy["spec"]["podSelector"]["matchLabels"].items():
            self.assertEqual(labels.get(key), value, key)
        self.assertEqual(policy["spec"]["policyTypes"], ["Ingress"])
        admitted = []
        for rule in policy["spec"]["ingress"]:
            self.assertIn("ports", rule, "a rule without ports admits all of them")
            for p in rule["ports"]:
                admitted.append(p["port"])
        self.assertEqual(sorted(admitted), ["grpc", "metrics"])
        for port in admitted:
            self.assertIn(port, self.ports)

    def test_no_scrape_annotations(self):
        # The shipped scrape config uses a static target, not the
        # prometheus.io/* convention: annotations would promise a scrape.
        with open(os.path.join(SOURCE, "deploy", "prometheus", "prometheus.yml")) as f:
            scrape = yaml.safe_load(f)
        uses_sd = any("kubernetes_sd_configs" in j for j in scrape["scrape_configs"])
        for name, doc in self.docs:
            for meta in (doc.get("metadata", {}),
                         doc.get("spec", {}).get("template", {}).get("metadata", {})):
                for key in (meta.get("annotations") or {}):
                    if key.startswith("prometheus.io/"):
                        self.assertTrue(uses_sd, "%s: annotation %s that no scrape config reads"
                                        % (name, key))



class PodSecurityChecker(unittest.TestCase):
    """The checker itself refuses what each level refuses."""

    @staticmethod
    def pod(container_sc=None, pod_sc=None, **spec):
        restricted_sc = {"allowPrivilegeEscalation": False,
                         "capabilities": {"drop": ["ALL"]}}
        restricted_sc.update(container_sc or {})
        base = {"securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "c", "securityContext": restricted_sc}]}
        base["securityContext"].update(pod_sc or {})
        base.update(spec)
        return {"metadata": {}, "spec": base}

    def refused(self, template, level, expected):
        got = pod_security.violations(template, level)
        self.assertTrue(any(expected in v for v in got), (expected, got))

    def test_a_hardened_pod_passes_every_level(self):
        for level in pod_security.LEVELS:
            self.assertEqual(pod_security.violations(self.pod(), level), [], level)

    def test_baseline_refusals(self):
        for spec, expected in [
                ({"volumes": [{"name": "state", "hostPath": {"path": "/x"}}]},
                 "volume state: hostPath"),
                ({"hostNetwork": True}, "hostNetwork"),
                ({"hostPID": True}, "hostPID"),
                ({"containers": [{"name": "c", "securityContext": {"privileged": True}}]},
                 "c: privileged"),
                ({"containers": [{"name": "c", "ports": [{"containerPort": 1,
                                                          "hostPort": 1}]}]}, "hostPort"),
                ({"containers": [{"name": "c", "securityContext": {
                    "capabilities": {"add": ["SYS_ADMIN"]}}}]}, "SYS_ADMIN"),
                ({"containers": [{"name": "c", "securityContext": {
                    "procMount": "Unmasked"}}]}, "procMount"),
        ]:
            self.refused(self.pod(**spec), "baseline", expected)
            self.assertEqual(pod_security.violations(self.pod(**spec), "privileged"), [])
        self.refused(self.pod(pod_sc={"seccompProfile": {"type": "Unconfined"}}),
                     "baseline", "pod: seccompProfile Unconfined")
        self.refused(self.pod(pod_sc={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
                     "baseline", "sysctl kernel.msgmax")
        self.assertEqual(pod_security.violations(self.pod(pod_sc={"sysctls": [
            {"name": "net.ipv4.ip_local_port_range", "value": "1 2"}]}), "baseline"), [])
        self.refused(self.pod(pod_sc={"seLinuxOptions": {"type": "spc_t"}}), "baseline",
                     "seLinuxOptions.type spc_t")
        unconfined = self.pod()
        unconfined["metadata"]["annotations"] = {
            pod_security.APPARMOR_PREFIX + "c": "unconfined"}
        self.refused(unconfined, "baseline", "unconfined")

    def test_restricted_refusals(self):
        bare = pod_security.violations({"containers": [{"name": "c"}]}, "restricted")
        self.assertEqual(len(bare), 4, bare)
        self.assertEqual(pod_security.violations({"containers": [{"name": "c"}]},
                                                 "baseline"), [])
        for template, expected in [
                (self.pod(volumes=[{"name": "n", "nfs": {"server": "x", "path": "/"}}]),
                 "volume n: ['nfs']"),
                (self.pod(container_sc={"runAsNonRoot": False}), "runAsNonRoot"),
                (self.pod(container_sc={"runAsUser": 0}), "c: runAsUser 0"),
                (self.pod(container_sc={"allowPrivilegeEscalation": True}),
                 "allowPrivilegeEscalation"),
                (self.pod(container_sc={"capabilities": {"drop": ["NET_RAW"]}}),
                 "do not drop ALL"),
                (self.pod(container_sc={"capabilities": {"drop": ["ALL"],
                                                         "add": ["CHOWN"]}}),
                 "capabilities add"),
                (self.pod(pod_sc={"seccompProfile": None}), "seccompProfile None"),
        ]:
            self.refused(template, "restricted", expected)
        with_volumes = self.pod(volumes=[{"name": "s", "emptyDir": {}},
                                         {"name": "p", "persistentVolumeClaim": {
                                             "claimName": "x"}}])
        self.assertEqual(pod_security.violations(with_volumes, "restricted"), [])


class SystemdUnitShape(unittest.TestCase):
    """deploy/systemd/cgacctd.service: every file a LoadCredential= reads is
    asserted first (AssertPathExists=), so that a missing one is named in
    `systemctl status` (issue 26, item 11: after cmake --install the unit
    would not start until its credential files existed, with no hint
    which)."""

    def test_every_credential_file_is_asserted(self):
        with open(os.path.join(SOURCE, "deploy", "systemd", "cgacctd.service")) as f:
            text = f.read()
        unit = text[text.index("[Unit]"):text.index("[Service]")]
        asserted = re.findall(r"(?m)^AssertPathExists=(\S+)$", unit)
        loaded = re.findall(r"(?m)^LoadCredential=[^:]+:(\S+)$", text)
        self.assertTrue(loaded)
        self.assertEqual(sorted(asserted), sorted(loaded))


class DockerfileShape(unittest.TestCase):
    """deploy/Dockerfile is not built in CI (no docker daemon there): its
    shape is checked here. Two stages on the same pinned Debian 12 point
    release, the build stage running install-deps.sh and cmake --install, the
    runtime stage copying only from the build stage, a non-root USER; and a
    .dockerignore that keeps host build trees out of the context."""

    def test_multi_stage_pinned_non_root(self):
        with open(os.path.join(SOURCE, "deploy", "Dockerfile")) as f:
            text = f.read()
        froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", text, re.M | re.I)
        self.assertGreaterEqual(len(froms), 2, froms)
        for image, _ in froms:
            self.assertRegex(image, r"^debian:12\.\d+(-slim)?$", "not a pinned point release")
        self.assertEqual(len({image for image, _ in froms}), 1, froms)
        build_stage = froms[0][1]
        self.assertTrue(build_stage, "the first stage has no name")
        runtime = text[text.rindex("\nFROM "):]
        self.assertIn("deploy/install-deps.sh", text[:text.rindex("\nFROM ")])
        self.assertIn("cmake --install", text[:text.rindex("\nFROM ")])
        copies = re.findall(r"^COPY\s+(.*)$", runtime, re.M)
        self.assertTrue(copies)
        for copy in copies:
            self.assertIn("--from=%s" % build_stage, copy, "runtime COPY from the host: " + copy)
        self.assertNotRegex(runtime, r"(?m)^RUN .*(g\+\+|cmake|-dev\b)")
        user = re.findall(r"^USER\s+(\S+)\s*$", runtime, re.M)
        self.assertEqual(len(user), 1)
        self.assertNotIn(user[0].split(":")[0], ("0", "root"))

    def test_revision_labels_and_healthcheck(self):
        # Issue 26, item 11: the image's revision was "unknown" (.git is not
        # in the context), it had no OCI labels and no HEALTHCHECK.
        with open(os.path.join(SOURCE, "deploy", "Dockerfile")) as f:
            text = f.read()
        split = text.rindex("\nFROM ")
        build, runtime = text[:split], text[split:]
        self.assertRegex(build, r"(?m)^ARG CGACCT_REVISION=unknown$")
        self.assertIn('-DCGACCT_REVISION="${CGACCT_REVISION}"', build)
        self.assertRegex(runtime, r"(?m)^ARG CGACCT_REVISION=unknown$")
        labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', runtime))
        self.assertEqual(labels.get("org.opencontainers.image.revision"), "${CGACCT_REVISION}")
        self.assertEqual(labels.get("org.opencontainers.image.title"), "cgacctd")
        health = re.findall(r"(?m)^HEALTHCHECK .*\n(?:\s+CMD .*)?", runtime)
        self.assertEqual(len(health), 1, health)
        self.assertIn('"cgacctctl", ', health[0].replace("/usr/local/bin/", ""))
        self.assertIn('"health"]', health[0])
        # The health check's target is the default CMD's listener.
        cmd = re.findall(r"(?m)^CMD \[(.*)\]$", runtime)[-1]
        env = re.findall(r"(?m)^ENV CGACCT_TARGET=(\S+)$", runtime)
        self.assertEqual(len(env), 1)
        self.assertIn('"--listen=%s"' % env[0], cmd)

    def test_dockerignore_keeps_build_trees_out(self):
        with open(os.path.join(SOURCE, ".dockerignore")) as f:
            ignored = {line.strip() for line in f if line.strip() and not line.startswith("#")}
        for entry in (".git", "build", "build-*"):
            self.assertIn(entry, ignored)


if __name__ == "__main__":
    unittest.main(verbosity=2)
