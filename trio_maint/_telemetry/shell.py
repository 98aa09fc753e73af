"""The shell of one instrumented client: :class:`ClientTelemetry`.

It is the client's ``_observer`` (:class:`~trio_maint._client.observe.CommandObserver`),
each pool's :class:`~trio_maint._net.pool.PoolObserver` and a
:class:`~trio_maint.NotificationHook` on each maintenance handler, and it owns one task in
the client's nursery, the timer that closes maintenance windows. It lives as long as an
exporter is attached and the client is open: when the client closes, its nursery ends the
timer, and every exporter's handle is closed then (:meth:`ClientTelemetry.client_closed`),
so that nothing outlives the client's ``async with`` block and no exporter keeps a closed
client reachable.

What to record is decided in :mod:`trio_maint._sansio.telemetry` and
:mod:`~trio_maint._sansio.telemetry_window`; the records go to every :class:`Sink`
attached (one per exporter: a client may be exported through OpenTelemetry and
Prometheus at once), each labelled by that exporter's
:class:`~trio_maint._sansio.telemetry.OperationLabels` (its bound on endpoints holds for
every client it exports). Gauges are read when an exporter collects, possibly from
another thread (:meth:`ClientTelemetry.snapshots`, and
:meth:`ClientTelemetry.cache_snapshots` for the client-side caches' counters).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
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
    DB_OPERATION_BATCH_SIZE,
    DB_OPERATION_NAME,
    OPERATION_DURATION,
    PUBSUB_MESSAGES,
    Attributes,
    EndpointKey,
    MetricSpec,
    OperationLabels,
    PoolSnapshot,
    endpoint_key,
    pool_name,
)
from .._sansio.telemetry_cache import CacheSnapshot, cache_attributes
from .._sansio.telemetry_window import (
    CLIENT_CLOSED,
    DETACHED,
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
    #: The exporter's label values, shared by every client it exports (its bounds hold
    #: per exporter).
    labels: OperationLabels

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


class _View:
    """One member as one exporter sees it: its labels there (bounded by the exporter's
    :class:`OperationLabels`), and its maintenance windows as that exporter was told
    them (from when it attached to when it detached)."""

    __slots__ = ("base", "cache_attrs", "pool_attrs", "tracker")

    def __init__(self, labels: OperationLabels, endpoint: EndpointKey, backstop: float) -> None:
        self.base = labels.base(endpoint)
        server = labels.server(self.base)
        self.pool_attrs = labels.pool(self.base)
        self.cache_attrs = cache_attributes(server, self.base.pool)
        self.tracker = MaintenanceTelemetry(server, self.pool_attrs, backstop)


class _Member:
    """One observed :class:`Redis`: the client itself, or a node of a cluster."""

    def __init__(self, shell: ClientTelemetry, client: Redis) -> None:
        self.client = client
        opts = client.options
        self.endpoint = endpoint_key(opts.host, opts.port, opts.unix_path, opts.db)
        self.pool_name = pool_name(opts.host, opts.port, opts.unix_path, opts.db)
        self.backstop = max(WINDOW_BACKSTOP_FACTOR * client.maintenance.config.relaxed_timeout, 1.0)
        #: One view per sink attached (written on the Trio thread; a scrape reads it).
        self.views: dict[Sink, _View] = {}
        self._shell = shell

    def view(self, sink: Sink) -> None:
        """Report to ``sink`` too."""
        self.views[sink] = _View(sink.labels, self.endpoint, self.backstop)

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
    its last sink is removed, and removes every sink when the client closes."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._sinks: tuple[Sink, ...] = ()
        self._closers: dict[Sink, Callable[[], None]] = {}  # the exporter's part of close
        self._members: dict[Redis, _Member] = {}
        self._pools: dict[ConnectionPool, _Member] = {}
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
        name = "trio_maint telemetry timer"
        if client._nursery is not None:  # ends with the client at the latest
            client._nursery.start_soon(self._run_timer, name=name)
        else:  # a Redis made without open_redis(): nothing closes it
            trio.lowlevel.spawn_system_task(self._run_timer, name=name)

    def node_started(self, client: Redis) -> None:
        """Observe ``client`` (the instrumented client, or a cluster node)."""
        if self.closed or client in self._members:
            return
        member = _Member(self, client)
        for sink in self._sinks:
            member.view(sink)
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
        reason = CLIENT_CLOSED if self.client.closed else DETACHED
        for sink in list(member.views):
            self._close_view(member, sink, reason)

    def _close_view(self, member: _Member, sink: Sink, reason: str) -> None:
        """Stop reporting ``member`` to ``sink``; its open window ends there (``reason``:
        :data:`DETACHED`, :data:`CLIENT_CLOSED`)."""
        view = member.views.pop(sink, None)
        if view is not None and trio.lowlevel.in_trio_run():  # else the exporter ends its
            now = trio.current_time()  # spans itself
            self._emit(member, sink, view.tracker.close(now, reason))

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks attached (a ``tuple``)."""
        return self._sinks

    def add_sink(self, sink: Sink, on_close: Callable[[], None]) -> None:
        """Send records to ``sink`` too (labelled by its :attr:`Sink.labels`) until
        :meth:`remove_sink`, or until the client closes; either calls ``on_close`` (the
        exporter forgets the client there)."""
        for member in self._members.values():
            member.view(sink)
        self._closers[sink] = on_close
        self._sinks = (*self._sinks, sink)

    def attached(self, sink: Sink) -> bool:
        """Whether records still go to ``sink``."""
        return sink in self._closers

    def remove_sink(self, sink: Sink, reason: str = DETACHED) -> None:
        """Stop sending to ``sink`` (its open maintenance windows end, ``reason``
        :data:`DETACHED`, or :data:`CLIENT_CLOSED` when the client closes) and call its
        ``on_close``; the last one removed detaches from the client. Idempotent."""
        on_close = self._closers.pop(sink, None)
        if on_close is None:
            return
        for member in list(self._members.values()):
            self._close_view(member, sink, reason)
        self._sinks = tuple(s for s in self._sinks if s is not sink)
        if not self._sinks:
            self._detach()
        try:
            on_close()
        except Exception:
            self._failed()

    def client_closed(self) -> None:
        """The client is closing (its nursery was cancelled: :meth:`_run_timer`): every
        sink is removed, as if each handle were closed; open maintenance windows end
        there, reason :data:`CLIENT_CLOSED`."""
        for sink in self._sinks:
            self.remove_sink(sink, CLIENT_CLOSED)

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
        endpoint: EndpointKey,
        name: CommandArg,
        start: float,
        error: BaseException | None,
        size: int,
    ) -> None:
        end = time.perf_counter()
        try:
            for sink in self._sinks:
                attributes = sink.labels.operation(endpoint, name, error)
                sink.record(OPERATION_DURATION, end - start, attributes)
                if sink.command_spans:
                    start_ns, end_ns = self._now_ns(start, end)
                    if size:
                        attributes = {**attributes, DB_OPERATION_BATCH_SIZE: size}
                    name_ = str(attributes[DB_OPERATION_NAME])
                    sink.span(name_, start_ns, end_ns, attributes, error)
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

    def _endpoint_of(self, client: Redis) -> EndpointKey:
        member = self._members.get(client)
        if member is not None:
            return member.endpoint
        return self._options_endpoint(client.options)

    @staticmethod
    def _options_endpoint(opts: ClientOptions) -> EndpointKey:
        return endpoint_key(opts.host, opts.port, opts.unix_path, opts.db)

    async def command(self, client: Redis, name: CommandArg, run: Awaitable[T]) -> T:
        """Time one command of ``client`` (see :class:`CommandObserver`)."""
        start = time.perf_counter()
        try:
            result = await run
        except BaseException as exc:
            self._done(self._endpoint_of(client), name, start, exc, 0)
            raise
        self._done(self._endpoint_of(client), name, start, None, 0)
        return result

    async def pipeline(self, client: object, transaction: bool, size: int, run: Awaitable[T]) -> T:
        """Time one pipeline (``db.operation.name`` ``MULTI`` or ``PIPELINE``)."""
        start = time.perf_counter()
        name = "MULTI" if transaction else "PIPELINE"
        if isinstance(client, Redis):
            endpoint = self._endpoint_of(client)
        else:
            assert isinstance(client, RedisCluster)
            endpoint = self._options_endpoint(client.options)
        try:
            result = await run
        except BaseException as exc:
            self._done(endpoint, name, start, exc, size)
            raise
        self._done(endpoint, name, start, None, size)
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
                endpoint = self._options_endpoint(opts)
            else:
                endpoint = (master.host, master.port, opts.db)
            self._done(endpoint, name, start, error, 0)

    def pubsub_message(self, options: ClientOptions, kind: str) -> None:
        """Count a received pub/sub message (not a ``pong``)."""
        if kind == "pong" or not self._sinks:
            return
        try:
            endpoint = self._options_endpoint(options)
            for sink in self._sinks:
                sink.add(PUBSUB_MESSAGES, 1, sink.labels.pubsub(endpoint, kind == "smessage"))
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
            for sink, view in member.views.items():
                sink.record(metric, seconds, view.pool_attrs)
        except Exception:
            self._failed()

    def snapshots(self, sink: Sink) -> list[PoolSnapshot]:
        """The pool gauges of every observed client, named as ``sink``'s exporter labels
        them. Any thread: nothing here touches Trio or changes anything (the maintenance
        counts are :meth:`MaintenanceMachine.gauges
        <trio_maint.lowlevel.MaintenanceMachine.gauges>`, a read), and ``now`` is Trio's
        clock reconstructed from ``time.perf_counter``."""
        found = []
        now = time.perf_counter() + self._offset
        for member in list(self._members.values()):
            view = member.views.get(sink)
            if view is None:
                continue
            pool = member.client.pool
            stats = pool.stats()
            relaxed, handoffs = member.client.maintenance.machine.gauges(now)
            found.append(
                PoolSnapshot(
                    name=view.base.pool,
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

    def cache_snapshots(self, sink: Sink) -> list[CacheSnapshot]:
        """The client-side caches of every observed client (``r.cache``; a cluster's
        nodes' caches), their ``stats()`` read now, labelled as ``sink``'s exporter
        labels them. Any thread: ``stats()`` only reads (its mapping of flushes is copied
        in one step) and changes nothing."""
        found = []
        for member in list(self._members.values()):
            cache = member.client.cache
            view = member.views.get(sink)
            if cache is not None and view is not None:
                found.append(CacheSnapshot(view.cache_attrs, cache.stats()))
        return found

    # ------------------------------------------------------------- maintenance

    def maintenance_event(self, member: _Member, event: MaintenanceEvent) -> None:
        """A maintenance event of ``member``'s handler."""
        for sink, view in list(member.views.items()):
            self._emit(member, sink, view.tracker.event(event))
        self._reschedule()

    def _emit(self, member: _Member, sink: Sink, outputs: list[Output]) -> None:
        try:
            for out in outputs:
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
        wake = min(
            (
                view.tracker.next_deadline()
                for member in self._members.values()
                for view in member.views.values()
            ),
            default=math.inf,
        )
        self._wake = wake
        if self._timer is not None:
            self._timer.deadline = wake

    async def _run_timer(self) -> None:
        """The task that closes windows when their time runs out, in the client's
        nursery. It ends when the shell detaches, or when the client closes (its nursery
        is cancelled): then the shell detaches (:meth:`client_closed`)."""
        try:
            with self._running:
                while True:
                    with trio.CancelScope(deadline=self._wake) as scope:
                        self._timer = scope
                        await trio.sleep_forever()
                    self._timer = None
                    now = trio.current_time()
                    if now >= self._wake:
                        for member in list(self._members.values()):
                            for sink, view in list(member.views.items()):
                                self._emit(member, sink, view.tracker.tick(now))
                        self._reschedule()
                        if self._wake <= now:  # never spin, whatever the trackers say
                            self._wake = now + 1.0
        finally:
            if not self.closed:  # not detached: the client's nursery is ending
                self.client_closed()
