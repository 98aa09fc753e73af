"""Cluster pipelines: :class:`ClusterPipeline` (commands split by node, replies put back in
order, what the retry policy allows resent in order) and transactions in one slot
(:func:`keys_slot_of`)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeAlias

import trio

from .._client.pipeline import caller_deadline, pipeline_results
from .._client.script import PipelineScripting, resend_noscript
from .._net.groups import unwrap_group
from .._sansio.blocking import TimeUnit, command_timeout, pipeline_reply_timeout, reply_timeout
from .._sansio.cmds import PipelineCommands
from .._sansio.errors import (
    ClusterDownError,
    ConnectionError,
    CrossSlotError,
    ExecAbortError,
    NoScriptError,
    ProtocolError,
    RedisError,
    ResponseError,
    WatchError,
    check_command,
)
from .._sansio.errors import TimeoutError as RedisTimeoutError
from .._sansio.replies import Callback
from .._sansio.resend import PipelineRetry
from .._sansio.resp import CommandArg
from .._sansio.retry import (
    Ask,
    Finish,
    Redirect,
    Retry,
    RetryState,
    classify,
    classify_transaction,
)
from .._sansio.scripts import first_calls_as_eval
from .._sansio.unset import UNSET, Unset
from .cache import write_begin, write_end
from .node import Node
from .redirects import COUNTER_NAMES, final_error, target_node

if TYPE_CHECKING:
    from .client import RedisCluster

__all__ = ["ClusterPipeline", "keys_slot_of"]


class ClusterPipeline(PipelineScripting, PipelineCommands):
    """Commands queued locally, sent per node in one write each (concurrently), replies
    returned in the order queued. Get one from :meth:`RedisCluster.pipeline`.

    The commands the retry policy says did not run (answered ``MOVED``, ``ASK``,
    ``TRYAGAIN``, ``CLUSTERDOWN``, a failed-over master's ``READONLY``, or whose node's
    connection failed before the write) are sent again, in the order queued: one write
    per node and round, one node after the other. A command whose connection failed
    after the write may have run: never resent, its error is its reply. With
    ``transaction=True`` every key must be in one slot: the commands run in
    ``MULTI``/``EXEC`` on its master, resent whole after a redirection or refusal that
    aborted the transaction before anything ran. ``WATCH`` is not supported.
    """

    def __init__(self, cluster: RedisCluster, transaction: bool = False) -> None:
        self._cluster = cluster
        self.transaction = transaction
        self._stack: list[tuple[tuple[CommandArg, ...], Callback | None]] = []
        # A blocking command was queued / is in the batch being executed: each node's
        # write waits for its commands' timeouts too (pipeline_reply_timeout).
        self._blocking = False
        self._blocking_run = False
        self._observing = False  # execute() runs inside the observer's pipeline()

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
        if timeout is not UNSET:  # a blocking command (see _blocking_timeout)
            self._blocking = True
        self._stack.append((args, callback))
        return self

    def _blocking_timeout(self, timeout: float | None, unit: TimeUnit = "s") -> float | None:
        """As :meth:`RedisCluster._blocking_timeout`; a command queued with it makes
        :meth:`execute` wait for the queued commands' timeouts too, per node
        (:func:`~trio_maint._sansio.blocking.pipeline_reply_timeout`)."""
        return reply_timeout(timeout, self._cluster.options.socket_timeout, unit)

    def execute_command(self, *args: CommandArg) -> ClusterPipeline:
        """Queue any command; returns the pipeline.

        :raises DataError: no arguments (nothing is queued).
        """
        check_command(args)
        if command_timeout(args) is not None:
            self._blocking = True
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
        :raises ConnectionError, TimeoutError: with ``raise_on_error``, the first command
            whose connection failed after the write (it may have run; without
            ``raise_on_error`` the error is in its place); a transaction raises it always.
        """
        observer = self._cluster._observer
        if observer is not None and not self._observing:  # the one check (_client/observe.py)
            self._observing = True
            try:
                run = self.execute(raise_on_error)
                size = len(self._stack)
                return await observer.pipeline(self._cluster, self.transaction, size, run)
            finally:
                self._observing = False
        stack, self._stack = self._stack, []
        self._blocking_run, self._blocking = self._blocking, False
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
        write = None
        if cluster.options.cache is not None:  # read-your-own-writes (docs/caching.md)
            write = write_begin(cluster, zip([args for args, _cb in stack], slots, strict=True))
        try:
            if self.transaction:
                # Each script's first call as EVAL: no NOSCRIPT inside EXEC (script.py).
                replies = await self._execute_transaction(first_calls_as_eval(stack), slots)
            else:
                replies = await self._execute_pipeline(stack, slots)
                if NoScriptError in map(type, replies):  # resent as EVAL, per node (script.py)
                    replies = await resend_noscript(
                        stack,
                        replies,
                        lambda i, s: self._execute_pipeline(s, [slots[x] for x in i]),
                    )
        finally:
            if write is not None:
                write_end(cluster, write)
        return pipeline_results(replies, stack, True, raise_on_error)

    async def _send(
        self, node: Node, commands: list[tuple[CommandArg, ...]]
    ) -> tuple[list[Any] | RedisError, bool | None]:
        """One write of ``commands`` to ``node``: ``(replies, None)``, or ``(the transport
        error, written)`` where ``written`` is ``False`` when the pool's acquisition
        failed (nothing was written) and ``None`` otherwise (the error's own flag says).
        Errors of a closed cluster client are raised."""
        cluster = self._cluster
        assert node.client is not None
        pool = node.client.pool
        try:
            conn = await pool.acquire_for_reply()
        except (ConnectionError, RedisTimeoutError) as exc:
            if cluster.closed:
                raise
            return exc, False
        wait: float | Literal[Unset.UNSET] | None = UNSET
        if self._blocking_run:
            wait = pipeline_reply_timeout(commands, node.client.options.socket_timeout)
        try:
            return await conn.execute_many(commands, timeout=wait), None
        except (ConnectionError, RedisTimeoutError, ProtocolError) as exc:
            if cluster.closed:
                raise
            return exc, None
        finally:
            pool.release(conn)

    async def _execute_pipeline(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], slots: list[int | None]
    ) -> list[Any]:
        cluster = self._cluster
        commands = [args for args, _cb in stack]
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
        first: list[_Write] = []
        clean = True

        async def send(node: Node, indexes: list[int]) -> None:
            nonlocal clean
            got, written = await self._send(node, [commands[i] for i in indexes])
            first.append((node, indexes, got, written))
            if not isinstance(got, list):
                clean = False
                return
            for i, reply in zip(indexes, got, strict=True):
                if isinstance(reply, RedisError):
                    clean = False
                replies[i] = reply

        if len(groups) == 1:
            ((node, indexes),) = groups.values()
            await send(node, indexes)
        else:
            try:
                async with trio.open_nursery() as nursery:
                    for node, indexes in groups.values():
                        nursery.start_soon(send, node, indexes)
            except BaseExceptionGroup as group:
                raise unwrap_group(group) from None
        if clean:
            return replies
        return await self._resend(commands, slots, first)

    async def _resend(
        self, commands: list[tuple[CommandArg, ...]], slots: list[int | None], first: list[_Write]
    ) -> list[Any]:
        """The slow path of a pipeline (:class:`PipelineRetry`): record the first round,
        then send again what the policy allows, round after round: one write per node,
        one node after the other, each in the order queued. Returns every command's
        reply or error (what may have run keeps its transport error as its reply)."""
        cluster = self._cluster
        tracker = PipelineRetry(cluster.retry_policy, len(commands), deadline=caller_deadline())
        sent_to: dict[int, Node] = {}
        for write in first:
            self._record(tracker, write, sent_to)
        while not tracker.done:
            if tracker.moving_wait() is not None:  # pragma: no cover - not in a cluster
                tracker.resolve_moving(False, trio.current_time())
                continue
            resends = tracker.resends()
            for index, decision in resends:  # MOVED first: the others route by the map
                if isinstance(decision, Redirect):
                    info = target_node(decision.target, sent_to[index].info.host)
                    cluster._map.set_master(decision.target.slot, info)
            nodes: dict[Hashable, Node] = {}
            targets: dict[int, str | None] = {}
            for index, decision in resends:
                node = await self._resend_node(index, decision, slots[index], sent_to)
                targets[index] = None if node is None else node.name
                if node is not None:
                    nodes[node.name] = node
            plan = tracker.plan(targets)
            if any(group.refresh for group in plan):
                cluster.request_refresh()
            delay = max(group.delay for group in plan)
            if delay:
                await trio.sleep(delay)
            for group in plan:  # one write per node, one after the other, in order
                indexes = list(group.indexes)
                node = nodes.get(group.target)
                if node is None:  # no node serves the slot in the map (after a refresh)
                    unserved = ClusterDownError("CLUSTERDOWN Hash slot not served")
                    self._record(
                        tracker,
                        (sent_to[indexes[0]], indexes, [unserved] * len(indexes), None),
                        sent_to,
                    )
                    continue
                got, written = await self._send(node, group.commands(commands, ("ASKING",)))
                if isinstance(got, list):
                    got = group.replies(got)
                self._record(tracker, (node, indexes, got, written), sent_to)
        return tracker.results()

    async def _resend_node(
        self,
        index: int,
        decision: Retry | Redirect | Ask,
        slot: int | None,
        sent_to: dict[int, Node],
    ) -> Node | None:
        """Where command ``index`` goes next: the node of an ``ASK``, else the master of
        its slot (``None`` when no node serves it, even after a refresh)."""
        cluster = self._cluster
        if isinstance(decision, Ask):
            return await cluster._node(target_node(decision.target, sent_to[index].info.host))
        node = cluster._master_now(slot)
        if node is not None:
            return node
        try:
            node, _replica = await cluster._route(slot, False)
        except ClusterDownError:
            return None
        return node

    def _record(self, tracker: PipelineRetry, write: _Write, sent_to: dict[int, Node]) -> None:
        """Record one write's result in ``tracker`` and count what it met."""
        node, indexes, got, written = write
        for index in indexes:
            sent_to[index] = node
        now = trio.current_time()
        counters = self._cluster.redirections
        if isinstance(got, list):
            tracker.record(indexes, got, now)
            kinds = [classify(reply).kind for reply in got if isinstance(reply, RedisError)]
        else:
            tracker.record(indexes, got, now, written=written)
            kinds = [classify(got, written=written).kind] * len(indexes)
        for kind in kinds:
            counter = COUNTER_NAMES.get(kind)
            if counter is not None:
                counters[counter] += 1

    async def _execute_transaction(
        self, stack: list[tuple[tuple[CommandArg, ...], Callback | None]], slots: list[int | None]
    ) -> list[Any]:
        """``MULTI``/commands/``EXEC`` on the slot's master; resent whole while the policy
        says the transaction did not run (redirected, refused while queueing, its
        connection failed before the write)."""
        cluster = self._cluster
        slot = keys_slot_of(slots)
        commands: list[tuple[CommandArg, ...]] = [("MULTI",), *[a for a, _ in stack], ("EXEC",)]
        state: RetryState | None = None
        ask_node: Node | None = None
        while True:
            if ask_node is not None:
                node, to_send = ask_node, [("ASKING",), *commands]
            else:
                routed = cluster._master_now(slot)
                node = routed or (await cluster._route(slot, False))[0]
                to_send = commands
            got, written = await self._send(node, to_send)
            if isinstance(got, list):
                if to_send is not commands:
                    got = got[1:]  # the transaction's own replies decide, not ASKING's
                if isinstance(got[-1], list) and not isinstance(got[0], RedisError):
                    return _transaction_replies(got, len(stack))  # it ran
                outcome = classify_transaction(got)
            else:
                outcome = classify(got, written=written)
            if state is None:
                state = RetryState(cluster.retry_policy, deadline=caller_deadline())
            step = await cluster._follow(state, outcome, node, False)
            if isinstance(step, Finish):
                if not isinstance(got, list):
                    raise final_error(outcome, step, node.name)
                try:
                    return _transaction_replies(got, len(stack))
                except RedisError as exc:
                    if step.reason and outcome.kind.proves_not_run:
                        exc.add_note(f"{node.name}: {step.reason}")
                    raise
            ask_node = step


#: One write of a pipeline: the node, the commands' indexes, the replies or the
#: transport error, and the error's ``written`` (see :meth:`ClusterPipeline._send`).
_Write: TypeAlias = tuple[Node, list[int], list[Any] | RedisError, bool | None]


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


def _transaction_replies(got: list[Any], size: int) -> list[Any]:
    """The ``EXEC`` results of a transaction's replies ``[MULTI, queued..., EXEC]``, or
    its error raised: ``MULTI``'s, the first queued command's, ``EXEC``'s, or
    :class:`WatchError` for a nil ``EXEC``."""
    queued, exec_reply = got[1:-1], got[-1]
    if isinstance(got[0], RedisError):
        raise got[0]
    if isinstance(exec_reply, ExecAbortError | ResponseError):
        for index, reply in enumerate(queued):
            if isinstance(reply, ResponseError):
                reply.add_note(f"command #{index + 1} in the transaction")
                raise reply
        raise exec_reply
    if exec_reply is None:
        raise WatchError("the transaction was not executed")
    if not isinstance(exec_reply, list) or len(exec_reply) != size:
        raise ResponseError(f"unexpected EXEC reply: {exec_reply!r:.200}")
    return exec_reply
