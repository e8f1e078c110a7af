"""cgacct.Client: sessions and a remote per-thread stock over cgacct.v1.

The semantics are those of the C++ library (cgacct::client; docs/DESIGN.md
§4.16, "The Python client"):

- One session per Client (OpenSession), kept alive on SessionStream by a
  daemon thread: a keepalive whenever the server asks (every ttl/3; one
  unasked every ttl/3 to a server that does not pace the stream). When the
  process dies, the server uncharges everything the session held within
  the ttl.
- charge(path, n) first consumes pages the calling thread's stock slot holds
  for (path, kind) -- no RPC, the kernel's consume_stock(); on a miss it
  charges max(n, batch) pages on the session (the kernel's try_charge with
  MEMCG_CHARGE_BATCH) and keeps the surplus in the slot. The batch adapts to
  the rate of misses (doubling up to stock_cap when the slot misses the same
  group again within 0.1 s, halving back towards `batch` after 1 s).
- uncharge(path, n) refills the slot; once the slot's entry passes
  stock_cap it returns all of it to the server in one RPC (the kernel's
  refill_stock(), which drains a stock past MEMCG_CHARGE_BATCH entirely).
- The server's drain requests (drain_all_stock() over the network: a charge
  at some group's memory.max) are answered by giving up every slot's stock
  for groups at or below drain_path.
- Every RPC carries a deadline and a request_id; UNAVAILABLE,
  DEADLINE_EXCEEDED and ABORTED are retried with the same id (so a retried
  charge is applied once). A broken SessionStream is re-attached; if the
  session is gone (its lease expired), a new one is opened and what the
  application holds is charged again on it.

Units: pages (the server's page_size, 4096 bytes by default) for every
nr_pages, stock and batch; milliseconds for ttl_ms; seconds for deadline;
microseconds for throttle_us. Thread-safety: every public method of Client
may be called from any thread.
"""
import collections
import logging
import os
import queue
import random
import socket
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Union

import grpc

from cgacct.groups import GroupsMixin
from cgacct.v1 import accounting_pb2 as pb
from cgacct.v1 import accounting_pb2_grpc as pb_grpc

_log = logging.getLogger("cgacct")

ANON = pb.PAGE_KIND_ANON
FILE = pb.PAGE_KIND_FILE
# Pages charged from the server on a stock miss: the kernel's
# MEMCG_CHARGE_BATCH.
DEFAULT_BATCH = 64
_KINDS = {ANON: ANON, FILE: FILE, "anon": ANON, "file": FILE}
# CANCELLED: a node shutting down (SIGTERM) cancels the calls still in
# flight, and this library never cancels its own unary calls: retried like
# UNAVAILABLE (the same request_id: applied once). A fresh user's SIGTERM
# failovers raised it from ClusterClient.charge in 4 of 14 rounds.
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED)
_U64_MAX = (1 << 64) - 1
# A re-charge after a lost session that fails with one of these was refused
# because this node does not serve the group now (in a cluster: its shard
# moved, or the node has no lease), not because the group is full or gone.
_NOT_HERE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
             grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.CANCELLED)
# How often the session thread tries to charge deferred pages again.
_DEFERRED_RETRY_S = 0.2
# Client._silent(): a session stream broken for longer than this, or silent
# this much past a keepalive period, makes ClusterClient's watch read the map.
_DETACHED_S = 0.25
_SILENCE_MARGIN_S = 0.5
# Adaptive batch: a miss sooner than _FAST_MISS_S after the previous miss of
# the same slot and group doubles its batch (up to stock_cap); one later than
# _SLOW_MISS_S halves it (down to batch).
_FAST_MISS_S = 0.1
# How long a drain waits for Charge answers still in flight to the stock
# (SessionServerMessage.charges_applied): a round trip at most, well inside
# the server's --session_drain_timeout_ms (20 ms by default).
_REFILL_WAIT_S = 0.005
_SLOW_MISS_S = 1.0
# Channel defaults, so that the channel is back within a lease after an
# outage: the reconnect backoff 100 ms after the first failed connection,
# growing to at most 1 s (gRPC's default grows to 120 s);
# grpc.min_reconnect_backoff_ms is also the least time gRPC gives a
# connection attempt (20 s by default): 1 s, so that a slow handshake on a
# loaded machine still completes; and re-resolving the target at most every
# 0.5 s: after a failed connection gRPC 1.51 waits for a new resolution of
# "host:port", which its DNS resolver otherwise allows only every 30 s (the
# session was measured re-opened ~10 s after the server was reachable again
# in pyclient_test without this, 0.2 s with it).
_CHANNEL_DEFAULTS = (("grpc.initial_reconnect_backoff_ms", 100),
                     ("grpc.min_reconnect_backoff_ms", 1000),
                     ("grpc.max_reconnect_backoff_ms", 1000),
                     ("grpc.dns_min_time_between_resolutions_ms", 500))

class ChargeResult(NamedTuple):
    """What charge() did.

    nr_pages: pages charged (the n asked for).
    from_stock: True when the calling thread's stock slot served it (no RPC).
    throttle_us: microseconds the caller still has to hold this group's
      writers back for memory.high: the server's ChargeResponse.throttle_us
      with throttle="return", 0 with throttle="sleep" (charge() slept it).
    """
    nr_pages: int
    from_stock: bool
    throttle_us: int


class Holding(NamedTuple):
    """Pages a session holds of one group and kind (SessionInfo.holdings)."""
    path: str
    kind: int  # ANON or FILE
    nr_pages: int


class SessionInfo(NamedTuple):
    """The server's view of a session (get_session(); GetSession).

    held_pages = what the application holds through the Client plus its
    stock; expires_in_ms until the lease ends without another keepalive.
    """
    session_id: bytes
    client_name: str
    ttl_ms: int
    expires_in_ms: int
    attached: bool
    held_pages: int
    max_held_pages: int
    holdings: List[Holding]


class Event(NamedTuple):
    type: str
    session_id: bytes
    group: bytes
    nr_pages: int
    code: Optional[grpc.StatusCode]
    details: str


Event.__doc__ = """Something the client did on its own, given to on_event.

type: "session_reopened" (the session was gone: a new one, session_id, was
  opened), "recharge_failed" (after that, charging again nr_pages pages the
  application holds of group failed with code/details: the server no
  longer counts them), "recharge_deferred" (the same, refused because the
  node does not serve the group now: UNAVAILABLE, DEADLINE_EXCEEDED or
  FAILED_PRECONDITION, or because the new session was gone already; the
  pages stay the application's, and the session thread charges them again
  at this node as resumes once it serves the group, or ClusterClient at the
  shard's new owner), "recharged_deferred" (nr_pages such pages of group
  charged again at this node), "drained" (a drain request answered: nr_pages
  stocked pages of groups at or below group returned), "stream_broken"
  (the SessionStream ended with code and is being re-attached).
session_id, group: bytes; nr_pages: pages; code: a grpc.StatusCode or None.
As the C++ library's cgacct::client::Event.
"""


