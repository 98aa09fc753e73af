"""The Redis Cluster client: :func:`open_redis_cluster` and :class:`RedisCluster`.

Each node gets its own :class:`~trio_maint.Redis` (opened with :func:`~trio_maint.open_redis`,
so its own pool and :class:`~trio_maint.MaintenanceHandler`), all running in the cluster
client's nursery. Commands are routed by slot (:mod:`trio_maint._sansio.slots`); ``MOVED``,
``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN`` and lost nodes are handled here (what each reply means:
:mod:`~trio_maint._cluster.redirects`). Maintenance: every node connection opts in as
``open_redis`` does; ``SMIGRATING`` relaxes timeouts per connection (the handler),
``SMIGRATED`` restores them and triggers one lazy slot-map refresh per sequence id
(:mod:`~trio_maint._cluster.refresh`). Pipelines and sharded pub/sub are in
:mod:`~trio_maint._cluster.pipeline` and :mod:`~trio_maint._cluster.pubsub`. See
docs/cluster.md.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import trio

from .._client.observe import CommandObserver
from .._client.pipeline import caller_deadline
from .._client.redis import Redis, open_redis
from .._client.script import Scripting
from .._client.streams import StreamConsumers
from .._net.groups import unwrap_group
from .._sansio.blocking import TimeUnit, command_timeout, reply_timeout
from .._sansio.cmds import ClientCommands, KeyT
from .._sansio.endpoint import format_host_port, split_host_port
from .._sansio.errors import (
    ClusterDownError,
    ConnectionClosedError,
    ConnectionError,
    RedisError,
    ResponseError,
    check_command,
)
from .._sansio.errors import TimeoutError as RedisTimeoutError
from .._sansio.fanout import combine_replies, fanout_policy
from .._sansio.options import ClientOptions
from .._sansio.outcome import Outcome
from .._sansio.redact import redact_url
from .._sansio.replies import Callback, apply_callback
from .._sansio.resp import CommandArg
from .._sansio.retry import (
    Ask,
    Finish,
    Redirect,
    RetryState,
    WaitForMoving,
    classify,
)
from .._sansio.slots import NodeInfo, SlotMap, command_keys, key_slot, keys_slot
from .._sansio.unset import UNSET, Unset
from .cache import cached_command
from .node import Node, SlotMigrationHook
from .pipeline import ClusterPipeline
from .pubsub import ClusterPubSub
from .redirects import (
    COUNTER_NAMES,
    cluster_policy,
    command_name,
    final_error,
    is_readonly,
    target_node,
)
from .refresh import SMIGRATED_DEDUP_SIZE, SlotMapRefresh

__all__ = ["SMIGRATED_DEDUP_SIZE", "RedisCluster", "open_redis_cluster"]

logger = logging.getLogger("trio_maint.cluster")


class RedisCluster(SlotMapRefresh, Scripting, StreamConsumers, ClientCommands):
    """A Redis Cluster client. Get one from :func:`open_redis_cluster`.

    Every command method of :class:`~trio_maint.Redis` is available and routed to the
    master of its key's slot (see docs/cluster.md). Keyless commands go to one master,
    except those the server tips for every shard with a way to combine the replies
    (:mod:`trio_maint._sansio.fanout`): ``DBSIZE`` (summed), ``KEYS`` (concatenated),
    ``FLUSHDB``/``FLUSHALL``, ``SCRIPT LOAD``/``EXISTS``/``FLUSH``, ``FUNCTION
    LOAD``/``DELETE``/``FLUSH``, ``CONFIG SET``, ... (every master). ``scan`` runs on one
    master; use :meth:`scan_iter` to walk every key.

    Errors: as :class:`~trio_maint.Redis`, plus :class:`~trio_maint.CrossSlotError`
    (before sending) for multi-key commands whose keys are in different slots, and the
    last :class:`~trio_maint.MovedError`/:class:`~trio_maint.TryAgainError`/
    :class:`~trio_maint.ClusterDownError`/:class:`~trio_maint.ConnectionError` when the
    redirection or retry budget (``max_redirects``, ``retry_timeout``) is spent (with
    the reason as a note). What may have reached a node (a connection lost after the
    write, a reply timeout) is raised at once, never resent: the retry policy is
    :mod:`trio_maint._sansio.retry` (docs/cluster.md, "Redirections and retries").

    Attributes (see :func:`open_redis_cluster` for the options):

    * ``options``: the :class:`ClientOptions` shared by every node (host/port aside).
    * ``read_from_replicas`` (``bool``), ``max_redirects`` (``int``; from the third
      redirection on, each waits 10 ms doubling up to 250 ms for the nodes to settle),
      ``retry_timeout`` and ``refresh_cooldown`` (seconds, ``float``). Setting
      ``max_redirects`` or ``retry_timeout`` rebuilds ``retry_policy``, the
      :class:`~trio_maint._sansio.retry.RetryPolicy` every command follows.
    * ``refreshes``: completed slot-map refreshes (``int``); ``smigrated_refreshes``:
      refreshes requested by ``SMIGRATED`` (``int``).
    * ``redirections``: a ``collections.Counter`` of what commands met: ``"moved"``,
      ``"ask"``, ``"tryagain"``, ``"clusterdown"``, ``"readonly"``, ``"connection"``
      (connections that failed before the request was written) and ``"loading"``; a
      pipeline counts each command, a transaction once.
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
        self.retry_policy = cluster_policy(max_redirects, retry_timeout)
        self.refresh_cooldown = refresh_cooldown
        self._nursery = nursery
        self._nodes: dict[str, Node] = {}
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
        # An attached exporter (trio_maint.otel, trio_maint.prometheus), else None; node
        # clients get it too (_client/observe.py).
        self._observer: CommandObserver | None = None

    def __repr__(self) -> str:
        return f"<RedisCluster {len(self._map.masters)} masters, {len(self._nodes)} nodes>"

    @property
    def max_redirects(self) -> int:
        """Most ``MOVED``/``ASK`` followed per command (``int``)."""
        return self.retry_policy.max_redirects

    @max_redirects.setter
    def max_redirects(self, value: int) -> None:
        self.retry_policy = cluster_policy(value, self.retry_timeout)

    @property
    def retry_timeout(self) -> float:
        """Seconds (``float``) one command may keep retrying ``TRYAGAIN``, ``CLUSTERDOWN``,
        a failed-over master's ``READONLY`` and connections that failed before the write,
        from the first such failure."""
        timeout = self.retry_policy.retry_timeout
        assert timeout is not None  # a cluster policy always has one
        return timeout

    @retry_timeout.setter
    def retry_timeout(self, value: float) -> None:
        self.retry_policy = cluster_policy(self.max_redirects, value)

    # ---------------------------------------------------------------- nodes

    @property
    def slot_map(self) -> SlotMap:
        """The current :class:`~trio_maint.SlotMap` (replaced on each refresh)."""
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
        master = self._map.master(key_slot(key))
        if master is None:
            raise ClusterDownError("CLUSTERDOWN Hash slot not served (in the client's map)")
        return master.name

    async def _node(self, info: NodeInfo) -> Node:
        node = self._nodes.get(info.name)
        if node is None:
            if self._closed:
                raise ConnectionClosedError("the cluster client is closed")
            node = Node(info)
            self._nodes[info.name] = node
            self._nursery.start_soon(self._run_node, node)
        if node.client is None:
            await node.ready.wait()
            if node.client is None:
                raise ConnectionClosedError(f"node {info.name} could not start: {node.error}")
        return node

    async def _run_node(self, node: Node) -> None:
        opts = attrs.evolve(self.options, host=node.info.host, port=node.info.port, unix_path=None)
        try:
            async with open_redis(opts) as client:
                handler = client.maintenance
                if handler is not None and handler.config.enabled:
                    handler.add_hook(SlotMigrationHook(self, node))
                node.client = client
                if self._observer is not None:
                    self._observer.node_started(client)
                node.ready.set()
                try:
                    await node.closing.wait()
                finally:
                    if self._observer is not None:
                        self._observer.node_stopped(client)
        except Exception as exc:  # pragma: no cover - open_redis only fails on bad options
            node.error = exc
            logger.exception("node %s stopped", node.name)
        finally:
            node.ready.set()

    # ---------------------------------------------------------------- routing

    def _slot_of(self, args: Sequence[Any]) -> int | None:
        keys = command_keys(args)
        if keys is None:
            raise KeyError(command_name(args[0]))
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

    async def _any_master(self) -> Node:
        masters = self._map.masters
        if not masters:
            await self.refresh_slots()
            masters = self._map.masters
            if not masters:
                raise ClusterDownError("CLUSTERDOWN no master in the slot map")
        return await self._node(masters[0])

    def _master_now(self, slot: int | None) -> Node | None:
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

    async def _route(self, slot: int | None, read: bool) -> tuple[Node, bool]:
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
        timeout: float | Literal[Unset.UNSET] | None = UNSET,
        _observed: bool = False,
    ) -> Any:
        """Run one command where ``slot`` lives and return its reply (error replies
        raised). A loop driven by the retry policy (``retry_policy``): the first attempt
        allocates nothing for retries; only a retryable outcome creates the command's
        :class:`RetryState`, whose decisions redirect, wait and resend, or raise."""
        if self._observer is not None and not _observed:  # the one check (observe.py)
            run = self._execute(args, slot, timeout, _observed=True)
            return await self._observer.cluster_command(self, args[0], slot, run)
        read = self.read_from_replicas and is_readonly(args)
        state: RetryState | None = None
        ask_node: Node | None = None
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
            asking, ask_node = ask_node is not None, None
            reply: Any
            try:
                conn = await pool.acquire_for_reply()
            except (ConnectionError, RedisTimeoutError) as exc:
                if self._closed:
                    raise
                # No connection, so the command was not written (whatever the dial wrote).
                outcome = classify(exc, written=False)
            else:
                try:
                    if asking:
                        replies = await conn.execute_many([("ASKING",), args], timeout=timeout)
                        reply = replies[1]  # the command's own reply decides
                    elif replica and conn not in node.readonly:
                        replies = await conn.execute_many([("READONLY",), args], timeout=timeout)
                        if isinstance(replies[0], RedisError):
                            raise replies[0]
                        node.readonly.add(conn)
                        reply = replies[1]
                    else:
                        reply = await conn.execute(args, timeout=timeout)
                except ConnectionError as exc:
                    if self._closed or exc.written:
                        raise  # it may have run: never resent
                    reply = exc
                finally:
                    pool.release(conn)
                if not isinstance(reply, RedisError):
                    return reply
                outcome = classify(reply)
            if state is None:
                state = RetryState(
                    self.retry_policy, deadline=caller_deadline(), replica_reads=read
                )
            step = await self._follow(state, outcome, node, replica)
            if isinstance(step, Finish):
                raise final_error(outcome, step, node.name)
            ask_node = step
            read = state.replica_reads  # False once a replica could not serve it

    async def _follow(
        self, state: RetryState, outcome: Outcome, node: Node, replica: bool
    ) -> Finish | Node | None:
        """Count ``outcome`` (met on ``node``; ``replica``: the node served as a replica),
        ask the policy (``state``) and carry out its decision: update the map
        (``MOVED``), ask for a refresh, wait the decision's delay.

        :returns: the :class:`Finish` (the caller gives the error to its caller), the node
            of an ``ASK`` (send ``ASKING`` and the operation there), or ``None`` (send it
            again, routed by its slot).
        """
        counter = COUNTER_NAMES.get(outcome.kind)
        if counter is not None:
            self.redirections[counter] += 1
        decision = state.decide(outcome, trio.current_time(), replica=replica)
        if isinstance(decision, WaitForMoving):  # pragma: no cover - not asked in a cluster
            decision = state.decide_after_wait(
                outcome, trio.current_time(), moving=False, replica=replica
            )
        if isinstance(decision, Finish):
            return decision
        ask_node: Node | None = None
        if isinstance(decision, Redirect):
            self._map.set_master(decision.target.slot, target_node(decision.target, node.info.host))
        elif isinstance(decision, Ask):
            ask_node = await self._node(target_node(decision.target, node.info.host))
        if decision.refresh:
            self.request_refresh()
        if decision.delay:
            await trio.sleep(decision.delay)
        return ask_node

    async def _on_all_masters(self, args: tuple[CommandArg, ...]) -> list[Any]:
        if not self._map.masters:
            await self.refresh_slots()
        masters = self._map.masters
        results: list[Any] = [None] * len(masters)

        async def run(index: int, info: NodeInfo) -> None:
            node = await self._node(info)
            assert node.client is not None
            try:
                results[index] = await node.client.execute_command(*args)
            except ResponseError as exc:  # combine_replies decides
                results[index] = exc

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
        timeout: float | Literal[Unset.UNSET] | None = UNSET,
    ) -> Any:
        policy = fanout_policy(args)
        if policy is not None:  # every master, as the server's tips say (_sansio/fanout)
            reply = combine_replies(policy, await self._on_all_masters(args))
        else:
            try:
                slot = self._slot_of(args)
            except KeyError:
                slot = await self._slot_of_unknown(args)
            if self.options.cache is not None:  # client-side caching (docs/caching.md)
                reply = await cached_command(self, args, slot, timeout)
            else:
                reply = await self._execute(args, slot, timeout)
        return reply if callback is None else apply_callback(callback, reply, args)

    async def execute_command(
        self, *args: CommandArg, timeout: float | Literal[Unset.UNSET] | None = UNSET
    ) -> Any:
        """Run any command on the node serving its keys and return its reply (commands
        not in the client's table are asked about with ``COMMAND GETKEYS``).

        :raises CrossSlotError: its keys are in different slots (nothing was sent).
        :raises DataError: no arguments (nothing was sent).
        :raises ResponseError, ConnectionError, TimeoutError: as the class docs say.
        """
        check_command(args)
        if timeout is UNSET:
            # A blocking command waits for its own timeout too (docs/streams.md).
            seconds = command_timeout(args)
            if seconds is not None:
                timeout = reply_timeout(seconds, self.options.socket_timeout)
        return await self._command(args, None, timeout=timeout)

    def _blocking_timeout(self, timeout: float | None, unit: TimeUnit = "s") -> float | None:
        """The reply wait of a blocking command whose own timeout is ``timeout``
        (counted in ``unit``: ``"s"`` or ``"ms"``; ``None``: it does not block): see
        :func:`~trio_maint._sansio.blocking.reply_timeout`."""
        return reply_timeout(timeout, self.options.socket_timeout, unit)

    # ---------------------------------------------------------------- helpers

    async def scan_iter(
        self,
        match: KeyT | None = None,
        count: int | None = None,
        type: str | None = None,
        _type: str | None = None,
    ) -> AsyncIterator[Any]:
        """Iterate over every key of every master (``SCAN`` on each, one after the
        other), optionally filtered by ``MATCH`` and ``TYPE``. As ``SCAN``, a key may be
        yielded more than once (or missed) if slots migrate meanwhile."""
        if not self._map.masters:
            await self.refresh_slots()
        for info in list(self._map.masters):
            node = await self._node(info)
            assert node.client is not None
            kind = _type if _type is not None else type
            async for key in node.client.scan_iter(match=match, count=count, _type=kind):
                yield key

    def pipeline(self, transaction: bool = False) -> ClusterPipeline:
        """A new :class:`ClusterPipeline`: commands split by node and replies reassembled
        in order; ``transaction=True`` wraps them in ``MULTI``/``EXEC`` (all keys in one
        slot, else :class:`~trio_maint.CrossSlotError`)."""
        return ClusterPipeline(self, transaction)

    @asynccontextmanager
    async def pubsub(
        self, *, ignore_subscribe_messages: bool = False
    ) -> AsyncIterator[ClusterPubSub]:
        """A :class:`ClusterPubSub` for sharded pub/sub (``SSUBSCRIBE``) for the block of
        ``async with rc.pubsub() as ps:`` (an async context manager: its reader tasks run
        in a nursery of its own; on exit its connections are closed).

        :param ignore_subscribe_messages: skip ``ssubscribe``/``sunsubscribe``
            confirmations.
        """
        async with ClusterPubSub.open(
            self, ignore_subscribe_messages=ignore_subscribe_messages
        ) as pubsub:
            yield pubsub

    @property
    def closed(self) -> bool:
        """True once the client's ``async with`` block has exited."""
        return self._closed

    def _close(self) -> None:
        self._closed = True
        for node in self._nodes.values():
            node.closing.set()
        self._round_finished.set()


