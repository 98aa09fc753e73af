"""Cluster pipelines: :class:`ClusterPipeline` (commands split by node, replies put back in
order, redirections retried) and transactions in one slot (:func:`keys_slot_of`)."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

import trio

from .._net.groups import unwrap_group
from .._sansio.commands import CommandsMixin
from .._sansio.errors import (
    AskError,
    ClusterDownError,
    ConnectionError,
    CrossSlotError,
    ExecAbortError,
    MovedError,
    RedisError,
    ResponseError,
    TryAgainError,
    WatchError,
)
from .._sansio.replies import Callback, apply_callback
from .._sansio.resp import CommandArg
from .._sansio.unset import UNSET, Unset
from .node import Node
from .redirects import REDIRECT_KINDS, backoff, redirect_target

if TYPE_CHECKING:
    from .client import RedisCluster

__all__ = ["ClusterPipeline", "keys_slot_of"]


class ClusterPipeline(CommandsMixin["ClusterPipeline"]):
    """Commands queued locally, sent per node in one write each (concurrently), replies
    returned in the order queued. Get one from :meth:`RedisCluster.pipeline`.

    A command answered with ``MOVED``/``ASK``/``TRYAGAIN``/``CLUSTERDOWN`` (or whose node
    was lost) is run again on its own through the client's redirect handling. With
    ``transaction=True`` every key must be in one slot: the commands run in
    ``MULTI``/``EXEC`` on its master (retried as a whole after ``MOVED``/``ASK``, which
    abort the transaction before anything ran). ``WATCH`` is not supported.
    """

    def __init__(self, cluster: RedisCluster, transaction: bool = False) -> None:
        self._cluster = cluster
        self.transaction = transaction
        self._stack: list[tuple[tuple[CommandArg, ...], Callback | None]] = []

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
        self._stack = []
        await trio.lowlevel.checkpoint()

    def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | Literal[Unset.UNSET] | None = UNSET,
    ) -> ClusterPipeline:
        self._stack.append((args, callback))
        return self

    def _blocking_timeout(self, timeout: float) -> float | None:
        return None

    def execute_command(self, *args: CommandArg) -> ClusterPipeline:
        """Queue any command; returns the pipeline."""
        self._stack.append((args, None))
        return self

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send every queued command and return the replies in order.

        :param raise_on_error: raise the first error reply; otherwise errors are returned
            in place of their replies.
        :raises CrossSlotError: a multi-key command (or, in a transaction, the whole
            pipeline) spans slots; nothing was sent.
        :raises WatchError: never (no WATCH); :raises ResponseError: with
            ``raise_on_error``, the first failed command.
        """
        stack, self._stack = self._stack, []
        if not stack:
            await trio.lowlevel.checkpoint()
            return []
        cluster = self._cluster
        slots: list[int | None] = []
        for args, _cb in stack:
            try:
                slots.append(cluster._slot_of(args))
            except KeyError:
                slots.append(await cluster._slot_of_unknown(args))
        if self.transaction:
            replies = await self._execute_transaction(stack, slots)
        else:
            replies = await self._execute_pipeline(stack, slots)
        results = [
            r if isinstance(r, RedisError) or cb is None else apply_callback(cb, r, args)
            for r, (args, cb) in zip(replies, stack, strict=True)
        ]
        if raise_on_error:
            for index, result in enumerate(results):
                if isinstance(result, RedisError):
                    result.add_note(
                        f"command #{index + 1} in the pipeline ({stack[index][0][0]!r})"
                    )
                    raise result
        return results

    async def _execute_pipeline(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], slots: list[int | None]
    ) -> list[Any]:
        cluster = self._cluster
        groups: dict[str, tuple[Node, list[int]]] = {}
        for index, slot in enumerate(slots):
            node = cluster._master_now(slot)
            if node is None:
                node, _replica = await cluster._route(slot, False)
            group = groups.get(node.name)
            if group is None:
                groups[node.name] = group = (node, [])
            group[1].append(index)
        replies: list[Any] = [None] * len(stack)
        retry: list[int] = []

        async def send(node: Node, indexes: list[int]) -> None:
            assert node.client is not None
            pool = node.client.pool
            try:
                conn = await pool.acquire_for_reply()
                try:
                    got = await conn.execute_many([stack[i][0] for i in indexes])
                finally:
                    pool.release(conn)
            except ConnectionError:
                if cluster.closed:
                    raise
                retry.extend(indexes)
                return
            for i, reply in zip(indexes, got, strict=True):
                if isinstance(reply, MovedError | AskError | TryAgainError | ClusterDownError):
                    retry.append(i)
                else:
                    replies[i] = reply

        async def again(i: int) -> None:
            try:
                replies[i] = await cluster._execute(stack[i][0], slots[i])
            except ResponseError as exc:
                replies[i] = exc

        try:
            async with trio.open_nursery() as nursery:
                for node, indexes in groups.values():
                    nursery.start_soon(send, node, indexes)
            if retry:
                async with trio.open_nursery() as nursery:
                    for i in sorted(retry):
                        nursery.start_soon(again, i)
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None
        return replies

    async def _execute_transaction(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], slots: list[int | None]
    ) -> list[Any]:
        cluster = self._cluster
        slot = keys_slot_of(slots)
        commands: list[tuple[CommandArg, ...]] = [("MULTI",), *[a for a, _ in stack], ("EXEC",)]
        ask_node: Node | None = None
        attempt = 0
        deadline = trio.current_time() + cluster.retry_timeout
        while True:
            if ask_node is not None:
                node, to_send = ask_node, [("ASKING",), *commands]
            else:
                node, _replica = await cluster._route(slot, False)
                to_send = commands
            ask_node = None
            assert node.client is not None
            pool = node.client.pool
            conn = await pool.acquire_for_reply()
            try:
                got = await conn.execute_many(to_send)
            finally:
                pool.release(conn)
            if to_send is not commands:
                got = got[1:]
            queued, exec_reply = got[1:-1], got[-1]
            if isinstance(got[0], RedisError):
                raise got[0]
            redirect: ResponseError | None = next(
                (r for r in queued if isinstance(r, MovedError | AskError | TryAgainError)), None
            )
            if redirect is None and isinstance(exec_reply, ResponseError):
                redirect = exec_reply if isinstance(exec_reply, ClusterDownError) else None
            if redirect is not None:
                cluster.redirections[REDIRECT_KINDS[type(redirect)]] += 1
                attempt += 1
                if attempt > cluster.max_redirects or trio.current_time() > deadline:
                    raise redirect
                if isinstance(redirect, MovedError):
                    moved_slot, target = redirect_target(redirect)
                    cluster._map.set_master(moved_slot, target)
                    cluster.request_refresh()
                elif isinstance(redirect, AskError):
                    _slot, target = redirect_target(redirect)
                    ask_node = await cluster._node(target)
                else:
                    await trio.sleep(backoff(attempt))
                continue
            if isinstance(exec_reply, ExecAbortError | ResponseError):
                for index, reply in enumerate(queued):
                    if isinstance(reply, ResponseError):
                        reply.add_note(f"command #{index + 1} in the transaction")
                        raise reply
                raise exec_reply
            if exec_reply is None:
                raise WatchError("the transaction was not executed")
            if not isinstance(exec_reply, list) or len(exec_reply) != len(stack):
                raise ResponseError(f"unexpected EXEC reply: {exec_reply!r:.200}")
            return exec_reply


def keys_slot_of(slots: Sequence[int | None]) -> int | None:
    """The one slot of a transaction's commands (``None``: all keyless).

    :raises CrossSlotError: they span slots.
    """
    found: int | None = None
    for slot in slots:
        if slot is None:
            continue
        if found is None:
            found = slot
        elif slot != found:
            raise CrossSlotError(
                f"a cluster transaction must keep every key in one slot (found {found} and "
                f"{slot}); use a hash tag"
            )
    return found
