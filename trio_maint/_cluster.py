"""The Redis Cluster client: :func:`open_redis_cluster` and :class:`RedisCluster`.

Each node gets its own :class:`~trio_maint.Redis` (opened with :func:`~trio_maint.open_redis`,
so its own pool and :class:`~trio_maint.MaintenanceHandler`), all running in the cluster
client's nursery. Commands are routed by slot (:mod:`trio_maint._slots`); ``MOVED``,
``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN`` and lost nodes are handled here. Maintenance: every
node connection opts in as ``open_redis`` does; ``SMIGRATING`` relaxes timeouts per
connection (the handler), ``SMIGRATED`` restores them and triggers one lazy slot-map refresh
per sequence id (this module). See docs/cluster.md.
"""

from __future__ import annotations

import collections
import logging
import random
import weakref
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Final, Self

import attrs
import trio

from ._client import Redis, open_redis, unwrap_group
from ._commands import Callback, CommandsMixin, KeyT, apply_callback
from ._connection import UNSET, Connection
from ._errors import (
    AskError,
    ClusterDownError,
    ConnectionClosedError,
    ConnectionError,
    CrossSlotError,
    ExecAbortError,
    LoadingError,
    MovedError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
    WatchError,
)
from ._notifications import Notification, SMigrated
from ._options import ClientOptions
from ._pubsub import Message, PubSub
from ._resp import CommandArg
from ._slots import (
    NodeInfo,
    SlotMap,
    command_keys,
    keys_slot,
    parse_slot_specs,
)

__all__ = ["ClusterPipeline", "ClusterPubSub", "RedisCluster", "open_redis_cluster"]

logger = logging.getLogger("trio_maint.cluster")

#: Read-only commands that may go to a replica with ``read_from_replicas``.
READ_COMMANDS: Final = frozenset(
    [
        "GET",
        "MGET",
        "EXISTS",
        "STRLEN",
        "GETRANGE",
        "TYPE",
        "TTL",
        "PTTL",
        "HGET",
        "HMGET",
        "HGETALL",
        "HEXISTS",
        "HKEYS",
        "HVALS",
        "HLEN",
        "HSTRLEN",
        "LRANGE",
        "LLEN",
        "LINDEX",
        "LPOS",
        "SMEMBERS",
        "SISMEMBER",
        "SMISMEMBER",
        "SCARD",
        "SRANDMEMBER",
        "SINTER",
        "SUNION",
        "SDIFF",
        "ZSCORE",
        "ZMSCORE",
        "ZCARD",
        "ZCOUNT",
        "ZRANK",
        "ZREVRANK",
        "ZRANGE",
        "ZREVRANGE",
        "ZRANGEBYSCORE",
        "ZREVRANGEBYSCORE",
        "ZLEXCOUNT",
        "XLEN",
        "XRANGE",
        "XREVRANGE",
        "GETBIT",
        "BITCOUNT",
        "BITPOS",
        "PFCOUNT",
        "GEOPOS",
        "GEODIST",
        "GEOHASH",
    ]
)
#: Keyless commands run on every master; their replies are combined.
_ALL_MASTERS: Final = frozenset({"DBSIZE", "FLUSHDB", "FLUSHALL", "KEYS"})
#: Most SMIGRATED sequence ids remembered per client for de-duplication.
SMIGRATED_DEDUP_SIZE: Final = 1024

_KINDS: Final[dict[type[RedisError], str]] = {
    MovedError: "moved",
    AskError: "ask",
    TryAgainError: "tryagain",
    ClusterDownError: "clusterdown",
    ReadOnlyError: "readonly",
    LoadingError: "loading",
}

_BACKOFF_START: Final = 0.01
_BACKOFF_MAX: Final = 0.25


def _name(arg: Any) -> str:
    if isinstance(arg, bytes):
        return arg.decode("ascii", "replace").upper()
    return str(arg).upper()


def _name_of(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"expected 'host:port', got {text!r}")
    return host.strip("[]"), int(port)


def _redirect_target(error: RedisError) -> tuple[int, NodeInfo]:
    """``(slot, node)`` of a ``MOVED slot host:port`` / ``ASK slot host:port`` reply."""
    parts = str(error).split()
    if len(parts) < 3:
        raise error
    host, port = _parse_address(parts[2])
    return int(parts[1]), NodeInfo(_name_of(host, port), host, port)


def _backoff(attempt: int) -> float:
    return float(min(_BACKOFF_MAX, _BACKOFF_START * (2**attempt)))


class _Node:
    """One cluster node: its :class:`Redis` (pool + maintenance handler) once running."""

    __slots__ = ("client", "closing", "error", "info", "readonly", "ready")

    def __init__(self, info: NodeInfo) -> None:
        self.info = info
        self.client: Redis | None = None
        self.error: BaseException | None = None
        self.ready = trio.Event()
        self.closing = trio.Event()
        # Connections of this node that ran READONLY (replica reads).
        self.readonly: weakref.WeakSet[Connection] = weakref.WeakSet()

    @property
    def name(self) -> str:
        return self.info.name


