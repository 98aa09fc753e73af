"""Pipelines and ``MULTI``/``EXEC`` transactions: :class:`Pipeline`."""

from __future__ import annotations

import math
from collections.abc import Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

import trio

from .._net.connection import Connection
from .._sansio.blocking import TimeUnit, command_timeout, pipeline_reply_timeout, reply_timeout
from .._sansio.cache_writes import own_write, own_writes
from .._sansio.cmds import KeyT, PipelineCommands
from .._sansio.errors import (
    ConnectionClosedError,
    ConnectionError,
    ExecAbortError,
    NoScriptError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    WatchError,
    check_command,
)
from .._sansio.replies import Callback, apply_callback
from .._sansio.resend import PipelineRetry
from .._sansio.resp import CommandArg
from .._sansio.retry import (
    STANDALONE_POLICY,
    Finish,
    RetryState,
    WaitForMoving,
    classify,
    classify_transaction,
)
from .._sansio.scripts import first_calls_as_eval
from .._sansio.unset import UNSET, Unset
from .observe import CommandObserver
from .script import PipelineScripting, resend_noscript

if TYPE_CHECKING:
    from .redis import Redis

__all__ = ["Pipeline", "caller_deadline", "pipeline_results"]


def caller_deadline() -> float | None:
    """The caller's Trio deadline (``trio.current_effective_deadline()``, absolute seconds
    of the Trio clock, ``float``), or ``None`` when it has none: it shortens a retry
    budget (:class:`~trio_maint._sansio.retry.RetryState`)."""
    deadline = trio.current_effective_deadline()
    return None if deadline == math.inf else deadline


