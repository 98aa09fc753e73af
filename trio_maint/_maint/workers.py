"""The HandoffManager: runs connection handoffs in worker tasks (the I/O half of a handoff).

The :class:`~trio_maint.lowlevel.MaintenanceMachine` decides which connection moves
where, when, whether a failure is retried and what becomes of the connection. The manager
only runs the attempts it is given, as Redis's handoff worker manager does (see
docs/maintenance.md): a bounded trio memory channel (``send_nowait``, then up to
:data:`QUEUE_FULL_GRACE` seconds for room), worker tasks started on demand up to
``max_workers`` (each exits after :data:`WORKER_IDLE_TIMEOUT` seconds without work), every
attempt under a deadline of ``handoff_timeout`` seconds and a cancel scope of its own, and
exactly one report per request through ``on_outcome``.

Get one with :func:`open_handoff_manager`; its nursery is entered with ``async with`` and
nothing it started outlives the block.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final, Generic, Protocol, TypeVar

import attrs
import trio

from .._net.groups import unwrap_group
from .._sansio.config import MaintConfig
from .._sansio.endpoint import Endpoint
from .._sansio.errors import ConnectionClosedError, HandoffDialError, HandoffQueueFullError
from .._sansio.loglimit import log_limited

__all__ = [
    "QUEUE_FULL_GRACE",
    "QUEUE_FULL_MESSAGE",
    "WORKER_IDLE_TIMEOUT",
    "HandoffConnection",
    "HandoffManager",
    "HandoffStats",
    "open_handoff_manager",
]

logger = logging.getLogger("trio_maint.handoff")

#: Seconds (``float``) a worker waits for a request before exiting.
WORKER_IDLE_TIMEOUT: Final = 15.0
#: Seconds (``float``) a request waits for room in a full queue before failing.
QUEUE_FULL_GRACE: Final = 0.1

QUEUE_FULL_MESSAGE: Final = (
    "handoff queue is full, cannot queue new handoff requests — "
    "consider increasing handoff_queue_size or max_workers"
)


class HandoffConnection(Protocol):
    """What the manager needs from what it hands off: a unique ``id`` (``int``), stable
    across handoffs. Everything else is done by the owner's ``perform``."""

    @property
    def id(self) -> int: ...


ConnT = TypeVar("ConnT", bound=HandoffConnection)


class _Phase(enum.Enum):
    WAITING_ROOM = "waiting for room in the queue"
    QUEUED = "queued"
    RUNNING = "running"


@attrs.define(eq=False)
class _Job(Generic[ConnT]):
    conn: ConnT
    endpoint: Endpoint
    seq_id: int
    phase: _Phase
    done: bool = False
    scope: trio.CancelScope | None = None


def _withdrawn(job: _Job[ConnT]) -> bool:
    # A function call, so that type checkers do not assume ``done`` unchanged across awaits.
    return job.done


@attrs.frozen
class HandoffStats:
    """A snapshot of a :class:`HandoffManager` (all ``int``).

    :ivar pending: requests the manager owns (waiting for room, queued or running).
    :ivar queued: requests sitting in the queue.
    :ivar running: attempts being performed now.
    :ivar completed: attempts that succeeded since the start.
    :ivar failed: attempts that failed since the start, any reason.
    :ivar queue_full: requests refused because the queue stayed full.
    :ivar workers: worker tasks alive; :ivar max_workers: the limit.
    :ivar queue_capacity: the queue's capacity (``handoff_queue_size``).
    """

    pending: int
    queued: int
    running: int
    completed: int
    failed: int
    queue_full: int
    workers: int
    max_workers: int
    queue_capacity: int


