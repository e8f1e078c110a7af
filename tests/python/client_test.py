#!/usr/bin/python3
"""cgacctd driven from Python: a second language over stubs generated from
the project's proto at build time with Debian's protoc and
grpc_python_plugin (tests/python/CMakeLists.txt), nothing hand-written.

  client_test.py CGACCTD STUBS_DIR

Starts CGACCTD on 127.0.0.1 port 0, then creates groups, charges, reads
GetStats, follows WatchEvents through an OOM and a delete, and lists and
describes the service through server reflection (v1alpha). Runs with
Debian's python3-grpcio and python3-protobuf (deploy/install-deps.sh).
"""
import os
import re
import subprocess
import sys
import threading
import unittest

CGACCTD = sys.argv[1]
sys.path.insert(0, sys.argv[2])
del sys.argv[1:3]

import grpc  # noqa: E402
from google.protobuf import descriptor_pb2  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor  # noqa: E402

from cgacct.v1 import accounting_pb2 as pb  # noqa: E402
from cgacct.v1 import accounting_pb2_grpc as pb_grpc  # noqa: E402
import reflection_pb2  # noqa: E402
import reflection_pb2_grpc  # noqa: E402

PAGE = 4096


def wire_path(path):
    """A path as the proto's field type wants it (string or bytes)."""
    field = pb.ChargeRequest.DESCRIPTOR.fields_by_name["path"]
    return path.encode() if field.type == FieldDescriptor.TYPE_BYTES else path


def text(value):
    return value.decode() if isinstance(value, bytes) else value


