"""cgacct.ClusterClient: one Client per owner node of a cgacct cluster.

In cluster mode (docs/DESIGN.md §4.18) each shard (by default each child of
`/`) is owned by one node, which alone serves its sessions and does its
charges; a node that does not own a path's shard refuses a session's charge
FAILED_PRECONDITION with the owner in the `cgacct-owner` trailer, and while
a shard has no owner (a failover) UNAVAILABLE. ClusterClient routes by the
cluster map (GetClusterMap): each path goes to its shard's owner through a
Client of its own there (a session and a stock per owner, as the kernel's
stock is per CPU). When a call fails UNAVAILABLE, DEADLINE_EXCEEDED or
FAILED_PRECONDITION it re-reads the map from any node it knows and tries
again until `failover_s` has passed; when a shard's owner has changed, what
the application holds in that shard is first charged again at the new owner
as a resume (ChargeRequest.resume, which a new owner admits during its
takeover grace while it refuses fresh charges), then the call is made there.
A watch thread does the same without waiting for a call to fail: while a
node's session stream is silent past a keepalive period plus a deadline, or
holds pages it refused to charge again, it reads the map every 0.25 s and
moves each shard whose owner changed, so that holdings reach a new owner
within its takeover grace.

    import cgacct
    with cgacct.ClusterClient(["node-a:50051", "node-b:50051"]) as c:
        c.charge("/tenants/acme", 3)
        c.uncharge("/tenants/acme", 3)

Thread-safe: one lock serialises the routing (map reads, moves of a shard's
holdings); the charges themselves run on the per-owner Clients, which are
thread-safe. Pages the new owner refuses when charged again (its group is
full, or deleted) are counted in stats()["recharge_failed_pages"] and are no
longer the application's to uncharge.
"""
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import grpc

from cgacct.client import (ANON, ChargeResult, Client, Error, _NOT_HERE, _check_kind, _check_pages, _under,
                           _wire_path)
from cgacct.groups import EventsUpdate, Group, GroupStats
from cgacct.v1 import accounting_pb2 as pb
from cgacct.v1 import accounting_pb2_grpc as pb_grpc

# Codes after which the map is read again and the call tried again: the
# node did not serve the path (client._NOT_HERE).
_REROUTED = _NOT_HERE
# How often the watch thread looks for suspect nodes (ClusterClient._watch).
_WATCH_S = 0.25


