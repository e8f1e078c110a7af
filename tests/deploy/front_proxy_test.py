#!/usr/bin/python3
"""deploy/front-proxy/nghttpx.conf, run (issue 22, finding 12's flood).

  front_proxy_test.py --cgacctd PATH --cgacctctl PATH --nghttpx PATH
                      --source DIR [--rounds N] [--seconds S]
                      [--split GAP]

Starts a real cgacctd with a tokens file, plaintext on 127.0.0.1 (port 0,
/metrics on another), and Debian's nghttpx from the shipped
deploy/front-proxy/nghttpx.conf, changed only in its addresses (TLS on a
free loopback port, the daemon's port), its certificate and key (made now
by the openssl CLI) and its log (a file, not syslog). Then, through the
proxy, with cgacctctl over TLS:
  - a call with a token names the token's identity (the `authorization`
    header passes through), one without a token is UNAUTHENTICATED
    (cgacctd's check, kept), a group is created and charged, and a
    server-streaming call (WatchEvents) answers;
  - N rounds (2) of the rapid-reset flood (tests/server/daemon/
    rapid_reset_flood.py --tls --reconnect: HEADERS + RST_STREAM pairs as
    fast as the proxy takes them, a new connection whenever it sends a
    GOAWAY, for S seconds (8)): cgacctd's RSS, sampled every 0.1 s from
    the flood's start to 3 s after its end, stays under 2x its idle RSS,
    the proxy sent GOAWAYs, both processes are alive and a call with a
    token still answers.
Prints the figures of each round: pairs sent and per second, connections
and GOAWAYs, calls that reached cgacctd (cgacct_grpc_server_handled_total
of GetEngineInfo, the flood's method), and the RSS (idle, peak, after) of
cgacctd and of nghttpx (its processes together).
--split GAP floods with rapid_reset_flood.py --split GAP instead (100
streams opened in one write, reset GAP seconds later): a flood the proxy
does not stop (deploy/README.md); by hand, not in ctest.
Exit 0 when every check holds, 1 when one does not, 77 (ctest's skip) when
nghttpx is not installed (deploy/install-deps.sh installs nghttp2-proxy).
"""
import argparse
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

TOKEN = "tenant-token-0123456789abcdef"
FLOOD = os.path.join("tests", "server", "daemon", "rapid_reset_flood.py")


def rss_kb(pid):
    """Resident set of `pid` in KiB (/proc/PID/statm), 0 once it is gone."""
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") //
                                               1024)
    except OSError:
        return 0


