"""A bounded pool of :class:`~trio_maint.lowlevel.Connection` objects.

At every moment a connection belongs to exactly one of: the pool's idle list, one
borrower, a pool hook that took it (the HandoffManager), or nobody (closed). Ownership
moves only in short synchronous steps.

* ``pool_size`` bounds connections in use (FIFO-fair waiting through a
  :class:`trio.Semaphore`) and the idle list; ``max_active_conns`` bounds every open
  connection, including ones handed to a hook.
* Idle connections are reused LIFO, after a cheap health check.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import attrs
import trio

from .._sansio.errors import ConnectionClosedError, PoolTimeoutError
from .._sansio.loglimit import log_limited
from .connection import Connection
from .timer import ReplyTimer

__all__ = ["ConnectionPool", "Disposition", "PoolHook", "PoolObserver", "PoolStats"]

logger = logging.getLogger("trio_maint.pool")


class Disposition(enum.Enum):
    """What a :class:`PoolHook` decides about a connection.

    * ``KEEP``: carry on (use it / pool it).
    * ``REMOVE``: close and forget it.
    * ``TAKEN``: the hook took ownership (e.g. queued it for a handoff); it will later call
      :meth:`ConnectionPool.give_back` or :meth:`ConnectionPool.discard`.
    """

    KEEP = "keep"
    REMOVE = "remove"
    TAKEN = "taken"


class PoolHook(Protocol):
    """Synchronous, cheap callbacks the pool runs at ownership changes (the maintenance
    layer plugs in here)."""

    def on_get(self, conn: Connection, is_new: bool) -> Disposition:
        """Before a borrower gets ``conn``; ``REMOVE``/``TAKEN`` make the pool try another
        idle connection or dial a new one."""
        ...

    def on_put(self, conn: Connection) -> Disposition:
        """When a borrower releases a healthy ``conn``."""
        ...

    def on_remove(self, conn: Connection, reason: str) -> None:
        """After ``conn`` was closed and forgotten; ``reason`` says why."""
        ...


class PoolObserver(Protocol):
    """Told how long acquisitions and dials took (the optional exporters,
    docs/observability.md); see :meth:`ConnectionPool.observe`."""

    def connection_wait(self, pool: ConnectionPool, seconds: float) -> None:
        """An acquisition ended after ``seconds`` (``float``), whether it got a
        connection or raised."""
        ...

    def connection_created(self, pool: ConnectionPool, seconds: float) -> None:
        """A new connection was dialed and handshaken in ``seconds`` (``float``)."""
        ...


@attrs.frozen
class PoolStats:
    """Counters of a :class:`ConnectionPool` (all ``int``).

    * ``hits``: acquisitions served by an idle connection; ``misses``: by a new one.
    * ``timeouts``: acquisitions that ended in :class:`~trio_maint.PoolTimeoutError`.
    * ``total``: open connections owned by the pool (idle, in use, or taken by a hook).
    * ``idle``: connections in the idle list; ``in_use``: borrowed ones.
    * ``stale``: connections discarded because a health check or the idle timeout failed.
    * ``created`` / ``removed``: connections dialed / closed over the pool's life.
    """

    hits: int
    misses: int
    timeouts: int
    total: int
    idle: int
    in_use: int
    stale: int
    created: int
    removed: int


Dialer = Callable[[], Awaitable[Connection]]


class ConnectionPool:
    """A bounded connection pool; see the module docstring.

    :param dial: ``async () -> Connection``: makes and handshakes a new connection.
    :param pool_size: most connections in use at once, and most kept idle (``int`` >= 1).
    :param max_active_conns: most open connections of any kind (0 = no cap).
    :param min_idle_conns: idle connections kept ready by :meth:`run_maintenance`.
    :param conn_max_idle_time: seconds (``float``) an idle connection may wait before it is
        closed instead of reused (``None`` = forever).
    :param pool_timeout: seconds (``float``) to wait for a free connection (``None`` =
        forever); then :class:`~trio_maint.PoolTimeoutError`.

    ``reply_timer``: a :class:`~trio_maint.lowlevel.ReplyTimer` given to every
    connection dialed (``open_redis`` sets one and runs it in its nursery), or ``None``.
    """

    def __init__(
        self,
        dial: Dialer,
        *,
        pool_size: int = 10,
        max_active_conns: int = 0,
        min_idle_conns: int = 0,
        conn_max_idle_time: float | None = None,
        pool_timeout: float | None = 5.0,
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be >= 1")
        self.dial = dial
        self.reply_timer: ReplyTimer | None = None
        self.pool_size = pool_size
        self.max_active_conns = max_active_conns
        self.min_idle_conns = min_idle_conns
        self.conn_max_idle_time = conn_max_idle_time
        self.pool_timeout = pool_timeout
        self.hooks: list[PoolHook] = []
        self._idle: list[Connection] = []
        self._all: dict[int, Connection] = {}
        self._in_use = 0
        self._borrow = trio.Semaphore(pool_size)
        self._active = trio.Semaphore(max_active_conns) if max_active_conns else None
        # Borrowers waiting at max_active_conns wake when a connection goes idle or closes.
        self._changed = trio.Event()
        self._change_waiters = 0
        self._closed = False
        self._hits = self._misses = self._timeouts = 0
        self._stale = self._created = self._removed = 0
        self._observer: PoolObserver | None = None

    # ------------------------------------------------------------ introspection

    def stats(self) -> PoolStats:
        """A snapshot of the pool's counters (:class:`PoolStats`)."""
        return PoolStats(
            hits=self._hits,
            misses=self._misses,
            timeouts=self._timeouts,
            total=len(self._all),
            idle=len(self._idle),
            in_use=self._in_use,
            stale=self._stale,
            created=self._created,
            removed=self._removed,
        )

    @property
    def waiting(self) -> int:
        """Tasks waiting for a connection now (``int``): for a free slot of
        ``pool_size``, or at ``max_active_conns`` for a connection to go idle or close."""
        return self._borrow.statistics().tasks_waiting + self._change_waiters

    def observe(self, observer: PoolObserver | None) -> None:
        """Report each acquisition's wait and each dial's duration to ``observer``
        (``None``: stop). A pool nobody observes pays nothing for it: the timed
        acquisition replaces :meth:`acquire_for_reply` on this instance only, and the
        dial is timed on the dial path."""
        self._observer = observer
        vars(self).pop("acquire_for_reply", None)
        if observer is None:
            return
        untimed = self.acquire_for_reply

        async def acquire_for_reply(*, schedule: bool = False) -> Connection:
            start = time.perf_counter()
            try:
                return await untimed(schedule=schedule)
            finally:
                observer.connection_wait(self, time.perf_counter() - start)

        vars(self)["acquire_for_reply"] = acquire_for_reply

    @property
    def connections(self) -> list[Connection]:
        """Every open connection the pool owns or lent (a new ``list``)."""
        return list(self._all.values())

    def find(self, conn_id: int) -> Connection | None:
        """The open connection ``conn_id`` (``int``) of this pool, or ``None``."""
        return self._all.get(conn_id)

    def owns(self, conn: Connection) -> bool:
        """Whether ``conn`` is one of this pool's open connections (``bool``)."""
        return self._all.get(conn.id) is conn

    @property
    def idle_connections(self) -> list[Connection]:
        """The idle connections, most recently used last (a new ``list``)."""
        return list(self._idle)

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    # ------------------------------------------------------------------ acquire

    async def acquire(self) -> Connection:
        """Borrow a connection: a healthy idle one (LIFO) or a new one.

        Waiters are served first come, first served. Always checkpoints.

        :raises PoolTimeoutError: none became free within ``pool_timeout`` seconds.
        :raises ConnectionClosedError: the pool is closed.
        :raises ConnectionError, TimeoutError, AuthenticationError: dialing failed.
        """
        return await self.acquire_for_reply(schedule=True)

    async def acquire_for_reply(self, *, schedule: bool = False) -> Connection:
        """:meth:`acquire` for a caller that sends a command on the connection and waits
        for its reply next (the client's commands and pipelines): with ``schedule=False``
        and no other connection of this pool in use, taking a healthy idle connection is a
        cancel point but not a schedule point, since waiting for the reply is always one —
        a sequential workload then makes one pass through Trio's scheduler per command
        instead of two (about -7 to -11 % client CPU per command, docs/performance.md).
        Under concurrency it schedules as :meth:`acquire` does, which measured faster.

        :param schedule: ``True`` makes it exactly :meth:`acquire`.
        :raises: as :meth:`acquire`.
        """
        if self._closed:
            raise ConnectionClosedError("the connection pool is closed")
        timeout = self.pool_timeout
        if self._borrow.value > 0 and self._idle:
            self._borrow.acquire_nowait()
        else:
            with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
                await self._borrow.acquire()
            if scope.cancelled_caught:
                self._timeouts += 1
                raise PoolTimeoutError(
                    f"no free connection in the pool within {timeout} s "
                    f"(pool_size={self.pool_size})"
                )
        try:
            # Only when no other connection of this pool is in use: under concurrency the
            # schedule point pays for itself (the tasks' writes and replies bunch up, and
            # each pass of the scheduler serves more of them).
            conn = await self._checkout(schedule or self._in_use > 0)
        except BaseException:
            self._borrow.release()
            raise
        self._in_use += 1
        return conn

    async def _wait_for_change(self, deadline: float) -> None:
        self._change_waiters += 1
        try:
            with trio.move_on_at(deadline) as scope:
                await self._changed.wait()
        finally:
            self._change_waiters -= 1
        if scope.cancelled_caught:
            self._timeouts += 1
            raise PoolTimeoutError(
                f"max_active_conns={self.max_active_conns} connections are open and none "
                f"became free within {self.pool_timeout} s"
            )

    def _notify_change(self) -> None:
        if self._change_waiters:
            changed, self._changed = self._changed, trio.Event()
            changed.set()

    async def _checkout(self, schedule: bool) -> Connection:
        timeout = self.pool_timeout
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        while True:
            conn = await self._checkout_once(deadline, schedule)
            if conn is not None:
                return conn

    async def _checkout_once(self, deadline: float, schedule: bool) -> Connection | None:
        """An idle connection or a new one; ``None`` after waiting at max_active_conns
        (the caller tries again)."""
        idle = self._idle
        max_idle = self.conn_max_idle_time
        while idle:
            conn = idle.pop()
            if max_idle is not None and trio.current_time() - conn.last_used > max_idle:
                self._stale += 1
                self._remove(conn, "idle for longer than conn_max_idle_time")
                continue
            try:
                healthy = await conn.check_idle(schedule=schedule)
            except BaseException:
                # Cancelled during the health check: the connection must not leak.
                if conn.usable and not conn.in_use and not self._closed:
                    idle.append(conn)
                else:
                    self._remove(conn, "cancelled during the health check")
                raise
            if not healthy:
                self._stale += 1
                self._remove(conn, "failed the health check")
                continue
            if self._closed:
                self._remove(conn, "pool closed")
                raise ConnectionClosedError("the connection pool is closed")
            verdict = self._run_get_hooks(conn, is_new=False)
            if verdict is Disposition.KEEP:
                self._hits += 1
                return conn
            if verdict is Disposition.REMOVE:
                self._remove(conn, "refused by a pool hook")
        # No idle connection: dial a new one, if max_active_conns allows.
        await trio.lowlevel.checkpoint_if_cancelled()
        active = self._active
        if active is not None:
            try:
                active.acquire_nowait()
            except trio.WouldBlock:
                # At the cap: wait until a connection goes idle (then take it) or closes
                # (then dial), within what is left of pool_timeout.
                await self._wait_for_change(deadline)
                return None
        conn = await self._new_connection(holding_active=True)
        verdict = self._run_get_hooks(conn, is_new=True)
        if verdict is not Disposition.KEEP:
            if verdict is Disposition.REMOVE:
                self._remove(conn, "refused by a pool hook")
            raise ConnectionClosedError("a pool hook refused the new connection")
        self._misses += 1
        return conn

    async def _new_connection(self, *, holding_active: bool = False) -> Connection:
        """Dial a connection. With ``max_active_conns``, the caller either holds an
        ``_active`` token already (``holding_active``) or one is taken here without
        waiting (:class:`trio.WouldBlock` when none is free)."""
        active = self._active
        if active is not None and not holding_active:
            active.acquire_nowait()
        start = time.perf_counter()
        try:
            conn = await self.dial()
        except BaseException:
            if active is not None:
                active.release()
            raise
        observer = self._observer
        if observer is not None:
            observer.connection_created(self, time.perf_counter() - start)
        self._all[conn.id] = conn
        if self._closed:
            self._remove(conn, "pool closed")  # the hooks forget it; the token is released
            raise ConnectionClosedError("the connection pool is closed")
        conn.reply_timer = self.reply_timer
        self._created += 1
        return conn

    def _run_get_hooks(self, conn: Connection, *, is_new: bool) -> Disposition:
        for hook in self.hooks:
            verdict = hook.on_get(conn, is_new)
            if verdict is not Disposition.KEEP:
                return verdict
        return Disposition.KEEP

    # ------------------------------------------------------------------ release

    @trio.lowlevel.enable_ki_protection
    def release(self, conn: Connection) -> None:
        """Give back a borrowed connection (synchronous, never blocks).

        A broken, closed or busy connection is closed and forgotten; otherwise the hooks'
        ``on_put`` decide (pool it, remove it, or take it for a handoff).
        """
        self._in_use -= 1
        self._borrow.release()
        if conn.id not in self._all:
            conn.close_nowait()
            return
        if self._closed or not conn.usable or conn.in_use:
            self._remove(conn, "closed" if self._closed else "broken")
            return
        for hook in self.hooks:
            verdict = hook.on_put(conn)
            if verdict is Disposition.REMOVE:
                self._remove(conn, "a pool hook asked for removal")
                return
            if verdict is Disposition.TAKEN:
                return
        self._to_idle(conn)

    def _to_idle(self, conn: Connection) -> None:
        conn.last_used = trio.current_time()
        if len(self._idle) >= self.pool_size:
            self._remove(conn, "idle list full")
        else:
            self._idle.append(conn)
            self._notify_change()

    @trio.lowlevel.enable_ki_protection
    def give_back(self, conn: Connection) -> None:
        """Return a connection a hook had taken (after a successful handoff) to the idle
        list. A connection that is no longer usable is closed instead."""
        if conn.id not in self._all:
            conn.close_nowait()
            return
        if self._closed or not conn.usable:
            self._remove(conn, "closed" if self._closed else "broken")
            return
        self._to_idle(conn)

    @trio.lowlevel.enable_ki_protection
    def take_idle(self) -> list[Connection]:
        """Remove every idle connection from the idle list and hand them to the caller
        (a hook, e.g. for a proactive handoff after MOVING); the caller must later
        :meth:`give_back` or :meth:`discard` each."""
        # In place: an acquire in progress (its health check may run the push handler
        # that calls this) holds a reference to the list and must see it emptied.
        taken = list(self._idle)
        self._idle.clear()
        return taken

    @trio.lowlevel.enable_ki_protection
    def claim_idle(self, conn: Connection) -> bool:
        """Atomically take ``conn`` out of the idle list if it is there (a hook, e.g. a
        delayed handoff); the caller must later :meth:`give_back` or :meth:`discard` it.

        :returns: ``True`` if ``conn`` was idle and is now the caller's (``bool``).
        """
        try:
            self._idle.remove(conn)
        except ValueError:
            return False
        return True

    @trio.lowlevel.enable_ki_protection
    def discard(self, conn: Connection, reason: str) -> None:
        """Close and forget a connection the caller owns (a hook, or a borrower that will
        not :meth:`release` it). ``reason`` goes to the ``on_remove`` hooks."""
        if conn in self._idle:
            self._idle.remove(conn)
        self._remove(conn, reason)

    def _remove(self, conn: Connection, reason: str) -> None:
        conn.close_nowait()
        if self._all.pop(conn.id, None) is None:
            return
        self._removed += 1
        if self._active is not None:
            self._active.release()
            self._notify_change()
        logger.debug("connection %d removed: %s", conn.id, reason)
        for hook in self.hooks:
            try:
                hook.on_remove(conn, reason)
            except Exception:
                logger.exception("pool hook on_remove failed")

    # ---------------------------------------------------------------- lifecycle

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """``async with pool.connection() as conn:`` borrows and always releases."""
        conn = await self.acquire()
        try:
            yield conn
        finally:
            self.release(conn)

    async def run_maintenance(self, interval: float = 1.0) -> None:
        """Run forever (in the owner's nursery): close idle connections past
        ``conn_max_idle_time`` and keep ``min_idle_conns`` ready. Dial failures are logged
        and retried on the next round."""
        while not self._closed:
            self.reap_idle()
            while (
                not self._closed
                and len(self._idle) < self.min_idle_conns
                and len(self._all) < self.pool_size
            ):
                try:
                    conn = await self._new_connection()
                except trio.WouldBlock:
                    break  # max_active_conns reached
                except Exception as exc:
                    log_limited(
                        logger,
                        logging.WARNING,
                        "min_idle_conns_failed",
                        trio.current_time(),
                        "could not open a min_idle_conns connection: %s",
                        exc,
                        extra={"event": "min_idle_conns_failed"},
                    )
                    break
                self._return_drained(conn, trio.current_time())  # through the on_put hooks
            try:
                await self.drain_idle()
            except Exception:  # pragma: no cover - drain_idle handles connection errors
                logger.exception("draining idle connections failed")
            await trio.sleep(interval)

    async def drain_idle(self) -> int:
        """Read what arrived on idle connections (push frames such as maintenance
        notifications, or the server closing them), so that it is acted on without waiting
        for the connection's next use. Called by :meth:`run_maintenance` every round.

        A drained connection goes through the ``on_put`` hooks again (a notification may
        have marked it for a handoff); a dead one is closed.

        :returns: how many connections were drained (``int``).
        """
        drained = 0
        for conn in [c for c in self._idle if c.has_input()]:
            if not self.claim_idle(conn):
                continue  # taken meanwhile
            last_used = conn.last_used
            ok = await conn.check_idle()
            drained += 1
            if self._closed or not ok:
                self._stale += 0 if self._closed else 1
                self._remove(conn, "closed" if self._closed else "failed the health check")
                continue
            self._return_drained(conn, last_used)
        return drained

    @trio.lowlevel.enable_ki_protection
    def _return_drained(self, conn: Connection, last_used: float) -> None:
        if conn.id not in self._all:
            conn.close_nowait()
            return
        for hook in self.hooks:
            verdict = hook.on_put(conn)
            if verdict is Disposition.REMOVE:
                self._remove(conn, "a pool hook asked for removal")
                return
            if verdict is Disposition.TAKEN:
                return
        self._to_idle(conn)
        conn.last_used = last_used

    def reap_idle(self) -> int:
        """Close idle connections older than ``conn_max_idle_time``; return how many."""
        limit = self.conn_max_idle_time
        if limit is None:
            return 0
        now = trio.current_time()
        old = [c for c in self._idle if now - c.last_used > limit]
        for conn in old:
            self._idle.remove(conn)
            self._stale += 1
            self._remove(conn, "idle for longer than conn_max_idle_time")
        return len(old)

    @trio.lowlevel.enable_ki_protection
    def close(self) -> None:
        """Close every connection now, borrowed ones included (a task still using one gets
        :class:`~trio_maint.ConnectionClosedError`). Later :meth:`acquire` calls raise
        :class:`~trio_maint.ConnectionClosedError`."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            self._remove(conn, "pool closed")
        for conn in list(self._all.values()):
            self._remove(conn, "pool closed")