class ClusterClient:
    """Clients of a cgacct cluster's nodes, each path at its shard's owner.

    ClusterClient(targets, failover_s=20.0, **client_options)

    targets: "host:port" of one or more nodes (any node serves the map; the
      owners' addresses come from it: each node's --advertise_address). A
      node not in cluster mode serves every path itself: against it a
      ClusterClient is one Client.
    failover_s: how long a call keeps re-reading the map and trying again
      after UNAVAILABLE / DEADLINE_EXCEEDED / FAILED_PRECONDITION: a node's
      lease TTL (--cluster_lease_ttl, 5 s) plus the takeover grace
      (--cluster_takeover_grace, 10 s) plus a few seconds.
    client_options: passed to each node's Client (ttl_ms, batch, deadline,
      retries, credentials, metadata, ...); keep `deadline` x (`retries` +
      1) well under failover_s, so that a dead owner is given up in time.

    Raises Error (UNAVAILABLE) when no target answers GetClusterMap within
    failover_s; ValueError for bad options.
    """

    def __init__(self, targets: Union[str, Sequence[str]], failover_s: float = 20.0,
                 **client_options: Any) -> None:
        if isinstance(targets, str):
            targets = [targets]
        if not targets or not all(isinstance(t, str) and t for t in targets):
            raise ValueError("targets: one or more \"host:port\", got %r" % (targets,))
        if isinstance(failover_s, bool) or not isinstance(failover_s, (int, float)) \
                or failover_s <= 0:
            raise ValueError("failover_s: must be seconds > 0, got %r" % (failover_s,))
        self._targets = list(targets)
        self._failover_s = float(failover_s)
        self._options = dict(client_options)
        self._deadline = float(self._options.get("deadline", 2.0))
        self._metadata = tuple(self._options.get("metadata", ()))
        self._credentials = self._options.get("credentials")
        self._mu = threading.Lock()
        self._owners = {}    # shard root (bytes) -> owner address ("" if none)
        self._clients = {}   # address -> Client
        self._home = {}      # shard root -> address whose Client holds its pages
        self._stats = {"map_reads": 0, "moves": 0, "watch_moves": 0,
                       "recharge_failed_pages": 0}
        self._closed = False
        self._watch_stop = threading.Event()
        with self._mu:
            self._read_map(time.monotonic() + self._failover_s)
        self._watcher = threading.Thread(target=self._watch, name="cgacct-cluster-watch",
                                         daemon=True)
        self._watcher.start()

    # --- public -------------------------------------------------------------

    def charge(self, path: Union[str, bytes], nr_pages: int,
               kind: Union[int, str] = ANON) -> ChargeResult:
        """Client.charge() at the owner of `path`'s shard (see the class
        comment for failovers). Returns its ChargeResult."""
        key = (_wire_path(path), _check_kind(kind))
        _check_pages(nr_pages)
        return self._routed(key, lambda c: c.charge(key[0], nr_pages, key[1]))

    def uncharge(self, path: Union[str, bytes], nr_pages: int,
                 kind: Union[int, str] = ANON) -> int:
        """Client.uncharge() at the owner of `path`'s shard. Returns the
        pages returned to the server."""
        key = (_wire_path(path), _check_kind(kind))
        _check_pages(nr_pages)
        return self._routed(key, lambda c: c.uncharge(key[0], nr_pages, key[1]))

    def held(self, path: Union[str, bytes], kind: Union[int, str] = ANON) -> int:
        """Pages of (path, kind) the application holds through this client."""
        key = (_wire_path(path), _check_kind(kind))
        with self._mu:
            root = self._root_of(key[0])
            client = self._clients.get(self._home.get(root, ""))
        return client.held(key[0], key[1]) if client is not None else 0

    # The rest of the API (cgacct.groups, as Client's). Unary calls go to
    # any node (a node that does not own the group's shard forwards the
    # call to the owner, one hop): to a node this client already talks to
    # first, the next on UNAVAILABLE. watch_events is a stream, served by
    # the owner only: it goes there.

    def create_group(self, path: Union[str, bytes], **limits: Any) -> Group:
        """Client.create_group() at any node."""
        return self._any(lambda c: c.create_group(path, **limits))

    def delete_group(self, path: Union[str, bytes]) -> int:
        """Client.delete_group() at any node."""
        return self._any(lambda c: c.delete_group(path))

    def set_limits(self, path: Union[str, bytes], **limits: Any) -> Group:
        """Client.set_limits() at any node."""
        return self._any(lambda c: c.set_limits(path, **limits))

    def list_groups(self, path: Union[str, bytes] = "/", recursive: bool = False) -> List[str]:
        """Client.list_groups() at any node (each holds the whole tree)."""
        return self._any(lambda c: c.list_groups(path, recursive))

    def group_stats(self, path: Union[str, bytes], flush: str = "exact") -> GroupStats:
        """Client.group_stats() at any node: exact at the owner of the
        group's shard; above the shard roots, the sum of every owner's."""
        return self._any(lambda c: c.group_stats(path, flush))

    def reclaim(self, path: Union[str, bytes], nr_bytes: int) -> int:
        """Client.reclaim() at any node (done by the shard's owner)."""
        return self._any(lambda c: c.reclaim(path, nr_bytes))

    def watch_events(self, path: Union[str, bytes],
                     timeout: Optional[float] = None) -> Iterator[EventsUpdate]:
        """Client.watch_events() at the owner of `path`'s shard now (after a
        failover the stream ends UNAVAILABLE: watch again)."""
        address = self.owner(path)
        if not address:
            raise Error(grpc.StatusCode.UNAVAILABLE,
                        "path: no node owns the shard of %s now"
                        % _wire_path(path).decode("utf-8", "replace"))
        with self._mu:
            client = self._client_for(address)
        return client.watch_events(path, timeout)

    def _any(self, call):
        with self._mu:
            if self._closed:
                raise Error(grpc.StatusCode.FAILED_PRECONDITION, "ClusterClient: closed")
            addresses = list(self._clients) + [t for t in self._targets
                                               if t not in self._clients]
        error = None
        for address in addresses:
            try:
                with self._mu:
                    client = self._client_for(address)
                return call(client)
            except Error as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE,
                                    grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                error = e
        raise error

    def owner(self, path: Union[str, bytes]) -> str:
        """The address of the node this client sends `path` to now ("" when
        its shard has no owner in the last map read)."""
        with self._mu:
            return self._owners.get(self._root_of(_wire_path(path)), "")

    def stats(self) -> Dict[str, int]:
        """Counters: map_reads, moves (shards whose holdings were charged
        again at a new owner), watch_moves (those of them the watch thread
        made, before any call of the application failed), recharge_failed_pages, plus the sum of the
        per-owner Clients' counters."""
        with self._mu:
            out = dict(self._stats)
            clients = list(self._clients.values())
        for c in clients:
            for k, v in c.stats().items():
                out[k] = out.get(k, 0) + v
        return out

    def close(self) -> None:
        """Closes every per-owner Client (their sessions return their
        pages); a node that is gone is given up after its Client's
        retries. Idempotent."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            clients = list(self._clients.values())
        self._watch_stop.set()
        if self._watcher is not threading.current_thread():
            self._watcher.join()

        def close_one(client):
            try:
                client.close()
            except Error:
                pass  # its node is gone: the lease returns the pages

        threads = [threading.Thread(target=close_one, args=(c,), daemon=True)
                   for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    # --- routing ------------------------------------------------------------

    def _routed(self, key, call):
        give_up = time.monotonic() + self._failover_s
        delay = 0.05
        while True:
            with self._mu:
                if self._closed:
                    raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                                "ClusterClient: closed")
                root = self._root_of(key[0])
                address = self._owners.get(root, "")
                client = None
                if root is None:
                    error = Error(grpc.StatusCode.NOT_FOUND,
                                  "path: no shard of the cluster map holds %s"
                                  % key[0].decode("utf-8", "replace"))
                elif not address:
                    error = Error(grpc.StatusCode.UNAVAILABLE,
                                  "shard %s has no owner now (a failover)"
                                  % root.decode("utf-8", "replace"))
                else:
                    error = None
                    try:
                        client = self._client_for(address)
                        self._move_home(root, address, client)
                    except Error as e:
                        error = e
            if error is None:
                try:
                    return call(client)
                except Error as e:
                    error = e
            code = error.code()
            if code not in _REROUTED + (grpc.StatusCode.NOT_FOUND,) \
                    or time.monotonic() + delay > give_up:
                raise error
            time.sleep(delay)
            delay = min(2 * delay, 1.0)
            with self._mu:
                try:
                    self._read_map(give_up, failed=address)
                except Error:
                    if code in (grpc.StatusCode.FAILED_PRECONDITION,
                                grpc.StatusCode.NOT_FOUND):
                        raise error from None
                    continue  # tried again until give_up
                moved = (self._root_of(key[0]) != root or
                         self._owners.get(root, "") != address)
            # A refusal that is not a routing one (the map has not changed:
            # memory.max, a group above the shards, a path that does not
            # exist) is the caller's.
            if code in (grpc.StatusCode.FAILED_PRECONDITION,
                        grpc.StatusCode.NOT_FOUND) and not moved:
                raise error

    def _watch(self):
        """The watch thread: every _WATCH_S, while a node's Client is
        suspect (Client._suspect(): its session stream silent past a
        keepalive period and a deadline, or pages deferred there), reads
        the map (that node asked last) and moves every shard whose owner
        changed to its new owner at once, as a resume, whether or not the
        application calls into it. Without it a holder learnt of a new
        owner only when one of its own calls failed there: a stopped
        owner cost each call its attempts' deadlines, a shard the
        application did not call into stayed with the old node (its
        deferred pages tried there forever), and a late move met the new
        owner past its takeover grace, where fresh charges had taken the
        room (ClusterTest's SIGSTOP fault: 8-48 pages over max, 1 run in
        5). A move the new owner refuses for now is tried at the next
        round. Never raises."""
        while not self._watch_stop.wait(_WATCH_S):
            with self._mu:
                if self._closed:
                    return
                clients = dict(self._clients)
            suspects = [a for a, c in clients.items() if c._suspect()]
            silent = [a for a, c in clients.items() if c._silent()]
            if not suspects:
                continue
            with self._mu:
                if self._closed:
                    return
                try:
                    self._read_map(time.monotonic() + self._deadline, failed=suspects)
                except Error:
                    continue  # no node answered: the next round
                for root, old in sorted(self._home.items()):
                    address = self._owners.get(root, "")
                    if not address or address == old:
                        continue
                    try:
                        self._move_home(root, address, self._client_for(address),
                                        wait=old not in silent)
                        self._stats["watch_moves"] += 1
                    except Error:
                        pass  # refused for now: the next round

    def _root_of(self, path):
        """The longest shard root of the last map read at or above `path`."""
        best = None
        for root in self._owners:
            if _under(path, root) and (best is None or len(root) > len(best)):
                best = root
        return best

    def _client_for(self, address):
        client = self._clients.get(address)
        if client is None:
            client = Client(address, **self._options)
            self._clients[address] = client
        return client

    def _move_home(self, root, address, client, wait=True):
        """Charges what the application holds in shard `root` at `address`
        (as a resume) if it was charged at another node; raises Error (the
        new owner refusing for now: tried again) with nothing moved. `wait`:
        Client._forget()'s (False from the watch: the old node is silent)."""
        old = self._home.get(root)
        if old == address:
            return
        if old is not None:
            held = self._clients[old]._forget(root, wait=wait)
            moved = {}
            try:
                for k, n in sorted(held.items()):
                    try:
                        client._adopt(k, n)
                        moved[k] = n
                    except Error as e:
                        if e.code() in _REROUTED:
                            raise
                        self._stats["recharge_failed_pages"] += n
            except Error:
                # Not this time: the holdings stay the old Client's.
                old_client = self._clients[old]
                with old_client._held_mu:
                    for k, n in held.items():
                        if k not in moved:
                            old_client._held[k] += n
                for k, n in moved.items():
                    with client._held_mu:
                        client._held[k] -= n
                    # (charged at the new owner already: returned there)
                    try:
                        client._uncharge_rpc(client._current()[0], k, n)
                    except Exception:  # noqa: BLE001 - its session returns them
                        pass
                raise
            self._stats["moves"] += 1
        self._home[root] = address

    def _read_map(self, give_up, failed=None):
        """GetClusterMap from the first node that answers: the targets, then
        every address the last map named, `failed` (the node a call just
        failed at, or a list of them) last: asked first, a stopped owner that is also a target
        cost every map read a whole deadline, and a holder reached the
        shard's new owner only after its takeover grace (ClusterTest's
        SIGSTOP fault: 48 pages over max, 1 run in 5). Raises Error
        UNAVAILABLE if none did before give_up."""
        last = None
        while True:
            known = [a for a in self._owners.values() if a]
            candidates = list(dict.fromkeys(self._targets + known))
            for bad in ([failed] if isinstance(failed, str) else failed or []):
                if bad in candidates:
                    candidates.remove(bad)
                    candidates.append(bad)
            for target in candidates:
                channel = (grpc.secure_channel(target, self._credentials)
                           if self._credentials is not None else grpc.insecure_channel(target))
                try:
                    reply = pb_grpc.AccountingStub(channel).GetClusterMap(
                        pb.GetClusterMapRequest(), timeout=self._deadline,
                        metadata=self._metadata)
                except grpc.RpcError as e:
                    last = e
                    continue
                finally:
                    channel.close()
                self._stats["map_reads"] += 1
                if not reply.cluster_mode:
                    # A single node (not in cluster mode) serves every path.
                    self._owners = {b"/": target}
                    return
                self._owners = {bytes(s.shard_root): s.owner_address
                                for s in reply.shards}
                return
            if time.monotonic() + 0.2 > give_up:
                raise Error(grpc.StatusCode.UNAVAILABLE,
                            "no node answered GetClusterMap (%s): %s" % (
                                ", ".join(self._targets),
                                last.details() if last is not None else "no target"))
            time.sleep(0.2)