def process_tree(pid):
    """`pid` and its descendants (nghttpx forks a worker process)."""
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
    localhost and 127.0.0.1, by the openssl CLI."""
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


def render_config(shipped, out, frontend_port, backend_port, d):
    """The shipped config with only its addresses, certificate, key and log
    changed; every other line as shipped. Fails if the shipped file lacks
    one of the lines changed (the test would no longer run the recipe)."""
    replaced = {
        "frontend": "frontend=127.0.0.1,%d" % frontend_port,
        "private-key-file": "private-key-file=" + os.path.join(d,
                                                               "server.key"),
        "certificate-file": "certificate-file=" + os.path.join(d,
                                                               "server.pem"),
        "errorlog-syslog": "errorlog-file=" + os.path.join(d, "nghttpx.log"),
    }
    seen = set()
    lines = []
    with open(shipped) as f:
        for line in f:
            line = line.rstrip("\n")
            key = line.split("=", 1)[0]
            if key in replaced:
                seen.add(key)
                line = replaced[key]
            elif key == "backend":
                seen.add(key)
                # The address, not its parameters (";;proto=h2").
                line = re.sub(r"^backend=127\.0\.0\.1,\d+",
                              "backend=127.0.0.1,%d" % backend_port, line)
                if str(backend_port) not in line:
                    raise RuntimeError("backend line not on 127.0.0.1: " +
                                       line)
            lines.append(line)
    missing = (set(replaced) | {"backend"}) - seen
    if missing:
        raise RuntimeError("%s has no %s line" % (shipped, sorted(missing)))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def start_cgacctd(binary, tokens):
    proc = subprocess.Popen(
        [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
         "--cpus=2", "--tokens_file=" + tokens],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    port = re.search(r"listening on 127\.0\.0\.1:(\d+) ", line)
    metrics = re.search(r"metrics on 127\.0\.0\.1:(\d+)", line)
    if not port or not metrics:
        proc.kill()
        raise RuntimeError("cgacctd did not start: %r" % line)
    return proc, int(port.group(1)), int(metrics.group(1))


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


def engine_info_calls(metrics_port):
    """GetEngineInfo calls cgacctd has handled, every code."""
    with urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % metrics_port, timeout=10) as r:
        text = r.read().decode()
    return sum(int(float(m.group(1))) for m in re.finditer(
        r'^cgacct_grpc_server_handled_total\{[^}]*method="GetEngineInfo"'
        r'[^}]*\} (\S+)$', text, re.M))


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


def flood_round(source, proxy_port, ca, seconds, cgacctd, nghttpx,
                metrics_port, split=None):
    calls_before = engine_info_calls(metrics_port)
    time.sleep(1.0)
    idle = rss_kb(cgacctd.pid)
    proxy_idle = tree_rss_kb(nghttpx.pid)
    flood = subprocess.Popen(
        [sys.executable, os.path.join(source, FLOOD), "127.0.0.1",
         str(proxy_port), str(seconds), "0", "--tls", ca, "--server-name",
         "localhost", "--reconnect"] +
        (["--split", str(split)] if split is not None else []),
        stdout=subprocess.PIPE, text=True)
    peak, proxy_peak = idle, proxy_idle
    while flood.poll() is None:
        peak = max(peak, rss_kb(cgacctd.pid))
        proxy_peak = max(proxy_peak, tree_rss_kb(nghttpx.pid))
        time.sleep(0.1)
    out = flood.stdout.read().strip().splitlines()
    if flood.returncode != 0 or not out:
        raise RuntimeError("rapid_reset_flood.py failed (exit %d)" %
                           flood.returncode)
    result = json.loads(out[-1])
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        peak = max(peak, rss_kb(cgacctd.pid))
        proxy_peak = max(proxy_peak, tree_rss_kb(nghttpx.pid))
        time.sleep(0.1)
    return dict(result, idle_kb=idle, peak_kb=peak,
                after_kb=rss_kb(cgacctd.pid), proxy_idle_kb=proxy_idle,
                proxy_peak_kb=proxy_peak,
                proxy_after_kb=tree_rss_kb(nghttpx.pid),
                reached=engine_info_calls(metrics_port) - calls_before)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cgacctd", required=True)
    parser.add_argument("--cgacctctl", required=True)
    parser.add_argument("--nghttpx", default="")
    parser.add_argument("--source", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--split", type=float)
    args = parser.parse_args()
    if not args.nghttpx or not os.access(args.nghttpx, os.X_OK):
        print("skipped: nghttpx is not installed (apt-get install "
              "nghttp2-proxy; deploy/install-deps.sh does)")
        return 77
    version = subprocess.run([args.nghttpx, "--version"], capture_output=True,
                             text=True).stdout.strip()
    print("proxy: %s" % version, flush=True)
    d = tempfile.mkdtemp(prefix="cgacct-front-proxy-")
    cgacctd = nghttpx = None
    checks = Checks()
    try:
        make_certs(d)
        ca = os.path.join(d, "ca.pem")
        tokens = os.path.join(d, "tokens")
        with open(tokens, "w") as f:
            f.write("tenant-a %s\n" % TOKEN)
        token_file = os.path.join(d, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cgacctd, port, metrics_port = start_cgacctd(args.cgacctd, tokens)
        proxy_port = free_port()
        conf = os.path.join(d, "nghttpx.conf")
        render_config(os.path.join(args.source, "deploy", "front-proxy",
                                   "nghttpx.conf"),
                      conf, proxy_port, port, d)
        nghttpx = subprocess.Popen([args.nghttpx, "--conf=" + conf],
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        checks.expect(wait_tls(proxy_port, ca) == "h2",
                      "the proxy speaks TLS with ALPN h2 on 127.0.0.1:%d" %
                      proxy_port)

        def c(token, *command):
            return ctl(args.cgacctctl, proxy_port, ca,
                       token_file if token else "", *command)
        info = c(True, "info", "--json")
        checks.expect(info.returncode == 0 and json.loads(info.stdout).get(
            "caller_identity") == "token:tenant-a",
            "a call through the proxy with a token is token:tenant-a's (%s)" %
            (info.stderr.strip() or "exit 0"))
        anonymous = c(False, "info")
        checks.expect(anonymous.returncode == 4 and
                      "UNAUTHENTICATED" in anonymous.stderr,
                      "without a token: %s" % anonymous.stderr.strip())
        created = c(True, "create", "/through-proxy")
        charged = c(True, "charge", "/through-proxy", "10", "anon")
        checks.expect(created.returncode == 0 and charged.returncode == 0 and
                      "nr_pages 10" in charged.stdout,
                      "create and charge through the proxy (%s%s)" %
                      (created.stderr.strip(), charged.stderr.strip()))
        watch = c(True, "events", "/through-proxy", "--watch", "-n", "1")
        checks.expect(watch.returncode == 0 and "oom 0" in watch.stdout,
                      "a WatchEvents stream through the proxy answers (%s)" %
                      (watch.stderr.strip() or "exit 0"))

        for i in range(args.rounds):
            r = flood_round(args.source, proxy_port, ca, args.seconds,
                            cgacctd, nghttpx, metrics_port, args.split)
            print("round %d: %d pairs in %.1f s (%d/s) over %d connections, "
                  "%d GOAWAYs (last code %s); calls that reached cgacctd: "
                  "%d; cgacctd RSS idle %d KiB, peak %d KiB (%.2fx), 3 s "
                  "after %d KiB; nghttpx RSS idle %d KiB, peak %d KiB, "
                  "after %d KiB" % (
                      i + 1, r["pairs"], r["seconds"], r["pairs_per_s"],
                      r["connections"], r["goaways"], r["goaway"],
                      r["reached"], r["idle_kb"], r["peak_kb"],
                      r["peak_kb"] / r["idle_kb"], r["after_kb"],
                      r["proxy_idle_kb"], r["proxy_peak_kb"],
                      r["proxy_after_kb"]), flush=True)
            checks.expect(r["peak_kb"] < 2 * r["idle_kb"],
                          "round %d: cgacctd's RSS under 2x idle" % (i + 1))
            checks.expect(r["goaways"] > 0,
                          "round %d: the proxy sent GOAWAYs" % (i + 1))
            checks.expect(cgacctd.poll() is None and nghttpx.poll() is None,
                          "round %d: cgacctd and nghttpx alive" % (i + 1))
            after = c(True, "info", "--json")
            checks.expect(after.returncode == 0,
                          "round %d: a call with a token answers after the "
                          "flood (%s)" % (i + 1,
                                          after.stderr.strip() or "exit 0"))
    finally:
        for proc in (nghttpx, cgacctd):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        log = os.path.join(d, "nghttpx.log")
        if checks.failed and os.path.exists(log):
            with open(log) as f:
                print("nghttpx log (last lines):\n" +
                      "".join(f.readlines()[-20:]))
        shutil.rmtree(d, ignore_errors=True)
    print("checks: %s" % ("all met" if not checks.failed else
                          "NOT met: " + "; ".join(checks.failed)))
    return 0 if not checks.failed else 1


if __name__ == "__main__":
    sys.exit(main())
