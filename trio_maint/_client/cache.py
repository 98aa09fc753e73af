"""Client-side caching, the Trio shell (``r.cache``): :class:`ClientCache`.

The cache reads through a *tracking connection* of its own (docs/caching.md has the design
and the guarantee): ``CLIENT TRACKING ON OPTIN`` (or ``BCAST``) on it, each cached read
sent there as ``CLIENT CACHING YES`` + the read, so the server tracks exactly the keys
read there and sends their invalidations on the same stream, in order with the replies.
One reader task reads it all the time; a task about to serve a cached value first reads,
synchronously, whatever the socket holds. Decisions are
:class:`~trio_maint._sansio.cache_machine.CacheMachine`'s; this module carries them out.

With maintenance handling on, the tracking connection is one more subscriber of the
client's :class:`~trio_maint.MaintenanceHandler` (a
:class:`~trio_maint.lowlevel.PubSubLink`): it dials the current endpoint, its
notifications are handled as the pool's are, and a MOVING hands it off make-before-break
(:meth:`ClientCache.adopt_connection`).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any, Final, Literal

import trio

from .._maint.handler import MaintenanceHandler
from .._maint.link import PubSubLink
from .._net.connection import Connection
from .._net.tracking import (
    READ_SIZE,
    next_frame,
    output_pending,
    read_nowait,
    wait_readable,
    write_nowait,
)
from .._sansio.cache import (
    MALFORMED,
    NOT_INVALIDATION,
    CacheStats,
    ReadTicket,
    copy_reply,
    parse_invalidation,
)
from .._sansio.cache_config import CacheConfig, cache_request
from .._sansio.cache_deadline import due, read_deadlines
from .._sansio.cache_deadline import resend as resend_rest
from .._sansio.cache_machine import (
    CacheAction,
    CacheMachine,
    Connect,
    Disable,
    DropTracking,
    Flushed,
    Verify,
)
from .._sansio.cache_writes import OwnWrite
from .._sansio.encode import encode_command
from .._sansio.errors import ConnectionClosedError, DataError, RedisError, TimeoutError
from .._sansio.errors import ConnectionError as RedisConnectionError
from .._sansio.loglimit import log_limited
from .._sansio.notifications import Malformed, parse_notification
from .._sansio.options import ClientOptions
from .._sansio.resp import NEED_DATA, CommandArg, PushNotification
from .._sansio.slots import key_slot
from .._sansio.unset import UNSET, Unset
from .tracker import (
    CACHING,
    CACHING_YES,
    LOST,
    READ,
    TRACKINGINFO,
    VERIFY,
    Slot,
    Tracker,
    deliver,
    flags_tracked,
)

__all__ = ["BYPASS", "DRAIN_BUDGET", "MAX_PENDING", "ClientCache"]

logger = logging.getLogger("trio_maint.cache")

#: Returned by :meth:`ClientCache.command` when the read is not the cache's to serve: the
#: caller sends it through the pool as usual.
BYPASS: Final = object()
#: Most replies owed on the tracking connection (``int``); beyond it reads bypass the cache.
MAX_PENDING: Final = 10_000
#: Most bytes a synchronous check of the tracking socket reads before a value is served
#: (``int``); when more are waiting the read bypasses the cache (the reader catches up).
DRAIN_BUDGET: Final = 1 << 20


class ClientCache:
    """The client-side cache of one client (``r.cache``, ``None`` when caching is off):
    made by :func:`~trio_maint.open_redis` when ``cache=CacheConfig(...)`` is given, and
    run for the client's lifetime inside its nursery.

    :ivar config: the :class:`~trio_maint.CacheConfig`.
    :ivar machine: the :class:`~trio_maint._sansio.cache_machine.CacheMachine` (its
        ``phase`` and ``serving`` tell whether the cache serves now).
    """

    def __init__(
        self,
        config: CacheConfig,
        options: ClientOptions,
        handler: MaintenanceHandler,
        *,
        slots: bool = False,
    ) -> None:
        self.config: Final = config
        self.machine: Final = CacheMachine(config, slots=slots)
        self._options = options
        self._handler = handler
        self._link: PubSubLink | None = None
        if handler.config.enabled:
            self._link = handler.pubsub_link()
            self._link.memory_tls = True  # TLS read without blocking (rule 1)
            self._link.attach(self)
        self._tracker: Tracker | None = None
        self._live: set[Tracker] = set()  # the current one, and one being handed off
        self._nursery: trio.Nursery | None = None
        self._timer: trio.CancelScope | None = None
        self._connecting = False
        self._attempted = trio.Event()  # set when a connection attempt ends
        self._closed = False
        self._prefixes = config.bcast and bool(config.prefixes)

    def __repr__(self) -> str:
        stats = self.machine.stats()
        return f"<ClientCache {self.machine.phase.value} entries={stats.entries}>"

    # -------------------------------------------------------------------- public API

    def stats(self) -> CacheStats:
        """A :class:`~trio_maint.CacheStats` snapshot (hits, misses, evictions,
        invalidations, flushes by cause, entries, bytes, ...)."""
        return self.machine.stats()

    def invalidate(self, *keys: str | bytes) -> int:
        """Remove the entries reading any of ``keys`` (``str`` keys are UTF-8 encoded) and
        keep the reads of them in flight out of the cache. Only this client's cache:
        nothing is sent. :returns: the entries removed (``int``)."""
        return self.machine.invalidate_keys([k.encode() if isinstance(k, str) else k for k in keys])

    def clear(self) -> int:
        """Remove every entry (counted as a ``clear`` flush). :returns: how many (``int``)."""
        return self.machine.clear()

    def invalidate_write(self, write: OwnWrite) -> None:
        """Read-your-own-writes (docs/caching.md): this client sends a command that may
        change ``write``'s keys (:func:`~trio_maint._sansio.cache_writes.own_write`); called
        before it is sent (reads of them in flight are not stored) and again once its
        reply came or it failed (what a read stored meanwhile is gone before the caller
        learns the write was acknowledged). Their entries are removed, or everything is
        flushed when its keys cannot be known."""
        self._carry_out(self.machine.own_write(write))

    async def sync(self) -> bool:
        """Wait until every invalidation the server sent this client before the call has
        been handled: one round trip on the tracking connection, which also proves it is
        still tracked (else the cache is flushed and tracking set up again). While the
        tracking connection is being set up (just after ``open_redis``, or after it was
        lost), waits for that first, at most ``connect_timeout``.

        :returns: whether the cache serves now (``bool``; ``False`` when there is no
            tracking connection, caching is disabled, or the check failed).
        """
        tracker = self._tracker
        starting = self._nursery is None and not self._closed  # run() not started yet
        if tracker is None and (self._connecting or starting):
            timeout = self._options.connect_timeout
            with trio.move_on_after(math.inf if timeout is None else timeout):
                await self._attempted.wait()
            tracker = self._tracker
        if tracker is None or tracker.dead:
            await trio.lowlevel.checkpoint()
            return False
        slot = self._submit_verify(tracker)
        if slot is None:
            await trio.lowlevel.checkpoint()
            return False
        await self._wait(slot, math.inf)  # the timer fails the connection at its deadline
        return self.machine.serving

    # -------------------------------------------------------------------- reads

    async def command(
        self,
        args: tuple[CommandArg, ...],
        timeout: float | Literal[Unset.UNSET] | None = UNSET,
        slot: int | None = None,
    ) -> Any:
        """Serve a cacheable read from the cache, or read it through the tracking
        connection and store the reply; ``BYPASS`` for anything else (not cacheable,
        caching suspended): the caller then sends it through the pool. A read sent on the
        tracking connection that gets no usable reply (an error reply, the connection
        lost meanwhile) returns a :class:`~trio_maint._sansio.cache_deadline.Resend`: the
        caller sends it through the pool with what is left of ``timeout``. A cancel point;
        a schedule point too, unless it returns ``BYPASS`` (the pool's path then has one).

        :param timeout: seconds for the whole call (``UNSET``: ``socket_timeout``;
            ``None``: none), as the pool's; it does not bound the tracking connection's
            health, which is judged by ``socket_timeout`` (docs/caching.md).
        :param slot: the keys' slot (cluster), for slot flushes.
        :raises TimeoutError: ``timeout`` passed before the reply came (the tracking
            connection is left alone: the reply is still read, and stored if valid).
        """
        request = cache_request(args, self.config.allow_list)
        if request is None or (self._prefixes and not self.config.covers(request[1])):
            return BYPASS
        # The read starts here. A cancel point, and no schedule point until a hit is
        # known: what the tracking socket holds is handled first, so a value whose
        # invalidation the server delivered before now is not served. (A miss's schedule
        # point is the wait for its reply; a bypass's, the pool's.)
        await trio.lowlevel.checkpoint_if_cancelled()
        machine = self.machine
        cache_key, keys = request
        tracker = self._tracker
        # Reading the socket can only remove entries: for a key without one, skip it.
        if tracker is not None and cache_key in machine.store and not self._drain(tracker):
            machine.store.bypass()
            return BYPASS
        hit, value = machine.lookup(cache_key, trio.current_time())
        if hit:
            value = copy_reply(value)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return value
        tracker = self._tracker
        if tracker is None or tracker.dead or len(tracker.pending) >= MAX_PENDING:
            machine.store.bypass()
            return BYPASS
        if self.machine.slots and slot is None:
            slot = key_slot(keys[0])
        ticket = machine.begin(cache_key, keys, slot)
        if ticket is None:
            return BYPASS
        now = trio.current_time()
        conn = tracker.conn
        deadlines = read_deadlines(timeout, self._options.socket_timeout, now, conn.timeouts)
        pending = self._submit_read(tracker, args, ticket, deadlines.health)
        if pending is None:
            return BYPASS
        value = await self._wait(pending, deadlines.caller)
        if value is LOST or isinstance(value, RedisError):
            now = trio.current_time()
            if not pending.done and now >= deadlines.health:  # as the timer would, now
                self._failed(tracker, TimeoutError("no reply on the tracking connection"))
            resend = resend_rest(deadlines, now) if pending.done else None
            if resend is None:  # one deadline for the whole call (docs/caching.md)
                raise TimeoutError(f"no reply from {conn.endpoint_text} within the timeout")
            return resend
        return value

    def _submit_read(
        self, tracker: Tracker, args: tuple[CommandArg, ...], ticket: ReadTicket, deadline: float
    ) -> Slot | None:
        try:
            data = encode_command(args)
        except DataError:
            self.machine.abandon(ticket)
            return None
        slot = Slot(READ, ticket)
        if self.config.bcast:
            slots = [slot]
        else:
            data = CACHING_YES + data
            slots = [Slot(CACHING), slot]
        if not self._send(tracker, data, slots, deadline):
            return None
        return slot

    def _submit_verify(self, tracker: Tracker) -> Slot | None:
        slot = Slot(VERIFY)
        data = TRACKINGINFO if self.config.bcast else CACHING_YES
        now = trio.current_time()
        deadline = due(self._options.socket_timeout, now, tracker.conn.timeouts)
        return slot if self._send(tracker, data, [slot], deadline) else None

    def _send(self, tracker: Tracker, data: bytes, slots: list[Slot], deadline: float) -> bool:
        """Queue ``slots`` and write ``data`` (synchronously as far as the socket takes
        it; the writer task writes the rest, in order). Each slot is due by ``deadline``
        (Trio time: ``socket_timeout`` from now, relaxed during maintenance; a reply owed
        longer fails the tracking connection). ``False``: the tracking connection failed
        (the slots were released)."""
        if tracker.dead or tracker.retired:
            for slot in slots:
                if slot.ticket is not None:
                    self.machine.abandon(slot.ticket)
            return False
        if deadline != math.inf:
            for slot in slots:
                slot.deadline = deadline
            if not tracker.pending and self._timer is not None:
                # The new head of the queue: the timer checks it (see _run_timer).
                self._timer.deadline = min(self._timer.deadline, deadline)
        tracker.pending.extend(slots)
        if tracker.out:
            tracker.out += data
            return True
        try:
            written = write_nowait(tracker.conn, data)
        except RedisError as exc:
            self._failed(tracker, exc)
            return False
        if written < len(data):
            tracker.out += data[written:]
        if written < len(data) or output_pending(tracker.conn):  # (TLS: ciphertext waits)
            tracker.writer_wake.set()
        return True

    async def _wait(self, slot: Slot, deadline: float) -> Any:
        """Wait for ``slot``'s reply until ``deadline`` (the caller's, Trio time): its
        value, or :data:`LOST` (the tracking connection failed: ``slot.done``; or the
        deadline passed: not ``slot.done``). The tracking connection's own deadline is
        the timer's (it checks the head of the queue: replies come in order).
        Cancellation, or the caller's deadline, leaves the slot in place; its reply is
        still read (and stored, if still valid), then dropped."""
        if slot.done:
            await trio.lowlevel.checkpoint()
            return slot.value
        slot.task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            slot.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        if deadline == math.inf:
            await trio.lowlevel.wait_task_rescheduled(abort)
        else:
            with trio.move_on_at(deadline):
                await trio.lowlevel.wait_task_rescheduled(abort)
        return slot.value if slot.done else LOST

    # ------------------------------------------------------------ the reading side

    def _drain(self, tracker: Tracker) -> bool:
        """Read and handle, synchronously, what the tracking socket holds. ``False``: more
        than :data:`DRAIN_BUDGET` bytes were waiting (handled up to there)."""
        budget = DRAIN_BUDGET
        conn = tracker.conn
        try:
            while not tracker.dead:
                count = read_nowait(conn)
                if count:
                    self._frames(tracker)
                    if output_pending(conn):  # TLS: an answer the read produced
                        tracker.writer_wake.set()
                if count < READ_SIZE:
                    return True  # the socket held less than asked: all of it was read
                budget -= count
                if budget <= 0:
                    return False
        except (RedisError, TypeError) as exc:
            self._failed(tracker, exc)
        return True

    def _frames(self, tracker: Tracker) -> None:
        conn = tracker.conn
        while not tracker.dead:
            frame = next_frame(conn)
            if frame is NEED_DATA:
                return
            if frame.__class__ is PushNotification:
                self._push(tracker, frame)
            else:
                self._reply(tracker, frame)

    def _reply(self, tracker: Tracker, value: Any) -> None:
        if not tracker.pending:
            self._failed(
                tracker, RedisError(f"unexpected reply on the tracking connection: {value!r:.100}")
            )
            return
        slot = tracker.pending.popleft()
        now = trio.current_time()
        if slot.kind == CACHING:
            if isinstance(value, RedisError):
                # No longer tracked here (a proxy re-pointed it to another server).
                self._carry_out(self.machine.caching_refused(now), tracker)
            return
        if slot.kind == VERIFY:
            ok = flags_tracked(value) if self.config.bcast else not isinstance(value, RedisError)
            if tracker is self._tracker:
                self._carry_out(self.machine.verified(ok, now))
            deliver(slot, ok)
        else:
            ticket = slot.ticket
            if ticket is not None:
                if isinstance(value, RedisError):
                    self.machine.abandon(ticket)
                elif self.machine.finish(ticket, value, now):
                    value = copy_reply(value)  # the stored object stays the cache's own
            deliver(slot, value)
        if tracker.retired and not tracker.pending:
            self._drop(tracker, "handed off")

    def _push(self, tracker: Tracker, frame: list[Any]) -> None:
        keys = parse_invalidation(frame)
        if keys is not NOT_INVALIDATION:
            if keys is not MALFORMED:
                self._carry_out(self.machine.invalidation(keys))
                return
            log_limited(
                logger,
                logging.WARNING,
                "cache_invalidation_malformed",
                trio.current_time(),
                "tracking connection %d: a malformed invalidation (%.100r): cache flushed",
                tracker.conn.id,
                frame,
                extra={"event": "cache_invalidation_malformed", "conn_id": tracker.conn.id},
            )
            self._carry_out(self.machine.malformed_invalidation())
            return
        if tracker is not self._tracker:
            return  # a retired connection's notifications are the past
        if self._link is not None:
            self._link.push(tracker.conn, frame)  # the maintenance handler's own handling
        notification = parse_notification(frame)
        if notification is not None and not isinstance(notification, Malformed):
            self._carry_out(self.machine.notification(notification, trio.current_time()))

    async def _read_loop(self, tracker: Tracker) -> None:
        try:
            self._frames(tracker)  # what the handshake's reads left buffered, first
            self._drain(tracker)
            while not tracker.dead:
                await wait_readable(tracker.conn)
                if not self._drain(tracker):
                    await trio.lowlevel.checkpoint()
        except RedisError as exc:
            self._failed(tracker, exc)

    async def _write_loop(self, tracker: Tracker) -> None:
        try:
            await tracker.write_loop()
        except RedisError as exc:
            self._failed(tracker, exc)

    # --------------------------------------------------------- tracking connections

    def _failed(self, tracker: Tracker, exc: BaseException) -> None:
        if tracker.dead:
            return
        if tracker is self._tracker and not self._closed:
            log_limited(
                logger,
                logging.INFO,
                "cache_tracking_lost",
                trio.current_time(),
                "tracking connection %d lost (%s): cache flushed, reconnecting",
                tracker.conn.id,
                exc,
                extra={"event": "cache_tracking_lost", "conn_id": tracker.conn.id},
            )
            self._carry_out(self.machine.lost(trio.current_time()), tracker)
        else:
            self._drop(tracker, repr(exc))

    def _drop(self, tracker: Tracker, reason: str) -> None:
        """Close ``tracker``'s connection; its waiting reads get :data:`LOST` (they go
        through the pool)."""
        if tracker.dead:
            return
        tracker.dead = True
        self._live.discard(tracker)
        if tracker is self._tracker:
            self._tracker = None
        tracker.scope.cancel()
        tracker.conn.close_nowait()
        pending, tracker.pending = tracker.pending, deque()
        for slot in pending:
            if slot.ticket is not None:
                self.machine.abandon(slot.ticket)
            deliver(slot, LOST)
        logger.debug("tracking connection %d closed: %s", tracker.conn.id, reason)

    async def _setup(self, conn: Connection) -> bool:
        """Turn tracking on on ``conn``. ``False``: the server refused (caching is then
        disabled); connection errors propagate."""
        reply = await conn.execute(self.config.tracking_command())
        if isinstance(reply, RedisError):
            self._carry_out(self.machine.refused(str(reply)))
            return False
        return True

    def _install(self, conn: Connection) -> Tracker:
        nursery = self._nursery
        if nursery is None or self._closed:
            raise ConnectionClosedError("the client is closed")
        tracker = Tracker(conn)
        self._tracker = tracker
        self._live.add(tracker)
        nursery.start_soon(self._run_tracker, tracker)
        return tracker

    async def _run_tracker(self, tracker: Tracker) -> None:
        with tracker.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, tracker)
                await self._read_loop(tracker)
                nursery.cancel_scope.cancel()

    async def _connect(self, at: float) -> None:
        actions: list[CacheAction] = []
        conn: Connection | None = None
        try:
            await trio.sleep_until(at)
            if self._closed:
                return
            if self._link is not None:
                conn = await self._link.connect()
            else:
                conn = await Connection.open(self._options, memory_tls=True)
            if not await self._setup(conn):
                conn.close_nowait()
                return
            if self._nursery is None:  # the client closed meanwhile
                conn.close_nowait()
                return
            old = self._tracker
            if old is not None:
                self._drop(old, "replaced")
            self._install(conn)
            actions = self.machine.connected(trio.current_time())
        except (RedisError, OSError) as exc:
            if conn is not None:
                conn.close_nowait()
            log_limited(
                logger,
                logging.WARNING,
                "cache_tracking_connect_failed",
                trio.current_time(),
                "cannot open the cache's tracking connection: %s",
                exc,
                extra={"event": "cache_tracking_connect_failed"},
            )
            actions = self.machine.connect_failed(trio.current_time())
        finally:
            self._connecting = False
            attempted, self._attempted = self._attempted, trio.Event()
            attempted.set()
        self._carry_out(actions)

    async def adopt_connection(self, conn: Connection) -> None:
        """A handoff's new connection (a MOVING, through the maintenance handler): turn
        tracking on there, make it the tracking connection, flush, and close the old one
        once the replies owed on it have come (make-before-break).

        :raises ConnectionClosedError: the client is closed (``conn`` is left open).
        :raises ConnectionError: the new endpoint refused tracking (the handoff fails;
            the old connection stays).
        """
        if self._closed:
            raise ConnectionClosedError("the client is closed")
        reply = await conn.execute(self.config.tracking_command())
        if isinstance(reply, RedisError):
            raise RedisConnectionError(f"the new endpoint refused CLIENT TRACKING: {reply}")
        old = self._tracker
        self._install(conn)
        if old is not None:
            old.retired = True
            if not old.pending:
                self._drop(old, "handed off")
        self._carry_out(self.machine.handed_off(trio.current_time()))

    @property
    def connection(self) -> Connection | None:
        """The tracking connection, or ``None`` (for the maintenance handler)."""
        tracker = self._tracker
        return None if tracker is None else tracker.conn

    # --------------------------------------------------------------------- actions

    def _carry_out(self, actions: list[CacheAction], tracker: Tracker | None = None) -> None:
        for action in actions:
            if isinstance(action, DropTracking):
                target = tracker if tracker is not None else self._tracker
                if target is not None:
                    self._drop(target, action.reason)
            elif isinstance(action, Connect):
                if not self._connecting and self._nursery is not None and not self._closed:
                    self._connecting = True
                    self._nursery.start_soon(self._connect, action.at)
            elif isinstance(action, Verify):
                current = self._tracker
                if current is not None:
                    self._submit_verify(current)
            elif isinstance(action, Flushed):
                logger.debug("cache flushed (%s): %d entries", action.cause, action.entries)
            elif isinstance(action, Disable):
                logger.warning(
                    "client-side caching disabled: the server refused CLIENT TRACKING (%s)",
                    action.reason,
                    extra={"event": "cache_disabled"},
                )
        timer = self._timer
        if timer is not None:
            timer.deadline = min(timer.deadline, self.machine.next_wake)

    def _overdue(self, now: float) -> float:
        """Fail a tracking connection whose oldest owed reply is overdue; the next
        deadline to check (``float``)."""
        wake = self.machine.next_wake
        for tracker in list(self._live):
            if tracker.pending:
                head = tracker.pending[0]
                if head.deadline <= now:
                    self._failed(tracker, TimeoutError("no reply on the tracking connection"))
                else:
                    wake = min(wake, head.deadline)
        return wake

    async def _run_timer(self) -> None:
        """The cache's one timer: the machine's (checks, window backstops) and the
        deadline of the oldest reply owed on each tracking connection."""
        while True:
            with trio.CancelScope(deadline=self._overdue(trio.current_time())) as scope:
                self._timer = scope
                await trio.sleep_forever()
            self._timer = None
            now = trio.current_time()
            if now >= self.machine.next_wake:
                self._carry_out(self.machine.timer(now))

    async def run(self) -> None:
        """Run the cache for the client's lifetime (in its nursery): the tracking
        connection's reader and writer, its (re)connection, the checks. Cancelled when
        the client closes; then every tracking connection is closed."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._run_timer)
                self._carry_out(self.machine.start(trio.current_time()))
                await trio.sleep_forever()
        finally:
            self.close()

    def close(self) -> None:
        """Close the tracking connection and stop (the client's exit calls it)."""
        self._closed = True
        self._nursery = None
        tracker = self._tracker
        if tracker is not None:
            self._drop(tracker, "client closed")
        if self._link is not None:
            self._link.close()