class Pipeline(PipelineScripting, PipelineCommands):
    """Commands queued locally and sent in one write; replies read in order.

    Get one from :meth:`Redis.pipeline`. Command methods queue and return the pipeline
    (so calls chain); :meth:`execute` sends them. With ``transaction=True`` (the default)
    they are wrapped in ``MULTI``/``EXEC`` and run atomically.

    Optimistic locking, as in redis-py::

        async with r.pipeline() as pipe:
            await pipe.watch("balance")
            balance = int(await pipe.get("balance"))  # runs at once while watching
            pipe.multi()
            pipe.set("balance", balance - 10)
            await pipe.execute()   # raises WatchError if "balance" changed meanwhile

    While watching, the pipeline holds one pool connection until :meth:`execute` or
    :meth:`reset` (or leaving ``async with``).
    """

    def __init__(self, client: Redis, transaction: bool = True) -> None:
        self._client = client
        self.transaction = transaction
        self._stack: list[tuple[tuple[CommandArg, ...], Callback | None]] = []
        # A queued command has a callback: execute() applies them (else replies as read).
        self._callbacks = False
        # A blocking command was queued: execute() works out the reply wait.
        self._blocking = False
        self._reply_wait: float | Literal[Unset.UNSET] | None = UNSET
        self._conn: Connection | None = None
        self._observing = False  # execute() runs inside _observed_execute
        self.watching = False
        self._explicit_multi = False
        # A command of redis-py's immediate mode (after watch(), before multi()), run when
        # the pipeline is awaited.
        self._immediate: tuple[tuple[CommandArg, ...], Callback | None] | None = None

    def __len__(self) -> int:
        return len(self._stack)

    def __bool__(self) -> bool:
        return True

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.reset()

    def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | Literal[Unset.UNSET] | None = UNSET,
    ) -> Pipeline:
        if self.watching and not self._explicit_multi:
            return self._defer_immediate(args, callback)
        if timeout is not UNSET:  # a blocking command (see _blocking_timeout)
            self._blocking = True
        if callback is not None:
            self._callbacks = True
        self._stack.append((args, callback))
        return self

    def _defer_immediate(self, args: tuple[CommandArg, ...], callback: Callback | None) -> Self:
        # redis-py's immediate mode: after watch() and before multi(), a command runs at
        # once. Typed methods return the pipeline; awaiting it runs the command.
        if self._immediate is not None:
            raise RedisError(
                "after watch() and before multi(), each command runs at once: await it "
                f"(`await pipe.get(k)`) before the next; {self._immediate[0][0]!r} was not"
            )
        self._immediate = (args, callback)
        return self

    def __await__(self) -> Generator[Any, None, Any]:
        """``await pipe.<command>(...)`` after :meth:`watch` and before :meth:`multi`:
        the command runs at once on the watching connection and this is its reply, as
        redis-py's immediate mode.

        Otherwise (commands are queued: not watching, or after :meth:`multi`) awaiting
        gives the pipeline itself, as redis-py's asyncio pipeline, and the command stays
        queued for :meth:`execute`.

        :raises ResponseError: the server answered with an error.
        """
        return self._run_immediate().__await__()

    async def _run_immediate(self) -> Any:
        pending, self._immediate = self._immediate, None
        if pending is None:
            # A queued command awaited (`await pipe.set(k, v)`, as redis-py's asyncio
            # pipeline allows): it stays queued, and this is the pipeline.
            await trio.lowlevel.checkpoint()
            return self
        args, callback = pending
        reply = await self.immediate_execute_command(*args)
        return reply if callback is None else apply_callback(callback, reply, args)

    def _blocking_timeout(self, timeout: float | None, unit: TimeUnit = "s") -> float | None:
        """As :meth:`Redis._blocking_timeout`; a command queued with it makes
        :meth:`execute` wait for the queued commands' timeouts too
        (:func:`~trio_maint._sansio.blocking.pipeline_reply_timeout`)."""
        return reply_timeout(timeout, self._client.options.socket_timeout, unit)

    def execute_command(self, *args: CommandArg) -> Pipeline:
        """Queue any command (``args`` as for :meth:`Redis.execute_command`); returns the
        pipeline (after :meth:`watch` and before :meth:`multi`, await it: the command
        runs at once, as every command method then).

        :raises DataError: no arguments (nothing is queued).
        """
        check_command(args)
        if self.watching and not self._explicit_multi:
            return self._defer_immediate(args, None)
        if command_timeout(args) is not None:
            self._blocking = True
        self._stack.append((args, None))
        return self

    # ------------------------------------------------------------------ watching

    async def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = await self._client.pool.acquire()
        return self._conn

    async def watch(self, *names: KeyT) -> None:
        """``WATCH`` keys; the pipeline then holds a connection until :meth:`execute` or
        :meth:`reset`.

        :raises RedisError: commands are already queued, or the server refused.
        """
        if self._explicit_multi:
            raise RedisError("WATCH must come before multi()")
        conn = await self._connection()
        reply = await conn.execute(("WATCH", *names))
        if isinstance(reply, RedisError):
            raise reply
        self.watching = True

    async def unwatch(self) -> None:
        """``UNWATCH``: forget every watched key."""
        if self._conn is not None and self.watching:
            reply = await self._conn.execute(("UNWATCH",))
            if isinstance(reply, RedisError):
                raise reply
        else:
            await trio.lowlevel.checkpoint()
        self.watching = False

    async def immediate_execute_command(self, *args: CommandArg) -> Any:
        """Run one command now, on the watching connection (to read watched keys before
        :meth:`multi`); returns its reply.

        :raises ResponseError: the server answered with an error.
        :raises DataError: no arguments (nothing was sent).
        """
        check_command(args)
        conn = await self._connection()
        seconds = command_timeout(args)
        wait = UNSET if seconds is None else reply_timeout(seconds, conn.options.socket_timeout)
        cache = self._client.cache
        if cache is None:
            reply = await conn.execute(args, timeout=wait)
        else:  # read-your-own-writes (docs/caching.md)
            write = own_write(args)
            if write is not None:
                cache.invalidate_write(write)
            try:
                reply = await conn.execute(args, timeout=wait)
            finally:
                if write is not None:
                    cache.invalidate_write(write)
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def _check_no_immediate(self) -> None:
        if self._immediate is not None:
            name = self._immediate[0][0]
            self._immediate = None
            raise RedisError(
                f"{name!r} was called after watch() and never awaited: before multi(), "
                "commands run at once (`await pipe.get(k)`), as in redis-py"
            )

    def multi(self) -> None:
        """Start queueing the transaction's commands (after :meth:`watch`).

        :raises RedisError: called twice, or commands were queued before it.
        """
        if self._explicit_multi:
            raise RedisError("multi() was already called")
        self._check_no_immediate()
        if self._stack:
            raise RedisError("commands were queued before multi()")
        self._explicit_multi = True

    # ----------------------------------------------------------------- executing

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send every queued command in one write and return their replies in order.

        :param raise_on_error: raise the first error reply (as its
            :class:`~trio_maint.ResponseError` subclass); otherwise errors are returned in
            the list in place of their replies.
        :returns: a ``list``, one item per queued command.
        :raises WatchError: a watched key changed (the transaction did not run).
        :raises ResponseError: with ``raise_on_error``, the first failed command.
        :raises ConnectionError, TimeoutError: the pipeline's connection failed; commands
            may or may not have run.
        """
        observer = self._client._observer
        if observer is not None and not self._observing:  # the one check (observe.py)
            return await self._observed_execute(observer, raise_on_error)
        self._check_no_immediate()
        stack, self._stack = self._stack, []
        callbacks, self._callbacks = self._callbacks, False
        if self._blocking:
            self._blocking = False
            # Inside MULTI/EXEC nothing blocks: only a plain pipeline waits longer.
            if not (self.transaction or self._explicit_multi):
                socket_timeout = self._client.options.socket_timeout
                self._reply_wait = pipeline_reply_timeout([a for a, _ in stack], socket_timeout)
        write = None
        cache = self._client.cache
        if cache is not None:  # read-your-own-writes (docs/caching.md): what the commands
            write = own_writes([a for a, _ in stack])  # change, before the send and after
            if write is not None:
                cache.invalidate_write(write)
        ran = False
        try:
            if not stack and not self.watching:
                await trio.lowlevel.checkpoint()
                return []
            if self.transaction or self._explicit_multi:
                if callbacks:  # each script's first call as EVAL: no NOSCRIPT inside EXEC
                    stack = first_calls_as_eval(stack)  # (script.py; a script call has one)
                replies = await self._execute_transaction(stack, callbacks)
            else:
                replies = await self._execute_pipeline(stack, callbacks)
            ran = True
        finally:
            if write is not None and cache is not None:
                cache.invalidate_write(write)
            if ran and self._conn is None:
                # The commands' reply was a schedule point: no second one (reset's).
                self._clear()
            else:
                await self.reset()
        return pipeline_results(replies, stack, callbacks, raise_on_error)

    async def _observed_execute(self, observer: CommandObserver, raise_on_error: bool) -> list[Any]:
        """:meth:`execute` reported to ``observer`` as one operation (``MULTI`` for a
        transaction, else ``PIPELINE``)."""
        transaction = self.transaction or self._explicit_multi
        self._observing = True
        try:
            run = self.execute(raise_on_error)
            return await observer.pipeline(self._client, transaction, len(self._stack), run)
        finally:
            self._observing = False

    async def _run(
        self,
        commands: list[tuple[CommandArg, ...]],
        *,
        transaction: bool = False,
        acquired: Connection | None = None,
    ) -> list[Any]:
        """Send ``commands`` in one write and return their replies (error replies as
        values). A pipeline holding a ``WATCH`` runs on its own connection and is never
        resent. Otherwise the retry policy (:data:`STANDALONE_POLICY`) is asked only when
        the first attempt calls for it: writes refused with ``READONLY`` (not executed)
        are sent again, in order, when the endpoint is moving; a transaction refused
        while queueing (it ran nothing) is sent again whole; a write that failed before
        anything was handed to the kernel is sent again. What may have run never is.

        ``acquired``: a connection the caller borrowed from the pool for the first
        attempt (auto-pipelining's batch worker); released here, as one borrowed here."""
        if self._conn is not None:
            return await self._conn.execute_many(commands, timeout=self._reply_wait)
        # The first attempt, as _attempt but inline: no extra coroutine on the hot path.
        pool = self._client.pool
        conn = await pool.acquire_for_reply() if acquired is None else acquired
        result: list[Any] | ConnectionError
        try:
            result = await conn.execute_many(commands, timeout=self._reply_wait)
        except ConnectionError as exc:
            if exc.written:
                raise
            result = exc  # nothing was written: the retry policy decides
        finally:
            pool.release(conn)
        if isinstance(result, list):
            if transaction:
                if not isinstance(result[-1], RedisError):
                    return result  # EXEC ran (a list) or a watched key changed (nil)
            elif ReadOnlyError not in map(type, result):
                return result
        if transaction:
            return await self._retry_transaction(commands, result, conn)
        return await self._retry_pipeline(commands, result, conn)

    async def _attempt(
        self, commands: list[tuple[CommandArg, ...]]
    ) -> tuple[list[Any] | ConnectionError, Connection]:
        """One write of ``commands`` on a pool connection: ``(replies, connection)``, or
        the ``ConnectionError`` raised before anything was written instead of the replies
        (any other failure is raised)."""
        pool = self._client.pool
        conn = await pool.acquire_for_reply()
        try:
            return await conn.execute_many(commands, timeout=self._reply_wait), conn
        except ConnectionError as exc:
            if exc.written:
                raise
            return exc, conn
        finally:
            pool.release(conn)

    async def _retry_transaction(
        self,
        commands: list[tuple[CommandArg, ...]],
        result: list[Any] | ConnectionError,
        conn: Connection,
    ) -> list[Any]:
        """The slow path of a transaction: resent whole while the policy says so; returns
        the replies of the last attempt (``_execute_transaction`` reads them)."""
        client = self._client
        state = RetryState(STANDALONE_POLICY, deadline=caller_deadline())
        while True:
            outcome = classify_transaction(result) if isinstance(result, list) else classify(result)
            decision = state.decide(outcome, trio.current_time(), moving=client._moving_known(conn))
            if isinstance(decision, WaitForMoving):
                moving = await client._moved_away(conn)
                decision = state.decide_after_wait(outcome, trio.current_time(), moving=moving)
            if isinstance(decision, Finish):
                if isinstance(result, list):
                    return result
                raise result
            result, conn = await self._attempt(commands)

    async def _retry_pipeline(
        self,
        commands: list[tuple[CommandArg, ...]],
        result: list[Any] | ConnectionError,
        conn: Connection,
    ) -> list[Any]:
        """The slow path of a pipeline: only the commands the policy says were not
        executed are sent again, in their order, in one write per round."""
        client = self._client
        tracker = PipelineRetry(STANDALONE_POLICY, len(commands), deadline=caller_deadline())
        everything = range(len(commands))
        tracker.record(everything, result, trio.current_time(), moving=client._moving_known(conn))
        while not tracker.done:
            if tracker.moving_wait() is not None:
                tracker.resolve_moving(await client._moved_away(conn), trio.current_time())
                continue
            for group in tracker.plan():  # standalone: one group, the pipeline's order
                if group.delay:  # pragma: no cover - the standalone policy resends at once
                    await trio.sleep(group.delay)
                result, conn = await self._attempt(group.commands(commands, ("ASKING",)))
                got = group.replies(result) if isinstance(result, list) else result
                tracker.record(
                    group.indexes, got, trio.current_time(), moving=client._moving_known(conn)
                )
        error = tracker.transport_error
        if error is not None:
            raise error
        return tracker.results()

    async def _execute_pipeline(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], callbacks: bool
    ) -> list[Any]:
        """The replies of a plain pipeline's commands, in order, error replies as values
        (callbacks not applied: :func:`pipeline_results`)."""
        replies = await self._run([args for args, _ in stack])
        # A NOSCRIPT reply comes only to a script call, which has a callback.
        if callbacks and NoScriptError in map(type, replies):  # resent as EVAL (script.py)
            replies = await resend_noscript(
                stack, replies, lambda _i, s: self._run([a for a, _ in s])
            )
        return replies

    async def _execute_transaction(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], callbacks: bool
    ) -> list[Any]:
        """``EXEC``'s reply, one item per command of ``stack`` (callbacks not applied:
        :func:`pipeline_results`)."""
        commands: list[tuple[CommandArg, ...]] = [("MULTI",)]
        commands += [args for args, _ in stack]
        commands.append(("EXEC",))
        replies = await self._run(commands, transaction=True)
        exec_reply = replies[-1]
        if isinstance(replies[0], RedisError):
            raise replies[0]
        if isinstance(exec_reply, ExecAbortError | ResponseError):
            # A command was refused while queueing: report that command's own error.
            for index, reply in enumerate(replies[1:-1]):
                if isinstance(reply, ResponseError):
                    _annotate(reply, index, stack[index][0])
                    raise reply
            raise exec_reply
        if exec_reply is None:
            raise WatchError("watched keys changed: the transaction was not executed")
        if not isinstance(exec_reply, list) or len(exec_reply) != len(stack):
            raise ResponseError(f"unexpected EXEC reply: {exec_reply!r:.200}")
        return exec_reply

    def _clear(self) -> None:
        """:meth:`reset` for a pipeline holding no connection, without its checkpoint."""
        self._clear_queue()
        self.watching = False

    def _clear_queue(self) -> None:
        """Forget the queued commands and what was worked out from them."""
        self._stack = []
        self._callbacks = False
        self._blocking = False
        self._reply_wait = UNSET
        self._explicit_multi = False
        self._immediate = None

    async def reset(self) -> None:
        """Drop queued commands, ``UNWATCH``, and give the held connection back."""
        self._clear_queue()
        conn, self._conn = self._conn, None
        if conn is None:
            self.watching = False
            await trio.lowlevel.checkpoint()
            return
        try:
            if self.watching and conn.usable:
                try:
                    await conn.execute(("UNWATCH",))
                except (RedisError, ConnectionClosedError):
                    pass
        finally:
            self.watching = False
            self._client.pool.release(conn)


