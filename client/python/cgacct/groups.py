"""The rest of cgacct.v1 for Python callers: groups, limits, statistics,
events, reclaim (issue 26, item 4), as methods of cgacct.Client.

Units: bytes for every limit and usage (as the cgroup files), pages only
where the API counts pages (reparented_pages). A limit that is "max"
(unlimited) is None in results; in arguments a limit is an int of bytes, or
"max", and a limit not given is left as it is (SetLimits' absent field).
Paths are str ("/a/b") in results, str or bytes in arguments. Every method
raises cgacct.Error (code(), details()) on failure: the server's status, or
INVALID_ARGUMENT naming the argument the client refuses before sending.
Thread-safety: as Client's, every method may be called from any thread.
"""
from typing import Dict, Iterator, List, NamedTuple, Optional, Union

import grpc

from cgacct.v1 import accounting_pb2 as pb

_U64_MAX = (1 << 64) - 1
_FLUSH = {"exact": pb.FLUSH_MODE_EXACT, "threshold": pb.FLUSH_MODE_THRESHOLD,
          "none": pb.FLUSH_MODE_NONE}

Limit = Union[int, str]


class Limits(NamedTuple):
    """memory.max, memory.high, memory.min, memory.low in bytes (None:
    "max"), and memory.oom.group."""
    max_bytes: Optional[int]
    high_bytes: Optional[int]
    min_bytes: Optional[int]
    low_bytes: Optional[int]
    oom_group: bool


class Group(NamedTuple):
    """A group as create_group() and set_limits() answer it."""
    path: str
    id: int
    limits: Limits


class GroupStats(NamedTuple):
    """GetStats of one group (group_stats()): the cgroup files.

    stat: memory.stat (name -> value, in the file's order and units);
    events, events_local: memory.events and memory.events.local (name ->
    count); failcnt: the v1 file's count; emin/elow: effective protection;
    flushed, max_staleness_us: whether this read flushed rstat, and how old
    the newest flush covering the group is. summed_shards, missing_shards:
    cluster mode, a group above the shard roots (docs/DESIGN.md §4.18).
    """
    path: str
    memory_current_bytes: int
    memory_peak_bytes: int
    limits: Limits
    stat: Dict[str, int]
    events: Dict[str, int]
    events_local: Dict[str, int]
    failcnt: int
    emin_bytes: int
    elow_bytes: int
    flushed: bool
    max_staleness_us: int
    summed_shards: List[str]
    missing_shards: List[str]


class EventsUpdate(NamedTuple):
    """One WatchEvents update: memory.events and memory.events.local."""
    path: str
    events: Dict[str, int]
    events_local: Dict[str, int]


_EVENT_NAMES = ("low", "high", "max", "oom", "oom_kill", "oom_group_kill",
                "sock_throttled")


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _limit_out(value: int) -> Optional[int]:
    return None if value == _U64_MAX else value


def _limits_out(limits) -> Limits:
    return Limits(_limit_out(limits.max_bytes), _limit_out(limits.high_bytes),
                  _limit_out(limits.min_bytes), _limit_out(limits.low_bytes),
                  bool(limits.oom_group))


def _events_out(events) -> Dict[str, int]:
    return {name: getattr(events, name) for name in _EVENT_NAMES}


def _group_out(group) -> Group:
    return Group(_text(group.path), group.id, _limits_out(group.limits))


def _limits_in(error, max=None, high=None, min=None, low=None, oom_group=None):
    """A pb.Limits of the limits given (None: not given)."""
    limits = pb.Limits()
    for name, value in (("max", max), ("high", high), ("min", min), ("low", low)):
        if value is None:
            continue
        if value == "max":
            value = _U64_MAX
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 0 <= value <= _U64_MAX:
            raise error(grpc.StatusCode.INVALID_ARGUMENT,
                        "%s: must be bytes (an integer from 0 to 2^64-1) or \"max\", got %r"
                        % (name, value))
        setattr(limits, name + "_bytes", value)
    if oom_group is not None:
        if not isinstance(oom_group, bool):
            raise error(grpc.StatusCode.INVALID_ARGUMENT,
                        "oom_group: must be True or False, got %r" % (oom_group,))
        limits.oom_group = oom_group
    return limits