class CgacctdFromPython(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = subprocess.Popen(
            [CGACCTD, "--listen=127.0.0.1:0", "--metrics_listen=", "--cpus=2",
             "--reflection=on"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = cls.daemon.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", line)
        if not m:
            cls.daemon.kill()
            raise RuntimeError("no start line: %r %s" % (line, cls.daemon.stderr.read()))
        cls.channel = grpc.insecure_channel("127.0.0.1:%s" % m.group(1))
        grpc.channel_ready_future(cls.channel).result(timeout=20)
        cls.stub = pb_grpc.AccountingStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.terminate()
        cls.daemon.wait(timeout=20)

    def create(self, path, max_bytes=None):
        limits = pb.Limits()
        if max_bytes is not None:
            limits.max_bytes = max_bytes
        return self.stub.CreateGroup(
            pb.CreateGroupRequest(path=wire_path(path), limits=limits), timeout=10)

    def test_create_charge_and_stats(self):
        group = self.create("/py", max_bytes=64 * PAGE)
        self.assertEqual(text(group.path), "/py")
        self.create("/py/job")
        resp = self.stub.Charge(pb.ChargeRequest(
            path=wire_path("/py/job"), nr_pages=3, kind=pb.PAGE_KIND_ANON), timeout=10)
        self.assertEqual(resp.nr_pages, 3)
        stats = self.stub.GetStats(pb.GetStatsRequest(
            path=wire_path("/py"), flush=pb.FLUSH_MODE_EXACT), timeout=10)
        self.assertGreaterEqual(stats.memory_current_bytes, 3 * PAGE)
        stat = {text(e.name): e.value for e in stats.stat}
        self.assertEqual(stat["anon"], 3 * PAGE)
        self.assertEqual(stats.limits.max_bytes, 64 * PAGE)

        # A bad request is a clear status, as from C++.
        with self.assertRaises(grpc.RpcError) as err:
            self.stub.Charge(pb.ChargeRequest(
                path=wire_path("/py/job"), nr_pages=0, kind=pb.PAGE_KIND_ANON), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("nr_pages", err.exception.details())
        with self.assertRaises(grpc.RpcError) as err:
            self.stub.GetStats(pb.GetStatsRequest(path=wire_path("/nope")), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_watch_events_through_an_oom_and_a_delete(self):
        self.create("/pw", max_bytes=1 * PAGE)
        self.create("/pw/c")
        stream = self.stub.WatchEvents(pb.WatchEventsRequest(path=wire_path("/pw/c")), timeout=30)
        first = next(stream)
        self.assertEqual(text(first.path), "/pw/c")
        self.assertEqual(first.events.oom_kill, 0)

        self.stub.Charge(pb.ChargeRequest(
            path=wire_path("/pw/c"), nr_pages=1, kind=pb.PAGE_KIND_ANON), timeout=10)
        with self.assertRaises(grpc.RpcError) as err:
            self.stub.Charge(pb.ChargeRequest(
                path=wire_path("/pw/c"), nr_pages=2, kind=pb.PAGE_KIND_ANON), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        update = next(stream)
        while update.events.oom_kill < 1:
            update = next(stream)
        self.assertEqual(update.events_local.oom_kill, 1)

        self.stub.Uncharge(pb.UnchargeRequest(
            path=wire_path("/pw/c"), nr_pages=1, kind=pb.PAGE_KIND_ANON), timeout=10)
        self.stub.DeleteGroup(pb.DeleteGroupRequest(path=wire_path("/pw/c")), timeout=10)
        with self.assertRaises(grpc.RpcError) as err:
            for _ in stream:
                pass
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("was deleted", err.exception.details())

    def test_answers_pass_to_the_next_request_as_they_are(self):
        """Issue 26, item 9: one type per concept. A path, a page token or a
        session id a response carries goes into the next request unchanged
        (they were `string` in responses and `bytes` in requests: a raw-stub
        user had to convert between them)."""
        fields = {
            pb.ListGroupsResponse: ("paths", "next_page_token"),
            pb.OpenSessionResponse: ("session_id",),
            pb.SessionInfo: ("session_id", "client_name"),
            pb.SessionHolding: ("path",),
            pb.Group: ("path",),
            pb.GroupStats: ("path", "summed_shards", "missing_shards"),
            pb.EventsUpdate: ("path",),
            pb.PeakWatermark: ("path",),
            pb.SessionServerMessage: ("drain_path",),
            pb.EngineClusterInfo: ("owned_shards",),
            pb.ChargeBatchRequest: ("idempotency_key",),
        }
        for message, names in fields.items():
            for name in names:
                self.assertEqual(message.DESCRIPTOR.fields_by_name[name].type,
                                 FieldDescriptor.TYPE_BYTES, (message.__name__, name))
        self.create("/pages")
        for i in range(5):
            self.create("/pages/g%d" % i)
        listed, token = [], b""
        while True:
            page = self.stub.ListGroups(pb.ListGroupsRequest(
                path=wire_path("/pages"), page_token=token, page_size=2), timeout=10)
            listed += list(page.paths)
            token = page.next_page_token
            if not token:
                break
        self.assertEqual(listed, [b"/pages/g%d" % i for i in range(5)])
        # A listed path is a request's path as it is.
        self.assertEqual(self.stub.GetStats(pb.GetStatsRequest(path=listed[0]),
                                            timeout=10).path, listed[0])
        session = self.stub.OpenSession(pb.OpenSessionRequest(ttl_ms=5000), timeout=10)
        self.stub.Charge(pb.ChargeRequest(path=listed[1], nr_pages=2, kind=pb.PAGE_KIND_FILE,
                                          session_id=session.session_id), timeout=10)
        info = self.stub.GetSession(pb.GetSessionRequest(session_id=session.session_id),
                                    timeout=10)
        self.assertEqual(info.session_id, session.session_id)
        self.assertEqual([(h.path, h.nr_pages) for h in info.holdings], [(listed[1], 2)])
        self.stub.CloseSession(pb.CloseSessionRequest(session_id=info.session_id), timeout=10)

    def test_reflection_lists_and_describes_the_service(self):
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="cgacct.v1.Accounting"),
        ]
        responses = list(stub.ServerReflectionInfo(iter(requests), timeout=10))
        self.assertEqual(len(responses), 2)
        names = [s.name for s in responses[0].list_services_response.service]
        self.assertIn("cgacct.v1.Accounting", names)
        files = responses[1].file_descriptor_response.file_descriptor_proto
        self.assertTrue(files)
        fd = descriptor_pb2.FileDescriptorProto.FromString(files[0])
        self.assertEqual(fd.package, "cgacct.v1")
        methods = [m.name for s in fd.service for m in s.method]
        for method in ("CreateGroup", "Charge", "GetStats", "WatchEvents"):
            self.assertIn(method, methods)


if __name__ == "__main__":
    unittest.main(verbosity=2)
