"""The shell of one instrumented client: :class:`ClientTelemetry`.

It is the client's ``_observer`` (:class:`~trio_maint._client.observe.CommandObserver`),
each pool's :class:`~trio_maint._net.pool.PoolObserver` and a
:class:`~trio_maint.NotificationHook` on each maintenance handler, and it owns one Trio
system task, the timer that closes maintenance windows. What to record is decided in
:mod:`trio_maint._sansio.telemetry` and :mod:`~trio_maint._sansio.telemetry_window`; the
records go to every :class:`Sink` attached (one per exporter: a client may be exported
through OpenTelemetry and Prometheus at once). Gauges are read when an exporter collects,
possibly from another thread (:meth:`ClientTelemetry.snapshots`, and
:meth:`ClientTelemetry.cache_snapshots` for the client-side caches' counters).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

import trio

from .._client.redis import Redis
from .._cluster.client import RedisCluster
from .._net.connection import Connection
from .._net.pool import ConnectionPool
from .._sansio.events import MaintenanceEvent
from .._sansio.loglimit import log_limited
from .._sansio.notifications import Notification
from .._sansio.options import ClientOptions
from .._sansio.resp import CommandArg
from .._sansio.telemetry import (
    CONNECTION_CREATE_TIME,
    CONNECTION_WAIT_TIME,
    DB_SYSTEM_NAME,
    OPERATION_DURATION,
    POOL_NAME,
    PUBSUB_DIRECTION,
    PUBSUB_MESSAGES,
    PUBSUB_SHARDED,
    Attributes,
    MetricSpec,
    OperationLabels,
    PoolSnapshot,
    ServerKey,
    pool_name,
)
from .._sansio.telemetry_cache import CacheSnapshot, cache_attributes
from .._sansio.telemetry_window import (
    Count,
    MaintenanceTelemetry,
    Observe,
    Output,
    WindowClosed,
    WindowEvent,
    WindowOpened,
)
from .._sansio.timeouts import WINDOW_BACKSTOP_FACTOR

__all__ = ["Client", "ClientTelemetry", "Sink"]

logger = logging.getLogger("trio_maint.telemetry")

T = TypeVar("T")

#: What an exporter instruments.
Client = Redis | RedisCluster

_Window = WindowOpened | WindowEvent | WindowClosed


class Sink(Protocol):
    """One exporter's side (an OpenTelemetry meter and tracer, or a Prometheus
    registry). Called on the Trio thread; must not raise (errors are logged)."""

    #: Whether :meth:`span` is wanted (per-command spans).
    command_spans: bool

    def add(self, metric: MetricSpec, value: int, attributes: Attributes) -> None:
        """Add ``value`` to the counter ``metric``."""
        ...

    def record(self, metric: MetricSpec, value: float, attributes: Attributes) -> None:
        """Record ``value`` in the histogram ``metric``."""
        ...

    def span(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Attributes,
        error: BaseException | None,
    ) -> None:
        """A finished command or pipeline (epoch nanoseconds)."""
        ...

    def window(self, key: object, output: _Window, time_ns: int) -> None:
        """A maintenance window of the client or node ``key`` opened, had an event or
        closed, at ``time_ns`` (epoch nanoseconds)."""
        ...


class _Member:
    """One observed :class:`Redis`: the client itself, or a node of a cluster."""

    def __init__(self, shell: ClientTelemetry, client: Redis) -> None:
        self.client = client
        opts = client.options
        self.base = shell.labels.base(opts.host, opts.port, opts.unix_path, opts.db)
        self.pool_name = pool_name(opts.host, opts.port, opts.unix_path, opts.db)
        pool_attrs: Attributes = {DB_SYSTEM_NAME: "redis", POOL_NAME: self.pool_name}
        backstop = max(WINDOW_BACKSTOP_FACTOR * client.maintenance.config.relaxed_timeout, 1.0)
        self.tracker = MaintenanceTelemetry(shell.labels.server(self.base), pool_attrs, backstop)
        self.pool_attrs = pool_attrs
        self.cache_attrs = cache_attributes(shell.labels.server(self.base), self.pool_name)
        self._shell = shell

    # NotificationHook: only the events matter.
    def pre(self, conn: Connection, notification: Notification) -> bool:
        """Never drops a notification (``True``)."""
        return True

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        """Nothing: the notification arrives again as an event."""

    def on_event(self, event: MaintenanceEvent) -> None:
        """Hand ``event`` to the shell."""
        self._shell.maintenance_event(self, event)

    def __repr__(self) -> str:
        return f"<telemetry hook {self.pool_name}>"


class ClientTelemetry:
    """The instrumentation of one client; get it with :meth:`of`. Detaches itself when
    its last sink is removed."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.labels = OperationLabels()
        self._sinks: tuple[Sink, ...] = ()
        self._spans = False
        self._members: dict[Redis, _Member] = {}
        self._pools: dict[ConnectionPool, _Member] = {}
        self._pubsub_attrs: dict[tuple[ServerKey, bool], Attributes] = {}
        self._offset = trio.current_time() - time.perf_counter()
        self._wake = math.inf
        self._timer: trio.CancelScope | None = None
        self._running = trio.CancelScope()
        self.closed = False

    @classmethod
    def of(cls, client: Client) -> ClientTelemetry:
        """The shell attached to ``client``, attached now if there is none.

        :raises TypeError: ``client`` is not a :class:`~trio_maint.Redis` or
            :class:`~trio_maint.RedisCluster`.
        :raises RuntimeError: the client is closed, or not inside a Trio run.
        """
        cls.check(client)
        shell = client._observer
        if isinstance(shell, ClientTelemetry) and not shell.closed:
            return shell
        shell = cls(client)
        shell._attach()
        return shell

    @staticmethod
    def check(client: object) -> None:
        """Raise unless ``client`` can be instrumented now (as :meth:`of`)."""
        if not isinstance(client, Redis | RedisCluster):
            raise TypeError(f"expected a Redis or RedisCluster client, got {client!r}")
        if not trio.lowlevel.in_trio_run():
            raise RuntimeError("instrument a client inside the Trio run that opened it")
        if client.closed:
            raise RuntimeError(f"{client!r} is closed")

    # ------------------------------------------------------------------ attaching

    def _attach(self) -> None:
        client = self.client
        client._observer = self
        if isinstance(client, RedisCluster):
            for node in client.nodes.values():
                self.node_started(node)
        else:
            self.node_started(client)
        trio.lowlevel.spawn_system_task(self._run_timer, name="trio_maint telemetry timer")

    def node_started(self, client: Redis) -> None:
        """Observe ``client`` (the instrumented client, or a cluster node)."""
        if self.closed or client in self._members:
            return
        member = _Member(self, client)
        self._members[client] = member
        self._pools[client.pool] = member
        client._observer = self
        client.pool.observe(self)
        client.maintenance.add_hook(member)

    def node_stopped(self, client: Redis) -> None:
        """Stop observing ``client`` (a cluster node that stopped)."""
        member = self._members.pop(client, None)
        if member is None:
            return
        self._pools.pop(client.pool, None)
        if client._observer is self:
            client._observer = None
        client.pool.observe(None)
        client.maintenance.remove_hook(member)
        if trio.lowlevel.in_trio_run():  # else an exporter ends its open spans itself
            self._emit(member, member.tracker.close(trio.current_time()))

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks attached (a ``tuple``)."""
        return self._sinks

    def add_sink(self, sink: Sink) -> None:
        """Send records to ``sink`` too."""
        self._sinks = (*self._sinks, sink)
        self._spans = any(s.command_spans for s in self._sinks)

    def remove_sink(self, sink: Sink) -> None:
        """Stop sending to ``sink``; the last one removed detaches from the client (open
        maintenance windows end, reason ``"detached"``)."""
        if self.closed:
            return
        if not any(s is sink for s in self._sinks):
            return
        if len(self._sinks) == 1:
            self._detach()  # it still gets the windows' ends
        self._sinks = tuple(s for s in self._sinks if s is not sink)
        self._spans = any(s.command_spans for s in self._sinks)

    def _detach(self) -> None:
        for client in list(self._members):
            self.node_stopped(client)
        if self.client._observer is self:
            self.client._observer = None
        self.closed = True
        self._running.cancel()

    # --------------------------------------------------------------- commands

    def _now_ns(self, start: float, end: float) -> tuple[int, int]:
        wall = time.time_ns()
        return wall - round((end - start) * 1e9), wall

    def _done(
        self,
        base: ServerKey,
        name: CommandArg,
        start: float,
        error: BaseException | None,
        size: int,
    ) -> None:
        end = time.perf_counter()
        sinks = self._sinks
        if not sinks:
            return
        try:
            attributes = self.labels.operation(base, name, error)
            for sink in sinks:
                sink.record(OPERATION_DURATION, end - start, attributes)
            if self._spans:
                start_ns, end_ns = self._now_ns(start, end)
                if size:
                    attributes = {**attributes, "db.operation.batch.size": size}
                for sink in sinks:
                    if sink.command_spans:
                        sink.span(
                            str(attributes["db.operation.name"]),
                            start_ns,
                            end_ns,
                            attributes,
                            error,
                        )
        except Exception:
            self._failed()

    def _failed(self) -> None:
        log_limited(
            logger,
            logging.WARNING,
            "telemetry_failed",
            time.perf_counter(),
            "recording telemetry failed",
            exc_info=True,
            extra={"event": "telemetry_failed"},
        )

    def _base_of(self, client: Redis) -> ServerKey:
        member = self._members.get(client)
        if member is not None:
            return member.base
        return self._options_base(client.options)

    def _options_base(self, opts: ClientOptions) -> ServerKey:
        return self.labels.base(opts.host, opts.port, opts.unix_path, opts.db)

    async def command(self, client: Redis, name: CommandArg, run: Awaitable[T]) -> T:
        """Time one command of ``client`` (see :class:`CommandObserver`)."""
        start = time.perf_counter()
        try:
            result = await run
        except BaseException as exc:
            self._done(self._base_of(client), name, start, exc, 0)
            raise
        self._done(self._base_of(client), name, start, None, 0)
        return result

    async def pipeline(self, client: object, transaction: bool, size: int, run: Awaitable[T]) -> T:
        """Time one pipeline (``db.operation.name`` ``MULTI`` or ``PIPELINE``)."""
        start = time.perf_counter()
        name = "MULTI" if transaction else "PIPELINE"
        if isinstance(client, Redis):
            base = self._base_of(client)
        else:
            assert isinstance(client, RedisCluster)
            base = self._options_base(client.options)
        try:
            result = await run
        except BaseException as exc:
            self._done(base, name, start, exc, size)
            raise
        self._done(base, name, start, None, size)
        return result

    async def cluster_command(
        self, cluster: object, name: CommandArg, slot: int | None, run: Awaitable[T]
    ) -> T:
        """Time one routed command; its endpoint is the master of ``slot`` once it ended."""
        assert isinstance(cluster, RedisCluster)
        start = time.perf_counter()
        error: BaseException | None = None
        try:
            return await run
        except BaseException as exc:
            error = exc
            raise
        finally:
            master = None if slot is None else cluster.slot_map.master(slot)
            opts = cluster.options
            if master is None:
                base = self._options_base(opts)
            else:
                base = self.labels.base(master.host, master.port, None, opts.db)
            self._done(base, name, start, error, 0)

    def pubsub_message(self, options: ClientOptions, kind: str) -> None:
        """Count a received pub/sub message (not a ``pong``)."""
        if kind == "pong" or not self._sinks:
            return
        try:
            key = (self._options_base(options), kind == "smessage")
            attributes = self._pubsub_attrs.get(key)
            if attributes is None:
                server = self.labels.server(key[0])
                attributes = {**server, PUBSUB_DIRECTION: "received", PUBSUB_SHARDED: key[1]}
                if len(self._pubsub_attrs) < 256:
                    self._pubsub_attrs[key] = attributes
            for sink in self._sinks:
                sink.add(PUBSUB_MESSAGES, 1, attributes)
        except Exception:
            self._failed()

    # ------------------------------------------------------------------- pools

    def connection_wait(self, pool: ConnectionPool, seconds: float) -> None:
        """Record ``db.client.connection.wait_time``."""
        self._pool_record(pool, CONNECTION_WAIT_TIME, seconds)

    def connection_created(self, pool: ConnectionPool, seconds: float) -> None:
        """Record ``db.client.connection.create_time``."""
        self._pool_record(pool, CONNECTION_CREATE_TIME, seconds)

    def _pool_record(self, pool: ConnectionPool, metric: MetricSpec, seconds: float) -> None:
        member = self._pools.get(pool)
        if member is None:
            return
        try:
            for sink in self._sinks:
                sink.record(metric, seconds, member.pool_attrs)
        except Exception:
            self._failed()

    def snapshots(self) -> list[PoolSnapshot]:
        """The pool gauges of every observed client. Any thread: nothing here touches
        Trio or changes anything (the maintenance counts are
        :meth:`MaintenanceMachine.gauges <trio_maint.lowlevel.MaintenanceMachine.gauges>`,
        a read), and ``now`` is Trio's clock reconstructed from ``time.perf_counter``."""
        found = []
        now = time.perf_counter() + self._offset
        for member in list(self._members.values()):
            pool = member.client.pool
            stats = pool.stats()
            relaxed, handoffs = member.client.maintenance.machine.gauges(now)
            found.append(
                PoolSnapshot(
                    name=member.pool_name,
                    idle=stats.idle,
                    used=stats.in_use,
                    max=pool.pool_size,
                    pending=pool.waiting,
                    timeouts=stats.timeouts,
                    closed=stats.removed,
                    relaxed=relaxed,
                    handoffs=handoffs,
                )
            )
        return found

    def cache_snapshots(self) -> list[CacheSnapshot]:
        """The client-side caches of every observed client (``r.cache``; a cluster's
        nodes' caches), their ``stats()`` read now. Any thread: ``stats()`` only reads
        (its mapping of flushes is copied in one step) and changes nothing."""
        found = []
        for member in list(self._members.values()):
            cache = member.client.cache
            if cache is not None:
                found.append(CacheSnapshot(member.cache_attrs, cache.stats()))
        return found

    # ------------------------------------------------------------- maintenance

    def maintenance_event(self, member: _Member, event: MaintenanceEvent) -> None:
        """A maintenance event of ``member``'s handler."""
        self._emit(member, member.tracker.event(event))
        self._reschedule()

    def _emit(self, member: _Member, outputs: list[Output]) -> None:
        if not outputs or not self._sinks:
            return
        try:
            for out in outputs:
                for sink in self._sinks:
                    if isinstance(out, Count):
                        sink.add(out.metric, out.value, out.attributes)
                    elif isinstance(out, Observe):
                        sink.record(out.metric, out.value, out.attributes)
                    else:
                        when = time.time_ns() - round((trio.current_time() - out.time) * 1e9)
                        sink.window(member, out, when)
        except Exception:
            self._failed()

    def _reschedule(self) -> None:
        wake = min((m.tracker.next_deadline() for m in self._members.values()), default=math.inf)
        self._wake = wake
        if self._timer is not None:
            self._timer.deadline = wake

    async def _run_timer(self) -> None:
        """The system task that closes windows when their time runs out."""
        with self._running:
            while True:
                with trio.CancelScope(deadline=self._wake) as scope:
                    self._timer = scope
                    await trio.sleep_forever()
                self._timer = None
                now = trio.current_time()
                if now >= self._wake:
                    for member in list(self._members.values()):
                        self._emit(member, member.tracker.tick(now))
                    self._reschedule()
                    if self._wake <= now:  # never spin, whatever the trackers say
                        self._wake = now + 1.0
