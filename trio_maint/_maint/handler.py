"""The maintenance shell of one client (``r.maintenance``): a thin Trio layer that feeds
the sans-IO :class:`~trio_maint.lowlevel.MaintenanceMachine` and carries out its actions.

A push frame goes one way, down: connection -> :meth:`MaintenanceHandler.push_handler`
-> parse (sans-IO) -> hooks' ``pre`` -> machine -> actions carried out here on the pool,
the :class:`~trio_maint.lowlevel.HandoffManager`, the pub/sub links, the timer and the
event streams -> hooks' ``post``. The pool's hooks (acquire, release, remove), the
handoffs' outcomes, the timer and ``READONLY`` replies go the same way. Decisions are
never taken here: see :mod:`trio_maint._sansio.maint` and docs/maintenance.md.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import trio

from .._net.connection import Connection, PushHandler
from .._net.groups import unwrap_group
from .._net.pool import ConnectionPool, Disposition
from .._sansio.breaker import BreakerState, BreakerStats, CircuitBreaker
from .._sansio.config import MaintConfig, MaintMode
from .._sansio.endpoint import Endpoint, EndpointType, detect_endpoint_type
from .._sansio.errors import (
    CircuitBreakerOpenError,
    ConnectionClosedError,
    HandoffDialError,
    HandoffQueueFullError,
    MaintenanceNotSupportedError,
    RedisError,
)
from .._sansio.events import (
    CircuitBreakerChanged,
    MalformedNotification,
    MovingRefused,
    NotificationReceived,
)
from .._sansio.maint import MaintenanceMachine
from .._sansio.maint_types import (
    Action,
    CancelHandoff,
    ConnKind,
    Discard,
    Emit,
    GiveBack,
    MovingSeen,
    Outcome,
    ReadonlyVerdict,
    Relax,
    Restore,
    ScheduleTimer,
    SetDialTarget,
    StartHandoff,
    TakeIdle,
    Verdict,
)
from .._sansio.notifications import Malformed, parse_notification
from .._sansio.options import ClientOptions
from .._sansio.trust import TargetPolicy
from .dialer import Dialer
from .events import DEFAULT_EVENT_BUFFER, EventHub, EventStream, MaintenanceState
from .hooks import NotificationHook
from .link import PubSubLink
from .logs import RefusedLog, log_failure, log_malformed, log_window, logger
from .workers import HandoffManager, open_handoff_manager

__all__ = ["DEFAULT_EVENT_BUFFER", "READONLY_MOVING_GRACE", "MaintenanceHandler"]

#: Seconds (``float``) a write refused with ``READONLY`` waits for a MOVING before the
#: error is raised (the old endpoint of a move turns read-only just before MOVING).
READONLY_MOVING_GRACE: Final = 1.0

#: What the HandoffManager hands off: a pooled connection or a pub/sub link.
_Item = Connection | PubSubLink


class MaintenanceHandler:
    """The maintenance side of one client (``r.maintenance``); made by
    :func:`~trio_maint.open_redis`, which runs it for the client's lifetime
    (:meth:`running`).

    :param options: the client's :class:`~trio_maint.ClientOptions`.
    :param config: the :class:`~trio_maint.MaintConfig` (``None``: defaults, mode ``auto``).

    Attributes: ``options``, ``config``, ``endpoint_type`` (the ``moving-endpoint-type``
    sent, auto-detected from the address and TLS), ``machine`` (the
    :class:`~trio_maint.lowlevel.MaintenanceMachine`), ``manager`` (the
    :class:`~trio_maint.lowlevel.HandoffManager` while running, else ``None``).
    """

    def __init__(self, options: ClientOptions, config: MaintConfig | None = None) -> None:
        config = config if config is not None else MaintConfig()
        self.options: Final = options
        self.config: Final = config
        endpoint_type = config.endpoint_type
        if config.enabled and endpoint_type is EndpointType.AUTO:
            host = "" if options.unix_path is not None else options.host
            endpoint_type = detect_endpoint_type(host, options.ssl)
        #: The ``moving-endpoint-type`` sent in the handshake (:class:`EndpointType`).
        self.endpoint_type: Final = endpoint_type
        if options.unix_path is not None:
            configured = Endpoint(options.unix_path, options.port or 6379)
        else:
            configured = Endpoint(options.host, options.port or 6379)
        self.configured: Final = configured
        #: Which MOVING targets are followed (:class:`~trio_maint.lowlevel.TargetPolicy`,
        #: docs/security.md).
        self.policy: Final = TargetPolicy(
            endpoint_type,
            configured,
            config.trusted_targets,
            config.target_check,
        )
        #: The decisions (:class:`~trio_maint.lowlevel.MaintenanceMachine`).
        self.machine: Final = MaintenanceMachine(
            config,
            configured,
            pool_size=options.pool_size,
            max_active_conns=options.max_active_conns,
            policy=self.policy,
        )
        self.manager: HandoffManager[_Item] | None = None
        self._dialer = Dialer(
            options,
            self.machine if config.enabled else None,
            configured,
            policy=self.policy,
            push_handler=self.push_handler if config.enabled else None,
            handshake_hook=self.handshake_hook if config.enabled else None,
        )
        self._pool: ConnectionPool | None = None
        self._links: dict[int, PubSubLink] = {}
        self._link_ids = itertools.count(-1, -1)
        self._hub = EventHub()
        self.machine.breakers.on_change = self._breaker_changed
        self._work: deque[Action] = deque()
        self._working = False
        self._wake = math.inf
        self._timer: trio.CancelScope | None = None
        self._moved: trio.Event | None = None
        self._refused_log = RefusedLog(options.address_text)
        self._closed = False

    def __repr__(self) -> str:
        target = self.machine.state(0.0).dial_target
        return f"<MaintenanceHandler mode={self.mode.value} endpoint={target}>"

    # ------------------------------------------------------------------------ wiring

    @property
    def mode(self) -> MaintMode:
        """The effective mode (``auto`` becomes ``disabled`` after a refusal)."""
        return self.machine.mode

    @property
    def push_handler_or_none(self) -> PushHandler | None:
        """The push handler to install on connections (``None`` when disabled)."""
        return self.push_handler if self.config.enabled else None

    def attach(self, pool: ConnectionPool) -> None:
        """Serve ``pool``: register as its hook (when the feature is not disabled)."""
        self._pool = pool
        if self.config.enabled:
            pool.hooks.append(self)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the background side for the block: the HandoffManager's workers and the
        machine's timer, in a nursery entered here; on exit they are cancelled, the
        machine stops and the event streams end."""
        try:
            if not self.config.enabled:
                await trio.lowlevel.checkpoint()
                yield
                return
            async with (
                trio.open_nursery() as nursery,
                open_handoff_manager(
                    self.config,
                    perform=self._perform,
                    on_outcome=self._on_outcome,
                    pool_size=self.options.pool_size,
                    max_active_conns=self.options.max_active_conns,
                ) as manager,
            ):
                self.manager = manager
                nursery.start_soon(self._run_timer)
                try:
                    yield
                finally:
                    self._closed = True
                    self.machine.close()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None
        finally:
            self._closed = True
            self.machine.close()
            self._hub.close()

    # ----------------------------------------------------------------------- dialing

    async def _connect(
        self, push: PushHandler | None = None, *, memory_tls: bool = False
    ) -> tuple[Connection, Endpoint, bool]:
        return await self._dialer.connect(push, memory_tls=memory_tls)

    async def dial(self) -> Connection:
        """The pool's dialer: a connected, handshaken
        :class:`~trio_maint.lowlevel.Connection` to the current endpoint (the configured
        one, or where a MOVING sent the client; see docs/maintenance.md).

        :raises ConnectionError, TimeoutError, AuthenticationError: as
            :meth:`Connection.connect <trio_maint.lowlevel.Connection.connect>`.
        """
        conn, endpoint, fell_back = await self._connect()
        self._carry_out(
            self.machine.register(conn.id, endpoint, trio.current_time(), fallback=fell_back)
        )
        return conn

    # ---------------------------------------------------------------------- handshake

    async def handshake_hook(self, conn: Connection) -> None:
        """Opt ``conn`` in after ``HELLO 3`` (see docs/maintenance.md).

        :raises MaintenanceNotSupportedError: mode ``enabled`` and the server refused.
        """
        if self.mode is MaintMode.DISABLED:
            return
        reply = await conn.handshake_command(
            "client", "maint_notifications", "on", "moving-endpoint-type", self.endpoint_type.value
        )
        if not isinstance(reply, RedisError):
            conn.maint_enabled = True
            return
        fail, actions = self.machine.handshake_refused(
            conn.endpoint_text, str(reply), trio.current_time()
        )
        if fail:
            raise MaintenanceNotSupportedError(
                f"server at {conn.endpoint_text} refused CLIENT MAINT_NOTIFICATIONS "
                f"({reply}) and maintenance mode is 'enabled'"
            )
        if actions:
            logger.debug(
                "server at %s does not support maintenance notifications (%s); "
                "maintenance handling is off for this client",
                conn.endpoint_text,
                reply,
                extra={"event": "maint_notifications_unsupported", "endpoint": conn.endpoint_text},
            )
        self._carry_out(actions)

    # ----------------------------------------------------------------- notifications

    def push_handler(self, conn: Connection, frame: list[Any]) -> None:
        """The pooled connections' push handler (synchronous, never raises)."""
        self.process(conn.id, conn, frame, pubsub=False)

    def process(self, key: int, conn: Connection, frame: list[Any], *, pubsub: bool) -> None:
        """Handle one push frame read on ``conn``, known to the machine as ``key``."""
        result = parse_notification(frame)
        if result is None:
            return
        now = trio.current_time()
        if isinstance(result, Malformed):
            log_malformed(conn.id, result, now)
            self._hub.emit(
                MalformedNotification(conn.id, result.name, result.reason, result.shape, now)
            )
            return
        hooks = self._hub.hooks
        for hook in hooks:
            try:
                keep = hook.pre(conn, result)
            except Exception:
                log_failure(
                    "notification_hook_failed_pre",
                    now,
                    "notification hook %r failed in pre()",
                    hook,
                )
                continue
            if keep is False:
                logger.debug("conn[%d] %s dropped by hook %r", conn.id, result.NAME, hook)
                return
        error: BaseException | None = None
        try:
            log_window(conn.id, result, now)
            self._carry_out(self.machine.notification(key, result, now))
        except Exception as exc:
            error = exc
            log_failure(
                "notification_failed",
                now,
                "conn[%d] handling %s failed",
                conn.id,
                result.NAME,
                conn_id=conn.id,
            )
        for hook in hooks:
            try:
                hook.post(conn, result, error)
            except Exception:
                log_failure(
                    "notification_hook_failed_post",
                    now,
                    "notification hook %r failed in post()",
                    hook,
                )
        if self._hub.listening:
            self._hub.emit(
                NotificationReceived(
                    conn.id, result, pubsub, None if error is None else repr(error), now
                )
            )

    # ---------------------------------------------------------------------- pool hook

    def on_get(self, conn: Connection, is_new: bool) -> Disposition:
        """A connection whose handoff is due is taken for it instead of being lent."""
        if self.machine.quick_acquired(conn.id, is_new):
            return Disposition.KEEP
        verdict, actions = self.machine.acquired(conn.id, is_new, trio.current_time())
        if actions:
            self._carry_out(actions)
        return Disposition.KEEP if verdict is Verdict.KEEP else Disposition.TAKEN

    def on_put(self, conn: Connection) -> Disposition:
        """A released connection whose handoff is due goes to the HandoffManager."""
        if self.machine.quick_released(conn.id):
            return Disposition.KEEP
        verdict, actions = self.machine.released(conn.id, trio.current_time())
        if actions:
            self._carry_out(actions)
        return Disposition.KEEP if verdict is Verdict.KEEP else Disposition.TAKEN

    def on_remove(self, conn: Connection, reason: str) -> None:
        """A removed connection is forgotten; its handoff (if any) is withdrawn."""
        self._carry_out(self.machine.removed(conn.id))

    # ----------------------------------------------------------------------- actions

    def _carry_out(self, actions: Sequence[Action]) -> None:
        """Carry out ``actions`` in order, and those they lead to, iteratively (an action
        that feeds the machine again only queues more work)."""
        if not actions:
            return
        self._work.extend(actions)
        if self._working:
            return
        self._working = True
        try:
            while self._work:
                action = self._work.popleft()
                try:
                    self._act(action)
                except Exception:  # a bug: never break the caller's command
                    logger.exception("carrying out %r failed", action)
        finally:
            self._working = False

    def _conn(self, conn_id: int) -> Connection | None:
        if conn_id < 0:
            link = self._links.get(conn_id)
            return None if link is None else link.connection
        return None if self._pool is None else self._pool.find(conn_id)

    def _act(self, action: Action) -> None:
        now = trio.current_time()
        if isinstance(action, Relax | Restore):
            conn = self._conn(action.conn_id)
            if conn is not None:
                conn.timeouts = action.timeouts if isinstance(action, Relax) else None
        elif isinstance(action, TakeIdle):
            conn = self._conn(action.conn_id)
            ok = conn is not None and self._pool is not None and self._pool.claim_idle(conn)
            self._work.extend(self.machine.claimed(action.conn_id, ok, now))
        elif isinstance(action, StartHandoff):
            self._start(action, now)
        elif isinstance(action, CancelHandoff):
            if self.manager is not None:
                self.manager.cancel_handoff(action.conn_id)
        elif isinstance(action, GiveBack):
            conn = self._conn(action.conn_id)
            if conn is not None and action.conn_id > 0 and self._pool is not None:
                self._pool.give_back(conn)
        elif isinstance(action, Discard):
            conn = self._conn(action.conn_id)
            if conn is not None and self._pool is not None:
                self._pool.discard(conn, action.reason)
            else:
                self._work.extend(self.machine.removed(action.conn_id))
        elif isinstance(action, ScheduleTimer):
            if action.at < self._wake:
                self._wake = action.at
                if self._timer is not None:
                    self._timer.deadline = action.at
        elif isinstance(action, MovingSeen):
            moved, self._moved = self._moved, None
            if moved is not None:
                moved.set()
        elif isinstance(action, Emit):
            if isinstance(action.event, MovingRefused):
                self._refused_log.log(action.event)
            self._hub.emit(action.event)
        elif isinstance(action, SetDialTarget):
            logger.debug("new connections go to %s", action.endpoint)

    def _start(self, action: StartHandoff, now: float) -> None:
        item: _Item | None = self._conn(action.conn_id) if action.conn_id > 0 else None
        if action.conn_id < 0:
            item = self._links.get(action.conn_id)
        manager = self.manager
        if item is not None and manager is not None and not manager.closed:
            manager.queue_handoff_nowait(item, action.endpoint, action.seq_id)
            return
        self._work.extend(
            self.machine.handoff_result(action.conn_id, Outcome.ABANDONED, now, "closed")
        )

    async def _run_timer(self) -> None:
        """The machine's one timer: sleeps until the earliest time it asked for."""
        while True:
            with trio.CancelScope(deadline=self._wake) as scope:
                self._timer = scope
                await trio.sleep_forever()
            self._timer = None
            now = trio.current_time()
            if now >= self._wake:
                self._wake = math.inf
                self._carry_out(self.machine.timer_fired(now))

    # ----------------------------------------------------------------------- handoffs

    async def _perform(self, item: _Item, endpoint: Endpoint) -> None:
        """One handoff attempt (run by a HandoffManager worker under ``handoff_timeout``):
        dial the target, handshake, swap the stream (pooled) or hand the new connection
        to the PubSub (pub/sub)."""
        if isinstance(item, Connection) and item.usable and not item.in_use:
            await item.check_idle()  # a newer MOVING read from the old stream retargets
        target = self.machine.attempt_started(item.id, trio.current_time())
        if target is None:
            raise CircuitBreakerOpenError(f"circuit breaker for {endpoint} is open")
        link = item if isinstance(item, PubSubLink) else None
        push = None if link is None else link.push
        memory_tls = link is not None and link.memory_tls  # a cache's tracking connection
        new = await self._dialer.connect_for_handoff(target, push, memory_tls=memory_tls)
        try:
            if isinstance(item, PubSubLink):
                await item.adopt(new)  # the PubSub owns it from now on
            else:
                item.adopt_stream_of(new)  # ``new`` is left empty
        except BaseException:
            new.close_nowait()
            raise
        if not isinstance(item, PubSubLink):
            new.close_nowait()

    def _on_outcome(self, item: _Item, error: BaseException | None) -> None:
        manager = self.manager
        if error is None:
            outcome = Outcome.OK
        elif isinstance(error, HandoffDialError):
            outcome = Outcome.DIAL_ERROR
        elif isinstance(error, CircuitBreakerOpenError):
            outcome = Outcome.BREAKER_OPEN
        elif isinstance(error, HandoffQueueFullError):
            outcome = Outcome.QUEUE_FULL
        elif isinstance(error, ConnectionClosedError) and manager is not None and manager.closed:
            outcome = Outcome.ABANDONED
        else:
            outcome = Outcome.ERROR
        now = trio.current_time()
        reason = "" if error is None else repr(error)
        self._carry_out(self.machine.handoff_result(item.id, outcome, now, reason))

    # ------------------------------------------------------------------------ READONLY

    async def wait_for_moving(self, conn: Connection) -> bool:
        """After ``conn`` answered a write with ``READONLY`` (so it did not run): whether
        the endpoint is moving, so the write may be sent again. Waits up to
        :data:`READONLY_MOVING_GRACE` seconds for the MOVING that follows a switch-over.
        Only on connections that opted in to maintenance notifications.

        :returns: ``True`` if the write may be retried (``bool``).
        """
        if not self.config.enabled or self._closed or not conn.maint_enabled:
            await trio.lowlevel.checkpoint()
            return False
        endpoint = Endpoint(conn.unix_path or conn.host, conn.port)
        verdict, actions = self.machine.readonly(conn.id, endpoint, trio.current_time())
        self._carry_out(actions)
        if verdict is ReadonlyVerdict.WAIT:
            if self._moved is None:
                self._moved = trio.Event()
            moved = self._moved
            with trio.move_on_after(READONLY_MOVING_GRACE):
                await moved.wait()
            now = trio.current_time()
            verdict, actions = self.machine.readonly(conn.id, endpoint, now, waited=True)
            self._carry_out(actions)
        else:
            await trio.lowlevel.checkpoint()
        return verdict is ReadonlyVerdict.RETRY

    # ------------------------------------------------------------------------ pub/sub

    def pubsub_link(self) -> PubSubLink:
        """A :class:`~trio_maint.lowlevel.PubSubLink` for one :class:`~trio_maint.PubSub`:
        its connection factory and push handler, so the subscriber follows MOVING as the
        pool does."""
        link = PubSubLink(self, next(self._link_ids))
        self._links[link.id] = link
        return link

    async def connect_link(self, link: PubSubLink) -> Connection:
        """A new connection for ``link`` to the current dial target (for
        :meth:`PubSubLink.connect <trio_maint.lowlevel.PubSubLink.connect>`)."""
        conn, endpoint, fell_back = await self._connect(link.push, memory_tls=link.memory_tls)
        now = trio.current_time()
        self._carry_out(
            self.machine.register(link.id, endpoint, now, kind=ConnKind.PUBSUB, fallback=fell_back)
        )
        return conn

    def forget_link(self, link: PubSubLink) -> None:
        """``link``'s PubSub closed."""
        if self._links.pop(link.id, None) is not None:
            self._carry_out(self.machine.removed(link.id))

    # ---------------------------------------------------------------- hooks and events

    def add_hook(self, hook: NotificationHook) -> None:
        """Register a :class:`~trio_maint.NotificationHook` (appended; runs after earlier
        ones)."""
        self._hub.add_hook(hook)

    def remove_hook(self, hook: NotificationHook) -> None:
        """Unregister ``hook`` (its ``on_event`` too); nothing happens if it is not
        registered."""
        self._hub.remove_hook(hook)

    def _breaker_changed(self, breaker: CircuitBreaker, old: BreakerState, now: float) -> None:
        if self._hub.listening:
            self._hub.emit(
                CircuitBreakerChanged(str(breaker.endpoint), old.value, breaker.state.value, now)
            )

    @property
    def hooks(self) -> tuple[NotificationHook, ...]:
        """The registered hooks, in order."""
        return self._hub.hooks

    def events(self, max_buffer: int = DEFAULT_EVENT_BUFFER) -> EventStream:
        """A new :class:`~trio_maint.EventStream` of
        :data:`~trio_maint.MaintenanceEvent` values from now on:
        ``async for event in r.maintenance.events(): ...``.

        :param max_buffer: events kept for a slow consumer (``int`` >= 1); beyond that the
            oldest are discarded and reported with :class:`~trio_maint.EventsDropped`.
        """
        return self._hub.stream(max_buffer)

    # -------------------------------------------------------------------------- state

    @property
    def state(self) -> MaintenanceState:
        """A :class:`~trio_maint.MaintenanceState` snapshot."""
        now = trio.current_time()
        machine = self.machine.state(now)
        target = machine.dial_target
        return MaintenanceState(
            mode=machine.mode,
            endpoint_type=self.endpoint_type,
            in_window=machine.open_windows
            or (machine.moving_deadline is not None and now < machine.moving_deadline),
            relaxed_connections=machine.relaxed_connections,
            pending_handoffs=machine.pending_handoffs,
            completed_handoffs=machine.completed_handoffs,
            failed_handoffs=machine.failed_handoffs,
            current_endpoint=(
                self.options.address_text if target == self.configured else str(target)
            ),
            last_moving_seq=machine.last_moving_seq,
            moving_deadline=machine.moving_deadline,
        )

    def handoff_target(self, conn: Connection) -> Endpoint | None:
        """Where ``conn`` is due to move (a MOVING marked it, or its handoff is queued or
        under way), or ``None`` (:class:`~trio_maint.Endpoint`)."""
        record = self.machine.record(conn.id)
        return None if record is None or record.mark is None else record.mark.target

    def circuit_breaker_stats(self) -> tuple[BreakerStats, ...]:
        """:class:`~trio_maint.lowlevel.BreakerStats` of every endpoint dialed (bounded),
        sorted by endpoint."""
        return self.machine.breakers.stats()
