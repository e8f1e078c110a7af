"""Kubernetes Pod Security Standards, checked on a pod template.

  violations(template, level) -> [str]

`template` is a pod template as a manifest gives it ({"metadata": ...,
"spec": ...}, or a bare pod spec), `level` "privileged", "baseline" or
"restricted". The rules are the Pod Security Standards' as the Pod Security
admission controller enforces them (Kubernetes 1.25 and later, policy
version "latest"), field by field, each level including the one below:

baseline: no Windows HostProcess; no host network, PID or IPC namespace; no
  privileged container; capabilities added only from the default set; no
  hostPath volume; no host port; AppArmor only runtime/default or localhost/*
  (annotation or field); SELinux type only container_t, container_init_t,
  container_kvm_t or container_engine_t, and no SELinux user or role;
  /proc mount Default; seccomp never Unconfined; only the safe sysctls.
restricted: only configMap, csi, downwardAPI, emptyDir, ephemeral,
  persistentVolumeClaim, projected and secret volumes; no privilege
  escalation; runAsNonRoot true (pod, or every container) and no container
  set false; runAsUser never 0; seccomp RuntimeDefault or Localhost (pod, or
  every container); every capability dropped, only NET_BIND_SERVICE added.

An empty list means the admission controller of that level admits it.
"""

LEVELS = ("privileged", "baseline", "restricted")

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t",
                 "container_engine_t"}
RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                           "persistentVolumeClaim", "projected", "secret"}
APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def _containers(spec):
    return (spec.get("containers", []) + spec.get("initContainers", []) +
            spec.get("ephemeralContainers", []))


def _baseline(metadata, spec):
    bad = []
    pod_sc = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            bad.append(field)
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        bad.append("windowsOptions.hostProcess")
    for volume in spec.get("volumes", []):
        if "hostPath" in volume:
            bad.append("volume %s: hostPath" % volume["name"])
    for key, value in (metadata.get("annotations") or {}).items():
        if key.startswith(APPARMOR_PREFIX) and not (
                value == "runtime/default" or value.startswith("localhost/")):
            bad.append("annotation %s: %s" % (key, value))
    contexts = [("pod", pod_sc)] + [(c["name"], c.get("securityContext") or {})
                                    for c in _containers(spec)]
    for name, sc in contexts:
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES:
            bad.append("%s: seLinuxOptions.type %s" % (name, se["type"]))
        for field in ("user", "role"):
            if se.get(field):
                bad.append("%s: seLinuxOptions.%s" % (name, field))
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            bad.append("%s: seccompProfile Unconfined" % name)
        apparmor = (sc.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            bad.append("%s: appArmorProfile %s" % (name, apparmor))
    for sysctl in pod_sc.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            bad.append("sysctl %s" % sysctl["name"])
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            bad.append("%s: privileged" % name)
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            bad.append("%s: windowsOptions.hostProcess" % name)
        added = set((sc.get("capabilities") or {}).get("add", []))
        if added - BASELINE_CAPABILITIES:
            bad.append("%s: capabilities add %s" % (name, sorted(added - BASELINE_CAPABILITIES)))
        for port in c.get("ports", []):
            if port.get("hostPort"):
                bad.append("%s: hostPort %s" % (name, port["hostPort"]))
        if sc.get("procMount", "Default") != "Default":
            bad.append("%s: procMount %s" % (name, sc["procMount"]))
    return bad


def _restricted(spec):
    bad = []
    pod_sc = spec.get("securityContext") or {}
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            bad.append("volume %s: %s" % (volume["name"], sorted(kinds)))
    if pod_sc.get("runAsUser") == 0:
        bad.append("pod: runAsUser 0")
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append("%s: allowPrivilegeEscalation is not false" % name)
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            bad.append("%s: capabilities do not drop ALL" % name)
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append("%s: capabilities add %s" % (name, caps["add"]))
        if sc.get("runAsNonRoot") is False or not sc.get("runAsNonRoot",
                                                          pod_sc.get("runAsNonRoot")):
            bad.append("%s: runAsNonRoot is not true" % name)
        if sc.get("runAsUser") == 0:
            bad.append("%s: runAsUser 0" % name)
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append("%s: seccompProfile %s" % (name, seccomp))
    return bad


def violations(template, level):
    """What in the pod `template` the Pod Security `level` forbids."""
    if level not in LEVELS:
        raise ValueError("unknown Pod Security level %r" % level)
    if "spec" in template:
        metadata, spec = template.get("metadata") or {}, template["spec"]
    else:
        metadata, spec = {}, template
    bad = []
    if level in ("baseline", "restricted"):
        bad += _baseline(metadata, spec)
    if level == "restricted":
        bad += _restricted(spec)
    return bad


def enforced_level(namespace):
    """The level a Namespace document enforces ("privileged" when unlabelled)."""
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    return labels.get("pod-security.kubernetes.io/enforce", "privileged")


def pod_templates(docs):
    """(kind/name, pod template) of every workload document in `docs`."""
    out = []
    for doc in docs:
        kind = doc.get("kind")
        if kind in ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"):
            out.append(("%s/%s" % (kind, doc["metadata"]["name"]), doc["spec"]["template"]))
        elif kind == "CronJob":
            out.append(("CronJob/" + doc["metadata"]["name"],
                        doc["spec"]["jobTemplate"]["spec"]["template"]))
        elif kind == "Pod":
            out.append(("Pod/" + doc["metadata"]["name"], doc))
    return out