class _SlotMigrationHook:
    """A :class:`~trio_maint.NotificationHook` installed on every node's handler: turns
    ``SMIGRATED`` into a slot-map update and one lazy refresh per sequence id."""

    def __init__(self, cluster: RedisCluster, node: _Node) -> None:
        self._cluster = weakref.ref(cluster)
        self._node = node

    def pre(self, conn: Connection, notification: Notification) -> bool:
        return True

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        cluster = self._cluster()
        if cluster is not None and isinstance(notification, SMigrated):
            cluster.handle_smigrated(self._node.name, conn, notification)

    def __repr__(self) -> str:
        return f"<cluster slot-migration hook {self._node.name}>"


class RedisCluster(CommandsMixin[Awaitable[Any]]):
    """A Redis Cluster client. Get one from :func:`open_redis_cluster`.

    Every command method of :class:`~trio_maint.Redis` is available and routed to the
    master of its key's slot (see docs/cluster.md). Keyless commands go to one master,
    except ``DBSIZE`` (summed), ``KEYS`` (concatenated) and ``FLUSHDB``/``FLUSHALL`` (every
    master). ``scan`` runs on one master; use :meth:`scan_iter` to walk every key.

    Errors: as :class:`~trio_maint.Redis`, plus :class:`~trio_maint.CrossSlotError`
    (before sending) for multi-key commands whose keys are in different slots, and the
    last :class:`~trio_maint.MovedError`/:class:`~trio_maint.TryAgainError`/
    :class:`~trio_maint.ClusterDownError`/:class:`~trio_maint.ConnectionError` when the
    redirection or retry budget (``max_redirects``, ``retry_timeout``) is spent.

    Attributes (see :func:`open_redis_cluster` for the options):

    * ``options``: the :class:`ClientOptions` shared by every node (host/port aside).
    * ``read_from_replicas`` (``bool``), ``max_redirects`` (``int``; from the third
      redirection on, each waits 10 ms doubling up to 250 ms for the nodes to settle),
      ``retry_timeout`` and ``refresh_cooldown`` (seconds, ``float``).
    * ``refreshes``: completed slot-map refreshes (``int``); ``smigrated_refreshes``:
      refreshes requested by ``SMIGRATED`` (``int``).
    * ``redirections``: a ``collections.Counter`` of what commands met: ``"moved"``,
      ``"ask"``, ``"tryagain"``, ``"clusterdown"``, ``"readonly"``, ``"connection"``
      (retried lost connections) and ``"loading"``.
    * ``last_refresh_error``: why the last refresh failed, or ``None``.
    """

    def __init__(
        self,
        options: ClientOptions,
        startup_nodes: Sequence[NodeInfo],
        nursery: trio.Nursery,
        *,
        read_from_replicas: bool = False,
        max_redirects: int = 16,
        retry_timeout: float = 5.0,
        refresh_cooldown: float = 0.1,
    ) -> None:
        self.options = options
        self.startup_nodes = list(startup_nodes)
        self.read_from_replicas = read_from_replicas
        self.max_redirects = max_redirects
        self.retry_timeout = retry_timeout
        self.refresh_cooldown = refresh_cooldown
        self._nursery = nursery
        self._nodes: dict[str, _Node] = {}
        self._map = SlotMap()
        self._closed = False
        self._refreshing = False
        self._refresh_pending = False
        self._rounds_started = 0
        self._rounds_done = 0
        self._round_finished = trio.Event()
        self._replica_turn = 0
        self._smigrated_seen: collections.OrderedDict[tuple[str, int], None] = (
            collections.OrderedDict()
        )
        self.refreshes = 0
        self.smigrated_refreshes = 0
        self.redirections: collections.Counter[str] = collections.Counter()
        self.last_refresh_error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<RedisCluster {len(self._map.masters)} masters, {len(self._nodes)} nodes>"

    # ---------------------------------------------------------------- nodes

    @property
    def slot_map(self) -> SlotMap:
        """The current :class:`~trio_maint._slots.SlotMap` (replaced on each refresh)."""
        return self._map

    @property
    def nodes(self) -> dict[str, Redis]:
        """The running node clients by ``"host:port"`` (a new ``dict``); each is a
        :class:`~trio_maint.Redis` with its own pool and ``maintenance`` handler."""
        return {n: node.client for n, node in self._nodes.items() if node.client is not None}

    def node_for_key(self, key: KeyT) -> str:
        """``"host:port"`` of the master serving ``key`` in the current map.

        :raises ClusterDownError: no node serves its slot.
        """
        from ._slots import key_slot

        master = self._map.master(key_slot(key))
        if master is None:
            raise ClusterDownError("CLUSTERDOWN Hash slot not served (in the client's map)")
        return master.name

    async def _node(self, info: NodeInfo) -> _Node:
        node = self._nodes.get(info.name)
        if node is None:
            if self._closed:
                raise ConnectionClosedError("the cluster client is closed")
            node = _Node(info)
            self._nodes[info.name] = node
            self._nursery.start_soon(self._run_node, node)
        if node.client is None:
            await node.ready.wait()
            if node.client is None:
                raise ConnectionClosedError(f"node {info.name} could not start: {node.error}")
        return node

    async def _run_node(self, node: _Node) -> None:
        opts = attrs.evolve(self.options, host=node.info.host, port=node.info.port, unix_path=None)
        try:
            async with open_redis(opts) as client:
                handler = client.maintenance
                if handler is not None and handler.config.enabled:
                    handler.add_hook(_SlotMigrationHook(self, node))
                node.client = client
                node.ready.set()
                await node.closing.wait()
        except Exception as exc:  # pragma: no cover - open_redis only fails on bad options
            node.error = exc
            logger.exception("node %s stopped", node.name)
        finally:
            node.ready.set()

    # ---------------------------------------------------------------- slot map

    async def _fetch_map(self, node: _Node) -> SlotMap:
        client = node.client
        assert client is not None
        try:
            reply = await client.execute_command("CLUSTER", "SHARDS")
            return SlotMap.from_shards(reply, node.info.host)
        except ResponseError as exc:
            if isinstance(exc, ClusterDownError | MovedError):
                raise
            reply = await client.execute_command("CLUSTER", "SLOTS")
            return SlotMap.from_slots(reply, node.info.host)

    async def _refresh_once(self) -> None:
        candidates: list[NodeInfo] = list(self._map.masters)
        random.shuffle(candidates)
        seen = {c.name for c in candidates}
        candidates += [s for s in self.startup_nodes if s.name not in seen]
        errors: list[str] = []
        for info in candidates:
            try:
                node = await self._node(info)
                new_map = await self._fetch_map(node)
            except (RedisError, ValueError) as exc:
                errors.append(f"{info.name}: {exc}")
                continue
            if new_map.covered == 0:
                errors.append(f"{info.name}: serves no slot map")
                continue
            self._map = new_map
            self.refreshes += 1
            return
        raise ConnectionError("no cluster node answered CLUSTER SHARDS/SLOTS: " + "; ".join(errors))

    def request_refresh(self) -> None:
        """Ask for a slot-map refresh in the background (synchronous).

        Requests are coalesced: while a refresh runs, any number of requests cause exactly
        one more refresh after it (never a lost one); refreshes are at least
        ``refresh_cooldown`` seconds apart.
        """
        self._refresh_pending = True
        if not self._refreshing and not self._closed:
            self._refreshing = True
            self._nursery.start_soon(self._refresh_loop)

    async def _refresh_loop(self) -> None:
        try:
            first = True
            while self._refresh_pending and not self._closed:
                if not first:
                    await trio.sleep(self.refresh_cooldown)
                first = False
                self._refresh_pending = False
                self._rounds_started += 1
                try:
                    await self._refresh_once()
                    self.last_refresh_error = None
                except RedisError as exc:
                    self.last_refresh_error = exc
                    logger.warning("slot map refresh failed: %s", exc)
                finally:
                    self._rounds_done += 1
                    finished, self._round_finished = self._round_finished, trio.Event()
                    finished.set()
        finally:
            self._refreshing = False

    async def refresh_slots(self, timeout: float | None = 10.0) -> None:
        """Refresh the slot map and wait for a refresh that started after this call.

        :param timeout: seconds (``float``) to wait (``None``: forever).
        :raises TimeoutError: it did not finish in time (``trio.TooSlowError`` is not used).
        """
        wanted = self._rounds_started + 1
        self.request_refresh()
        with trio.move_on_after(float("inf") if timeout is None else timeout) as scope:
            while self._rounds_done < wanted and not self._closed:
                await self._round_finished.wait()
        if scope.cancelled_caught:
            from ._errors import TimeoutError as RedisTimeoutError

            raise RedisTimeoutError(f"the slot map refresh took longer than {timeout} s")

    def handle_smigrated(self, node_name: str, conn: Connection | None, n: SMigrated) -> bool:
        """React to an ``SMIGRATED`` notification read on ``node_name``'s connection
        ``conn`` (the maintenance handler already restored the connection's timeouts).

        Entries whose source is this node (its announced ``host:port``, or the address
        the connection dialed; pairs ``[target, slots]`` count as this node's) move their
        slots to the target in the map at once, and one lazy refresh is requested per
        sequence id (de-duplicated over the last 1,024 ids).

        :returns: ``True`` when it requested a refresh.
        """
        names = {node_name}
        if conn is not None:
            names.add(conn.endpoint_text)
        matching = [m for m in n.moves if m.source is None or m.source in names]
        if not matching:
            return False
        key = (node_name, n.seq_id)
        if key in self._smigrated_seen:
            return False
        self._smigrated_seen[key] = None
        while len(self._smigrated_seen) > SMIGRATED_DEDUP_SIZE:
            self._smigrated_seen.popitem(last=False)
        for move in matching:
            try:
                host, port = _parse_address(move.target)
            except ValueError:
                continue
            target = NodeInfo(_name_of(host, port), host, port)
            for slot in parse_slot_specs(move.slots):
                self._map.set_master(slot, target)
        logger.info(
            "SMIGRATED seq %d from %s: slots %s moved to %s; reloading the slot map",
            n.seq_id,
            node_name,
            ",".join(s for m in matching for s in m.slots),
            matching[0].target,
            extra={"event": "smigrated_reload", "seq_id": n.seq_id, "node": node_name},
        )
        self.smigrated_refreshes += 1
        self.request_refresh()
        return True

    # ---------------------------------------------------------------- routing

    def _slot_of(self, args: Sequence[Any]) -> int | None:
        keys = command_keys(args)
        if keys is None:
            raise KeyError(_name(args[0]))
        return keys_slot(keys, args[0])

    async def _slot_of_unknown(self, args: tuple[CommandArg, ...]) -> int | None:
        """Ask a node for the keys of a command not in the table (``COMMAND GETKEYS``)."""
        node = await self._any_master()
        assert node.client is not None
        try:
            keys = await node.client.execute_command("COMMAND", "GETKEYS", *args)
        except ResponseError:
            return None  # no keys (or an invalid command: let the node say so)
        return keys_slot(keys, args[0])

    async def _any_master(self) -> _Node:
        masters = self._map.masters
        if not masters:
            await self.refresh_slots()
            masters = self._map.masters
            if not masters:
                raise ClusterDownError("CLUSTERDOWN no master in the slot map")
        return await self._node(masters[0])

    def _master_now(self, slot: int | None) -> _Node | None:
        """The running node of ``slot``'s master when the map knows it (no await); else
        ``None`` and the caller goes through :meth:`_route`. Same answer as
        ``_route(slot, False)`` in that case, which would not have checkpointed either."""
        if slot is None:
            return None
        master = self._map.master(slot)
        if master is None:
            return None
        node = self._nodes.get(master.name)
        if node is None or node.client is None:
            return None
        return node

    async def _route(self, slot: int | None, read: bool) -> tuple[_Node, bool]:
        """``(node, is_replica)`` to send a command of ``slot`` to."""
        if slot is None:
            return await self._any_master(), False
        master = self._map.master(slot)
        if master is None:
            await self.refresh_slots()
            master = self._map.master(slot)
            if master is None:
                raise ClusterDownError(f"CLUSTERDOWN Hash slot {slot} not served")
        if read and self.read_from_replicas:
            replicas = self._map.replicas(slot)
            if replicas:
                self._replica_turn += 1
                return await self._node(replicas[self._replica_turn % len(replicas)]), True
        return await self._node(master), False

    async def _execute(
        self,
        args: tuple[CommandArg, ...],
        slot: int | None,
        timeout: float | object | None = UNSET,
    ) -> Any:
        """Run one command where ``slot`` lives, following redirections and retrying as
        the class docs say; returns the reply (error replies raised)."""
        read = self.read_from_replicas and _name(args[0]) in READ_COMMANDS
        redirects = 0
        trail: list[str] = []
        attempt = 0
        deadline: float | None = None
        ask_node: _Node | None = None
        while True:
            if ask_node is not None:
                node, replica = ask_node, False
            elif not read and (fast := self._master_now(slot)) is not None:
                node, replica = fast, False
            else:
                node, replica = await self._route(slot, read)
            client = node.client
            assert client is not None
            pool = client.pool
            reply: Any
            conn: Connection | None = None
            try:
                conn = await pool.acquire_for_reply()
                if ask_node is not None:
                    replies = await conn.execute_many([("ASKING",), args], timeout=timeout)  # type: ignore[arg-type]
                    reply = replies[0] if isinstance(replies[0], RedisError) else replies[1]
                elif replica and conn not in node.readonly:
                    replies = await conn.execute_many([("READONLY",), args], timeout=timeout)  # type: ignore[arg-type]
                    if isinstance(replies[0], RedisError):
                        raise replies[0]
                    node.readonly.add(conn)
                    reply = replies[1]
                else:
                    reply = await conn.execute(args, timeout=timeout)  # type: ignore[arg-type]
            except ConnectionError as exc:
                if self._closed or (isinstance(exc, ConnectionClosedError) and pool.closed):
                    raise
                # The node may be down (a failover): refresh and retry within the budget.
                reply = exc
            finally:
                if conn is not None:
                    pool.release(conn)
            ask_node = None
            if not isinstance(reply, RedisError):
                return reply
            cls = reply.__class__
            kind = _KINDS.get(cls)
            if kind is None:
                if not isinstance(reply, ConnectionError):
                    raise reply
                kind = "connection"
            self.redirections[kind] += 1
            if cls is MovedError or cls is AskError:
                redirects += 1
                trail.append(f"{node.name}: {reply}")
                if redirects > self.max_redirects:
                    reply.add_note("redirections followed: " + " -> ".join(trail))
                    raise reply
                if redirects > 2:
                    # Nodes disagree for a moment (mid-migration): let them settle.
                    self.request_refresh()
                    await trio.sleep(_backoff(redirects - 3))
            if cls is MovedError:
                moved_slot, target = _redirect_target(reply)
                self._map.set_master(moved_slot, target)
                self.request_refresh()
                if replica:
                    read = False  # the replica does not serve it: ask the master
                continue
            if replica and cls is LoadingError:
                read = False  # a replica still loading: read from the master
                continue
            if cls is AskError:
                _slot, target = _redirect_target(reply)
                ask_node = await self._node(target)
                continue
            if cls is LoadingError:
                raise reply  # a master loading: not a cluster condition to wait out here
            now = trio.current_time()
            if deadline is None:
                deadline = now + self.retry_timeout
            if now >= deadline:
                raise reply
            if cls is not TryAgainError:
                self.request_refresh()
            await trio.sleep(min(_backoff(attempt), max(0.0, deadline - now)))
            attempt += 1

    async def _on_all_masters(self, args: tuple[CommandArg, ...]) -> list[Any]:
        if not self._map.masters:
            await self.refresh_slots()
        masters = self._map.masters
        results: list[Any] = [None] * len(masters)

        async def run(index: int, info: NodeInfo) -> None:
            node = await self._node(info)
            assert node.client is not None
            results[index] = await node.client.execute_command(*args)

        try:
            async with trio.open_nursery() as nursery:
                for index, info in enumerate(masters):
                    nursery.start_soon(run, index, info)
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None
        return results

    async def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | object | None = ...,
    ) -> Any:
        name = _name(args[0])
        if name in _ALL_MASTERS:
            replies = await self._on_all_masters(args)
            if name == "DBSIZE":
                return sum(int(r) for r in replies)
            if name == "KEYS":
                return [key for r in replies for key in r]
            reply = replies[0] if replies else b"OK"
        else:
            try:
                slot = self._slot_of(args)
            except KeyError:
                slot = await self._slot_of_unknown(args)
            reply = await self._execute(args, slot, UNSET if timeout is ... else timeout)
        return reply if callback is None else apply_callback(callback, reply, args)

    async def execute_command(
        self, *args: CommandArg, timeout: float | object | None = UNSET
    ) -> Any:
        """Run any command on the node serving its keys and return its reply (commands
        not in the client's table are asked about with ``COMMAND GETKEYS``).

        :raises CrossSlotError: its keys are in different slots (nothing was sent).
        :raises ResponseError, ConnectionError, TimeoutError: as the class docs say.
        """
        return await self._command(args, None, timeout=... if timeout is UNSET else timeout)

    def _blocking_timeout(self, timeout: float) -> float | None:
        if not timeout:
            return None
        return float(timeout) + (self.options.socket_timeout or 0.0)

    # ---------------------------------------------------------------- helpers

    async def scan_iter(
        self,
        match: KeyT | None = None,
        count: int | None = None,
        type: str | None = None,
    ) -> AsyncIterator[Any]:
        """Iterate over every key of every master (``SCAN`` on each, one after the
        other), optionally filtered by ``MATCH`` and ``TYPE``. As ``SCAN``, a key may be
        yielded more than once (or missed) if slots migrate meanwhile."""
        if not self._map.masters:
            await self.refresh_slots()
        for info in list(self._map.masters):
            node = await self._node(info)
            assert node.client is not None
            async for key in node.client.scan_iter(match=match, count=count, type=type):
                yield key

    def pipeline(self, transaction: bool = False) -> ClusterPipeline:
        """A new :class:`ClusterPipeline`: commands split by node and replies reassembled
        in order; ``transaction=True`` wraps them in ``MULTI``/``EXEC`` (all keys in one
        slot, else :class:`~trio_maint.CrossSlotError`)."""
        return ClusterPipeline(self, transaction)

    def pubsub(self, *, ignore_subscribe_messages: bool = False) -> ClusterPubSub:
        """A new :class:`ClusterPubSub` for sharded pub/sub (``SSUBSCRIBE``); use it as
        ``async with rc.pubsub() as ps:``."""
        return ClusterPubSub(self, ignore_subscribe_messages=ignore_subscribe_messages)

    @property
    def closed(self) -> bool:
        """True once the client's ``async with`` block has exited."""
        return self._closed

    def _close(self) -> None:
        self._closed = True
        for node in self._nodes.values():
            node.closing.set()
        self._round_finished.set()


