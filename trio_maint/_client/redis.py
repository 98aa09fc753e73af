"""The client: :func:`open_redis` and :class:`Redis`."""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import trio

from .._maint.handler import MaintenanceHandler
from .._net.connection import Connection
from .._net.groups import unwrap_group
from .._net.pool import ConnectionPool
from .._net.timer import ReplyTimer
from .._sansio.autopipe import batchable
from .._sansio.blocking import TimeUnit, command_timeout, reply_timeout
from .._sansio.cache_deadline import Resend
from .._sansio.cache_writes import own_write
from .._sansio.cmds import ClientCommands, KeyT
from .._sansio.config import MaintConfig
from .._sansio.errors import ConnectionError, RedisError, WatchError, check_command
from .._sansio.options import ClientOptions
from .._sansio.replies import Callback, apply_callback
from .._sansio.resp import CommandArg
from .._sansio.retry import STANDALONE_POLICY, Finish, RetryState, WaitForMoving, classify
from .._sansio.unset import UNSET, Unset
from .autopipe import AutoPipeliner
from .cache import BYPASS, ClientCache
from .observe import CommandObserver
from .pipeline import Pipeline, caller_deadline
from .pubsub import PubSub
from .script import Scripting
from .streams import StreamConsumers

__all__ = ["Redis", "open_redis"]

logger = logging.getLogger("trio_maint.client")


def _require_trio(name: str) -> None:
    if not trio.lowlevel.in_trio_run():
        raise RuntimeError(
            f"{name} must be used inside a Trio run (trio.run, or anyio.run(..., "
            "backend='trio')); trio_maint does not run on asyncio"
        )


