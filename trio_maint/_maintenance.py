"""Maintenance glue: the client's reaction to maintenance push notifications.

One :class:`MaintenanceHandler` per client (``r.maintenance``) ties the sans-IO pieces
(parsing, relaxed timeouts, endpoints) and the :class:`~trio_maint.HandoffManager` to the
connection pool:

* its :meth:`~MaintenanceHandler.handshake_hook` opts every new stream in with
  ``CLIENT MAINT_NOTIFICATIONS ON moving-endpoint-type T`` after ``HELLO 3``;
* its :meth:`~MaintenanceHandler.push_handler` parses each push frame, runs the
  :class:`NotificationHook` hooks, relaxes or restores the receiving connection's
  timeouts, and reacts to MOVING (hand connections off to the new endpoint);
* as a :class:`~trio_maint.PoolHook` it hands marked connections to the HandoffManager
  when they are released (or found idle), and withdraws handoffs of removed connections;
* it publishes typed events (:meth:`~MaintenanceHandler.events`) and a state snapshot
  (:attr:`~MaintenanceHandler.state`).

See docs/maintenance.md for the behaviour and a timeline.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Final, Protocol, Self, TypeAlias

import attrs
import trio

from ._breaker import BreakerState
from ._config import MaintConfig, MaintMode
from ._connection import Connection, PushHandler, open_stream
from ._endpoint import Endpoint, EndpointType, detect_endpoint_type
from ._errors import (
    ConnectionClosedError,
    ConnectionError,
    HandoffDialError,
    MaintenanceNotSupportedError,
    RedisError,
)
from ._errors import TimeoutError as RedisTimeoutError
from ._handoff import HandoffManager
from ._notifications import (
    FailedOver,
    FailingOver,
    Malformed,
    Migrated,
    Migrating,
    Moving,
    Notification,
    SMigrated,
    SMigrating,
    parse_notification,
)
from ._options import ClientOptions
from ._pool import ConnectionPool, Disposition
from ._timeouts import RelaxedTimeouts

__all__ = [
    "EventStream",
    "EventsDropped",
    "HandoffFailed",
    "HandoffQueued",
    "HandoffSucceeded",
    "Histogram",
    "LoggingHook",
    "MaintenanceDisabled",
    "MaintenanceEvent",
    "MaintenanceHandler",
    "MaintenanceState",
    "MalformedNotification",
    "MetricsHook",
    "MovingStarted",
    "NotificationHook",
    "NotificationReceived",
]

logger = logging.getLogger("trio_maint.maintenance")

#: Seconds a command refused with ``READONLY`` waits for a MOVING before the error is
#: raised (the old endpoint of a move turns read-only just before MOVING is sent).
READONLY_MOVING_GRACE: Final = 1.0

#: Default capacity of an :meth:`MaintenanceHandler.events` stream.
DEFAULT_EVENT_BUFFER: Final = 256

_OPENING = (Migrating, FailingOver, SMigrating)
_CLOSING = (Migrated, FailedOver, SMigrated)


# --------------------------------------------------------------------------------- events


@attrs.frozen
class NotificationReceived:
    """A maintenance notification was handled (hooks did not drop it).

    :ivar conn_id: the connection it arrived on (``int``).
    :ivar notification: the parsed notification (``Moving``, ``Migrating``, ...).
    :ivar pubsub: ``True`` when it arrived on a pub/sub connection (``bool``).
    :ivar error: ``repr`` of the error handling it raised, or ``None``.
    :ivar time: ``trio.current_time()`` (``float``).
    """

    conn_id: int
    notification: Notification
    pubsub: bool
    error: str | None
    time: float


@attrs.frozen
class MalformedNotification:
    """A maintenance push frame with a wrong structure was ignored.

    :ivar conn_id: the connection (``int``); :ivar name: its name or ``None``;
    :ivar reason: what is wrong (``str``); :ivar shape: its structure (``str``);
    :ivar time: ``trio.current_time()``.
    """

    conn_id: int
    name: str | None
    reason: str
    shape: str
    time: float


@attrs.frozen
class MovingStarted:
    """The first MOVING of a new sequence id: the client reacts pool-wide.

    :ivar seq_id: (``int``); :ivar endpoint: the new endpoint as ``host:port`` text, or
        ``None`` for a null endpoint (reconnect to the current address after
        ``time / 2``); :ivar deadline: when the old endpoint goes away
        (``trio.current_time()`` scale, ``float``); :ivar time: when it was handled.
    """

    seq_id: int
    endpoint: str | None
    deadline: float
    time: float


@attrs.frozen
class HandoffQueued:
    """A connection was given to the HandoffManager (``conn_id``, ``endpoint`` text,
    ``seq_id``, ``time``)."""

    conn_id: int
    endpoint: str
    seq_id: int
    time: float


@attrs.frozen
class HandoffSucceeded:
    """A connection now talks to ``endpoint``; ``latency`` is the seconds (``float``) from
    queueing to success."""

    conn_id: int
    endpoint: str
    latency: float
    time: float


@attrs.frozen
class HandoffFailed:
    """A handoff failed and the connection was removed from the pool; ``error`` is the
    ``repr`` of the cause, ``latency`` seconds from queueing (``float``)."""

    conn_id: int
    endpoint: str
    error: str
    latency: float
    time: float


@attrs.frozen
class MaintenanceDisabled:
    """``auto`` mode met a server that refuses ``CLIENT MAINT_NOTIFICATIONS``: the feature
    is off for this client from now on (``endpoint`` text, the server's ``reply``)."""

    endpoint: str
    reply: str
    time: float


@attrs.frozen
class EventsDropped:
    """This stream's consumer was too slow: ``count`` (``int``) oldest events were
    discarded just before this one was delivered."""

    count: int


#: Any event of :meth:`MaintenanceHandler.events`.
MaintenanceEvent: TypeAlias = (
    NotificationReceived
    | MalformedNotification
    | MovingStarted
    | HandoffQueued
    | HandoffSucceeded
    | HandoffFailed
    | MaintenanceDisabled
    | EventsDropped
)


class EventStream:
    """A bounded stream of :data:`MaintenanceEvent` values; get one from
    :meth:`MaintenanceHandler.events` and read it with ``async for``.

    Publishing never blocks: when the buffer is full the oldest event is discarded, and
    the consumer receives an :class:`EventsDropped` (with the count) before the next
    event. Iteration ends when the client closes or :meth:`aclose` is called.
    """

    def __init__(self, owner: MaintenanceHandler, size: int) -> None:
        if size < 1:
            raise ValueError("max_buffer: must be >= 1")
        self._owner = owner
        self._send, self._receive = trio.open_memory_channel[MaintenanceEvent](size)
        self._lost = 0
        #: Total events this stream discarded (``int``).
        self.dropped = 0

    def _publish(self, event: MaintenanceEvent) -> None:
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            try:
                self._receive.receive_nowait()
            except trio.WouldBlock:  # pragma: no cover - a full buffer has an item
                pass
            self._lost += 1
            self.dropped += 1
            self._send.send_nowait(event)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._owner._unsubscribe(self)

    def _close(self) -> None:
        self._send.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> MaintenanceEvent:
        if self._lost:
            await trio.lowlevel.checkpoint()
            lost, self._lost = self._lost, 0
            return EventsDropped(lost)
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop receiving events."""
        self._owner._unsubscribe(self)
        self._send.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


# ---------------------------------------------------------------------------------- hooks


class NotificationHook(Protocol):
    """Observes (and may drop) maintenance notifications; register with
    :meth:`MaintenanceHandler.add_hook`.

    Hooks run synchronously on the task that read the frame, in registration order; keep
    them fast. An exception in a hook is logged and ignored: it never breaks handling.
    A hook may also define ``on_event(event)``, called with every
    :data:`MaintenanceEvent` (handoff outcomes included).
    """

    def pre(self, conn: Connection, notification: Notification) -> bool:
        """Before handling. Return ``False`` to drop the notification: it is then not
        handled and no ``post`` runs."""
        ...

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        """After handling; ``error`` is what handling raised, or ``None``."""
        ...


def _seq_of(notification: Notification) -> int | None:
    return notification.seq_id


class LoggingHook:
    """Logs every notification: "processing notification started" at ``level`` before
    handling, "processing notification failed" at WARNING on error, "processing
    notification succeeded" at DEBUG otherwise. Records carry a machine-readable payload in
    ``extra``: ``event``, ``conn_id``, ``seq_id``, ``name``, ``notification`` (``repr``).

    :param level: logging level of the "started" line (default ``logging.INFO``).
    :param logger: the logger (default ``trio_maint.maintenance.hooks``).
    """

    def __init__(self, level: int = logging.INFO, logger: logging.Logger | None = None) -> None:
        self.level = level
        self.logger = logger or logging.getLogger("trio_maint.maintenance.hooks")

    def _extra(self, event: str, conn: Connection, n: Notification) -> dict[str, Any]:
        return {
            "event": event,
            "conn_id": conn.id,
            "seq_id": _seq_of(n),
            "notification_name": n.NAME,
            "notification": repr(n),
        }

    def pre(self, conn: Connection, notification: Notification) -> bool:
        """Log "processing notification started" at ``level``; never drops (``True``)."""
        self.logger.log(
            self.level,
            "processing notification started: conn[%d] %s seq=%s",
            conn.id,
            notification.NAME,
            _seq_of(notification),
            extra=self._extra("notification_started", conn, notification),
        )
        return True

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        """Log the outcome: WARNING with ``error`` when handling failed, else DEBUG."""
        if error is not None:
            self.logger.warning(
                "processing notification failed: conn[%d] %s: %r",
                conn.id,
                notification.NAME,
                error,
                extra=self._extra("notification_failed", conn, notification),
            )
        else:
            self.logger.debug(
                "processing notification succeeded: conn[%d] %s",
                conn.id,
                notification.NAME,
                extra=self._extra("notification_succeeded", conn, notification),
            )


#: Default bucket upper bounds (seconds) of :class:`Histogram`.
DEFAULT_BUCKETS: Final = (
    0.0001,
    0.0005,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    15.0,
    60.0,
)


class Histogram:
    """A cumulative-free bucket histogram of seconds: ``counts[i]`` observations
    ``<= bounds[i]`` (and above ``bounds[i-1]``), ``counts[-1]`` above the last bound.

    Attributes: ``bounds`` (``tuple[float, ...]``), ``counts`` (``list[int]``), ``count``,
    ``total`` (``float``), ``min``/``max`` (``float``, ``nan`` while empty).
    """

    def __init__(self, bounds: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.total = 0.0
        self.min = math.nan
        self.max = math.nan

    def observe(self, value: float) -> None:
        """Record one value (seconds)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value
        self.min = value if self.count == 1 else min(self.min, value)
        self.max = value if self.count == 1 else max(self.max, value)

    @property
    def mean(self) -> float:
        """The average (``float``; ``nan`` while empty)."""
        return self.total / self.count if self.count else math.nan

    def snapshot(self) -> dict[str, Any]:
        """``{"count", "total", "min", "max", "mean", "buckets": {bound: n, ..., "inf": n}}``."""
        buckets: dict[str, int] = {
            str(b): c for b, c in zip(self.bounds, self.counts[:-1], strict=True)
        }
        buckets["inf"] = self.counts[-1]
        return {
            "count": self.count,
            "total": self.total,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "buckets": buckets,
        }


class MetricsHook:
    """Counts notifications and handoffs. All fields are filled in:

    * ``notification_counts`` / ``error_counts``: ``Counter`` by notification name;
    * ``processing_times``: ``dict`` name -> :class:`Histogram` of handling time (seconds of
      wall-clock time from ``pre`` to ``post``);
    * ``handoffs_queued``, ``handoff_successes``, ``handoff_failures`` (``int``) and
      ``handoff_failure_reasons`` (``Counter`` of error class names);
    * ``handoff_latency``: :class:`Histogram` of seconds from queueing to the outcome;
    * ``malformed``: malformed frames ignored (``int``).
    """

    def __init__(self) -> None:
        self.notification_counts: Counter[str] = Counter()
        self.error_counts: Counter[str] = Counter()
        self.processing_times: dict[str, Histogram] = {}
        self.handoffs_queued = 0
        self.handoff_successes = 0
        self.handoff_failures = 0
        self.handoff_failure_reasons: Counter[str] = Counter()
        self.handoff_latency = Histogram()
        self.malformed = 0
        self._started: tuple[int, float] | None = None

    def pre(self, conn: Connection, notification: Notification) -> bool:
        """Count the notification by name and start its processing timer; never drops
        (``True``)."""
        self.notification_counts[notification.NAME] += 1
        self._started = (id(notification), time.perf_counter())
        return True

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        """Record the processing time (seconds, ``float``) in ``processing_times[name]``
        and count an ``error`` in ``error_counts``."""
        started, self._started = self._started, None
        if started is not None and started[0] == id(notification):
            histogram = self.processing_times.get(notification.NAME)
            if histogram is None:
                histogram = self.processing_times[notification.NAME] = Histogram()
            histogram.observe(time.perf_counter() - started[1])
        if error is not None:
            self.error_counts[notification.NAME] += 1

    def on_event(self, event: MaintenanceEvent) -> None:
        """Count handoffs queued / succeeded / failed (with the failure's error type) and
        record each success's latency (seconds) in ``handoff_latency``."""
        if isinstance(event, HandoffQueued):
            self.handoffs_queued += 1
        elif isinstance(event, HandoffSucceeded):
            self.handoff_successes += 1
            self.handoff_latency.observe(event.latency)
        elif isinstance(event, HandoffFailed):
            self.handoff_failures += 1
            self.handoff_failure_reasons[event.error.split("(", 1)[0]] += 1
            self.handoff_latency.observe(event.latency)
        elif isinstance(event, MalformedNotification):
            self.malformed += 1

    def get_metrics(self) -> dict[str, Any]:
        """Everything above as plain ``dict``/``int`` values."""
        return {
            "notification_counts": dict(self.notification_counts),
            "error_counts": dict(self.error_counts),
            "processing_times": {k: h.snapshot() for k, h in self.processing_times.items()},
            "handoffs_queued": self.handoffs_queued,
            "handoff_successes": self.handoff_successes,
            "handoff_failures": self.handoff_failures,
            "handoff_failure_reasons": dict(self.handoff_failure_reasons),
            "handoff_latency": self.handoff_latency.snapshot(),
            "malformed": self.malformed,
        }


# ---------------------------------------------------------------------------------- state


@attrs.frozen
class MaintenanceState:
    """A snapshot of ``r.maintenance`` (:attr:`MaintenanceHandler.state`).

    :ivar mode: the effective :class:`~trio_maint.MaintMode` (``auto`` turns into
        ``disabled`` once a server refused the opt-in).
    :ivar endpoint_type: the ``moving-endpoint-type`` requested
        (:class:`~trio_maint.EndpointType`).
    :ivar in_window: a maintenance window is open on some connection, or a MOVING's
        ``time`` has not run out yet (``bool``).
    :ivar relaxed_connections: connections whose timeouts are relaxed now (``int``).
    :ivar pending_handoffs: connections owned by the HandoffManager, plus delayed
        (null-endpoint) handoffs not yet due (``int``).
    :ivar completed_handoffs / failed_handoffs: totals since the client opened (``int``).
    :ivar current_endpoint: where new connections are dialed (``str``).
    :ivar last_moving_seq: sequence id of the latest MOVING handled (``int | None``).
    :ivar moving_deadline: when that MOVING's ``time`` runs out (``float | None``).
    """

    mode: MaintMode
    endpoint_type: EndpointType
    in_window: bool
    relaxed_connections: int
    pending_handoffs: int
    completed_handoffs: int
    failed_handoffs: int
    current_endpoint: str
    last_moving_seq: int | None
    moving_deadline: float | None


@attrs.frozen
class _Mark:
    """``conn.handoff`` of a connection to hand off when its borrower releases it."""

    endpoint: Endpoint
    seq_id: int


def _only(group: BaseExceptionGroup[BaseException], exc: BaseException) -> bool:
    """Whether ``group`` holds ``exc`` and otherwise only ``trio.Cancelled``."""
    rest = group.split(trio.Cancelled)[1]
    if rest is None:
        return False
    leaves: list[BaseException] = []
    pending: list[BaseException] = [rest]
    while pending:
        item = pending.pop()
        if isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        else:
            leaves.append(item)
    return leaves == [exc]


_DISPOSITIONS: Final = {True: Disposition.TAKEN, False: Disposition.REMOVE, None: Disposition.KEEP}


class _Retargeted(Exception):
    """A handoff attempt abandoned because a newer MOVING named another endpoint."""


class _Reconnectable(Protocol):
    def reconnect_soon(self) -> None: ...


# -------------------------------------------------------------------------------- handler


class MaintenanceHandler:
    """The maintenance side of one client (``r.maintenance``); created by
    :func:`~trio_maint.open_redis`, which also runs its HandoffManager.

    :param options: the client's :class:`~trio_maint.ClientOptions`.
    :param config: the :class:`~trio_maint.MaintConfig` (``None``: defaults, mode ``auto``).
    """

    def __init__(self, options: ClientOptions, config: MaintConfig | None = None) -> None:
        config = config if config is not None else MaintConfig()
        self.options: Final = options
        self.config: Final = config
        self._mode = config.mode
        endpoint_type = config.endpoint_type
        if config.enabled and endpoint_type is EndpointType.AUTO:
            host = "" if options.unix_path is not None else options.host
            endpoint_type = detect_endpoint_type(host, options.ssl)
        #: The ``moving-endpoint-type`` sent in the handshake (:class:`EndpointType`).
        self.endpoint_type: Final = endpoint_type
        if options.unix_path is not None:
            self._configured = Endpoint(options.unix_path, options.port or 6379)
        else:
            self._configured = Endpoint(options.host, options.port or 6379)
        self._target = self._configured
        self._endpoint_options: dict[Endpoint, ClientOptions] = {self._configured: options}
        self._pool: ConnectionPool | None = None
        self.manager: HandoffManager[Connection] | None = None
        if config.enabled:
            self.manager = HandoffManager(
                config,
                perform=self._perform,
                on_success=self._on_handoff_success,
                on_failure=self._on_handoff_failure,
                pool_size=options.pool_size,
                max_active_conns=options.max_active_conns,
            )
        self._hooks: tuple[NotificationHook, ...] = ()
        self._observers: tuple[Callable[[MaintenanceEvent], None], ...] = ()
        self._streams: list[EventStream] = []
        self._relaxed: weakref.WeakValueDictionary[int, Connection] = weakref.WeakValueDictionary()
        self._queued_at: dict[int, float] = {}
        self._conn_seq: dict[int, int] = {}  # connection id -> latest MOVING seq handled
        self._last_seq: int | None = None
        self._moving_deadline: float | None = None
        self._downgrade_logged = False
        self._closed = False
        self._moved: trio.Event | None = None
        # Null-endpoint handoffs not yet due: connection id -> (connection, target, seq).
        self._scheduled: dict[int, tuple[Connection, Endpoint, int]] = {}

    # ------------------------------------------------------------------------ wiring

    @property
    def mode(self) -> MaintMode:
        """The effective mode (``auto`` becomes ``disabled`` after a refusal)."""
        return self._mode

    @property
    def push_handler_or_none(self) -> PushHandler | None:
        """The push handler to install on connections (``None`` when disabled)."""
        return self.push_handler if self.config.enabled else None

    def attach(self, pool: ConnectionPool) -> None:
        """Serve ``pool``: register as its hook (when the feature is not disabled)."""
        self._pool = pool
        if self.config.enabled:
            pool.hooks.append(self)

    async def __aenter__(self) -> Self:
        if self.manager is not None:
            await self.manager.__aenter__()
        else:
            await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._closed = True
        try:
            if self.manager is not None:
                return await self.manager.__aexit__(exc_type, exc, tb)
            return False
        except BaseExceptionGroup as group:
            # The client cancels its nursery (around this one) when its block exits, so
            # the workers' Cancelled (which belong to that outer scope) come out next to
            # the block's own exception: let that exception propagate unwrapped.
            if exc is not None and _only(group, exc):
                return False
            raise
        finally:
            streams, self._streams = self._streams, []
            for stream in streams:
                stream._close()

    def _options_for(self, endpoint: Endpoint) -> ClientOptions:
        opts = self._endpoint_options.get(endpoint)
        if opts is None:
            opts = attrs.evolve(
                self.options, host=endpoint.host, port=endpoint.port, unix_path=None
            )
            self._endpoint_options[endpoint] = opts
        return opts

    def _new_connection(
        self, endpoint: Endpoint, push_handler: PushHandler | None = None
    ) -> Connection:
        return Connection(
            self._options_for(endpoint),
            push_handler=push_handler or self.push_handler_or_none,
            handshake_hook=self.handshake_hook if self.config.enabled else None,
        )

    async def dial(self) -> Connection:
        """The pool's dialer: a connected, handshaken :class:`~trio_maint.Connection` to
        the current endpoint (the configured one, or where a MOVING sent the client).

        A dial that started before a MOVING and so reached the old endpoint is marked for
        a handoff: it serves one borrower, then moves like the others.
        """
        started = self._target
        conn, dialed = await self._dial(started)
        current = self._target
        moved_meanwhile = dialed == started and current != started and conn.handoff is None
        if moved_meanwhile and self._last_seq is not None and not self._blocked(current):
            conn.handoff = _Mark(current, self._last_seq)
        return conn

    async def _dial(self, target: Endpoint) -> tuple[Connection, Endpoint]:
        if target != self._configured:
            breaker = self.manager.breaker(target) if self.manager is not None else None
            if breaker is not None and not breaker.allow(trio.current_time()):
                target = self._configured  # the new endpoint is failing: stay where we were
            else:
                conn = self._new_connection(target)
                try:
                    await conn.connect()
                except BaseException as exc:
                    if breaker is not None:
                        if isinstance(exc, ConnectionError | RedisError):
                            breaker.record_failure(trio.current_time())
                        else:
                            breaker.release()
                    if not isinstance(exc, ConnectionError | RedisTimeoutError) or isinstance(
                        exc, MaintenanceNotSupportedError
                    ):
                        raise
                    logger.warning(
                        "cannot connect to the new endpoint %s (%s); using %s",
                        target,
                        exc,
                        self.options.address_text,
                        extra={"event": "moving_target_unreachable", "endpoint": str(target)},
                    )
                    target = self._configured
                else:
                    if breaker is not None:
                        breaker.record_success(trio.current_time())
                    return conn, target
        conn = self._new_connection(target)
        await conn.connect()
        return conn, target

    # ---------------------------------------------------------------------- handshake

    async def handshake_hook(self, conn: Connection) -> None:
        """Opt ``conn`` in after ``HELLO 3`` (see the class docs and
        docs/maintenance.md).

        :raises MaintenanceNotSupportedError: mode ``enabled`` and the server refused.
        """
        if self._mode is MaintMode.DISABLED:
            return
        reply = await conn.handshake_command(
            "client", "maint_notifications", "on", "moving-endpoint-type", self.endpoint_type.value
        )
        if isinstance(reply, RedisError):
            if self.config.mode is MaintMode.ENABLED:
                raise MaintenanceNotSupportedError(
                    f"server at {conn.endpoint_text} refused CLIENT MAINT_NOTIFICATIONS "
                    f"({reply}) and maintenance mode is 'enabled'"
                )
            self._downgrade(conn, reply)
            return
        conn.maint_enabled = True

    def _downgrade(self, conn: Connection, reply: RedisError) -> None:
        self._mode = MaintMode.DISABLED
        if self._downgrade_logged:
            return
        self._downgrade_logged = True
        logger.debug(
            "server at %s does not support maintenance notifications (%s); "
            "maintenance handling is off for this client",
            conn.endpoint_text,
            reply,
            extra={"event": "maint_notifications_unsupported", "endpoint": conn.endpoint_text},
        )
        self._emit(MaintenanceDisabled(conn.endpoint_text, str(reply), trio.current_time()))

    # ----------------------------------------------------------------- notifications

    def push_handler(self, conn: Connection, frame: list[Any]) -> None:
        """The connections' push handler (synchronous, never raises)."""
        self._process(conn, frame, None)

    def _process(self, conn: Connection, frame: list[Any], link: _PubSubLink | None) -> None:
        result = parse_notification(frame)
        if result is None:
            return
        if isinstance(result, Malformed):
            logger.warning(
                "conn[%d] ignoring a malformed maintenance notification %s: %s (shape %s)",
                conn.id,
                result.name,
                result.reason,
                result.shape,
                extra={"event": "notification_malformed", "conn_id": conn.id},
            )
            self._emit(
                MalformedNotification(
                    conn.id, result.name, result.reason, result.shape, trio.current_time()
                )
            )
            return
        hooks = self._hooks
        for hook in hooks:
            try:
                keep = hook.pre(conn, result)
            except Exception:
                logger.exception("notification hook %r failed in pre()", hook)
                continue
            if keep is False:
                logger.debug("conn[%d] %s dropped by hook %r", conn.id, result.NAME, hook)
                return
        error: BaseException | None = None
        try:
            if link is not None:
                link.on_notification(conn, result)
            else:
                self._apply(conn, result)
        except Exception as exc:
            error = exc
            logger.exception("conn[%d] handling %s failed", conn.id, result.NAME)
        for hook in hooks:
            try:
                hook.post(conn, result, error)
            except Exception:
                logger.exception("notification hook %r failed in post()", hook)
        if self._streams or self._observers:
            self._emit(
                NotificationReceived(
                    conn.id,
                    result,
                    link is not None,
                    None if error is None else repr(error),
                    trio.current_time(),
                )
            )

    def relaxation(self, conn: Connection) -> RelaxedTimeouts:
        """``conn``'s :class:`RelaxedTimeouts`, installed as its timeout policy on first
        use (connections that never saw a notification have none: no cost per command)."""
        timeouts = conn.timeouts
        if not isinstance(timeouts, RelaxedTimeouts):
            timeouts = RelaxedTimeouts(self.config.relaxed_timeout)
            conn.timeouts = timeouts
        self._relaxed[conn.id] = conn
        return timeouts

    def _apply(self, conn: Connection, n: Notification) -> None:
        if isinstance(n, Moving):
            self._on_moving(conn, n)
        else:
            self._relax(conn, n)

    def _relax(self, conn: Connection, n: Notification) -> None:
        if not isinstance(n, _OPENING + _CLOSING):
            return
        now = trio.current_time()
        timeouts = self.relaxation(conn)
        timeouts.on_notification(n, now)
        if isinstance(n, _OPENING):
            logger.info(
                "conn[%d] %s: timeouts relaxed to at least %.1f s",
                conn.id,
                n.NAME,
                timeouts.relaxed_timeout,
                extra={
                    "event": "timeouts_relaxed",
                    "conn_id": conn.id,
                    "notification_name": n.NAME,
                },
            )
        else:
            logger.info(
                "conn[%d] %s: %d maintenance window(s) still open",
                conn.id,
                n.NAME,
                timeouts.open_windows,
                extra={
                    "event": "timeouts_restored",
                    "conn_id": conn.id,
                    "notification_name": n.NAME,
                },
            )

    # ------------------------------------------------------------------------ MOVING

    @staticmethod
    def _is_at(conn: Connection, endpoint: Endpoint) -> bool:
        return conn.unix_path is None and conn.host == endpoint.host and conn.port == endpoint.port

    def _on_moving(self, conn: Connection, n: Moving) -> None:
        manager = self.manager
        pool = self._pool
        if manager is None or pool is None or manager.closed or self._closed:
            return
        last = self._last_seq
        if last is not None and n.seq_id < last:
            logger.debug(
                "conn[%d] ignoring stale MOVING seq %d (latest %d)", conn.id, n.seq_id, last
            )
            return
        if self._conn_seq.get(conn.id, -1) >= n.seq_id:
            logger.debug("conn[%d] ignoring replayed MOVING seq %d", conn.id, n.seq_id)
            return
        now = trio.current_time()
        endpoint = n.endpoint
        if last is None or n.seq_id > last:
            self._last_seq = n.seq_id
            self._moving_deadline = now + n.time
            moved, self._moved = self._moved, None
            if moved is not None:
                moved.set()
            logger.info(
                "MOVING seq %d: endpoint moves to %s within %.0f s",
                n.seq_id,
                endpoint if endpoint is not None else "the current address",
                n.time,
                extra={"event": "moving", "seq_id": n.seq_id, "endpoint": str(endpoint)},
            )
            self._emit(
                MovingStarted(
                    n.seq_id,
                    None if endpoint is None else str(endpoint),
                    now + n.time,
                    now,
                )
            )
            if endpoint is not None:
                self._target = endpoint
                self._sweep_explicit(pool, manager, endpoint, n.seq_id, exclude=conn)
            else:
                for other in pool.connections:
                    if other is not conn:
                        self._schedule(manager, pool, other, n)
        if endpoint is None:
            self._schedule(manager, pool, conn, n)
            return
        # This connection's own copy: mark it (in use, or being checked out).
        if pool.owns(conn):
            self._conn_seq[conn.id] = n.seq_id
        if manager.is_pending(conn.id):  # read from the old stream during its handoff
            # Retargeted even when the newer MOVING names where it already is (A -> B ->
            # A): the handoff to B must not complete.
            self._retarget(manager, conn, endpoint, n.seq_id)
            return
        if self._is_at(conn, endpoint):
            self._clear_stale_mark(conn, n.seq_id)
            return
        mark = conn.handoff
        if isinstance(mark, _Mark) and mark.seq_id >= n.seq_id:
            return
        if self._blocked(endpoint):
            return  # its breaker is open: stay here rather than fail fast and churn
        conn.handoff = _Mark(endpoint, n.seq_id)

    @staticmethod
    def _clear_stale_mark(conn: Connection, seq_id: int) -> None:
        """A newer MOVING names where ``conn`` already is: forget an older mark (it must
        not be handed off to the previous target when released)."""
        mark = conn.handoff
        if isinstance(mark, _Mark) and mark.seq_id < seq_id:
            conn.handoff = None

    def _retarget(
        self, manager: HandoffManager[Connection], conn: Connection, endpoint: Endpoint, seq: int
    ) -> None:
        mark = conn.handoff
        if isinstance(mark, _Mark) and mark.seq_id >= seq:
            return
        conn.handoff = _Mark(endpoint, seq)
        manager.queue_handoff_nowait(conn, endpoint, seq)  # merged: the newer target wins

    def _sweep_explicit(
        self,
        pool: ConnectionPool,
        manager: HandoffManager[Connection],
        endpoint: Endpoint,
        seq_id: int,
        *,
        exclude: Connection,
    ) -> None:
        if self._blocked(endpoint):
            return
        idle = pool.take_idle()
        idle_ids = {c.id for c in idle}
        for other in pool.connections:
            if other is exclude:
                continue
            self._conn_seq[other.id] = seq_id
            if other.id in idle_ids:
                continue
            if manager.is_pending(other.id):
                self._retarget(manager, other, endpoint, seq_id)
                continue
            if self._is_at(other, endpoint):
                self._clear_stale_mark(other, seq_id)
                continue
            mark = other.handoff
            if not (isinstance(mark, _Mark) and mark.seq_id >= seq_id):
                other.handoff = _Mark(endpoint, seq_id)
        for other in idle:
            if other is exclude or self._is_at(other, endpoint):
                self._clear_stale_mark(other, seq_id)
                pool.give_back(other)
                continue
            other.handoff = _Mark(endpoint, seq_id)
            queued = self._queue(other)
            if queued is None:
                pool.give_back(other)
            elif not queued:
                pool.discard(other, "handoff manager closed")

    def _schedule(
        self,
        manager: HandoffManager[Connection],
        pool: ConnectionPool,
        conn: Connection,
        n: Moving,
    ) -> None:
        target = self._target
        seq_id = n.seq_id

        if pool.owns(conn):
            self._conn_seq[conn.id] = seq_id
            self._scheduled[conn.id] = (conn, target, seq_id)
            manager.schedule_handoff(
                conn, target, seq_id, delay=n.null_endpoint_delay, claim=self._claim
            )

    def _claim(self, conn: Connection) -> bool:
        """A null-endpoint timer fired: take ``conn`` if idle (the manager then owns it),
        else mark it so its release queues it."""
        entry = self._scheduled.pop(conn.id, None)
        if entry is None:
            return False  # withdrawn (removed, or expedited)
        return self._claim_for(conn, entry[1], entry[2])

    def _claim_for(self, conn: Connection, target: Endpoint, seq_id: int) -> bool:
        pool, manager = self._pool, self.manager
        if conn.closed or self._closed or pool is None or manager is None:
            return False
        if pool.claim_idle(conn):
            conn.handoff = _Mark(target, seq_id)
            self._queued(conn, target, seq_id)
            return True
        if not manager.is_pending(conn.id):
            conn.handoff = _Mark(target, seq_id)  # in use: handed off when released
        return False

    def _expedite(self) -> None:
        """Run every pending null-endpoint handoff now (the old endpoint already refuses
        writes, so waiting for ``time / 2`` would only fail commands)."""
        manager = self.manager
        scheduled, self._scheduled = self._scheduled, {}
        if manager is None or manager.closed:
            return
        for conn, target, seq_id in scheduled.values():
            if manager.is_pending(conn.id):
                continue  # already being handed off
            manager.cancel_handoff(conn.id)  # its timer
            if self._claim_for(conn, target, seq_id):
                conn_mark = conn.handoff
                assert isinstance(conn_mark, _Mark)
                try:
                    manager.queue_handoff_nowait(conn, conn_mark.endpoint, conn_mark.seq_id)
                except (ConnectionClosedError, RuntimeError):
                    conn.handoff = None
                    if self._pool is not None:
                        self._pool.discard(conn, "handoff manager closed")

    def _queued(self, conn: Connection, endpoint: Endpoint, seq_id: int) -> None:
        now = trio.current_time()
        self._queued_at.setdefault(conn.id, now)
        self._emit(HandoffQueued(conn.id, str(endpoint), seq_id, now))

    def _blocked(self, endpoint: Endpoint) -> bool:
        """Whether ``endpoint``'s circuit breaker is open and not yet due for a trial: a
        handoff there would fail fast, so connections stay where they are (no churn)."""
        manager = self.manager
        if manager is None:
            return False
        breaker = manager.breaker(endpoint)
        if breaker.state is not BreakerState.OPEN:
            return False
        last = breaker.stats().last_failure_time
        return last is not None and trio.current_time() - last < breaker.reset_timeout

    def _queue(self, conn: Connection) -> bool | None:
        """Give a marked connection to the HandoffManager; ``False`` if it is closed,
        ``None`` if the target's breaker is open (the mark is dropped: keep the
        connection where it is)."""
        mark = conn.handoff
        manager = self.manager
        if not isinstance(mark, _Mark) or manager is None:
            return False
        if self._blocked(mark.endpoint):
            conn.handoff = None
            return None
        try:
            manager.queue_handoff_nowait(conn, mark.endpoint, mark.seq_id)
        except (ConnectionClosedError, RuntimeError):
            conn.handoff = None
            return False
        self._queued(conn, mark.endpoint, mark.seq_id)
        return True

    async def wait_for_moving(self, conn: Connection) -> bool:
        """After ``conn`` answered a write with ``READONLY``: wait (at most
        :data:`READONLY_MOVING_GRACE` seconds) for the MOVING that follows a switch-over.

        :returns: ``True`` if the endpoint is moving (``conn`` is marked for a handoff, or
            a new MOVING arrived), so the refused command can be retried safely.
        """
        if self.manager is None or self._closed:
            await trio.lowlevel.checkpoint()
            return False
        if conn.handoff is None and not self._scheduled:
            if self._moved is None:
                self._moved = trio.Event()
            moved = self._moved
            with trio.move_on_after(READONLY_MOVING_GRACE):
                await moved.wait()
            if not moved.is_set():
                return False
        else:
            await trio.lowlevel.checkpoint()
        if self._scheduled:
            self._expedite()
        return True

    # ---------------------------------------------------------------------- pool hook

    def on_get(self, conn: Connection, is_new: bool) -> Disposition:
        """A connection marked for handoff is queued instead of being lent out."""
        if conn.handoff is None or is_new:
            return Disposition.KEEP
        return _DISPOSITIONS[self._queue(conn)]

    def on_put(self, conn: Connection) -> Disposition:
        """A released connection marked for handoff goes to the HandoffManager."""
        if conn.handoff is None:
            return Disposition.KEEP
        return _DISPOSITIONS[self._queue(conn)]

    def on_remove(self, conn: Connection, reason: str) -> None:
        """A removed connection's handoff (queued or scheduled) is withdrawn."""
        if self.manager is not None and not self.manager.closed:
            self.manager.cancel_handoff(conn.id)
        self._queued_at.pop(conn.id, None)
        self._conn_seq.pop(conn.id, None)
        self._scheduled.pop(conn.id, None)
        self._relaxed.pop(conn.id, None)

    # ----------------------------------------------------------------------- handoffs

    async def _perform(self, conn: Connection, endpoint: Endpoint) -> None:
        # Notifications the old endpoint sent meanwhile (a newer MOVING retargets this
        # handoff: the manager then redoes it to the new endpoint).
        if conn.usable and not conn.in_use:
            await conn.check_idle()
        mark = conn.handoff
        if isinstance(mark, _Mark) and mark.endpoint != endpoint:
            manager = self.manager
            if manager is not None and manager.pending_seq_ids().get(conn.id) == mark.seq_id:
                # The manager took the newer target: it redoes this handoff there.
                raise _Retargeted(f"conn[{conn.id}] now moves to {mark.endpoint}, not {endpoint}")
        opts = self._options_for(endpoint)
        timeout = opts.connect_timeout
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
                stream = await open_stream(opts, unix_path=opts.unix_path)
        except ConnectionError as exc:
            raise HandoffDialError(f"cannot reach {endpoint}: {exc}") from exc
        if scope.cancelled_caught:
            raise HandoffDialError(f"dialing {endpoint} took longer than {timeout} s")
        new = self._new_connection(endpoint)
        try:
            await new.connect(stream)
            conn.adopt_stream_of(new)
        finally:
            new.close_nowait()
        manager = self.manager
        duration = manager.config.post_handoff_relaxed_duration if manager is not None else 0.0
        self.relaxation(conn).relax_after_handoff(trio.current_time(), duration)

    def _latency(self, conn: Connection) -> tuple[float, float]:
        now = trio.current_time()
        return now, now - self._queued_at.pop(conn.id, now)

    def _on_handoff_success(self, conn: Connection) -> None:
        mark = conn.handoff
        conn.handoff = None
        now, latency = self._latency(conn)
        endpoint = str(mark.endpoint) if isinstance(mark, _Mark) else conn.endpoint_text
        if self._pool is not None:
            self._pool.give_back(conn)
        else:  # pragma: no cover - always attached in the client
            conn.close_nowait()
        self._emit(HandoffSucceeded(conn.id, endpoint, latency, now))

    def _on_handoff_failure(self, conn: Connection, error: BaseException) -> None:
        mark = conn.handoff
        conn.handoff = None
        now, latency = self._latency(conn)
        endpoint = str(mark.endpoint) if isinstance(mark, _Mark) else conn.endpoint_text
        if self._pool is not None:
            self._pool.discard(conn, f"handoff failed: {error}")
        else:  # pragma: no cover
            conn.close_nowait()
        self._emit(HandoffFailed(conn.id, endpoint, repr(error), latency, now))

    # ------------------------------------------------------------------------ pub/sub

    def pubsub_link(self) -> _PubSubLink:
        """A connection factory for a :class:`~trio_maint.PubSub` that follows MOVING:
        ``link = handler.pubsub_link(); ps = PubSub(..., connection_factory=link.connect);
        link.attach(ps)``."""
        return _PubSubLink(self)

    # ---------------------------------------------------------------- hooks and events

    def add_hook(self, hook: NotificationHook) -> None:
        """Register a :class:`NotificationHook` (appended; runs after earlier ones)."""
        self._hooks = (*self._hooks, hook)
        on_event = getattr(hook, "on_event", None)
        if callable(on_event):
            self._observers = (*self._observers, on_event)

    @property
    def hooks(self) -> tuple[NotificationHook, ...]:
        """The registered hooks, in order."""
        return self._hooks

    def events(self, max_buffer: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        """A new :class:`EventStream` of :data:`MaintenanceEvent` values from now on:
        ``async for event in r.maintenance.events(): ...``.

        :param max_buffer: events kept for a slow consumer (``int`` >= 1); beyond that the
            oldest are discarded and reported with :class:`EventsDropped`.
        """
        stream = EventStream(self, max_buffer)
        if self._closed:
            stream._close()
        else:
            self._streams.append(stream)
        return stream

    def _unsubscribe(self, stream: EventStream) -> None:
        if stream in self._streams:
            self._streams.remove(stream)

    def _emit(self, event: MaintenanceEvent) -> None:
        for observer in self._observers:
            try:
                observer(event)
            except Exception:
                logger.exception("maintenance event observer %r failed", observer)
        for stream in tuple(self._streams):
            stream._publish(event)

    # -------------------------------------------------------------------------- state

    @property
    def state(self) -> MaintenanceState:
        """A :class:`MaintenanceState` snapshot."""
        now = trio.current_time()
        relaxed = 0
        windows = False
        for conn in list(self._relaxed.values()):
            timeouts = conn.timeouts
            if conn.closed or not isinstance(timeouts, RelaxedTimeouts):
                continue
            if timeouts.is_relaxed(now):
                relaxed += 1
            if timeouts.open_windows > 0:
                windows = True
        deadline = self._moving_deadline
        manager = self.manager
        stats = manager.stats() if manager is not None else None
        return MaintenanceState(
            mode=self._mode,
            endpoint_type=self.endpoint_type,
            in_window=windows or (deadline is not None and now < deadline),
            relaxed_connections=relaxed,
            pending_handoffs=0 if stats is None else stats.pending + stats.scheduled,
            completed_handoffs=0 if stats is None else stats.completed,
            failed_handoffs=0 if stats is None else stats.failed,
            current_endpoint=(
                self.options.address_text if self._target == self._configured else str(self._target)
            ),
            last_moving_seq=self._last_seq,
            moving_deadline=deadline,
        )

    def __repr__(self) -> str:
        return f"<MaintenanceHandler mode={self._mode.value} endpoint={self._target}>"


class _PubSubLink:
    """Connection factory and push handler of one PubSub: on MOVING it asks the PubSub to
    reconnect (once per sequence id) to the new endpoint and resubscribe."""

    def __init__(self, handler: MaintenanceHandler) -> None:
        self.handler = handler
        self.target = handler._target
        self.pubsub: _Reconnectable | None = None
        self.last_seq: int | None = None

    def attach(self, pubsub: _Reconnectable) -> None:
        self.pubsub = pubsub

    async def connect(self) -> Connection:
        conn = self.handler._new_connection(self.target, self.push)
        await conn.connect()
        return conn

    def push(self, conn: Connection, frame: list[Any]) -> None:
        self.handler._process(conn, frame, self)

    def on_notification(self, conn: Connection, n: Notification) -> None:
        if not isinstance(n, Moving):
            self.handler._relax(conn, n)
            return
        if self.last_seq is not None and n.seq_id <= self.last_seq:
            return
        self.last_seq = n.seq_id
        target = n.endpoint if n.endpoint is not None else self.target
        if n.endpoint is not None and MaintenanceHandler._is_at(conn, n.endpoint):
            return
        self.target = target
        logger.info(
            "pub/sub conn[%d] MOVING seq %d: reconnecting to %s and resubscribing",
            conn.id,
            n.seq_id,
            target,
            extra={"event": "pubsub_moving", "conn_id": conn.id, "seq_id": n.seq_id},
        )
        if self.pubsub is not None:
            self.pubsub.reconnect_soon()