class HandoffManager(Generic[ConnT]):
    """Runs handoff attempts in worker tasks of its own nursery; get one from
    :func:`open_handoff_manager`.

    Between :meth:`queue_handoff_nowait` and its report the manager owns the connection.
    Each request ends in exactly one call ``on_outcome(conn, error)``: ``error`` is
    ``None`` when ``perform`` returned, the exception ``perform`` raised (a
    :class:`~trio_maint.HandoffDialError` when the endpoint could not be reached; running
    out of ``handoff_timeout`` counts as one), :class:`~trio_maint.HandoffQueueFullError`
    when the queue stayed full, or :class:`~trio_maint.ConnectionClosedError` when the
    manager closed first. A request withdrawn with :meth:`cancel_handoff` gets no report.
    Callbacks are synchronous; an exception they raise is logged and ignored.
    """

    def __init__(
        self,
        config: MaintConfig,
        nursery: trio.Nursery,
        *,
        perform: Callable[[ConnT, Endpoint], Awaitable[None]],
        on_outcome: Callable[[ConnT, BaseException | None], None],
    ) -> None:
        if not config.is_resolved:
            raise ValueError("HandoffManager needs a resolved MaintConfig (config.resolved())")
        self.config: Final = config
        self._nursery = nursery
        self._perform = perform
        self._on_outcome = on_outcome
        self._send, self._receive = trio.open_memory_channel[_Job[ConnT]](config.handoff_queue_size)
        self._closed = False
        self._pending: dict[int, _Job[ConnT]] = {}
        self._workers = 0
        self._starting = 0
        self._waiting = 0  # requests waiting for room in a full queue
        self._completed = 0
        self._failed = 0
        self._queue_full = 0

    @property
    def closed(self) -> bool:
        """``True`` once its ``async with`` block has been left (``bool``)."""
        return self._closed

    # ------------------------------------------------------------------------------ queueing

    def _new_job(self, conn: ConnT, endpoint: Endpoint, seq_id: int) -> _Job[ConnT] | None:
        if self._closed:
            raise ConnectionClosedError("the handoff manager is closed")
        if conn.id in self._pending:
            logger.debug("conn[%d] already has a handoff; request ignored", conn.id)
            return None
        job = _Job(conn, endpoint, seq_id, _Phase.QUEUED)
        self._pending[conn.id] = job
        return job

    @trio.lowlevel.enable_ki_protection
    def queue_handoff_nowait(self, conn: ConnT, endpoint: Endpoint, seq_id: int) -> bool:
        """Hand ``conn`` over for a handoff to ``endpoint`` (never blocks; for push handlers
        and pool hooks). If the queue is full, the wait of up to 0.1 s for room happens in
        the background, then ``on_outcome(conn, HandoffQueueFullError)``.

        :param conn: the connection; the manager owns it from now on.
        :param endpoint: the target :class:`~trio_maint.Endpoint` (``perform`` receives it).
        :param seq_id: the MOVING notification's sequence id (``int``), for logs.
        :returns: ``False`` if ``conn`` already had a request (nothing changed).
        :raises ConnectionClosedError: the manager is closed; ``conn`` stays the caller's.
        """
        job = self._new_job(conn, endpoint, seq_id)
        if job is None:
            return False
        try:
            self._send.send_nowait(job)
        except trio.WouldBlock:
            if self._waiting >= max(self.config.handoff_queue_size, self.config.max_workers):
                # As many requests already wait for room as the queue holds: a flood.
                # Report this one full at once instead of a task per request.
                self._ensure_workers()
                self._queue_full += 1
                self._finish(job, HandoffQueueFullError(QUEUE_FULL_MESSAGE))
                return True
            job.phase = _Phase.WAITING_ROOM
            self._nursery.start_soon(self._grace_send, job)
        self._ensure_workers()
        return True

    async def queue_handoff(self, conn: ConnT, endpoint: Endpoint, seq_id: int) -> bool:
        """Like :meth:`queue_handoff_nowait`, but waits for room in a full queue itself (up
        to 0.1 s) and reports a queue that stayed full by raising.

        :returns: as :meth:`queue_handoff_nowait`.
        :raises HandoffQueueFullError: the queue stayed full; ``on_outcome`` has been
            called already, so the caller must leave ``conn`` alone.
        :raises ConnectionClosedError: the manager is closed; ``conn`` stays the caller's.

        If the calling task is cancelled while waiting, the request is withdrawn and
        ``conn`` stays the caller's.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        job = self._new_job(conn, endpoint, seq_id)
        if job is None:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return False
        try:
            self._send.send_nowait(job)
        except trio.WouldBlock:
            job.phase = _Phase.WAITING_ROOM
            self._ensure_workers()
            if not await self._grace_send(job, caller_owned=True):
                raise HandoffQueueFullError(QUEUE_FULL_MESSAGE) from None
            return True
        self._ensure_workers()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return True

    async def _grace_send(self, job: _Job[ConnT], caller_owned: bool = False) -> bool:
        """Wait up to QUEUE_FULL_GRACE for room. False only when the queue stayed full
        (the job is then reported with HandoffQueueFullError)."""
        self._waiting += 1
        try:
            return await self._grace_send_counted(job, caller_owned)
        finally:
            self._waiting -= 1

    async def _grace_send_counted(self, job: _Job[ConnT], caller_owned: bool) -> bool:
        try:
            with trio.CancelScope() as job.scope:
                with trio.move_on_after(QUEUE_FULL_GRACE):
                    try:
                        await self._send.send(job)
                    except (trio.ClosedResourceError, trio.BrokenResourceError):
                        return True  # closing: the shutdown reports the job
                    if job.phase is _Phase.WAITING_ROOM:  # a worker may have it already
                        job.phase = _Phase.QUEUED
                        job.scope = None
                    return True
        except BaseException:
            if caller_owned and not job.done and self._pending.get(job.conn.id) is job:
                del self._pending[job.conn.id]
                job.done = True
            raise
        if job.done:
            return True  # withdrawn, or reported by the shutdown
        self._queue_full += 1
        stats = self._send.statistics()
        log_limited(
            logger,
            logging.WARNING,
            "handoff_queue_full",
            trio.current_time(),
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

    @trio.lowlevel.enable_ki_protection
    def cancel_handoff(self, conn_id: int) -> bool:
        """Withdraw connection ``conn_id``'s request (``int``): a running attempt is
        cancelled; no report follows and the connection is the caller's again.

        :returns: ``True`` if there was one (``bool``).
        """
        job = self._pending.pop(conn_id, None)
        if job is None:
            return False
        job.done = True
        if job.scope is not None:
            job.scope.cancel()
        return True

    # ------------------------------------------------------------------------------- workers

    def _ensure_workers(self) -> None:
        if self._closed:
            return
        stats = self._send.statistics()
        waiting = sum(1 for j in self._pending.values() if j.phase is _Phase.WAITING_ROOM)
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
                    self._finish(job, ConnectionClosedError("handoff worker crashed"))
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return
        finally:
            self._workers -= 1
            # A request queued while this worker was idling out was not given a worker
            # of its own (this one still counted): make sure one runs it.
            if not self._closed and self._send.statistics().current_buffer_used:
                self._ensure_workers()

    async def _run(self, job: _Job[ConnT]) -> None:
        if job.done or self._pending.get(job.conn.id) is not job:
            return
        job.phase = _Phase.RUNNING
        timeout = self.config.handoff_timeout
        error: BaseException | None = None
        with trio.CancelScope() as job.scope:
            with trio.move_on_after(timeout) as budget:
                try:
                    await self._perform(job.conn, job.endpoint)
                except Exception as exc:
                    error = exc
        job.scope = None
        if _withdrawn(job):
            return
        if budget.cancelled_caught and error is None:
            error = HandoffDialError(f"handoff to {job.endpoint} did not finish within {timeout} s")
        self._finish(job, error)

    @trio.lowlevel.enable_ki_protection
    def _finish(self, job: _Job[ConnT], error: BaseException | None) -> None:
        if job.done:
            return
        job.done = True
        if self._pending.get(job.conn.id) is job:
            del self._pending[job.conn.id]
        if error is None:
            self._completed += 1
        else:
            self._failed += 1
        try:
            self._on_outcome(job.conn, error)
        except Exception:
            logger.exception("conn[%d] on_outcome callback failed", job.conn.id)

    def _close(self) -> None:
        self._closed = True
        self._send.close()
        self._receive.close()
        self._nursery.cancel_scope.cancel()
        error = ConnectionClosedError("handoff manager closed before the handoff completed")
        for job in list(self._pending.values()):
            self._finish(job, error)

    # ------------------------------------------------------------------------- introspection

    def is_pending(self, conn_id: int) -> bool:
        """Whether the manager owns connection ``conn_id`` (``int``) for a handoff."""
        return conn_id in self._pending

    def stats(self) -> HandoffStats:
        """A :class:`HandoffStats` snapshot."""
        phases = [job.phase for job in self._pending.values()]
        return HandoffStats(
            pending=len(phases),
            queued=0 if self._closed else self._send.statistics().current_buffer_used,
            running=phases.count(_Phase.RUNNING),
            completed=self._completed,
            failed=self._failed,
            queue_full=self._queue_full,
            workers=self._workers,
            max_workers=self.config.max_workers,
            queue_capacity=self.config.handoff_queue_size,
        )


@asynccontextmanager
async def open_handoff_manager(
    config: MaintConfig,
    *,
    perform: Callable[[ConnT, Endpoint], Awaitable[None]],
    on_outcome: Callable[[ConnT, BaseException | None], None],
    pool_size: int = 0,
    max_active_conns: int = 0,
) -> AsyncIterator[HandoffManager[ConnT]]:
    """Open a :class:`HandoffManager` whose workers run in a nursery of its own::

        async with open_handoff_manager(config, perform=swap, on_outcome=report) as manager:
            manager.queue_handoff_nowait(conn, Endpoint("10.0.0.5", 12000), seq_id=1001)

    ``perform(conn, endpoint)`` dials, redoes the handshake and swaps the stream, under a
    deadline of ``handoff_timeout`` seconds (``trio.current_effective_deadline()``); on
    any error it leaves the connection on its old stream. Leaving the block cancels every
    attempt and reports each request still owned with ``ConnectionClosedError``.

    :param config: the :class:`~trio_maint.MaintConfig`; its automatic (0) fields are
        resolved with ``pool_size`` and ``max_active_conns`` (``int``).
    :param perform: ``async (conn, endpoint) -> None``.
    :param on_outcome: ``(conn, error | None) -> None``, once per request.
    """
    resolved = config.resolved(pool_size, max_active_conns)
    try:
        async with trio.open_nursery() as nursery:
            manager = HandoffManager(resolved, nursery, perform=perform, on_outcome=on_outcome)
            try:
                yield manager
            finally:
                manager._close()
    except BaseExceptionGroup as group:
        raise unwrap_group(group) from None
