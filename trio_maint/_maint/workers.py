"""The HandoffManager: moves connections to a new endpoint in the background.

When a managed Redis sends MOVING on a connection, the connection must be re-dialled to the
new endpoint, re-handshaken and its stream swapped, while the connection object keeps its
identity (see docs/maintenance.md). :class:`HandoffManager` runs those handoffs: a bounded
queue, worker tasks started on demand, retries with backoff for dial failures, a circuit
breaker per endpoint, and a clean shutdown when its ``async with`` block ends.

It knows nothing about pools or streams: the owner supplies ``perform`` (dial, handshake,
swap) and callbacks that receive each connection back (``on_success``) or tell the owner to
discard it (``on_failure``). Any object with an integer ``id`` can be handed off.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Final, Generic

import trio

from .._net.groups import holds_only
from .._sansio.breaker import BreakerRegistry, BreakerStats, CircuitBreaker
from .._sansio.config import MaintConfig
from .._sansio.endpoint import Endpoint
from .._sansio.errors import (
    CircuitBreakerOpenError,
    ConnectionClosedError,
    HandoffDialError,
    HandoffQueueFullError,
    HandoffRetriesExhaustedError,
)
from .jobs import ConnT, HandoffConnection, HandoffStats, Job, Phase, withdrawn

__all__ = [
    "QUEUE_FULL_GRACE",
    "RETRY_BASE_DELAY",
    "WORKER_IDLE_TIMEOUT",
    "HandoffConnection",
    "HandoffManager",
    "HandoffStats",
]

logger = logging.getLogger("trio_maint.handoff")

#: Seconds a worker waits for a request before exiting.
WORKER_IDLE_TIMEOUT: Final = 15.0
#: Seconds a request waits for room in a full queue before failing.
QUEUE_FULL_GRACE: Final = 0.1
#: Delay (seconds) before the first retry of a failed dial; doubled for each further
#: retry and capped at ``handoff_timeout``.
RETRY_BASE_DELAY: Final = 0.5

QUEUE_FULL_MESSAGE: Final = (
    "handoff queue is full, cannot queue new handoff requests — "
    "consider increasing handoff_queue_size or max_workers"
)


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


class HandoffManager(Generic[ConnT]):
    """Runs connection handoffs in worker tasks it owns; use as ``async with``.

    ::

        async with HandoffManager(config, perform=swap, on_success=give_back,
                                  on_failure=discard) as manager:
            manager.queue_handoff_nowait(conn, Endpoint("10.0.0.5", 12000), seq_id=1001)

    Each queued connection ends in exactly one callback: ``on_success(conn)`` once its
    stream was swapped, or ``on_failure(conn, error)`` when the handoff failed or was
    abandoned; the owner then discards the connection. Between queueing and that callback
    the manager owns the connection: its owner must not use it (but may take it back with
    :meth:`cancel_handoff`). Behaviour follows Redis's handoff worker manager (see
    docs/maintenance.md), with these rules:

    * ``perform(conn, endpoint)`` runs under a deadline of ``handoff_timeout`` seconds
      (visible to it through ``trio.current_effective_deadline()``). It dials, redoes the
      handshake and swaps the stream, and on any error leaves the connection on its old
      stream (closing the new one). It raises :class:`~trio_maint.HandoffDialError` when
      the endpoint cannot be reached: retried after 0.5 s, 1 s, 2 s... (capped at
      ``handoff_timeout``) up to ``max_handoff_retries`` dial attempts in all, then
      :class:`~trio_maint.HandoffRetriesExhaustedError`. Running out of time counts as a
      dial failure. Any other exception fails the handoff at once.
    * Before each dial the endpoint's circuit breaker is asked; an open breaker fails the
      handoff with :class:`~trio_maint.CircuitBreakerOpenError` without dialing. Dial
      failures and successes are recorded, so a breaker recovers (half-open, then closed)
      once the endpoint answers again.
    * One request per connection id: a request for a connection already owned by the
      manager is merged into it; a newer ``seq_id`` replaces the target endpoint (a
      handoff running to the old endpoint is redone to the new one), an older or equal
      one is ignored as stale.
    * Leaving the ``async with`` block cancels workers, retries and timers, and calls
      ``on_failure(conn, ConnectionClosedError)`` for every connection still owned.
      Nothing runs afterwards.

    * ``perform`` is also where the owner applies the post-handoff relaxation
      (``config.post_handoff_relaxed_duration``) to the connection's timeouts, after the
      dial and before the handshake.

    Callbacks are synchronous and must not block; an exception they raise is logged and
    ignored.

    :param config: the :class:`~trio_maint.MaintConfig`; its automatic (0) fields are
        resolved with ``pool_size`` and ``max_active_conns``.
    :param perform: ``async (conn, endpoint) -> None``, see above.
    :param on_success: ``(conn) -> None``, called after a successful handoff.
    :param on_failure: ``(conn, error) -> None``, called when the manager gives the
        connection up; ``error`` is a :class:`~trio_maint.HandoffError`, the exception
        ``perform`` raised, or :class:`~trio_maint.ConnectionClosedError` at shutdown.
    :param breakers: a :class:`~trio_maint.lowlevel.BreakerRegistry` to share between managers;
        by default a new one configured from ``config``.
    :param pool_size: the size of the pool served (``int``), for scaling.
    :param max_active_conns: the pool's limit on open connections (``int``), for scaling.
    """

    def __init__(
        self,
        config: MaintConfig,
        *,
        perform: Callable[[ConnT, Endpoint], Awaitable[None]],
        on_success: Callable[[ConnT], None] | None = None,
        on_failure: Callable[[ConnT, BaseException], None] | None = None,
        breakers: BreakerRegistry | None = None,
        pool_size: int = 0,
        max_active_conns: int = 0,
    ) -> None:
        self.config: Final = config.resolved(pool_size, max_active_conns)
        self._perform = perform
        self._on_success = on_success
        self._on_failure = on_failure
        self._breakers = breakers if breakers is not None else BreakerRegistry.from_config(config)
        self._send, self._receive = trio.open_memory_channel[Job[ConnT]](
            self.config.handoff_queue_size
        )
        self._state = _State.NEW
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._pending: dict[int, Job[ConnT]] = {}
        self._timers: dict[int, tuple[int, trio.CancelScope]] = {}
        self._workers = 0
        self._starting = 0
        self._completed = 0
        self._failed = 0
        self._queue_full = 0

    # ----------------------------------------------------------------------------- lifetime

    async def __aenter__(self) -> HandoffManager[ConnT]:
        if self._state is not _State.NEW:
            raise RuntimeError("a HandoffManager can be entered only once")
        manager: AbstractAsyncContextManager[trio.Nursery] = trio.open_nursery()
        self._nursery = await manager.__aenter__()
        self._nursery_manager = manager
        self._state = _State.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._nursery is not None
        self._state = _State.CLOSED
        self._nursery.cancel_scope.cancel()
        assert self._nursery_manager is not None
        try:
            return bool(await self._nursery_manager.__aexit__(exc_type, exc, tb))
        except BaseExceptionGroup as group:
            # Workers never raise, so a group holds only the body's own exception: let it
            # propagate unwrapped, as if there were no nursery.
            if exc is not None and holds_only(group, exc):
                return False
            raise
        finally:
            self._send.close()
            self._receive.close()
            self._timers.clear()
            error = ConnectionClosedError("handoff manager closed before the handoff completed")
            for job in list(self._pending.values()):
                self._finish(job, error)

    @property
    def closed(self) -> bool:
        """``True`` once the ``async with`` block has been left (``bool``)."""
        return self._state is _State.CLOSED

    def _check_open(self) -> trio.Nursery:
        if self._state is _State.NEW or self._nursery is None:
            raise RuntimeError("use the HandoffManager as 'async with' before queueing")
        if self._state is _State.CLOSED:
            raise ConnectionClosedError("the handoff manager is closed")
        return self._nursery

    # ------------------------------------------------------------------------------ queueing

    @trio.lowlevel.enable_ki_protection
    def queue_handoff_nowait(self, conn: ConnT, endpoint: Endpoint, seq_id: int) -> bool:
        """Hand ``conn`` over for a handoff to ``endpoint`` (never blocks).

        For push handlers and pool hooks. If the queue is full, waiting up to 0.1 s for
        room happens in the background; if it stays full, ``on_failure(conn,
        HandoffQueueFullError)`` is called.

        :param conn: the connection; the manager owns it from now on.
        :param endpoint: the target :class:`~trio_maint.Endpoint`.
        :param seq_id: the MOVING notification's sequence id (``int``).
        :returns: ``True`` if a new request was made, ``False`` if it was merged into the
            request already owning ``conn`` (see the class documentation).
        :raises ConnectionClosedError: the manager is closed; ``conn`` stays the caller's.
        :raises RuntimeError: the manager was not entered yet.
        """
        nursery = self._check_open()
        existing = self._pending.get(conn.id)
        if existing is not None:
            self._merge(existing, endpoint, seq_id)
            return False
        job = Job(conn, endpoint, seq_id, Phase.QUEUED)
        self._pending[conn.id] = job
        self._cancel_timer(conn.id)
        try:
            self._send.send_nowait(job)
        except trio.WouldBlock:
            job.phase = Phase.WAITING_ROOM
            nursery.start_soon(self._grace_send, job)
        self._ensure_workers()
        return True

    async def queue_handoff(self, conn: ConnT, endpoint: Endpoint, seq_id: int) -> bool:
        """Like :meth:`queue_handoff_nowait`, but waits for room in a full queue itself
        (up to 0.1 s) and reports a queue that stayed full by raising.

        :returns: as :meth:`queue_handoff_nowait`.
        :raises HandoffQueueFullError: the queue stayed full; ``on_failure(conn, error)``
            has already been called, so the caller must leave ``conn`` alone.
        :raises ConnectionClosedError: the manager is closed; ``conn`` stays the caller's.
        :raises RuntimeError: the manager was not entered yet.

        If the calling task is cancelled while waiting, the request is withdrawn and
        ``conn`` stays the caller's.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        existing = self._pending.get(conn.id)
        if existing is not None:
            self._merge(existing, endpoint, seq_id)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return False
        job = Job(conn, endpoint, seq_id, Phase.QUEUED)
        self._pending[conn.id] = job
        self._cancel_timer(conn.id)
        try:
            self._send.send_nowait(job)
        except trio.WouldBlock:
            job.phase = Phase.WAITING_ROOM
            self._ensure_workers()
            if not await self._grace_send(job, caller_owned=True):
                raise HandoffQueueFullError(QUEUE_FULL_MESSAGE) from None
            return True
        self._ensure_workers()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return True

    async def _grace_send(self, job: Job[ConnT], caller_owned: bool = False) -> bool:
        """Wait up to QUEUE_FULL_GRACE for room in the queue. Returns False only when the
        queue stayed full (the job is then failed with HandoffQueueFullError)."""
        try:
            with trio.CancelScope() as job.scope:
                with trio.move_on_after(QUEUE_FULL_GRACE):
                    try:
                        await self._send.send(job)
                    except (trio.ClosedResourceError, trio.BrokenResourceError):
                        return True  # closing: the shutdown reports the job
                    if job.phase is Phase.WAITING_ROOM:  # a worker may have it already
                        job.phase = Phase.QUEUED
                        job.scope = None
                    return True
        except BaseException:
            if caller_owned and not job.done and self._pending.get(job.conn.id) is job:
                del self._pending[job.conn.id]
                job.done = True
            raise
        if job.done:
            return True  # withdrawn by cancel_handoff or failed by the shutdown
        self._queue_full += 1
        stats = self._send.statistics()
        logger.warning(
            "conn[%d] %s (%d/%d)",
            job.conn.id,
            QUEUE_FULL_MESSAGE,
            stats.current_buffer_used,
            stats.max_buffer_size,
            extra={
                "event": "handoff_queue_full",
                "conn_id": job.conn.id,
                "queue_len": stats.current_buffer_used,
                "queue_cap": stats.max_buffer_size,
            },
        )
        self._ensure_workers()
        self._finish(job, HandoffQueueFullError(QUEUE_FULL_MESSAGE))
        return False

    def _merge(self, job: Job[ConnT], endpoint: Endpoint, seq_id: int) -> None:
        if seq_id <= job.seq_id:
            logger.debug(
                "conn[%d] already has a handoff (seq %d); ignoring seq %d",
                job.conn.id,
                job.seq_id,
                seq_id,
                extra={"event": "handoff_duplicate", "conn_id": job.conn.id, "seq_id": seq_id},
            )
            return
        changed = endpoint != job.endpoint
        job.seq_id = seq_id
        if changed:
            job.endpoint = endpoint
            job.attempts = 0
            if job.phase is Phase.RUNNING:
                job.redo = True
        logger.debug(
            "conn[%d] handoff retargeted to %s (seq %d)",
            job.conn.id,
            endpoint,
            seq_id,
            extra={"event": "handoff_retargeted", "conn_id": job.conn.id, "seq_id": seq_id},
        )

    def schedule_handoff(
        self,
        conn: ConnT,
        endpoint: Endpoint,
        seq_id: int,
        *,
        delay: float,
        claim: Callable[[ConnT], bool] | None = None,
    ) -> None:
        """Queue a handoff of ``conn`` to ``endpoint`` after ``delay`` seconds (``float``),
        for a MOVING with a null endpoint (reconnect to the configured address after half
        its ``time``, see docs/maintenance.md).

        ``conn`` stays its owner's until the timer fires. Then ``claim(conn)`` is called:
        it must atomically take the connection from the pool if it is idle and return
        ``True`` (the manager then owns it), or return ``False`` to skip (e.g. it is in
        use and will be queued on release). A newer ``seq_id`` replaces a pending timer of
        the same connection; an older or equal one is ignored. Timers die with the manager.

        :raises ConnectionClosedError: the manager is closed.
        :raises RuntimeError: the manager was not entered yet.
        """
        nursery = self._check_open()
        current = self._timers.get(conn.id)
        if current is not None:
            if seq_id <= current[0]:
                return
            current[1].cancel()
        scope = trio.CancelScope()
        self._timers[conn.id] = (seq_id, scope)
        nursery.start_soon(self._fire_later, conn, endpoint, seq_id, delay, claim, scope)

    async def _fire_later(
        self,
        conn: ConnT,
        endpoint: Endpoint,
        seq_id: int,
        delay: float,
        claim: Callable[[ConnT], bool] | None,
        scope: trio.CancelScope,
    ) -> None:
        with scope:
            await trio.sleep(max(delay, 0.0))
        if scope.cancel_called or self._state is not _State.OPEN:
            return
        if self._timers.get(conn.id, (0, None))[1] is scope:
            del self._timers[conn.id]
        try:
            if claim is not None and not claim(conn):
                return
        except Exception:
            logger.exception("conn[%d] claim callback failed", conn.id)
            return
        self.queue_handoff_nowait(conn, endpoint, seq_id)

    def _cancel_timer(self, conn_id: int) -> None:
        timer = self._timers.pop(conn_id, None)
        if timer is not None:
            timer[1].cancel()

    @trio.lowlevel.enable_ki_protection
    def cancel_handoff(self, conn_id: int) -> bool:
        """Withdraw the handoff (or scheduled handoff) of connection ``conn_id`` (``int``),
        e.g. because its owner removed it from the pool. A running attempt is cancelled.
        No callback is called.

        :returns: ``True`` if there was one (``bool``).
        """
        timer = self._timers.pop(conn_id, None)
        if timer is not None:
            timer[1].cancel()
        job = self._pending.pop(conn_id, None)
        if job is None:
            return timer is not None
        job.done = True
        if job.scope is not None:
            job.scope.cancel()
        return True

    # ------------------------------------------------------------------------------- workers

    def _ensure_workers(self) -> None:
        if self._state is not _State.OPEN or self._nursery is None:
            return
        stats = self._send.statistics()
        waiting = sum(1 for j in self._pending.values() if j.phase is Phase.WAITING_ROOM)
        needed = stats.current_buffer_used + waiting - stats.tasks_waiting_receive - self._starting
        while needed > 0 and self._workers < self.config.max_workers:
            self._workers += 1
            self._starting += 1
            needed -= 1
            self._nursery.start_soon(self._worker)

    async def _worker(self) -> None:
        self._starting -= 1
        try:
            while True:
                with trio.move_on_after(WORKER_IDLE_TIMEOUT) as idle:
                    job = await self._receive.receive()
                if idle.cancelled_caught:
                    logger.debug("handoff worker exiting after %.0f s idle", WORKER_IDLE_TIMEOUT)
                    return
                try:
                    await self._run(job)
                except Exception:  # a bug, not an outcome: keep the nursery alive
                    logger.exception("conn[%d] handoff worker crashed", job.conn.id)
                    if not job.done:
                        self._finish(job, ConnectionClosedError("handoff worker crashed"))
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return
        finally:
            self._workers -= 1

    async def _run(self, job: Job[ConnT]) -> None:
        if job.done or self._pending.get(job.conn.id) is not job:
            return
        job.phase = Phase.RUNNING
        config = self.config
        while True:
            endpoint = job.endpoint
            now = trio.current_time()
            breaker = self._breakers.get(endpoint, now)
            if not breaker.allow(now):
                logger.warning(
                    "conn[%d] circuit breaker for %s is open, failing fast",
                    job.conn.id,
                    endpoint,
                    extra={"event": "handoff_breaker_open", "conn_id": job.conn.id},
                )
                self._finish(
                    job, CircuitBreakerOpenError(f"circuit breaker for {endpoint} is open")
                )
                return
            job.attempts += 1
            job.redo = False
            logger.info(
                "conn[%d] handoff to %s (attempt %d/%d)",
                job.conn.id,
                endpoint,
                job.attempts,
                config.max_handoff_retries,
                extra={
                    "event": "handoff_attempt",
                    "conn_id": job.conn.id,
                    "endpoint": str(endpoint),
                    "attempt": job.attempts,
                    "seq_id": job.seq_id,
                },
            )
            error: BaseException | None = None
            with trio.CancelScope() as job.scope:
                with trio.move_on_after(config.handoff_timeout) as budget:
                    try:
                        await self._perform(job.conn, endpoint)
                    except Exception as exc:
                        error = exc
                    except BaseException:  # shutdown: no verdict on the endpoint
                        breaker.release()
                        raise
            job.scope = None
            if withdrawn(job):  # by cancel_handoff while performing
                breaker.release()
                return
            if budget.cancelled_caught and error is None:
                error = HandoffDialError(
                    f"handoff to {endpoint} did not finish within {config.handoff_timeout} s"
                )
            now = trio.current_time()
            if error is None:
                breaker.record_success(now)
                if job.redo:
                    job.attempts = 0
                    continue
                self._finish(job, None)
                return
            if isinstance(error, HandoffDialError):
                breaker.record_failure(now)
            else:
                breaker.release()
            if job.redo:  # retargeted meanwhile: try the new endpoint
                job.attempts = 0
                continue
            if not isinstance(error, HandoffDialError):
                self._finish(job, error)
                return
            if job.attempts >= config.max_handoff_retries:
                exhausted = HandoffRetriesExhaustedError(
                    f"handoff to {endpoint} failed after {job.attempts} dial attempts: {error}"
                )
                exhausted.__cause__ = error
                self._finish(job, exhausted)
                return
            delay = min(RETRY_BASE_DELAY * 2 ** (job.attempts - 1), config.handoff_timeout)
            logger.info(
                "conn[%d] handoff to %s failed (attempt %d/%d), retrying in %.2f s: %s",
                job.conn.id,
                endpoint,
                job.attempts,
                config.max_handoff_retries,
                delay,
                error,
                extra={"event": "handoff_retry", "conn_id": job.conn.id, "delay": delay},
            )
            job.phase = Phase.RETRY_WAIT
            assert self._nursery is not None
            self._nursery.start_soon(self._retry_later, job, delay)
            return

    async def _retry_later(self, job: Job[ConnT], delay: float) -> None:
        with trio.CancelScope() as job.scope:
            await trio.sleep(delay)
        job.scope = None
        if job.done or self._state is not _State.OPEN:
            return
        job.phase = Phase.QUEUED
        try:
            self._send.send_nowait(job)
        except trio.WouldBlock:
            job.phase = Phase.WAITING_ROOM
            self._ensure_workers()
            await self._grace_send(job)
            return
        self._ensure_workers()

    @trio.lowlevel.enable_ki_protection
    def _finish(self, job: Job[ConnT], error: BaseException | None) -> None:
        if job.done:
            return
        job.done = True
        if self._pending.get(job.conn.id) is job:
            del self._pending[job.conn.id]
        extra = {"conn_id": job.conn.id, "endpoint": str(job.endpoint), "seq_id": job.seq_id}
        if error is None:
            self._completed += 1
            logger.info(
                "conn[%d] handoff to %s succeeded",
                job.conn.id,
                job.endpoint,
                extra={"event": "handoff_succeeded", **extra},
            )
            try:
                if self._on_success is not None:
                    self._on_success(job.conn)
            except Exception:
                logger.exception("conn[%d] on_success callback failed", job.conn.id)
            return
        self._failed += 1
        logger.warning(
            "conn[%d] handoff to %s failed: %s",
            job.conn.id,
            job.endpoint,
            error,
            extra={"event": "handoff_failed", "error": repr(error), **extra},
        )
        try:
            if self._on_failure is not None:
                self._on_failure(job.conn, error)
        except Exception:
            logger.exception("conn[%d] on_failure callback failed", job.conn.id)

    # ------------------------------------------------------------------------- introspection

    def is_pending(self, conn_id: int) -> bool:
        """Whether the manager owns connection ``conn_id`` (``int``) for a handoff."""
        return conn_id in self._pending

    def pending_seq_ids(self) -> dict[int, int]:
        """A copy of the pending map: connection id -> MOVING ``seq_id``."""
        return {conn_id: job.seq_id for conn_id, job in self._pending.items()}

    @property
    def breakers(self) -> BreakerRegistry:
        """The :class:`~trio_maint.lowlevel.BreakerRegistry` in use."""
        return self._breakers

    def breaker(self, endpoint: Endpoint) -> CircuitBreaker:
        """The circuit breaker of ``endpoint`` (created if needed)."""
        return self._breakers.get(endpoint, trio.current_time())

    def circuit_breaker_stats(self) -> tuple[BreakerStats, ...]:
        """:class:`~trio_maint.lowlevel.BreakerStats` of every endpoint seen, sorted by endpoint."""
        return self._breakers.stats()

    def stats(self) -> HandoffStats:
        """A :class:`HandoffStats` snapshot."""
        phases = [job.phase for job in self._pending.values()]
        return HandoffStats(
            pending=len(phases),
            queued=self._send.statistics().current_buffer_used if not self.closed else 0,
            running=phases.count(Phase.RUNNING),
            retry_waiting=phases.count(Phase.RETRY_WAIT),
            completed=self._completed,
            failed=self._failed,
            queue_full=self._queue_full,
            workers=self._workers,
            max_workers=self.config.max_workers,
            queue_capacity=self.config.handoff_queue_size,
            scheduled=len(self._timers),
        )
