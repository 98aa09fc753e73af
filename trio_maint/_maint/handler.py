"""Maintenance glue: the client's reaction to maintenance push notifications.

One :class:`MaintenanceHandler` per client (``r.maintenance``) ties the sans-IO pieces
(parsing, relaxed timeouts, endpoints) and the :class:`~trio_maint.lowlevel.HandoffManager` to the
connection pool:

* its :meth:`~MaintenanceHandler.handshake_hook` opts every new stream in with
  ``CLIENT MAINT_NOTIFICATIONS ON moving-endpoint-type T`` after ``HELLO 3``;
* its :meth:`~MaintenanceHandler.push_handler` parses each push frame, runs the
  :class:`NotificationHook` hooks, relaxes or restores the receiving connection's
  timeouts, and reacts to MOVING (hand connections off to the new endpoint);
* as a :class:`~trio_maint.lowlevel.PoolHook` it hands marked connections to the HandoffManager
  when they are released (or found idle), and withdraws handoffs of removed connections;
* it publishes typed events (:meth:`~MaintenanceHandler.events`) and a state snapshot
  (:attr:`~MaintenanceHandler.state`).

See docs/maintenance.md for the behaviour and a timeline.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Self

import attrs
import trio

from .._net.connection import Connection, PushHandler
from .._net.groups import holds_only
from .._net.pool import ConnectionPool, Disposition
from .._net.stream import open_stream
from .._sansio.config import MaintConfig, MaintMode
from .._sansio.endpoint import Endpoint, EndpointType, detect_endpoint_type
from .._sansio.errors import (
    ConnectionError,
    HandoffDialError,
    MaintenanceNotSupportedError,
    RedisError,
)
from .._sansio.errors import TimeoutError as RedisTimeoutError
from .._sansio.notifications import (
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
from .._sansio.options import ClientOptions
from .._sansio.timeouts import RelaxedTimeouts
from .events import (
    EventStream,
    HandoffFailed,
    HandoffSucceeded,
    MaintenanceDisabled,
    MaintenanceEvent,
    MaintenanceState,
    MalformedNotification,
    NotificationReceived,
)
from .hooks import NotificationHook
from .moving import READONLY_MOVING_GRACE, MovingReactions, _Mark
from .pubsub import PubSubLink
from .workers import HandoffManager

__all__ = ["DEFAULT_EVENT_BUFFER", "READONLY_MOVING_GRACE", "MaintenanceHandler"]

logger = logging.getLogger("trio_maint.maintenance")

#: Default capacity of an :meth:`MaintenanceHandler.events` stream.
DEFAULT_EVENT_BUFFER: Final = 256

_OPENING = (Migrating, FailingOver, SMigrating)
_CLOSING = (Migrated, FailedOver, SMigrated)

_DISPOSITIONS: Final = {True: Disposition.TAKEN, False: Disposition.REMOVE, None: Disposition.KEEP}


class _Retargeted(Exception):
    """A handoff attempt abandoned because a newer MOVING named another endpoint."""


# -------------------------------------------------------------------------------- handler


class MaintenanceHandler(MovingReactions):
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
            if exc is not None and holds_only(group, exc):
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
        """The pool's dialer: a connected, handshaken :class:`~trio_maint.lowlevel.Connection` to
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

    def _process(self, conn: Connection, frame: list[Any], link: PubSubLink | None) -> None:
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
        """``conn``'s :class:`~trio_maint.lowlevel.RelaxedTimeouts`, installed as its timeout
        policy on first use (connections that never saw a notification have none: no cost per
        command)."""
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

    def pubsub_link(self) -> PubSubLink:
        """A connection factory for a :class:`~trio_maint.PubSub` that follows MOVING:
        ``link = handler.pubsub_link(); ps = PubSub(..., connection_factory=link.connect);
        link.attach(ps)``."""
        return PubSubLink(self)

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