class Error(grpc.RpcError):
    """A failed call: code() is a grpc.StatusCode, details() the server's
    message (it names the offending field, e.g. "path: ..."), or the
    client's own for input it refuses before sending (INVALID_ARGUMENT /
    FAILED_PRECONDITION, naming the argument). Catchable as grpc.RpcError."""

    def __init__(self, code, details):
        super().__init__("%s: %s" % (code.name, details))
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class _SessionLost(Exception):
    """Internal: the session named in a call no longer exists on the server."""


class _Slot:
    """One per-thread stock slot, the kernel's memcg_stock_pcp.

    stock maps (path bytes, kind) -> stocked pages, held by the session but
    not by the application; batch and last_miss drive the adaptive batch.
    All three are protected by `lock`, taken by the owning thread and by the
    drain, resume and close paths (never across an RPC)."""
    __slots__ = ("lock", "stock", "batch", "last_miss", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()
        self.stock = {}
        self.batch = {}
        self.last_miss = {}


class _SlotToken:
    """Lives in the owning thread's threading.local: when the thread ends,
    its finalizer hands the slot (and the stock in it) to the next thread."""
    __slots__ = ("__weakref__",)


def _release_slot(client_ref, slot):
    client = client_ref()
    if client is not None:
        with client._slots_mu:
            client._free_slots.append(slot)


class _Gate:
    """Shared/exclusive gate: operations that talk to the server under the
    current session enter shared; re-opening a lost session enters exclusive
    (it waits for those in flight, each bounded by its deadlines)."""

    def __init__(self):
        self._cv = threading.Condition(threading.Lock())
        self._shared = 0  # guarded by _cv
        self._exclusive = False  # guarded by _cv

    def enter_shared(self):
        with self._cv:
            while self._exclusive:
                self._cv.wait()
            self._shared += 1

    def leave_shared(self):
        with self._cv:
            self._shared -= 1
            if self._shared == 0:
                self._cv.notify_all()

    def enter_exclusive(self):
        with self._cv:
            while self._exclusive:
                self._cv.wait()
            self._exclusive = True
            while self._shared:
                self._cv.wait()

    def leave_exclusive(self):
        with self._cv:
            self._exclusive = False
            self._cv.notify_all()


def _wire_path(path):
    if isinstance(path, str):
        return path.encode("utf-8")
    if isinstance(path, (bytes, bytearray)):
        return bytes(path)
    raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                "path: must be str or bytes, got %s" % type(path).__name__)


def _check_pages(n):
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _U64_MAX:
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    "nr_pages: must be an integer from 1 to 2^64-1 pages, got %r" % (n,))


def _check_kind(kind):
    try:
        return _KINDS[kind]
    except (KeyError, TypeError):
        raise Error(grpc.StatusCode.INVALID_ARGUMENT,
                    "kind: must be cgacct.ANON, cgacct.FILE, 'anon' or 'file', got %r"
                    % (kind,)) from None


def _under(path, root):
    """Whether group `path` is `root` or below it (bytes, canonical paths)."""
    return root == b"/" or path == root or path.startswith(root + b"/")


