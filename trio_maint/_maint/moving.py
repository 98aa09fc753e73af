"""The reaction to MOVING: which connections move where, and when.

:class:`MovingReactions` is the part of
:class:`~trio_maint._maint.handler.MaintenanceHandler` that handles MOVING notifications:
it marks connections for a handoff (``conn.handoff``), sweeps the idle ones to the
HandoffManager at once, schedules the delayed handoffs of a null endpoint, keeps
connections where they are while the target's circuit breaker is open, and lets a command
refused with ``READONLY`` wait for the MOVING that follows a switch-over. The handler owns
the state; this class only holds the methods (see docs/maintenance.md).
"""

from __future__ import annotations

import logging
from typing import Final

import attrs
import trio

from .._net.connection import Connection
from .._net.pool import ConnectionPool
from .._sansio.breaker import BreakerState
from .._sansio.endpoint import Endpoint
from .._sansio.errors import ConnectionClosedError
from .._sansio.notifications import Moving
from .events import HandoffQueued, MaintenanceEvent, MovingStarted
from .workers import HandoffManager

__all__ = ["READONLY_MOVING_GRACE", "MovingReactions"]

logger = logging.getLogger("trio_maint.maintenance")

#: Seconds a command refused with ``READONLY`` waits for a MOVING before the error is
#: raised (the old endpoint of a move turns read-only just before MOVING is sent).
READONLY_MOVING_GRACE: Final = 1.0


@attrs.frozen
class _Mark:
    """``conn.handoff`` of a connection to hand off when its borrower releases it."""

    endpoint: Endpoint
    seq_id: int


class MovingReactions:
    """MOVING handling, mixed into :class:`~trio_maint._maint.handler.MaintenanceHandler`
    (which sets every attribute below in its constructor)."""

    manager: HandoffManager[Connection] | None
    _pool: ConnectionPool | None
    _closed: bool
    _target: Endpoint
    _last_seq: int | None
    _moving_deadline: float | None
    _moved: trio.Event | None
    _conn_seq: dict[int, int]
    _queued_at: dict[int, float]
    # Null-endpoint handoffs not yet due: connection id -> (connection, target, seq).
    _scheduled: dict[int, tuple[Connection, Endpoint, int]]

    def _emit(self, event: MaintenanceEvent) -> None:
        raise NotImplementedError

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