class Redis(Scripting, StreamConsumers, ClientCommands):
    """A Redis client over a bounded connection pool. Get one from :func:`open_redis`.

    Every command method is a coroutine returning the reply (see
    docs/commands.md for each reply's type). Errors: :class:`~trio_maint.ResponseError`
    (and subclasses) for error replies; :class:`~trio_maint.ConnectionError`,
    :class:`~trio_maint.TimeoutError`, :class:`~trio_maint.ProtocolError` for transport
    failures (the connection concerned is discarded);
    :class:`~trio_maint.PoolTimeoutError` when no connection is free in time;
    :class:`~trio_maint.DataError` for arguments that cannot be encoded.

    Retries (:data:`~trio_maint._sansio.retry.STANDALONE_POLICY`, docs/maintenance.md):
    a write refused with ``READONLY`` while the endpoint is moving (MOVING) is sent again
    once; a command whose connection failed before any byte of it was written is sent
    again at once, at most twice. Nothing that may have reached the server is resent.
    """

    def __init__(
        self,
        options: ClientOptions,
        pool: ConnectionPool,
        maintenance: MaintenanceHandler | None = None,
    ) -> None:
        self.options = options
        self.pool = pool
        if maintenance is None:  # a bare Redis: maintenance handling off
            maintenance = MaintenanceHandler(options, MaintConfig(mode="disabled"))
        #: The :class:`~trio_maint.MaintenanceHandler`: ``.state``, ``.events()``,
        #: ``.add_hook()`` (see docs/maintenance.md). Always there; its ``mode`` says
        #: whether maintenance handling is on.
        self.maintenance: MaintenanceHandler = maintenance
        self._pubsubs: weakref.WeakSet[PubSub] = weakref.WeakSet()
        # An attached exporter (trio_maint.otel, trio_maint.prometheus), else None.
        self._observer: CommandObserver | None = None
        # The nursery of open_redis(), else None: an exporter's task runs there, and its
        # end (the client closing) detaches the exporter (trio_maint._telemetry.shell).
        self._nursery: trio.Nursery | None = None
        #: The :class:`~trio_maint.ClientCache` (``stats()``, ``invalidate()``,
        #: ``clear()``, ``sync()``; docs/caching.md), or ``None`` when caching is off.
        self.cache: ClientCache | None = None
        # The AutoPipeliner of open_redis(auto_pipeline=True), else None (autopipe.py).
        self._batcher: AutoPipeliner | None = None

    def __repr__(self) -> str:
        return f"<Redis {self.options.address_text} db={self.options.db}>"

    async def execute_command(
        self, *args: CommandArg, timeout: float | Literal[Unset.UNSET] | None = UNSET
    ) -> Any:
        """Run any command and return its reply.

        :param args: the command name and arguments (``str``, ``bytes``, ``int``, ``float``).
        :param timeout: seconds to wait for the reply (``None`` = forever); default the
            client's ``socket_timeout``.
        :raises ResponseError: the server answered with an error (connection kept).
        :raises DataError: no arguments, or an argument cannot be encoded (nothing was
            sent).
        :raises ConnectionError, TimeoutError, ProtocolError: the connection failed and was
            discarded (after the retries of the class docs).
        :raises PoolTimeoutError: no connection became free within ``pool_timeout``.
        """
        check_command(args)
        if timeout is UNSET:
            # A blocking command waits for its own timeout too (docs/streams.md).
            seconds = command_timeout(args)
            if seconds is not None:
                timeout = reply_timeout(seconds, self.options.socket_timeout)
        return await self._command(args, timeout=timeout)

    async def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | Literal[Unset.UNSET] | None = UNSET,
        _observed: bool = False,
    ) -> Any:
        if self._observer is not None and not _observed:  # the one check (observe.py)
            run = self._command(args, callback, timeout=timeout, _observed=True)
            return await self._observer.command(self, args[0], run)
        cache = self.cache
        if cache is not None:  # client-side caching (docs/caching.md)
            reply = await cache.command(args, timeout)
            if reply.__class__ is Resend:  # through the pool, with the rest of the timeout
                timeout = reply.timeout
            elif reply is not BYPASS:
                return reply if callback is None else apply_callback(callback, reply, args)
            elif (write := own_write(args)) is not None:
                # Read-your-own-writes: invalidated when sent and when done.
                cache.invalidate_write(write)
                try:
                    reply = await self._pooled(args, timeout)
                finally:
                    cache.invalidate_write(write)
                return reply if callback is None else apply_callback(callback, reply, args)
        batcher = self._batcher
        if batcher is not None and timeout is UNSET and batchable(args):
            reply = await batcher.execute(args)  # auto-pipelining (autopipe.py)
            return reply if callback is None else apply_callback(callback, reply, args)
        # As _send_pooled, inline: no extra coroutine on the path of every command.
        pool = self.pool
        conn = await pool.acquire_for_reply()
        try:
            reply = await conn.execute(args, timeout=timeout)
        except ConnectionError as exc:
            if exc.written:
                raise
            reply = exc  # nothing was written: the retry policy decides
        finally:
            pool.release(conn)
        if isinstance(reply, RedisError):
            reply = await self._retry(args, timeout, reply, conn)
        return reply if callback is None else apply_callback(callback, reply, args)

    async def _pooled(
        self, args: tuple[CommandArg, ...], timeout: float | Literal[Unset.UNSET] | None
    ) -> Any:
        """Send ``args`` through the pool, auto-pipelined when the client does that and the
        command batches (else :meth:`_send_pooled`), and return its reply (error replies
        raised)."""
        batcher = self._batcher
        if batcher is not None and timeout is UNSET and batchable(args):
            return await batcher.execute(args)
        return await self._send_pooled(args, timeout)

    async def _send_pooled(
        self, args: tuple[CommandArg, ...], timeout: float | Literal[Unset.UNSET] | None
    ) -> Any:
        """Send ``args`` through the pool on a connection of its own (retried as the class
        docs say) and return its reply (error replies raised)."""
        pool = self.pool
        conn = await pool.acquire_for_reply()
        try:
            reply = await conn.execute(args, timeout=timeout)
        except ConnectionError as exc:
            if exc.written:
                raise
            reply = exc
        finally:
            pool.release(conn)
        if isinstance(reply, RedisError):
            reply = await self._retry(args, timeout, reply, conn)
        return reply

    async def _retry(
        self,
        args: tuple[CommandArg, ...],
        timeout: float | Literal[Unset.UNSET] | None,
        result: RedisError,
        conn: Connection,
    ) -> Any:
        """The slow path of a command whose attempt ended with ``result`` (an error reply,
        or a ``ConnectionError`` raised before anything was written): a loop driven by
        :data:`STANDALONE_POLICY`. Returns the reply of a resend, or raises the last
        error (with the policy's reason as a note when a resend was possible but not
        made)."""
        state = RetryState(STANDALONE_POLICY, deadline=caller_deadline())
        pool = self.pool
        while True:
            outcome = classify(result)
            decision = state.decide(outcome, trio.current_time(), moving=self._moving_known(conn))
            if isinstance(decision, WaitForMoving):
                moving = await self._moved_away(conn)
                decision = state.decide_after_wait(outcome, trio.current_time(), moving=moving)
            if isinstance(decision, Finish):
                if decision.reason and outcome.kind.proves_not_run:
                    result.add_note(decision.reason)
                raise result
            if decision.delay:  # pragma: no cover - the standalone policy resends at once
                await trio.sleep(decision.delay)
            conn = await pool.acquire_for_reply()
            try:
                reply = await conn.execute(args, timeout=timeout)
            except ConnectionError as exc:
                if exc.written:
                    raise
                reply = exc
            finally:
                pool.release(conn)
            if not isinstance(reply, RedisError):
                return reply
            result = reply

    def _moving_known(self, conn: Connection) -> bool | None:
        """For a ``READONLY`` on ``conn``: ``False`` when no MOVING can explain it (no
        maintenance handling on this connection), else ``None`` (ask
        :meth:`_moved_away`)."""
        return False if not conn.maint_enabled else None

    async def _moved_away(self, conn: Connection) -> bool:
        """After a ``READONLY`` reply (the write was refused, not executed): ``True`` when
        the endpoint is moving (MOVING), so the command may be retried on the new
        endpoint (the maintenance handler waits up to 1 s for the MOVING). Only on
        connections that opted in to maintenance notifications."""
        handler = self.maintenance
        if not conn.maint_enabled:
            return False
        return await handler.wait_for_moving(conn)

    def _blocking_timeout(self, timeout: float | None, unit: TimeUnit = "s") -> float | None:
        """The reply wait of a blocking command whose own timeout is ``timeout``
        (counted in ``unit``: ``"s"`` or ``"ms"``; ``None``: it does not block): see
        :func:`~trio_maint._sansio.blocking.reply_timeout`."""
        return reply_timeout(timeout, self.options.socket_timeout, unit)

    def pipeline(self, transaction: bool = True) -> Pipeline:
        """A new :class:`~trio_maint.Pipeline`; ``transaction=True`` wraps its commands in
        ``MULTI``/``EXEC``."""
        return Pipeline(self, transaction)

    def pubsub(self, *, ignore_subscribe_messages: bool = False) -> PubSub:
        """A new :class:`~trio_maint.PubSub` on a dedicated connection; use it as
        ``async with r.pubsub() as ps:``."""
        handler = self.maintenance
        if not handler.config.enabled:
            pubsub = PubSub(self.options, ignore_subscribe_messages=ignore_subscribe_messages)
        else:
            link = handler.pubsub_link()
            pubsub = PubSub(
                self.options,
                ignore_subscribe_messages=ignore_subscribe_messages,
                connection_factory=link.connect,
                on_close=link.close,
            )
            link.attach(pubsub)
        pubsub._observer = self._observer  # its received messages (observe.py)
        # Closed with the client (open_redis's block), like the pool's connections.
        self._pubsubs.add(pubsub)
        if self.closed:
            pubsub._close_nowait()
        return pubsub

    def _close_pubsubs(self) -> None:
        for pubsub in list(self._pubsubs):
            pubsub._close_nowait()

    async def scan_iter(
        self,
        match: KeyT | None = None,
        count: int | None = None,
        type: str | None = None,
        _type: str | None = None,
    ) -> AsyncIterator[Any]:
        """Iterate over every key (``SCAN`` cursor by cursor), optionally filtered by a
        ``MATCH`` pattern and a ``TYPE`` (``type`` or redis-py's ``_type``). As SCAN, a key
        may be yielded more than once if the keyspace changes meanwhile."""
        cursor = 0
        kind = _type if _type is not None else type
        while True:
            cursor, keys = await self.scan(cursor, match=match, count=count, _type=kind)
            for key in keys:
                yield key
            if cursor == 0:
                return

    async def transaction(
        self, func: Any, *watches: KeyT, value_from_callable: bool = False
    ) -> Any:
        """Run ``await func(pipe)`` in a WATCH/MULTI/EXEC loop until it commits without a
        :class:`~trio_maint.WatchError` (as redis-py's ``transaction``); ``func`` reads with
        ``pipe.immediate_execute_command`` and queues after ``pipe.multi()``.

        :returns: the ``EXEC`` results, or ``func``'s return value with
            ``value_from_callable``.
        """

        while True:
            async with self.pipeline(True) as pipe:
                try:
                    if watches:
                        await pipe.watch(*watches)
                    value = await func(pipe)
                    results = await pipe.execute()
                    return value if value_from_callable else results
                except WatchError:
                    continue

    @property
    def closed(self) -> bool:
        """True once the client's ``async with`` block has exited."""
        return self.pool.closed