class Client(GroupsMixin):
    """A session on cgacctd with a per-thread stock of pre-charged pages,
    and the rest of the API: create_group, delete_group, set_limits,
    list_groups, group_stats, reclaim, watch_events (cgacct.groups).

    Client(target, ttl_ms=10000, batch=64, stock_cap=256, stock_groups=7,
           throttle="sleep", deadline=2.0, retries=3, client_name=None,
           credentials=None, metadata=(), interceptors=(), options=(),
           on_event=None)

    The options and their defaults are the C++ library's (cgacct::client::
    Options, names in brackets).
    target: "host:port" of cgacctd's gRPC listener.
    ttl_ms: the session's lease in milliseconds (0: the server's
      --session_default_ttl_ms) [session_ttl]; the server asks for a
      keepalive every granted ttl / 3.
    batch: pages charged from the server on a stock miss when the asked n is
      smaller (MEMCG_CHARGE_BATCH, 64); the floor of the adaptive batch
      [batch_pages]. 0: no batching and no stock (every charge and
      uncharge is an RPC of exactly n).
    stock_cap: most pages one slot keeps for one (group, kind) (an uncharge
      past it returns the whole entry), and the ceiling of the adaptive
      batch (default 256, at least batch) [max_batch_pages].
    stock_groups: (group, kind) pairs one slot stocks at once (the kernel's
      NR_MEMCG_STOCK, 7); stocking another returns the least recently used
      one's pages [stock_groups]. So a group can be over its applications'
      use by at most
      threads x stock_cap pages per client (clients x threads x stock_cap
      in all), until a drain takes them back.
    throttle: "sleep" (charge() sleeps the server's throttle_us, at most
      2 s) or "return" (charge() returns it in ChargeResult.throttle_us for
      the caller) [throttle].
    deadline: seconds per RPC attempt [call_timeout].
    retries: further attempts of a call that failed UNAVAILABLE,
      DEADLINE_EXCEEDED or ABORTED (same request_id: applied once)
      [max_attempts - 1]; so no call blocks longer than about
      (retries + 1) x deadline plus backoff (at most 1 s between attempts).
    client_name: shown by GetSession (default "host:pid").
    credentials: grpc.ChannelCredentials for a TLS channel (None: plaintext).
    metadata: (key, value) pairs sent with every call (e.g. the
      ("authorization", "Bearer TOKEN") of --tokens_file).
    interceptors: grpc client interceptors wrapped around the channel.
    options: gRPC channel options, over the client's defaults (reconnect
      backoff 100 ms to 1 s, re-resolution at most every 0.5 s: so that the
      channel is back within a lease after an outage).
    on_event: optional callable(Event) told what the client did on its own
      (session_reopened, recharge_failed, drained, stream_broken), from the
      session thread or a calling thread; keep it short, do not close() in
      it, and do not call a ClusterClient from it (its watch may be waiting
      for this Client's calls while holding the ClusterClient's lock)
      [on_event].

    The constructor opens the session (raises Error if it cannot) and waits
    up to `deadline` for its SessionStream to be attached (drain requests
    reach the client only then). Use as a context manager, or call close();
    a Client never closed keeps its session (and its thread) until the
    process exits, then the server returns its pages when the lease runs
    out. Thread-safe. Bad options raise ValueError naming the option.
    """

    def __init__(self, target: str, ttl_ms: int = 10000,
                 batch: int = DEFAULT_BATCH, stock_cap: Optional[int] = None,
                 stock_groups: int = 7, throttle: str = "sleep", deadline: float = 2.0,
                 retries: int = 3, client_name: Optional[str] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 metadata: Sequence[Any] = (), interceptors: Sequence[Any] = (),
                 options: Sequence[Any] = (),
                 on_event: Optional[Callable[["Event"], None]] = None) -> None:
        if not isinstance(target, str) or not target:
            raise ValueError("target: must be \"host:port\", got %r" % (target,))
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
            raise ValueError("batch: must be an integer >= 0 pages, got %r" % (batch,))
        if stock_cap is None:
            stock_cap = max(4 * DEFAULT_BATCH, batch)
        if isinstance(stock_cap, bool) or not isinstance(stock_cap, int) or stock_cap < batch:
            raise ValueError("stock_cap: must be an integer >= batch (%d) pages, got %r"
                             % (batch, stock_cap))
        if on_event is not None and not callable(on_event):
            raise ValueError("on_event: must be callable, got %r" % (on_event,))
        if batch == 0:
            stock_cap = 0  # no batching: no stock either, as the C++ library
        if isinstance(stock_groups, bool) or not isinstance(stock_groups, int) \
                or stock_groups < 1:
            raise ValueError("stock_groups: must be an integer >= 1, got %r" % (stock_groups,))
        if throttle not in ("sleep", "return"):
            raise ValueError("throttle: must be 'sleep' or 'return', got %r" % (throttle,))
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 0 <= ttl_ms < 1 << 32:
            raise ValueError("ttl_ms: must be an integer from 0 to 2^32-1 milliseconds, got %r"
                             % (ttl_ms,))
        if not deadline > 0:
            raise ValueError("deadline: must be > 0 seconds, got %r" % (deadline,))
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError("retries: must be an integer >= 0, got %r" % (retries,))
        self._batch = batch
        self._stock_cap = stock_cap
        # Set when a drain took the stock, cleared by the next charge that
        # refills it or once the first free after it, sent back marked
        # restock, was applied; meanwhile uncharge() returns frees to the
        # server (the server takes a short drain answer as an empty stock).
        self._stock_held_off = False
        # Makes a drain's (held off, epoch + 1) one step for the paths that
        # clear the flag when the epoch has not moved (a refill, a restock).
        self._held_off_mu = threading.Lock()
        # Drain answers given so far: a refill whose Charge overlapped one
        # returns its extra pages instead of stocking them (see charge()).
        self._drain_epoch = 0
        self._stock_groups = stock_groups
        self._on_event = on_event
        self._throttle = throttle
        self._deadline = float(deadline)
        self._retries = retries
        self._metadata = tuple(metadata or ())
        self._ttl_ms_asked = ttl_ms
        self._client_name = (client_name if client_name is not None
                             else "%s:%d" % (socket.gethostname(), os.getpid()))
        # _CHANNEL_DEFAULTS, then the caller's options over them.
        channel_options = dict(_CHANNEL_DEFAULTS)
        channel_options.update(dict(options))
        channel_options = list(channel_options.items())
        if credentials is None:
            channel = grpc.insecure_channel(target, options=channel_options)
        else:
            channel = grpc.secure_channel(target, credentials, options=channel_options)
        self._raw_channel = channel
        if interceptors:
            channel = grpc.intercept_channel(channel, *interceptors)
        self._stub = pb_grpc.AccountingStub(channel)

        self._rid_prefix = os.urandom(8).hex()
        self._rid_lock = threading.Lock()
        self._rid_next = 0  # guarded by _rid_lock

        # Session state. _session_id, _gen, _ttl_ms and _max_held are
        # guarded by _mu and change only under the gate's exclusive side
        # (or in the constructor).
        self._mu = threading.Lock()
        self._gate = _Gate()
        self._session_id = b""
        self._gen = 0
        self._ttl_ms = 0
        self._max_held = 0
        # Set under _mu; read without it on the fast path (a stale False
        # lets a call race with close(), which then fails on the closed
        # session instead of here).
        self._closed = False

        # What the application holds (charged, not uncharged), by (path,
        # kind): re-charged on a new session if the old one is lost.
        # _unaccounted: pages of `held` a re-charge could not get back (so no
        # session holds them); an uncharge drops them first. Both guarded by
        # _held_mu, taken inside a slot lock, never around one.
        # _deferred: pages of `held` whose re-charge this client's node
        # refused because it did not serve the group then (kept, not
        # given up: the session thread charges them again there,
        # _recharge_deferred, and ClusterClient moves them to a new owner);
        # an uncharge drops them first too.
        self._held_mu = threading.Lock()
        self._held = collections.Counter()
        self._unaccounted = collections.Counter()
        self._deferred = collections.Counter()
        self._next_deferred_try = 0.0
        # Successful Charge answers read (their batches stocked) in session
        # generation _seen_gen; see _wait_for_refills.
        self._seen_cv = threading.Condition(threading.Lock())
        self._seen_gen = 0
        self._charges_seen = 0
        self._returns_in_flight = 0  # _return_pages calls under way

        # Slots: every slot ever made (drain, resume and close walk them) and
        # those whose thread ended (reused). Guarded by _slots_mu.
        self._slots_mu = threading.Lock()
        self._slots = []
        self._free_slots = []
        self._local = threading.local()

        # Counters for stats(); guarded by _stats_mu.
        self._stats_mu = threading.Lock()
        self._stats = collections.Counter()

        self._stop = threading.Event()
        # The current SessionStream call and its request queue: guarded by
        # _mu, set by the session thread.
        self._stream_call = None
        self._stream_q = None
        # When the server last answered on the stream (monotonic seconds):
        # written by the session thread and _open_session, read by the
        # request iterator (a float store, atomic under the GIL). Reset at
        # each attach too (the stalled-stream timer of that stream).
        self._last_answer = time.monotonic()
        # When the server last said anything at all, or a session was
        # opened: not reset by attaching (ClusterClient's watch reads it,
        # _suspect()). Written and read as _last_answer.
        self._last_heard = self._last_answer
        # Since when the session stream has been broken (monotonic seconds),
        # None while it is attached and answering: set by the session thread
        # when a stream ends, cleared by the next message (read by _silent()).
        self._detached_since = None

        try:
            self._open_session()
        except BaseException:
            self._raw_channel.close()
            raise
        # Set when the server first answers on a SessionStream: until then
        # the session gets no drain requests, so the constructor waits for
        # it (at most `deadline`; the session thread keeps trying after).
        self._attached = threading.Event()
        self._reader = threading.Thread(target=self._stream_loop,
                                        name="cgacct-session", daemon=True)
        self._reader.start()
        self._attached.wait(self._deadline)

    # --- public -----------------------------------------------------------

    @property
    def session_id(self) -> bytes:
        """The current session's id (bytes); changes if the session was lost
        and re-opened."""
        with self._mu:
            return self._session_id

    @property
    def ttl_ms(self) -> int:
        """The lease the server granted, milliseconds."""
        with self._mu:
            return self._ttl_ms

    def charge(self, path: Union[str, bytes], nr_pages: int,
               kind: Union[int, str] = ANON) -> ChargeResult:
        """Charge nr_pages pages of `kind` (ANON, FILE) to group `path`.

        Served from the calling thread's stock slot when it holds nr_pages
        for (path, kind) (no RPC); otherwise charges max(nr_pages, batch)
        pages on the session and stocks the surplus. Returns a ChargeResult.
        Raises Error: RESOURCE_EXHAUSTED when the group is at memory.max even
        after the server drained every client's stock and reclaimed (the
        kernel's OOM), INVALID_ARGUMENT / NOT_FOUND / PERMISSION_DENIED as
        the server answers them (naming the field), UNAVAILABLE /
        DEADLINE_EXCEEDED after the retries. Nothing is charged on error,
        except that a charge whose every answer was lost (UNAVAILABLE /
        DEADLINE_EXCEEDED after the last retry) may have been applied: the
        session then holds those pages until close() or its expiry, which
        return them.
        """
        key = (_wire_path(path), _check_kind(kind))
        _check_pages(nr_pages)
        self._check_open()
        slot = self._slot()
        with slot.lock:
            have = slot.stock.get(key, 0)
            if have >= nr_pages:
                del slot.stock[key]  # re-inserted last: least recently used first
                self._set_stock(slot, key, have - nr_pages)
                with self._held_mu:
                    self._held[key] += nr_pages
                hit = True
            else:
                hit = False
        if hit:
            self._count("charges")
            self._count("stock_hits")
            return ChargeResult(nr_pages, True, 0)
        while True:
            self._check_open()
            self._gate.enter_shared()
            lost_gen = None
            done = False
            try:
                session_id, gen = self._current()
                now = time.monotonic()
                with slot.lock:
                    want = max(nr_pages, self._next_batch(slot, key, now))
                # One RPC: the server charges the batch if it fits at once,
                # else exactly nr_pages through reclaim and the drains (as
                # try_charge_memcg() drops its batch before reclaiming), so
                # a group at its max costs one drain wait, not two.
                epoch = self._drain_epoch
                resp = self._charge_rpc(session_id, key, nr_pages, want)
                charged = min(max(resp.nr_pages, nr_pages), want)
                with slot.lock:
                    if charged < want:
                        slot.batch[key] = self._batch  # the batch did not fit
                    with self._held_mu:
                        self._held[key] += nr_pages
                    with self._held_off_mu:
                        if charged > nr_pages and self._drain_epoch != epoch:
                            # A drain answered while this charge was on the
                            # network: the server may read that answer as
                            # an empty stock, so the extra pages go back.
                            returns = [(key, charged - nr_pages)]
                        else:
                            if charged > nr_pages:
                                self._stock_held_off = False
                            returns = self._refill(slot, key, charged - nr_pages)
                done = True
                self._saw_charge(gen)
                lost_gen, _ = self._return_pages(session_id, gen, slot, returns)
            except _SessionLost:
                lost_gen = gen
            finally:
                self._gate.leave_shared()
            if lost_gen is not None:
                # If the charge itself succeeded, a failed resume is left
                # to the session thread.
                self._resume_after_loss(lost_gen, must_succeed=not done)
            if done:
                break
        self._count("charges")
        throttle_us = resp.throttle_us
        if throttle_us and self._throttle == "sleep":
            self._count("throttled_us", throttle_us)
            time.sleep(throttle_us / 1e6)
            throttle_us = 0
        return ChargeResult(nr_pages, False, throttle_us)

    def uncharge(self, path: Union[str, bytes], nr_pages: int,
                 kind: Union[int, str] = ANON) -> int:
        """Uncharge nr_pages pages of `kind` from group `path` that this
        client charged. Refills the calling thread's stock slot; once the
        slot's entry passes stock_cap, uncharges all of it on the server
        (the kernel's refill_stock()/drain_stock()), and the pages of the
        slot's least recently used group when it already stocks
        stock_groups others; after a server drain took the stock, and
        until a charge refills it, uncharges them all on the server (the
        server takes a drain answer with less than asked as an empty
        stock).
        Returns the pages this call returned to the server (0 when the stock
        took them all). Raises Error: FAILED_PRECONDITION (naming nr_pages)
        when the application holds fewer than nr_pages of (path, kind)
        through this client (unlike the C++ library, which leaves that to
        the server), INVALID_ARGUMENT for bad arguments; nothing changes
        then. If the server cannot take the returned pages back (after the
        retries), they are dropped, not stocked (counted in
        return_failed_pages; the session holds them until it closes, if the
        server still counts them) and the uncharge still succeeds: the
        application no longer holds them either way."""
        key = (_wire_path(path), _check_kind(kind))
        _check_pages(nr_pages)
        self._check_open()
        slot = self._slot()
        self._gate.enter_shared()
        lost_gen = None
        try:
            session_id, gen = self._current()
            with slot.lock:
                with self._held_mu:
                    held = self._held[key]
                    if held < nr_pages:
                        raise Error(grpc.StatusCode.FAILED_PRECONDITION,
                                    "nr_pages: uncharging %d pages of %s but this client "
                                    "holds %d" % (nr_pages, key[0].decode("utf-8", "replace"),
                                                  held))
                    self._held[key] -= nr_pages
                    if not self._held[key]:
                        del self._held[key]
                    lost = min(nr_pages, self._unaccounted[key])
                    if lost:
                        self._unaccounted[key] -= lost
                        if not self._unaccounted[key]:
                            del self._unaccounted[key]
                    # Pages no session holds here yet (deferred): freed
                    # without an RPC, never stocked (the server does not
                    # count them, and a charge served from them would be
                    # admitted nowhere).
                    waiting = min(nr_pages - lost, self._deferred[key])
                    if waiting:
                        self._deferred[key] -= waiting
                        if not self._deferred[key]:
                            del self._deferred[key]
                        lost += waiting
                restock = self._stock_held_off
                if restock:
                    # A drain took the stock and no charge has refilled it
                    # since: the server takes this client's stock there as
                    # empty and does not wait for its drain answers, so
                    # this free goes back to the server, marked restock:
                    # once the server has applied it (it waits for this
                    # session's answers again, as after a refill) the frees
                    # after it are stocked again, unless a drain answered
                    # meanwhile. Without it a shrinking application whose
                    # stock a drain took at its max sent every free after
                    # it (issue 26, item 10).
                    epoch = self._drain_epoch
                    returns = [(key, nr_pages - lost)] if nr_pages > lost else []
                else:
                    returns = self._refill(slot, key, nr_pages - lost)
            lost_gen, returned = self._return_pages(session_id, gen, slot, returns,
                                                    restock=restock)
            if restock and returns and lost_gen is None and returned == returns[0][1]:
                with self._held_off_mu:
                    if self._drain_epoch == epoch:
                        self._stock_held_off = False
        finally:
            self._gate.leave_shared()
        if lost_gen is not None:
            self._resume_after_loss(lost_gen, must_succeed=False)
        return returned

    def drain(self) -> int:
        """Return every stocked page of every slot to the server (the
        kernel's drain_all_stock() on the client's own initiative, e.g.
        before a long idle period). Returns the pages returned."""
        self._check_open()
        slot = self._slot()
        self._gate.enter_shared()
        try:
            session_id, gen = self._current()
            returns = sorted(self._take_stock(b"/", gen).items())
            lost_gen, returned = self._return_pages(session_id, gen, slot, returns)
        finally:
            self._gate.leave_shared()
        if lost_gen is not None:
            self._resume_after_loss(lost_gen, must_succeed=True)
        return returned

    def held(self, path: Union[str, bytes], kind: Union[int, str] = ANON) -> int:
        """Pages of (path, kind) the application holds through this client
        (charged, not uncharged; the stock not included)."""
        key = (_wire_path(path), _check_kind(kind))
        with self._held_mu:
            return self._held[key]

    def stocked(self, path: Optional[Union[str, bytes]] = None,
                kind: Union[int, str] = ANON) -> int:
        """Pages stocked in all slots for (path, kind), or for every group
        and kind when path is None."""
        key = None if path is None else (_wire_path(path), _check_kind(kind))
        total = 0
        for slot in self._all_slots():
            with slot.lock:
                if key is None:
                    total += sum(slot.stock.values())
                else:
                    total += slot.stock.get(key, 0)
        return total

    def stats(self) -> Dict[str, int]:
        """Counters since the constructor, a dict (a counter never seen is
        absent): charges (charge() calls that succeeded), stock_hits (of
        which served by the stock), charge_rpcs, uncharge_rpcs (RPCs, retry
        attempts not included), retries (attempts after the first, all
        RPCs), keepalives sent, drains answered, drained_pages (stocked
        pages they returned), reopened_sessions, reattached_streams,
        recharge_failed_pages, resume_deferred_pages, recharged_deferred_pages,
        throttled_us
        (slept). As the C++ library's ClientStats."""
        with self._stats_mu:
            return dict(self._stats)

    def get_session(self) -> SessionInfo:
        """The server's view of this session (GetSession): a SessionInfo
        (held_pages = application holdings + stock), holdings sorted by path,
        then kind. Raises Error."""
        info = self._call(self._stub.GetSession,
                          pb.GetSessionRequest(session_id=self.session_id))
        return SessionInfo(
            session_id=info.session_id,
            client_name=info.client_name.decode("utf-8", "replace"),
            ttl_ms=info.ttl_ms, expires_in_ms=info.expires_in_ms,
            attached=info.attached, held_pages=info.held_pages,
            max_held_pages=info.max_held_pages,
            holdings=[Holding(h.path.decode("utf-8", "replace"), h.kind, h.nr_pages)
                      for h in info.holdings])

    def close(self) -> int:
        """Close the session: the server uncharges everything it holds (the
        application's pages and the stock). Idempotent. Returns the pages the
        server returned. If the server cannot be reached, raises Error after
        stopping the client; the server returns the pages when the lease
        expires (within ttl_ms)."""
        with self._mu:
            if self._closed:
                return 0
            self._closed = True
        self._stop.set()  # the session thread stops re-attaching and resuming
        self._gate.enter_exclusive()
        try:
            session_id, _ = self._current()
            for slot in self._all_slots():
                with slot.lock:
                    slot.stock.clear()
            with self._held_mu:
                self._held.clear()
                self._unaccounted.clear()
                self._deferred.clear()
            error = None
            returned = 0
            try:
                returned = self._call(self._stub.CloseSession,
                                      pb.CloseSessionRequest(session_id=session_id)).returned_pages
            except Error as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    error = e
        finally:
            self._gate.leave_exclusive()
            with self._mu:
                call, q = self._stream_call, self._stream_q
            if q is not None:
                q.put(None)
            if call is not None:
                call.cancel()
            self._reader.join(timeout=self._deadline)
            self._raw_channel.close()
        if error is not None:
            raise error
        return returned

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except Error:
            if exc_type is None:
                raise
        return False

    # --- slots ------------------------------------------------------------

    def _slot(self):
        slot = getattr(self._local, "slot", None)
        if slot is None:
            with self._slots_mu:
                if self._free_slots:
                    slot = self._free_slots.pop()
                else:
                    slot = _Slot()
                    self._slots.append(slot)
            token = _SlotToken()
            weakref.finalize(token, _release_slot, weakref.ref(self), slot)
            self._local.slot = slot
            self._local.token = token
        return slot

    def _all_slots(self):
        with self._slots_mu:
            return list(self._slots)

    @staticmethod
    def _set_stock(slot, key, n):
        # Caller holds slot.lock.
        if n:
            slot.stock[key] = n
        else:
            slot.stock.pop(key, None)

    def _refill(self, slot, key, pages):
        """refill_stock(): adds `pages` of key to the slot; once that passes
        stock_cap, the slot's whole entry goes back (drain_stock(): the
        kernel drains a stock that passes MEMCG_CHARGE_BATCH entirely, so
        the frees after it accumulate again instead of each returning its
        own pages). Stocking a (group, kind) the slot lacks when it already
        stocks stock_groups of them evicts the least recently used (as the
        kernel's stock drains the memcg it replaces). Returns [(key, pages)]
        to return to the server. Caller holds slot.lock."""
        cur = slot.stock.pop(key, 0)  # re-inserted last: most recently used
        total = cur + pages
        if total > self._stock_cap:
            return [(key, total)] if total else []
        out = []
        if total:
            if not cur and len(slot.stock) >= self._stock_groups:
                lru = next(iter(slot.stock))
                out.append((lru, slot.stock.pop(lru)))
            slot.stock[key] = total
        return out

    def _return_pages(self, session_id, gen, slot, returns, restock=False):
        """Uncharges `returns` ([(key, pages)]) on the session. Never raises:
        pages it cannot return are dropped (counted in return_failed_pages;
        the session holds them on the server, if it still does, until it
        closes), never stocked again. Returns (lost_gen, pages returned):
        lost_gen is `gen` if the session turned out to be gone (the caller
        resumes; its pages went with it), else None. Caller is inside the
        gate (shared). restock: each goes back with UnchargeRequest.restock."""
        if not returns:
            return None, 0
        with self._seen_cv:
            self._returns_in_flight += 1
        try:
            return self._return_pages_counted(session_id, gen, slot, returns,
                                              restock)
        finally:
            with self._seen_cv:
                self._returns_in_flight -= 1
                self._seen_cv.notify_all()

    def _return_pages_counted(self, session_id, gen, slot, returns, restock):
        returned = 0
        for i, (key, n) in enumerate(returns):
            try:
                self._uncharge_rpc(session_id, key, n, restock)
            except _SessionLost:
                return gen, returned  # everything the session held is gone already
            except Error:
                # Not back into the stock: a later charge would consume
                # pages nobody may count any more (in a cluster, a node that
                # lost the shard ended the session that held them: charges
                # served from them were admitted nowhere, 1.10x the max in
                # ClusterTest's black-holed link). Dropped: if the server
                # still counts them, the session does until it closes.
                self._count("return_failed_pages", sum(m for _, m in returns[i:]))
                return None, returned
            returned += n
        return None, returned

    def _next_batch(self, slot, key, now):
        # Caller holds slot.lock.
        b = slot.batch.get(key, self._batch)
        last = slot.last_miss.get(key)
        if last is not None:
            if now - last < _FAST_MISS_S:
                b = min(2 * b, self._stock_cap)
            elif now - last > _SLOW_MISS_S:
                b = max(b // 2, self._batch)
        slot.batch[key] = b
        slot.last_miss[key] = now
        return b

    def _saw_charge(self, gen):
        """A successful Charge answer of session generation gen was read
        and its batch stocked."""
        with self._seen_cv:
            if gen != self._seen_gen:
                self._seen_gen, self._charges_seen = gen, 0
            self._charges_seen += 1
            self._seen_cv.notify_all()

    def _wait_for_refills(self, gen, applied):
        """Before a drain takes the stock: waits, at most _REFILL_WAIT_S,
        until this client has read the `applied` successful Charge answers
        the server had sent in session generation gen, so the batches they
        carry are in the stock and go back with the drain, and until no
        _return_pages is under way (its pages reach the server first; the kernel's
        drain work cannot run between a CPU's charge and its refill_stock();
        a client's answer is on the network between the two). An answer
        that never comes counts as read once the wait ends."""
        with self._seen_cv:
            self._seen_cv.wait_for(
                lambda: (self._seen_gen == gen and self._charges_seen >= applied
                         and self._returns_in_flight == 0),
                timeout=_REFILL_WAIT_S)
            if self._seen_gen != gen:
                self._seen_gen, self._charges_seen = gen, 0
            self._charges_seen = max(self._charges_seen, applied)

    # --- cluster mode (cgacct.cluster.ClusterClient) ----------------------

    def _adopt(self, key, nr_pages):
        """Charges nr_pages of key (path, kind) on this client's session as
        a resume (ChargeRequest.resume: a cluster node admits it in its
        takeover grace) and counts them as the application's: pages the
        application holds that were charged at the shard's previous owner.
        Raises Error as charge() does; nothing counted then."""
        self._check_open()
        self._gate.enter_shared()
        lost_gen = None
        try:
            session_id, gen = self._current()
            try:
                self._charge_rpc(session_id, key, nr_pages, resume=True)
            except _SessionLost:
                lost_gen = gen
            else:
                with self._held_mu:
                    self._held[key] += nr_pages
                self._saw_charge(gen)
        finally:
            self._gate.leave_shared()
        if lost_gen is not None:
            self._resume_after_loss(lost_gen, must_succeed=True)
            self._adopt(key, nr_pages)

    def _silent(self):
        """Whether this client's node has gone quiet, for ClusterClient's
        watch: its session stream broken for more than _DETACHED_S (a node
        dead, stopping, or that ended the session and will not open
        another), or silent for longer than a keepalive period plus
        _SILENCE_MARGIN_S (a node stopped or cut off: it asks for a
        keepalive every ttl / 3). A wrong guess costs one map read. Never
        blocks on the network."""
        with self._mu:
            period = max(self._ttl_ms, 3) / 3000.0
            closed = self._closed
        if closed:
            return False
        now = time.monotonic()
        detached = self._detached_since
        return (detached is not None and now - detached > _DETACHED_S) or \
            now - self._last_heard > period + min(self._deadline, _SILENCE_MARGIN_S)

    def _suspect(self):
        """Whether this client's node may no longer serve what it holds (for
        ClusterClient's watch): _silent(), or pages wait deferred (the node
        refused their re-charge as not served there). Never blocks on the
        network."""
        if self._silent():
            return True
        with self._mu:
            if self._closed:
                return False
        with self._held_mu:
            return any(n > 0 for n in self._deferred.values())

    def _forget(self, root, wait=True):
        """Drops what this client holds and stocks at or below `root`
        without returning it: its node no longer owns that shard (the pages
        died with its ownership; the next owner is charged again through
        _adopt). Returns {(path, kind): pages the application held}.
        With `wait`, waits for this client's calls in flight (each bounded
        by its deadlines), as the C++ Forget() does: a charge the old node
        acknowledged after the books were taken would otherwise stay in
        this client, uncounted at the new owner (the application holding
        pages that no node counts). ClusterClient's watch does not wait: it
        moves only from a node that has gone silent (whose calls in flight
        end in their deadlines, unanswered) and that the map no longer
        names (which refuses what it is sent after its fence), and waiting
        cost a move up to a call's attempts (2 s in ClusterTest), past the
        heir's takeover grace."""
        if wait:
            self._gate.enter_exclusive()
        try:
            with self._mu:
                gen = self._gen
            self._take_stock(root, gen)
            with self._held_mu:
                keys = [k for k in self._held if _under(k[0], root)]
                held = {k: self._held.pop(k) - self._unaccounted.pop(k, 0) for k in keys}
                for k in keys:
                    self._deferred.pop(k, None)  # moved with the rest
        finally:
            if wait:
                self._gate.leave_exclusive()
        return {k: n for k, n in held.items() if n > 0}

    def _take_stock(self, root, gen):
        """Empties every slot's stock for groups at or below `root` while
        the session generation is still `gen`; returns {(path, kind): pages}."""
        taken = collections.Counter()
        for slot in self._all_slots():
            with slot.lock:
                if self._gen != gen:
                    break
                for key in [k for k in slot.stock if _under(k[0], root)]:
                    taken[key] += slot.stock.pop(key)
        return taken

    # --- RPCs -------------------------------------------------------------

    def _event(self, type_, session_id, group=b"", nr_pages=0, code=None, details=""):
        if self._on_event is None:
            return
        try:
            self._on_event(Event(type_, session_id, group, nr_pages, code, details))
        except Exception:  # noqa: BLE001 -- the application's callback
            _log.exception("cgacct: on_event callback")

    def _count(self, name, n=1):
        with self._stats_mu:
            self._stats[name] += n

    def _check_open(self):
        if self._closed:
            raise Error(grpc.StatusCode.FAILED_PRECONDITION, "client: closed")

    def _current(self):
        with self._mu:
            return self._session_id, self._gen

    def _request_id(self):
        with self._rid_lock:
            self._rid_next += 1
            return ("%s-%d" % (self._rid_prefix, self._rid_next)).encode()

    _error = Error

    @staticmethod
    def _wire_path(path):
        return _wire_path(path)

    def _once(self, method, request):
        """One unary call, one attempt (a create, delete or reclaim retried
        after an answer was lost would answer differently), as Error."""
        try:
            return method(request, timeout=self._deadline, metadata=self._metadata)
        except grpc.RpcError as e:
            code = e.code() if callable(getattr(e, "code", None)) else None
            if code is None:
                raise
            raise Error(code, e.details() or "") from None

    def _call(self, method, request):
        """One unary call with a deadline per attempt and bounded retries of
        UNAVAILABLE / DEADLINE_EXCEEDED / ABORTED (the request, its
        request_id included, is sent unchanged), pausing 10, 20, 40 ms ...
        (+-50%, at most 1 s) between attempts."""
        delay = 0.01
        for attempt in range(self._retries + 1):
            try:
                return method(request, timeout=self._deadline, metadata=self._metadata)
            except grpc.RpcError as e:
                code = e.code() if callable(getattr(e, "code", None)) else None
                if code in _RETRIED and attempt < self._retries:
                    self._count("retries")
                    time.sleep(delay * (0.5 + random.random()))
                    delay = min(2 * delay, 1.0)
                    continue
                if code is None:
                    raise
                raise Error(code, e.details() or "") from None
        raise AssertionError("unreachable")

    def _session_gone(self, session_id):
        """After a NOT_FOUND naming-or-not the session: whether the session
        itself is gone (GetSession answers NOT_FOUND)."""
        try:
            self._call(self._stub.GetSession, pb.GetSessionRequest(session_id=session_id))
        except Error as e:
            return e.code() == grpc.StatusCode.NOT_FOUND
        return False

    def _page_rpc(self, charge, session_id, key, n, batch=0, resume=False,
                  restock=False):
        """One Charge (charge=True) or Uncharge RPC of n pages of key
        (path, kind) on session_id, with a fresh request_id (retried with
        it). A charge with batch > n asks for the batch (ChargeRequest.
        batch_pages: charged if it fits at once, else n); resume marks a
        re-charge of pages held under a lost session (ChargeRequest.resume:
        a cluster node admits these in its takeover grace); restock marks
        an uncharge after which this client stocks its frees again
        (UnchargeRequest.restock). Raises _SessionLost when the session is
        gone."""
        if charge:
            method, request, counter = self._stub.Charge, pb.ChargeRequest, "charge_rpcs"
        else:
            method, request, counter = self._stub.Uncharge, pb.UnchargeRequest, "uncharge_rpcs"
        req = request(path=key[0], nr_pages=n, kind=key[1],
                      request_id=self._request_id(), session_id=session_id)
        if charge and batch > n:
            req.batch_pages = batch
        if charge and resume:
            req.resume = True
        if not charge and restock:
            req.restock = True
        self._count(counter)
        try:
            return self._call(method, req)
        except Error as e:
            if e.code() == grpc.StatusCode.NOT_FOUND and self._session_gone(session_id):
                raise _SessionLost() from None
            raise

    def _charge_rpc(self, session_id, key, n, batch=0, resume=False):
        return self._page_rpc(True, session_id, key, n, batch, resume)

    def _uncharge_rpc(self, session_id, key, n, restock=False):
        return self._page_rpc(False, session_id, key, n, restock=restock)

    # --- session ----------------------------------------------------------

    def _open_session(self):
        """OpenSession; sets the session fields. Caller holds the gate
        exclusively (or is the constructor)."""
        resp = self._call(self._stub.OpenSession, pb.OpenSessionRequest(
            ttl_ms=self._ttl_ms_asked, client_name=self._client_name.encode("utf-8")))
        with self._mu:
            self._session_id = resp.session_id
            self._gen += 1
            self._ttl_ms = resp.ttl_ms
            self._max_held = resp.max_held_pages
        self._last_answer = self._last_heard = time.monotonic()

    def _resume_after_loss(self, lost_gen, must_succeed):
        """_resume(lost_gen) after a call found its session gone. A failure
        is raised if must_succeed (the call's own work is not done), else
        left to the session thread, which resumes once the server is
        reachable again."""
        try:
            self._resume(lost_gen)
        except Error:
            if must_succeed:
                raise

    def _resume(self, lost_gen):
        """The session of generation lost_gen is gone on the server (its
        lease expired): drop the stock (the server uncharged it), open a new
        session and charge again what the application holds. Pages that
        cannot be charged again (the group is full, or deleted) are counted
        in recharge_failed_pages and dropped by later uncharges; those this
        node refuses because it does not serve the group now, or whose new
        session is gone already, are counted in resume_deferred_pages and
        kept (ClusterClient moves them to the
        shard's new owner)."""
        self._gate.enter_exclusive()
        try:
            with self._mu:
                if self._gen != lost_gen or self._closed:
                    return  # another thread resumed already (or close()d)
            slots = self._all_slots()
            for slot in slots:
                slot.lock.acquire()
            try:
                with self._mu:
                    self._gen += 1  # stock of the old session is void
                for slot in slots:
                    slot.stock.clear()
                with self._held_mu:
                    todo = {k: v - self._unaccounted[k] for k, v in self._held.items()}
                    self._deferred.clear()  # re-charged below with the rest
            finally:
                for slot in slots:
                    slot.lock.release()
            self._open_session()
            self._count("reopened_sessions")
            session_id, _ = self._current()
            self._event("session_reopened", session_id)
            for key, n in sorted(todo.items()):
                if n <= 0:
                    continue
                try:
                    self._charge_rpc(session_id, key, n, resume=True)
                    self._saw_charge(self._current()[1])
                except (Error, _SessionLost) as e:
                    code, details = ((e.code(), e.details()) if isinstance(e, Error)
                                     else (grpc.StatusCode.NOT_FOUND, "session_id: lost again"))
                    if code in _NOT_HERE or (code == grpc.StatusCode.NOT_FOUND and
                                             details.startswith("session_id")):
                        # This node does not serve the group now (in a
                        # cluster: it lost the shard, or has no lease), or
                        # the new session is gone already (seen at a node
                        # resumed after a pause past its fence): the
                        # pages stay the application's, uncounted here, for
                        # the next resume or for ClusterClient to charge
                        # again at the shard's new owner (_forget moves
                        # them). Dropping them would let the new owner
                        # admit fresh charges over them.
                        self._count("resume_deferred_pages", n)
                        with self._held_mu:
                            self._deferred[key] += n
                        self._event("recharge_deferred", session_id, key[0], n, code, details)
                        continue
                    self._count("recharge_failed_pages", n)
                    with self._held_mu:
                        self._unaccounted[key] += n
                    self._event("recharge_failed", session_id, key[0], n, code, details)
        finally:
            self._gate.leave_exclusive()

    def _requests(self, q, box, session_id, period, paced):
        """SessionStream's request iterator (consumed by gRPC's own thread):
        the attach, then keepalives and drain answers as the reader queues
        them; a keepalive every `period` seconds too until the server says
        it paces the stream (`paced` set: it asks for each keepalive). Ends
        when `None` is queued or the client stops. No answer for 2 periods
        plus a deadline cancels its call (box[0]; the reader re-attaches)."""
        yield pb.SessionClientMessage(attach_session_id=session_id)
        next_keepalive = time.monotonic() + period
        while not self._stop.is_set():
            try:
                msg = q.get(timeout=max(0.0, next_keepalive - time.monotonic()))
            except queue.Empty:
                if time.monotonic() - self._last_answer > 2 * period + self._deadline:
                    if box:
                        box[0].cancel()
                    return
                next_keepalive = time.monotonic() + period
                if paced.is_set():
                    continue
                self._count("keepalives")
                yield pb.SessionClientMessage(keepalive=True)
                continue
            if msg is None:
                return
            yield msg

    def _stream_loop(self):
        """The session thread: attach SessionStream, read keepalive answers
        and drain requests; re-attach when the stream breaks; resume when
        the session is gone."""
        delay = 0.05
        while not self._stop.is_set():
            session_id, gen = self._current()
            with self._mu:
                period = max(self._ttl_ms, 3) / 3000.0
            q = queue.Queue()
            box = []
            paced = threading.Event()
            self._last_answer = time.monotonic()
            call = self._stub.SessionStream(self._requests(q, box, session_id, period, paced),
                                            metadata=self._metadata)
            box.append(call)
            with self._mu:
                self._stream_call, self._stream_q = call, q
            if self._stop.is_set():
                call.cancel()
                break
            code, details = None, ""
            try:
                for msg in call:
                    self._last_answer = self._last_heard = time.monotonic()
                    self._detached_since = None
                    self._attached.set()
                    delay = 0.05
                    if msg.paced:
                        paced.set()
                    if msg.keepalive_request:
                        paced.set()
                        self._count("keepalives")
                        q.put(pb.SessionClientMessage(keepalive=True))
                    if msg.drain_id:
                        self._answer_drain(q, msg, gen)
                    if self._deferred and time.monotonic() >= self._next_deferred_try:
                        self._next_deferred_try = time.monotonic() + _DEFERRED_RETRY_S
                        self._recharge_deferred()
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
            except Exception:  # noqa: BLE001 -- keep the session thread alive
                _log.exception("cgacct: session stream")
                call.cancel()
            finally:
                q.put(None)
            if self._detached_since is None:
                self._detached_since = time.monotonic()
            if self._stop.is_set():
                break
            if code == grpc.StatusCode.NOT_FOUND and self._session_gone(session_id):
                try:
                    self._resume(gen)
                    delay = 0.05
                    continue
                except Error:
                    pass  # the server is unreachable: try again after the backoff
            self._count("reattached_streams")
            self._event("stream_broken", session_id, code=code, details=details)
            self._stop.wait(delay * (0.5 + random.random()))
            delay = min(2 * delay, max(0.05, period / 2))

    def _recharge_deferred(self):
        """Charges again, as resumes, the pages a re-charge left deferred
        because this client's node did not serve their group then: in a
        cluster, the node that dropped a shard at its fence (an etcd leader
        change, a quorum lost) serves it again on the same lease, and
        admits resumes before fresh charges for its takeover grace. Without
        this nothing charged them again while the owner stayed the same,
        and fresh charges took their room (1.26-1.30x memory.max in
        ClusterTest's etcd faults). Pages the application freed meanwhile
        go back. Called by the session thread, at most every
        _DEFERRED_RETRY_S; stops at the first refusal (tried again later).
        Never raises."""
        with self._held_mu:
            todo = {k: n for k, n in self._deferred.items() if n > 0}
        if not todo:
            return
        self._gate.enter_shared()
        try:
            session_id, gen = self._current()
            for key, n in sorted(todo.items()):
                try:
                    self._charge_rpc(session_id, key, n, resume=True)
                except (Error, _SessionLost):
                    return  # still refused, or the session went: later
                self._saw_charge(gen)
                with self._held_mu:
                    got = min(n, self._deferred[key])
                    self._deferred[key] -= got
                    if not self._deferred[key]:
                        del self._deferred[key]
                self._count("recharged_deferred_pages", got)
                self._event("recharged_deferred", session_id, key[0], got)
                if n > got:  # freed by the application while on the wire
                    self._return_pages(session_id, gen, None, [(key, n - got)])
        finally:
            self._gate.leave_shared()

    def _answer_drain(self, q, msg, gen):
        root = msg.drain_path
        if msg.charges_applied:
            self._wait_for_refills(gen, msg.charges_applied)
        # Until the next charge that refills the stock, what the
        # application frees goes back to the server (see uncharge()).
        with self._held_off_mu:
            self._stock_held_off = True
            self._drain_epoch += 1
        taken = self._take_stock(root, gen)
        answer = pb.SessionClientMessage(drain_id=msg.drain_id)
        for (path, kind), n in sorted(taken.items()):
            answer.returned.add(path=path, kind=kind, nr_pages=n)
        q.put(answer)
        self._count("drains")
        self._count("drained_pages", sum(taken.values()))
        self._event("drained", self._current()[0], root, sum(taken.values()))
