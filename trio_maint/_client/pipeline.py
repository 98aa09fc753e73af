"""Pipelines and ``MULTI``/``EXEC`` transactions: :class:`Pipeline`."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

import trio

from .._net.connection import Connection
from .._sansio.commands import CommandsMixin, KeyT
from .._sansio.errors import (
    ConnectionClosedError,
    ExecAbortError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    WatchError,
)
from .._sansio.replies import Callback, apply_callback
from .._sansio.resp import CommandArg
from .._sansio.unset import UNSET, Unset

if TYPE_CHECKING:
    from .redis import Redis

__all__ = ["Pipeline"]


class Pipeline(CommandsMixin["Pipeline"]):
    """Commands queued locally and sent in one write; replies read in order.

    Get one from :meth:`Redis.pipeline`. Command methods queue and return the pipeline
    (so calls chain); :meth:`execute` sends them. With ``transaction=True`` (the default)
    they are wrapped in ``MULTI``/``EXEC`` and run atomically.

    Optimistic locking, as in redis-py::

        async with r.pipeline() as pipe:
            await pipe.watch("balance")
            balance = int(await pipe.immediate_execute_command("GET", "balance"))
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
        self._conn: Connection | None = None
        self.watching = False
        self._explicit_multi = False

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
        self._stack.append((args, callback))
        return self

    def _blocking_timeout(self, timeout: float) -> float | None:
        return None

    def execute_command(self, *args: CommandArg) -> Pipeline:
        """Queue any command (``args`` as for :meth:`Redis.execute_command`); returns the
        pipeline."""
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
        """
        conn = await self._connection()
        reply = await conn.execute(args)
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def multi(self) -> None:
        """Start queueing the transaction's commands (after :meth:`watch`).

        :raises RedisError: called twice, or commands were queued before it.
        """
        if self._explicit_multi:
            raise RedisError("multi() was already called")
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
        stack, self._stack = self._stack, []
        try:
            if not stack and not self.watching:
                await trio.lowlevel.checkpoint()
                return []
            if self.transaction or self._explicit_multi:
                return await self._execute_transaction(stack, raise_on_error)
            return await self._execute_pipeline(stack, raise_on_error)
        finally:
            await self.reset()

    async def _run(
        self, commands: list[tuple[CommandArg, ...]], *, transaction: bool = False
    ) -> list[Any]:
        if self._conn is not None:
            return await self._conn.execute_many(commands)
        pool = self._client.pool
        conn = await pool.acquire_for_reply()
        try:
            replies = await conn.execute_many(commands)
        finally:
            pool.release(conn)
        # Writes refused with READONLY were not executed: when the endpoint is moving
        # (the old endpoint turns read-only just before MOVING), send them again on the
        # new endpoint, as single commands are (see docs/maintenance.md). A transaction
        # refused while queueing ran nothing, so it is sent again whole.
        refused = [i for i, r in enumerate(replies) if r.__class__ is ReadOnlyError]
        if refused and await self._client._moved_away(conn):
            if transaction:
                return await self._run(commands, transaction=True)
            again = await self._run([commands[i] for i in refused])
            for i, reply in zip(refused, again, strict=True):
                replies[i] = reply
        return replies

    async def _execute_pipeline(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], raise_on_error: bool
    ) -> list[Any]:
        replies = await self._run([args for args, _ in stack])
        results = [
            r if isinstance(r, RedisError) or cb is None else apply_callback(cb, r, args)
            for r, (args, cb) in zip(replies, stack, strict=True)
        ]
        if raise_on_error:
            _raise_first_error(results, stack)
        return results

    async def _execute_transaction(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], raise_on_error: bool
    ) -> list[Any]:
        commands: list[tuple[CommandArg, ...]] = [("MULTI",)]
        commands += [args for args, _ in stack]
        commands.append(("EXEC",))
        replies = await self._run(commands, transaction=True)
        queued, exec_reply = replies[1:-1], replies[-1]
        if isinstance(replies[0], RedisError):
            raise replies[0]
        if isinstance(exec_reply, ExecAbortError | ResponseError):
            # A command was refused while queueing: report that command's own error.
            for index, reply in enumerate(queued):
                if isinstance(reply, ResponseError):
                    _annotate(reply, index, stack[index][0])
                    raise reply
            raise exec_reply
        if exec_reply is None:
            raise WatchError("watched keys changed: the transaction was not executed")
        if not isinstance(exec_reply, list) or len(exec_reply) != len(stack):
            raise ResponseError(f"unexpected EXEC reply: {exec_reply!r:.200}")
        results = [
            r if isinstance(r, RedisError) or cb is None else apply_callback(cb, r, args)
            for r, (args, cb) in zip(exec_reply, stack, strict=True)
        ]
        if raise_on_error:
            _raise_first_error(results, stack)
        return results

    async def reset(self) -> None:
        """Drop queued commands, ``UNWATCH``, and give the held connection back."""
        self._stack = []
        self._explicit_multi = False
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


def _raise_first_error(
    results: list[Any], stack: list[tuple[tuple[CommandArg, ...], Callback | None]]
) -> None:
    for index, result in enumerate(results):
        if isinstance(result, RedisError):
            _annotate(result, index, stack[index][0])
            raise result