async def _dial(options: ClientOptions) -> Connection:
    return await Connection.open(options)


@asynccontextmanager
async def open_redis(
    url: str | ClientOptions | None = None, /, **options: Any
) -> AsyncIterator[Redis]:
    """Open a Redis client that owns a nursery: ``async with open_redis(url) as r:``.

    :param url: a Redis URL (``redis://[[user]:password@]host[:port][/db]``,
        ``rediss://...``, ``unix:///path?db=N``), a :class:`ClientOptions`, or ``None``
        for ``redis://localhost:6379``.
    :param options: :class:`ClientOptions` fields, overriding the URL's.
    :returns: an async context manager yielding a :class:`Redis`. Nothing the client
        started outlives the block; connections are closed on exit.
    :raises RuntimeError: not inside a Trio run.
    :raises ValueError: a bad URL or option.

    Connections are made lazily: the first command dials.
    """
    _require_trio("open_redis()")
    if "cache_config" in options:  # redis-py's name
        options["cache"] = options.pop("cache_config")
    if isinstance(url, ClientOptions):
        opts = attrs_evolve(url, options)
    elif url is None:
        opts = ClientOptions(**options)
    else:
        opts = ClientOptions.from_url(url, **options)

    handler = MaintenanceHandler(opts, opts.maintenance)
    pool = ConnectionPool(
        handler.dial,
        pool_size=opts.pool_size,
        max_active_conns=opts.max_active_conns,
        min_idle_conns=opts.min_idle_conns,
        conn_max_idle_time=opts.conn_max_idle_time,
        pool_timeout=opts.pool_timeout,
    )
    handler.attach(pool)
    pool.reply_timer = timer = ReplyTimer()
    client = Redis(opts, pool, handler)
    if opts.cache is not None:
        client.cache = ClientCache(opts.cache, opts, handler)
    try:
        async with trio.open_nursery() as nursery, handler.running():
            # ``handler.running()`` runs the HandoffManager's workers and the maintenance
            # timer (its own nursery, nested here).
            client._nursery = nursery
            nursery.start_soon(timer.run)
            if client.cache is not None:
                nursery.start_soon(client.cache.run)
            if opts.auto_pipeline:
                client._batcher = AutoPipeliner(client)
                nursery.start_soon(client._batcher.run)
            if opts.min_idle_conns or opts.conn_max_idle_time is not None:
                nursery.start_soon(pool.run_maintenance)
            try:
                yield client
            finally:
                pool.close()
                if client._batcher is not None:
                    client._batcher.close()
                client._close_pubsubs()
                if client.cache is not None:
                    client.cache.close()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise unwrap_group(group) from None


def attrs_evolve(options: ClientOptions, changes: dict[str, Any]) -> ClientOptions:
    """A copy of ``options`` with ``changes`` applied (validated)."""
    import attrs

    return attrs.evolve(options, **changes) if changes else options
