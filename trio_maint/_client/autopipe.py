"""Auto-pipelining, the Trio shell: concurrent tasks' commands written together.

With ``auto_pipeline=True`` (:class:`~trio_maint.ClientOptions`), :meth:`Redis._command
<trio_maint.Redis.execute_command>` hands each batchable command
(:func:`~trio_maint._sansio.autopipe.batchable`) to the client's :class:`AutoPipeliner`.
A command sent while no other is in flight goes straight through the pool, as without
auto-pipelining. Otherwise its task parks and a batch worker (one of
:data:`BATCH_WORKERS`, tasks of the client's nursery) writes it with the other queued
commands as one non-transactional pipeline: the same connection handling, maintenance
decisions and retry policy as :meth:`Pipeline.execute <trio_maint.Pipeline.execute>`.
The decisions (what batches, what goes straight out, how much a batch takes) are
:class:`~trio_maint._sansio.autopipe.BatchQueue`'s.

A queued command waits for a batch at most ``pool_timeout`` seconds: when every batch
worker is busy that long (a stalled server), it fails with
:class:`~trio_maint.PoolTimeoutError`, unsent, as a command that waited that long for a
pool connection does. Once a batch took it, ``socket_timeout`` bounds its reply.

Cancellation: a task cancelled while its command is queued takes it out of the queue
(nothing was sent). One cancelled after a batch took its command leaves it to the batch
(it may run, as a command cancelled while awaiting its reply may); the worker reads its
reply and drops it, so the connection is never left mid-reply. The client closing
cancels the workers: commands queued or in a batch then fail with
:class:`~trio_maint.ConnectionClosedError`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import outcome
import trio

from .._sansio.autopipe import BatchQueue
from .._sansio.encode import CommandArg, encode_command
from .._sansio.errors import (
    ConnectionClosedError,
    ConnectionError,
    DataError,
    PoolTimeoutError,
    ProtocolError,
    RedisError,
)
from .._sansio.unset import UNSET
from .pipeline import Pipeline

if TYPE_CHECKING:
    from .._net.connection import Connection
    from .redis import Redis

__all__ = ["BATCH_WORKERS", "AutoPipeliner"]

#: Batch workers per client: how many batches (each on its own pool connection) can be
#: awaiting their replies at once.
BATCH_WORKERS: Final = 4


class _Queued:
    """One command waiting for a batch: its arguments, its parked task, and until when
    (Trio's clock, seconds) it may wait for one."""

    __slots__ = ("abandoned", "args", "deadline", "task")

    def __init__(
        self, args: tuple[CommandArg, ...], task: trio.lowlevel.Task, deadline: float
    ) -> None:
        self.args = args
        self.task = task
        self.deadline = deadline
        # Set when the task was cancelled after a batch took the command: its reply is
        # read and dropped.
        self.abandoned = False


class AutoPipeliner:
    """Runs a client's auto-pipelined commands (see the module doc).

    :param client: the :class:`~trio_maint.Redis` whose pool the batches use.
    :param workers: batch workers (``int`` ≥ 1), default :data:`BATCH_WORKERS`.
    """

    def __init__(self, client: Redis, workers: int = BATCH_WORKERS) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        self._client = client
        self._workers = workers
        self._state: BatchQueue[_Queued] = BatchQueue()
        self._idle = trio.lowlevel.ParkingLot()
        # Where the expiry task waits while nothing is queued.
        self._nothing_queued = trio.lowlevel.ParkingLot()
        self._closed = False
        wait = client.options.pool_timeout
        self._max_wait = math.inf if wait is None else wait

    async def run(self) -> None:
        """Run the batch workers (and, with a ``pool_timeout``, the task that fails the
        commands queued past it) until cancelled (the client's nursery runs this)."""
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(self._workers):
                    nursery.start_soon(self._worker)
                if self._max_wait != math.inf:
                    nursery.start_soon(self._expire)
        finally:
            self.close()

    async def _expire(self) -> None:
        """Fail each command that waited ``pool_timeout`` seconds in the queue (every
        batch worker busy: a stalled server, say) with
        :class:`~trio_maint.PoolTimeoutError`, as a command waiting that long for a pool
        connection is; it was never sent."""
        state = self._state
        while True:
            front = state.front()
            if front is None:
                await self._nothing_queued.park()
                continue
            await trio.sleep_until(front.deadline)
            for item in state.expire(_expired_at(trio.current_time())):
                error = PoolTimeoutError(
                    f"no batch took the command within pool_timeout ({self._max_wait:g} s):"
                    " every batch worker was busy; it was not sent"
                )
                trio.lowlevel.reschedule(item.task, outcome.Error(error))

    def close(self) -> None:
        """Stop taking commands; fail the queued ones with
        :class:`~trio_maint.ConnectionClosedError` (nothing of theirs was sent)."""
        self._closed = True
        queued = self._state.take()
        while queued:
            for item in queued:
                trio.lowlevel.reschedule(item.task, outcome.Error(_closed_error()))
            queued = self._state.take()

    async def execute(self, args: tuple[CommandArg, ...]) -> Any:
        """Run the batchable command ``args`` and return its reply.

        :raises ResponseError: its own error reply.
        :raises ConnectionError, TimeoutError, PoolTimeoutError: as
            :meth:`Pipeline.execute <trio_maint.Pipeline.execute>` (a batch's failure
            fails each command in it).
        :raises PoolTimeoutError: no batch took it within ``pool_timeout`` seconds (it
            was not sent), as a command that waited that long for a pool connection.
        :raises ConnectionClosedError: the client closed before the reply came.
        """
        if self._closed:
            raise _closed_error()
        state = self._state
        if state.start():  # nothing else in flight: nothing to batch with
            try:
                return await self._client._send_pooled(args, timeout=UNSET)
            finally:
                state.done()
        item = _Queued(args, trio.lowlevel.current_task(), trio.current_time() + self._max_wait)
        if state.enqueue(item):
            self._idle.unpark()
            self._nothing_queued.unpark()

        def abort(_: object) -> trio.lowlevel.Abort:
            if not state.withdraw(item):
                item.abandoned = True  # a batch has it: its reply is dropped
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            return await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            state.done()

    async def _worker(self) -> None:
        state = self._state
        while True:
            if not state.waiting:
                await self._idle.park()
                continue
            taken = await self._take_batch()
            if taken is None:
                continue
            batch, conn = taken
            if state.waiting:  # more than one batch's worth: another worker takes the rest
                self._idle.unpark()
            await self._run_batch(batch, conn)

    async def _take_batch(self) -> tuple[list[_Queued], Connection] | None:
        """A pool connection, then the queued commands (a batch): a command leaves the
        queue only when nothing stands between it and its write, so that one whose task
        is cancelled while a connection is found (a dial, a full pool) is taken back
        unsent, never written after that task's next command. ``None`` when the queue
        emptied meanwhile, or when no connection came (the queued commands then failed
        with the pool's error)."""
        pool = self._client.pool
        try:
            conn = await pool.acquire_for_reply()
        except Exception as exc:  # a full pool, a failed dial, a closed pool
            _fail(self._state.take(), exc)
            return None
        batch = self._state.take()
        if not batch:
            pool.release(conn)
            return None
        return batch, conn

    async def _run_batch(self, batch: list[_Queued], conn: Connection) -> None:
        """Send ``batch`` as one pipeline and wake each task with its reply.

        A failure is each command's own where that can be told: an argument that does
        not encode fails its command only (nothing was sent; the rest go as a batch), and
        a reply that breaks the connection (past a cap, not RESP) fails its command,
        while the commands before it get their replies, already read, and those after it
        a :class:`~trio_maint.ConnectionError` (written: they may have run). Any other
        failure of the batch's connection fails each of its commands, as it fails each
        command of a pipeline."""
        commands = [item.args for item in batch]
        try:
            replies = await Pipeline(self._client, transaction=False)._run(commands, acquired=conn)
        except trio.Cancelled:
            _fail(batch, _closed_error())
            raise
        except DataError as exc:  # raised before anything was written: find whose it is
            rest = self._refuse_unencodable(batch)
            if len(rest) == len(batch):  # (no culprit found: never sent again as it was)
                _fail(rest, exc)
                return
            # Back to the front of the queue (this worker takes them next, with a
            # connection in hand), but for those whose task was cancelled meanwhile.
            self._state.requeue([i for i in rest if not i.abandoned])
            return
        except ProtocolError as exc:
            read = exc.read_before
            if read is None or read[0] is not commands:
                _fail(batch, exc)
                return
            done = len(read[1])
            _deliver(batch[:done], read[1])
            _fail(batch[done : done + 1], exc)
            after = ConnectionError(
                "the connection was discarded after an earlier command of the same "
                "auto-pipelined batch got a reply it could not take; this command may "
                "have run"
            )
            after.__cause__ = exc
            _fail(batch[done + 1 :], after)
            return
        except Exception as exc:  # the batch's connection failed: so did each command
            _fail(batch, exc)
            return
        _deliver(batch, replies)
        self._state.batch_replied(len(batch), _string_bytes(replies))

    @staticmethod
    def _refuse_unencodable(batch: list[_Queued]) -> list[_Queued]:
        """Fail each command of ``batch`` whose arguments do not encode with its own
        :class:`~trio_maint.DataError`; return the others."""
        rest = []
        for item in batch:
            try:
                encode_command(item.args)
            except DataError as exc:
                _fail([item], exc)
            else:
                rest.append(item)
        return rest


def _expired_at(now: float) -> Callable[[_Queued], bool]:
    """Whether a queued command's wait bound has passed at ``now`` (Trio's clock)."""
    return lambda item: item.deadline <= now


def _string_bytes(replies: list[Any]) -> int:
    """The length of the ``bytes`` and ``str`` replies among ``replies``, summed."""
    return sum(len(r) for r in replies if r.__class__ is bytes or r.__class__ is str)


def _deliver(batch: list[_Queued], replies: list[Any]) -> None:
    """Wake each task of ``batch`` with its reply (an error reply raised)."""
    for item, reply in zip(batch, replies, strict=True):
        if item.abandoned:
            continue
        if isinstance(reply, RedisError):
            trio.lowlevel.reschedule(item.task, outcome.Error(reply))
        else:
            trio.lowlevel.reschedule(item.task, outcome.Value(reply))


def _fail(batch: list[_Queued], exc: Exception) -> None:
    """Wake each task of ``batch`` with ``exc`` (a copy each after the first)."""
    first = True
    for item in batch:
        if not item.abandoned:
            trio.lowlevel.reschedule(item.task, outcome.Error(exc if first else _copy(exc)))
            first = False


def _closed_error() -> ConnectionClosedError:
    return ConnectionClosedError("the client is closed")


def _copy(exc: Exception) -> Exception:
    """Each task raises an exception of its own (a traceback is per raise): a copy of
    ``exc``, caused by it; ``exc`` itself when it cannot be copied."""
    try:
        twin = copy.copy(exc)
    except Exception:  # pragma: no cover - every exception of ours copies
        return exc
    twin.__cause__ = exc
    return twin