# ---------------------------------------------------------------------------------- open


def _startup_nodes(spec: Any, default_port: int) -> tuple[list[NodeInfo], str | None]:
    """Startup nodes (and the URL to take options from, if any) from what
    :func:`open_redis_cluster` accepts.

    :raises TypeError: a node is not a ``str``, ``(host, port)`` or ClientOptions.
    :raises ValueError: a bad URL or address (the message never shows a password)."""
    if isinstance(spec, str | ClientOptions | tuple):
        items = [spec]
    elif isinstance(spec, Iterable) and not isinstance(spec, bytes | bytearray):
        items = list(spec)
    else:
        raise TypeError(
            "open_redis_cluster() takes a URL (str), ClientOptions, (host, port) or a "
            f"sequence of them, got {type(spec).__name__}"
        )
    nodes: list[NodeInfo] = []
    url: str | None = None
    for item in items:
        if not isinstance(item, str | ClientOptions | tuple):
            raise TypeError(
                "a startup node must be a URL or 'host:port' (str), (host, port) or "
                f"ClientOptions, got {type(item).__name__}"
            )
        if isinstance(item, ClientOptions):
            host, port = item.host, item.port
        elif isinstance(item, tuple):
            host, port = str(item[0]), int(item[1])
        elif "://" in item:
            parsed = ClientOptions.from_url(item)
            host, port = parsed.host, parsed.port
            url = url or item
        elif "@" in item:
            # "user:password@host:port" without a scheme: never quote the password.
            raise ValueError(
                f"invalid startup node {redact_url(item)}: credentials need a URL "
                "(redis://user:password@host:port)"
            )
        else:
            # "host:port" as Redis writes it (the last ':' starts the port), or a bare host.
            host, port = (
                split_host_port(item, require_port=True) if ":" in item else (item, default_port)
            )
        nodes.append(NodeInfo(format_host_port(host, port), host, port))
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
    :raises ValueError: a bad URL or option (``auto_pipeline`` too: standalone only).
    :raises RuntimeError: not inside a Trio run.
    """
    if not trio.lowlevel.in_trio_run():
        raise RuntimeError("open_redis_cluster() must be used inside a Trio run")
    spec = url_or_startup_nodes
    if isinstance(spec, ClientOptions):
        base = attrs.evolve(spec, **options) if options else spec
        startup = [NodeInfo(format_host_port(base.host, base.port), base.host, base.port)]
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
    if base.auto_pipeline:
        raise ValueError("auto_pipeline is for a standalone client (open_redis)")
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
