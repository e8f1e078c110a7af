"""cgacct: the Python client of cgacctd (docs/DESIGN.md, "Python client").

    import cgacct
    with cgacct.Client("127.0.0.1:50051") as c:
        c.charge("/tenants/acme", 3)        # pages; usually no RPC (the stock)
        c.uncharge("/tenants/acme", 3)

`Client` opens one session, keeps it alive on SessionStream, charges in
batches on it and keeps the surplus in per-thread stock slots (the kernel's
per-CPU stock carried across the network); when the process dies the server
uncharges what the session held. `ClusterClient` does the same against a
cluster of nodes (docs/DESIGN.md §4.18): a Client per shard owner, routed
by the cluster map, following a failover. The gRPC stubs generated from
proto/cgacct/v1/accounting.proto are `cgacct.v1.accounting_pb2` and
`cgacct.v1.accounting_pb2_grpc`. Typed (py.typed); installable with pip
(client/python/pyproject.toml).
"""
__version__ = "0.1.0"  # the project's version (CMakeLists.txt; PythonPackageTest checks)

from cgacct.client import (ANON, FILE, DEFAULT_BATCH, Client, Error,  # noqa: E402
                           ChargeResult, Event, Holding, SessionInfo)
from cgacct.cluster import ClusterClient  # noqa: E402
from cgacct.groups import EventsUpdate, Group, GroupStats, Limits  # noqa: E402

__all__ = ["ANON", "FILE", "DEFAULT_BATCH", "Client", "ClusterClient", "Error",
           "ChargeResult", "Event", "Holding", "SessionInfo", "Group", "GroupStats",
           "Limits", "EventsUpdate", "__version__"]
