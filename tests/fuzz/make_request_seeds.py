#!/usr/bin/env python3
"""Writes the hand-made seeds of request_fuzzer (tests/fuzz/corpus/request_fuzzer/
seed-*): one or a few calls per cgacct.v1.Accounting method, valid and
invalid, in the fuzzer's input format (tests/fuzz/request_fuzzer.cc):
[method index][u16 length, little endian][request bytes], repeated; a
ChargeStream request is itself [u16 length][ChargeBatchRequest] frames.
Protobuf is encoded by hand (no protobuf module needed). Deterministic:
re-running rewrites the same files.  Usage: make_request_seeds.py OUTDIR"""
import os
import struct
import sys

METHODS = ["CreateGroup", "DeleteGroup", "ListGroups", "SetLimits", "Charge",
           "Uncharge", "ChargeBatch", "ChargeStream", "GetStats", "Reclaim",
           "WatchEvents", "GetEngineInfo", "OpenSession", "CloseSession",
           "GetSession", "OpenPeakWatermark", "ResetPeakWatermark",
           "ReadPeakWatermark", "ClosePeakWatermark", "GetClusterMap"]
ANON, FILE = 1, 2
PAGE = 4096


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_varint(field, n):
    return varint(field << 3) + varint(n)


def f_bytes(field, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(field << 3 | 2) + varint(len(data)) + data


def limits(max_b=None, high_b=None, min_b=None, low_b=None):
    out = b""
    for i, v in enumerate((max_b, high_b, min_b, low_b), start=1):
        if v is not None:
            out += f_varint(i, v)
    return out


def charge(path, n, kind, cpu=None, rid=None):
    out = f_bytes(1, path) + f_varint(2, n) + f_varint(3, kind)
    if cpu is not None:
        out += f_varint(4, cpu)
    if rid is not None:
        out += f_bytes(5, rid)
    return out


def op(op_id, path, n, kind, uncharge=False, cpu=None):
    out = f_varint(1, op_id) + (f_varint(2, 1) if uncharge else b"")
    out += f_bytes(3, path) + f_varint(4, n) + f_varint(5, kind)
    if cpu is not None:
        out += f_varint(6, cpu)
    return out


def batch(*ops):
    return b"".join(f_bytes(1, o) for o in ops)


def frame(payload):
    assert len(payload) < 65536
    return struct.pack("<H", len(payload)) + payload


def call(method, payload):
    return bytes([METHODS.index(method)]) + frame(payload)


SEEDS = {
    "create": call("CreateGroup", f_bytes(1, "/d") + f_bytes(2, limits(max_b=1 << 20))),
    "create-exists": call("CreateGroup", f_bytes(1, "/a")),
    "create-no-parent": call("CreateGroup", f_bytes(1, "/x/y")),
    "create-bad-path": call("CreateGroup", f_bytes(1, "/a/../b")),
    "delete": call("DeleteGroup", f_bytes(1, "/c")),
    "delete-children": call("DeleteGroup", f_bytes(1, "/a")),
    "delete-root": call("DeleteGroup", f_bytes(1, "/")),
    "list": call("ListGroups", f_bytes(1, "/") + f_varint(2, 1) + f_varint(4, 1)),
    "list-token": call("ListGroups", f_bytes(1, "/") + f_varint(2, 1) + f_bytes(3, "/a")),
    "set": call("SetLimits", f_bytes(1, "/a/b") + f_bytes(2, limits(high_b=100 * PAGE, low_b=PAGE))),
    "set-max-below": call("SetLimits", f_bytes(1, "/a/b") + f_bytes(2, limits(max_b=10 * PAGE))),
    "set-root": call("SetLimits", f_bytes(1, "/") + f_bytes(2, limits(max_b=0))),
    "charge": call("Charge", charge("/a/b", 10, ANON, cpu=3, rid="r1")),
    "charge-oom": call("Charge", charge("/a/b", 5000, ANON)),
    "charge-huge": call("Charge", charge("/c", (1 << 63) // PAGE - 1, FILE)),
    "charge-kind": call("Charge", charge("/a/b", 1, 0)),
    "charge-cpu": call("Charge", charge("/a/b", 1, ANON, cpu=9)),
    "charge-zero": call("Charge", charge("/a/b", 0, ANON)),
    "charge-rid-empty": call("Charge", charge("/a/b", 1, ANON, rid="")),
    "charge-utf8": call("Charge", charge(b"/\xff", 1, ANON)),
    "charge-undecodable": call("Charge", b"z"),
    "uncharge": call("Uncharge", charge("/a/b", 50, ANON)),
    "uncharge-too-much": call("Uncharge", charge("/a/b", 200, ANON)),
    "uncharge-file": call("Uncharge", charge("/c", 1000, FILE, rid="u1")),
    "batch": call("ChargeBatch", batch(op(1, "/a/b", 5, ANON), op(2, "/c", 5, FILE, uncharge=True),
                                       op(3, "/x", 1, ANON), op(4, "/a/b", 0, FILE, cpu=7))),
    "batch-too-many": call("ChargeBatch", batch(*([b""] * 4097))),
    "stream": call("ChargeStream", frame(batch(op(1, "/a/b", 5, ANON))) +
                   frame(batch(op(2, "/a/b", 5, ANON, uncharge=True), op(3, "bad", 1, ANON)))),
    "stream-undecodable": call("ChargeStream", frame(batch(op(1, "/c", 1, FILE))) + frame(b"z")),
    "stats": call("GetStats", f_bytes(1, "/a") + f_varint(2, 2)),
    "stats-flush": call("GetStats", f_bytes(1, "/a") + f_varint(2, 7)),
    "reclaim": call("Reclaim", f_bytes(1, "/c") + f_varint(2, 10 * PAGE)),
    "reclaim-zero": call("Reclaim", f_bytes(1, "/c") + f_varint(2, 0)),
    "reclaim-anon": call("Reclaim", f_bytes(1, "/a") + f_varint(2, 1 << 40)),
    "watch": call("WatchEvents", f_bytes(1, "/a")),
    "info": call("GetEngineInfo", b""),
    "cluster-map": call("GetClusterMap", b""),
    "session-open": call("OpenSession", f_varint(1, 200) + f_bytes(2, "fuzz:1")),
    "session-open-bad-ttl": call("OpenSession", f_varint(1, 1)),
    "session-close": call("CloseSession", f_bytes(1, "0" * 32)),
    "session-get-empty": call("GetSession", b""),
    "session-charge": call("Charge", charge("/a/b", 3, ANON) + f_bytes(6, "0" * 32)),
    "session-uncharge-empty-id": call("Uncharge", charge("/c", 1, FILE) + f_bytes(6, "")),
    "sequence": (call("CreateGroup", f_bytes(1, "/d")) + call("Charge", charge("/d", 70, FILE, rid="s")) +
                 call("Charge", charge("/d", 70, FILE, rid="s")) + call("Reclaim", f_bytes(1, "/d") + f_varint(2, PAGE)) +
                 call("DeleteGroup", f_bytes(1, "/d")) + call("GetStats", f_bytes(1, "/"))),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(out, "seed-" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