class GroupsMixin:
    """Client's group, limit, statistics, events and reclaim methods (see
    the module docstring for units and errors). Needs the Client's _stub,
    _call (retried unary call), _once (one attempt) and _wire_path."""

    def create_group(self, path: Union[str, bytes], *, max: Optional[Limit] = None,
                     high: Optional[Limit] = None, min: Optional[Limit] = None,
                     low: Optional[Limit] = None,
                     oom_group: Optional[bool] = None) -> Group:
        """mkdir of a cgroup (CreateGroup) with the limits given (the others
        "max", or 0 for min/low). ALREADY_EXISTS if it exists (a retry whose
        first attempt was applied answers that too); NOT_FOUND if the parent
        does not exist."""
        request = pb.CreateGroupRequest(
            path=self._wire_path(path),
            limits=_limits_in(self._error, max, high, min, low, oom_group))
        return _group_out(self._once(self._stub.CreateGroup, request))

    def delete_group(self, path: Union[str, bytes]) -> int:
        """rmdir (DeleteGroup): FAILED_PRECONDITION if it has children.
        Returns the pages still charged, moved to the parent as the kernel
        reparents a dying memcg's."""
        request = pb.DeleteGroupRequest(path=self._wire_path(path))
        return self._once(self._stub.DeleteGroup, request).reparented_pages

    def set_limits(self, path: Union[str, bytes], *, max: Optional[Limit] = None,
                   high: Optional[Limit] = None, min: Optional[Limit] = None,
                   low: Optional[Limit] = None,
                   oom_group: Optional[bool] = None) -> Group:
        """Writes the limit files given (SetLimits); a lowered memory.max
        reclaims first, as the kernel's memory_max_write(). Returns the
        group with all its limits."""
        request = pb.SetLimitsRequest(
            path=self._wire_path(path),
            limits=_limits_in(self._error, max, high, min, low, oom_group))
        return _group_out(self._call(self._stub.SetLimits, request))

    def list_groups(self, path: Union[str, bytes] = "/",
                    recursive: bool = False) -> List[str]:
        """The groups below `path` (its children, or with recursive=True its
        whole subtree), sorted; every page of ListGroups."""
        if not isinstance(recursive, bool):
            raise self._error(grpc.StatusCode.INVALID_ARGUMENT,
                              "recursive: must be True or False, got %r" % (recursive,))
        request = pb.ListGroupsRequest(path=self._wire_path(path), recursive=recursive)
        paths: List[str] = []
        while True:
            response = self._call(self._stub.ListGroups, request)
            paths += [_text(p) for p in response.paths]
            if not response.next_page_token:
                return paths
            request.page_token = response.next_page_token

    def group_stats(self, path: Union[str, bytes], flush: str = "exact") -> GroupStats:
        """GetStats: memory.current, .peak, the limits, memory.stat and
        memory.events of `path`. flush: "exact" (fold every update
        acknowledged before the read), "threshold" (the kernel's
        memory.stat behaviour) or "none"."""
        if flush not in _FLUSH:
            raise self._error(grpc.StatusCode.INVALID_ARGUMENT,
                              "flush: must be \"exact\", \"threshold\" or \"none\", got %r"
                              % (flush,))
        s = self._call(self._stub.GetStats,
                       pb.GetStatsRequest(path=self._wire_path(path), flush=_FLUSH[flush]))
        return GroupStats(
            path=_text(s.path), memory_current_bytes=s.memory_current_bytes,
            memory_peak_bytes=s.memory_peak_bytes, limits=_limits_out(s.limits),
            stat={e.name: e.value for e in s.stat}, events=_events_out(s.events),
            events_local=_events_out(s.events_local), failcnt=s.failcnt,
            emin_bytes=s.emin_bytes, elow_bytes=s.elow_bytes, flushed=s.flushed,
            max_staleness_us=s.max_staleness_us,
            summed_shards=[_text(p) for p in s.summed_shards],
            missing_shards=[_text(p) for p in s.missing_shards])

    def reclaim(self, path: Union[str, bytes], nr_bytes: int) -> int:
        """memory.reclaim: reclaims nr_bytes from `path`'s subtree. Returns
        the bytes reclaimed; UNAVAILABLE (the kernel's EAGAIN) when it could
        not reclaim them all (page cache only: anon is never reclaimed)."""
        if isinstance(nr_bytes, bool) or not isinstance(nr_bytes, int) or \
                not 1 <= nr_bytes <= _U64_MAX:
            raise self._error(grpc.StatusCode.INVALID_ARGUMENT,
                              "nr_bytes: must be an integer from 1 to 2^64-1, got %r"
                              % (nr_bytes,))
        request = pb.ReclaimRequest(path=self._wire_path(path), nr_bytes=nr_bytes)
        return self._once(self._stub.Reclaim, request).reclaimed_bytes

    def watch_events(self, path: Union[str, bytes],
                     timeout: Optional[float] = None) -> Iterator[EventsUpdate]:
        """WatchEvents: memory.events of `path` on subscribe, then after each
        change (the newest counts, not a backlog), until the group is
        deleted (then Error NOT_FOUND), `timeout` seconds pass (Error
        DEADLINE_EXCEEDED) or the iterator is closed. Like poll() on
        memory.events."""
        call = self._stub.WatchEvents(pb.WatchEventsRequest(path=self._wire_path(path)),
                                      timeout=timeout, metadata=self._metadata)
        try:
            for update in call:
                yield EventsUpdate(_text(update.path), _events_out(update.events),
                                   _events_out(update.events_local))
        except grpc.RpcError as e:
            raise self._error(e.code(), e.details() or "") from None
        finally:
            call.cancel()