# -------------------------------------------------------------------------------- pipeline


class ClusterPipeline(CommandsMixin["ClusterPipeline"]):
    """Commands queued locally, sent per node in one write each (concurrently), replies
    returned in the order queued. Get one from :meth:`RedisCluster.pipeline`.

    A command answered with ``MOVED``/``ASK``/``TRYAGAIN``/``CLUSTERDOWN`` (or whose node
    was lost) is run again on its own through the client's redirect handling. With
    ``transaction=True`` every key must be in one slot: the commands run in
    ``MULTI``/``EXEC`` on its master (retried as a whole after ``MOVED``/``ASK``, which
    abort the transaction before anything ran). ``WATCH`` is not supported.
    """

    def __init__(self, cluster: RedisCluster, transaction: bool = False) -> None:
        self._cluster = cluster
        self.transaction = transaction
        self._stack: list[tuple[tuple[CommandArg, ...], Callback | None]] = []

    def __len__(self) -> int:
        return len(self._stack)

    def __bool__(self) -> bool:
        return True

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stack = []
        await trio.lowlevel.checkpoint()

    def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | object | None = ...,
    ) -> ClusterPipeline:
        self._stack.append((args, callback))
        return self

    def _blocking_timeout(self, timeout: float) -> float | None:
        return None

    def execute_command(self, *args: CommandArg) -> ClusterPipeline:
        """Queue any command; returns the pipeline."""
        self._stack.append((args, None))
        return self

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send every queued command and return the replies in order.

        :param raise_on_error: raise the first error reply; otherwise errors are returned
            in place of their replies.
        :raises CrossSlotError: a multi-key command (or, in a transaction, the whole
            pipeline) spans slots; nothing was sent.
        :raises WatchError: never (no WATCH); :raises ResponseError: with
            ``raise_on_error``, the first failed command.
        """
        stack, self._stack = self._stack, []
        if not stack:
            await trio.lowlevel.checkpoint()
            return []
        cluster = self._cluster
        slots: list[int | None] = []
        for args, _cb in stack:
            try:
                slots.append(cluster._slot_of(args))
            except KeyError:
                slots.append(await cluster._slot_of_unknown(args))
        if self.transaction:
            replies = await self._execute_transaction(stack, slots)
        else:
            replies = await self._execute_pipeline(stack, slots)
        results = [
            r if isinstance(r, RedisError) or cb is None else apply_callback(cb, r, args)
            for r, (args, cb) in zip(replies, stack, strict=True)
        ]
        if raise_on_error:
            for index, result in enumerate(results):
                if isinstance(result, RedisError):
                    result.add_note(
                        f"command #{index + 1} in the pipeline ({stack[index][0][0]!r})"
                    )
                    raise result
        return results

    async def _execute_pipeline(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], slots: list[int | None]
    ) -> list[Any]:
        cluster = self._cluster
        groups: dict[str, tuple[_Node, list[int]]] = {}
        for index, slot in enumerate(slots):
            node = cluster._master_now(slot)
            if node is None:
                node, _replica = await cluster._route(slot, False)
            group = groups.get(node.name)
            if group is None:
                groups[node.name] = group = (node, [])
            group[1].append(index)
        replies: list[Any] = [None] * len(stack)
        retry: list[int] = []

        async def send(node: _Node, indexes: list[int]) -> None:
            assert node.client is not None
            pool = node.client.pool
            try:
                conn = await pool.acquire_for_reply()
                try:
                    got = await conn.execute_many([stack[i][0] for i in indexes])
                finally:
                    pool.release(conn)
            except ConnectionError:
                if cluster.closed:
                    raise
                retry.extend(indexes)
                return
            for i, reply in zip(indexes, got, strict=True):
                if isinstance(reply, MovedError | AskError | TryAgainError | ClusterDownError):
                    retry.append(i)
                else:
                    replies[i] = reply

        async def again(i: int) -> None:
            try:
                replies[i] = await cluster._execute(stack[i][0], slots[i])
            except ResponseError as exc:
                replies[i] = exc

        try:
            async with trio.open_nursery() as nursery:
                for node, indexes in groups.values():
                    nursery.start_soon(send, node, indexes)
            if retry:
                async with trio.open_nursery() as nursery:
                    for i in sorted(retry):
                        nursery.start_soon(again, i)
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None
        return replies

    async def _execute_transaction(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], slots: list[int | None]
    ) -> list[Any]:
        cluster = self._cluster
        slot = keys_slot_of(slots)
        commands: list[tuple[CommandArg, ...]] = [("MULTI",), *[a for a, _ in stack], ("EXEC",)]
        ask_node: _Node | None = None
        attempt = 0
        deadline = trio.current_time() + cluster.retry_timeout
        while True:
            if ask_node is not None:
                node, to_send = ask_node, [("ASKING",), *commands]
            else:
                node, _replica = await cluster._route(slot, False)
                to_send = commands
            ask_node = None
            assert node.client is not None
            pool = node.client.pool
            conn = await pool.acquire_for_reply()
            try:
                got = await conn.execute_many(to_send)
            finally:
                pool.release(conn)
            if to_send is not commands:
                got = got[1:]
            queued, exec_reply = got[1:-1], got[-1]
            if isinstance(got[0], RedisError):
                raise got[0]
            redirect: ResponseError | None = next(
                (r for r in queued if isinstance(r, MovedError | AskError | TryAgainError)), None
            )
            if redirect is None and isinstance(exec_reply, ResponseError):
                redirect = exec_reply if isinstance(exec_reply, ClusterDownError) else None
            if redirect is not None:
                cluster.redirections[_KINDS[type(redirect)]] += 1
                attempt += 1
                if attempt > cluster.max_redirects or trio.current_time() > deadline:
                    raise redirect
                if isinstance(redirect, MovedError):
                    moved_slot, target = _redirect_target(redirect)
                    cluster._map.set_master(moved_slot, target)
                    cluster.request_refresh()
                elif isinstance(redirect, AskError):
                    _slot, target = _redirect_target(redirect)
                    ask_node = await cluster._node(target)
                else:
                    await trio.sleep(_backoff(attempt))
                continue
            if isinstance(exec_reply, ExecAbortError | ResponseError):
                for index, reply in enumerate(queued):
                    if isinstance(reply, ResponseError):
                        reply.add_note(f"command #{index + 1} in the transaction")
                        raise reply
                raise exec_reply
            if exec_reply is None:
                raise WatchError("the transaction was not executed")
            if not isinstance(exec_reply, list) or len(exec_reply) != len(stack):
                raise ResponseError(f"unexpected EXEC reply: {exec_reply!r:.200}")
            return exec_reply


def keys_slot_of(slots: Sequence[int | None]) -> int | None:
    """The one slot of a transaction's commands (``None``: all keyless).

    :raises CrossSlotError: they span slots.
    """
    found: int | None = None
    for slot in slots:
        if slot is None:
            continue
        if found is None:
            found = slot
        elif slot != found:
            raise CrossSlotError(
                f"a cluster transaction must keep every key in one slot (found {found} and "
                f"{slot}); use a hash tag"
            )
    return found


# ---------------------------------------------------------------------------------- pubsub


class ClusterPubSub:
    """Sharded pub/sub over a cluster: one subscriber connection per node that owns a
    subscribed shard channel. Use as ``async with rc.pubsub() as ps:``, then
    :meth:`ssubscribe` and ``async for message in ps`` or :meth:`get_message`.

    When a channel's slot moves (the node sends ``sunsubscribe`` for it, or its
    connection is lost) the channel is subscribed again on the slot's new owner, after a
    slot-map refresh; that ``sunsubscribe`` is not delivered. Messages published while
    it moves may be missed (pub/sub is at-most-once).

    :param ignore_subscribe_messages: skip ``ssubscribe``/``sunsubscribe`` confirmations.
    """

    def __init__(self, cluster: RedisCluster, *, ignore_subscribe_messages: bool = False) -> None:
        self._cluster = cluster
        self.ignore_subscribe_messages = ignore_subscribe_messages
        #: The shard channels subscribed (``set``).
        self.shard_channels: set[Any] = set()
        self._where: dict[Any, str] = {}  # channel -> node name
        self._subs: dict[str, PubSub] = {}
        self._send, self._receive = trio.open_memory_channel[Message](1000)
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: Any = None
        self._lock = trio.Lock()
        #: How many times channels were subscribed again elsewhere (``int``).
        self.resubscriptions = 0

    async def __aenter__(self) -> Self:
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        await self.aclose()
        return False

    async def aclose(self) -> None:
        """Close every subscriber connection; iteration then ends."""
        nursery, self._nursery = self._nursery, None
        subs, self._subs = self._subs, {}
        for ps in subs.values():
            await ps.aclose()
        self._send.close()
        if nursery is not None:
            nursery.cancel_scope.cancel()
            try:
                await self._nursery_cm.__aexit__(None, None, None)
            except BaseExceptionGroup as group:
                raise unwrap_group(group) from None
        self._receive.close()

    def _key(self, channel: Any) -> Any:
        return channel.encode() if isinstance(channel, str) else channel

    async def _sub_for(self, name: str) -> PubSub:
        ps = self._subs.get(name)
        if ps is None:
            if self._nursery is None:
                raise ConnectionClosedError("this ClusterPubSub is closed (use async with)")
            info = self._cluster._map.nodes.get(name)
            if info is None:
                host, port = _parse_address(name)
                info = NodeInfo(name, host, port)
            node = await self._cluster._node(info)
            assert node.client is not None
            ps = node.client.pubsub()
            self._subs[name] = ps
            self._nursery.start_soon(self._reader, name, ps)
        return ps

    async def ssubscribe(self, *channels: KeyT) -> None:
        """``SSUBSCRIBE`` each channel on the master of its slot.

        :raises ConnectionError: a node cannot be reached.
        """
        if not channels:
            raise ValueError("ssubscribe() needs at least one channel")
        async with self._lock:
            await self._subscribe(channels)

    async def _subscribe(self, channels: Sequence[Any]) -> None:
        by_node: dict[str, list[Any]] = {}
        for channel in channels:
            from ._slots import key_slot

            node, _r = await self._cluster._route(key_slot(channel), False)
            by_node.setdefault(node.name, []).append(channel)
        for name, group in by_node.items():
            ps = await self._sub_for(name)
            await ps.ssubscribe(*group)
            for channel in group:
                self.shard_channels.add(channel)
                self._where[self._key(channel)] = name

    async def sunsubscribe(self, *channels: KeyT) -> None:
        """``SUNSUBSCRIBE`` the channels (all when none are given)."""
        async with self._lock:
            targets = list(channels) if channels else list(self.shard_channels)
            by_node: dict[str, list[Any]] = {}
            for channel in targets:
                self.shard_channels.discard(channel)
                name = self._where.pop(self._key(channel), None)
                if name is not None:
                    by_node.setdefault(name, []).append(channel)
            for name, group in by_node.items():
                ps = self._subs.get(name)
                if ps is not None:
                    await ps.sunsubscribe(*group)

    async def _reader(self, name: str, ps: PubSub) -> None:
        while True:
            try:
                message = await ps.get_message()
            except ConnectionClosedError:
                return
            except RedisError as exc:
                logger.info("sharded pub/sub connection to %s lost (%s); moving", name, exc)
                await self._move_away(name, None)
                return
            if message is None:
                continue
            if message.type == "sunsubscribe":
                key = self._key(message.channel)
                if key in self._where and self._where[key] == name:
                    # The server dropped it (its slot moved): follow the slot.
                    if self._nursery is not None:
                        self._nursery.start_soon(self._move_away, name, message.channel)
                    continue
            if self.ignore_subscribe_messages and message.type in ("ssubscribe", "sunsubscribe"):
                continue
            try:
                await self._send.send(message)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return

    async def _move_away(self, name: str, channel: Any | None) -> None:
        cluster = self._cluster
        async with self._lock:
            if channel is not None:
                channels = [c for c in self.shard_channels if self._key(c) == self._key(channel)]
                old = self._subs.get(name)
                if old is not None:  # the old node dropped it: never resubscribe there
                    old.shard_channels.difference_update(channels)
            else:
                channels = [c for c in self.shard_channels if self._where.get(self._key(c)) == name]
                ps = self._subs.pop(name, None)
                if ps is not None:
                    await ps.aclose()
            if not channels:
                return
            for attempt in range(50):
                try:
                    await cluster.refresh_slots()
                    moved = []
                    for c in channels:
                        from ._slots import key_slot

                        master = cluster._map.master(key_slot(c))
                        if master is not None and (master.name != name or attempt >= 10):
                            moved.append(c)
                    if moved:
                        for c in moved:
                            self._where.pop(self._key(c), None)
                        await self._subscribe(moved)
                        self.resubscriptions += len(moved)
                        channels = [c for c in channels if c not in moved]
                    if not channels:
                        return
                except RedisError as exc:
                    logger.info("resubscribing shard channels failed (%s); retrying", exc)
                await trio.sleep(_backoff(attempt))

    async def get_message(self, timeout: float | None = None) -> Message | None:
        """The next message from any node, or ``None`` after ``timeout`` seconds
        (``None``: wait forever).

        :raises ConnectionClosedError: the ClusterPubSub is closed.
        """
        with trio.move_on_after(float("inf") if timeout is None else timeout):
            try:
                return await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                raise ConnectionClosedError("this ClusterPubSub is closed") from None
        return None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        """The next message; iteration stops when the ClusterPubSub is closed."""
        try:
            message = await self.get_message()
        except ConnectionClosedError:
            raise StopAsyncIteration from None
        assert message is not None
        return message


# ---------------------------------------------------------------------------------- open


def _startup_nodes(spec: Any, default_port: int) -> tuple[list[NodeInfo], str | None]:
    """Startup nodes (and the URL to take options from, if any) from what
    :func:`open_redis_cluster` accepts."""
    items = [spec] if isinstance(spec, str | ClientOptions | tuple) else list(spec)
    nodes: list[NodeInfo] = []
    url: str | None = None
    for item in items:
        if isinstance(item, ClientOptions):
            host, port = item.host, item.port
        elif isinstance(item, tuple):
            host, port = str(item[0]), int(item[1])
        elif "://" in item:
            parsed = ClientOptions.from_url(item)
            host, port = parsed.host, parsed.port
            url = url or item
        else:
            host, port = _parse_address(item) if ":" in item else (item, default_port)
        nodes.append(NodeInfo(_name_of(host, port), host, port))
    if not nodes:
        raise ValueError("open_redis_cluster() needs at least one startup node")
    return nodes, url


@asynccontextmanager
async def open_redis_cluster(
    url_or_startup_nodes: str
    | ClientOptions
    | tuple[str, int]
    | Sequence[str | tuple[str, int]] = "redis://localhost:6379",
    /,
    *,
    read_from_replicas: bool = False,
    max_redirects: int = 16,
    retry_timeout: float = 5.0,
    refresh_cooldown: float = 0.1,
    **options: Any,
) -> AsyncIterator[RedisCluster]:
    """Open a Redis Cluster client that owns a nursery:
    ``async with open_redis_cluster("redis://127.0.0.1:7000") as rc:``.

    :param url_or_startup_nodes: one URL (``redis://host:port``, options as for
        :func:`~trio_maint.open_redis`), a :class:`ClientOptions`, ``(host, port)``, or a
        sequence of ``"host:port"``/``(host, port)``/URLs; the slot map is read from the
        first that answers.
    :param read_from_replicas: send read-only commands to replicas (``READONLY`` is sent
        on those connections); reads may then be slightly stale.
    :param max_redirects: most ``MOVED``/``ASK`` followed per command (``int``).
    :param retry_timeout: seconds (``float``) a command may spend retrying ``TRYAGAIN``,
        ``CLUSTERDOWN``, ``READONLY`` (a failed-over master) and lost connections.
    :param refresh_cooldown: seconds (``float``) between two slot-map refreshes.
    :param options: :class:`ClientOptions` fields for every node (``maintenance=`` a
        :class:`~trio_maint.MaintConfig`, ``pool_size`` per node, timeouts, TLS, ...);
        ``db`` must be 0.
    :returns: an async context manager yielding a :class:`RedisCluster`; every node pool
        and background task ends with the block.
    :raises ConnectionError: no startup node answered ``CLUSTER SHARDS``/``CLUSTER SLOTS``.
    :raises ValueError: a bad URL or option.
    :raises RuntimeError: not inside a Trio run.
    """
    if not trio.lowlevel.in_trio_run():
        raise RuntimeError("open_redis_cluster() must be used inside a Trio run")
    spec = url_or_startup_nodes
    if isinstance(spec, ClientOptions):
        base = attrs.evolve(spec, **options) if options else spec
        startup = [NodeInfo(_name_of(base.host, base.port), base.host, base.port)]
    else:
        _nodes, url = _startup_nodes(spec, 6379)
        base = (
            ClientOptions.from_url(url, **options) if url is not None else ClientOptions(**options)
        )
        startup, _url = _startup_nodes(spec, base.port)
    if base.db != 0:
        raise ValueError("Redis Cluster only has database 0")
    if base.unix_path is not None:
        raise ValueError("a cluster client connects over TCP (no unix_path)")
    try:
        async with trio.open_nursery() as nursery:
            cluster = RedisCluster(
                base,
                startup,
                nursery,
                read_from_replicas=read_from_replicas,
                max_redirects=max_redirects,
                retry_timeout=retry_timeout,
                refresh_cooldown=refresh_cooldown,
            )
            try:
                cluster._rounds_started += 1
                try:
                    await cluster._refresh_once()
                finally:
                    cluster._rounds_done += 1
                yield cluster
            finally:
                cluster._close()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise unwrap_group(group) from None