def _annotate(error: RedisError, index: int, args: tuple[CommandArg, ...]) -> None:
    name = args[0] if args else "?"
    error.add_note(f"command #{index + 1} in the pipeline ({name!r})")


def pipeline_results(
    replies: list[Any],
    stack: list[tuple[tuple[CommandArg, ...], Callback | None]],
    callbacks: bool,
    raise_on_error: bool,
) -> list[Any]:
    """What :meth:`Pipeline.execute` returns (and the cluster's): ``replies`` (one per
    entry of ``stack``) with the callbacks applied to all but error replies (``callbacks``
    ``False``: ``stack`` has none); with ``raise_on_error``, the first error reply raised
    instead, annotated with its command. The usual case (no callback, no error reply) is
    one pass in C over the replies' types, and ``replies`` itself."""
    errors = False
    for kind in set(map(type, replies)):
        if issubclass(kind, RedisError):
            errors = True
            break
    if not errors:
        if not callbacks:
            return replies
        return [
            r if cb is None else apply_callback(cb, r, args)
            for r, (args, cb) in zip(replies, stack, strict=True)
        ]
    results = [
        r if isinstance(r, RedisError) or cb is None else apply_callback(cb, r, args)
        for r, (args, cb) in zip(replies, stack, strict=True)
    ]
    if raise_on_error:
        _raise_first_error(results, stack)
    return results


def _raise_first_error(
    results: list[Any], stack: list[tuple[tuple[CommandArg, ...], Callback | None]]
) -> None:
    for index, result in enumerate(results):
        if isinstance(result, RedisError):
            _annotate(result, index, stack[index][0])
            raise result
