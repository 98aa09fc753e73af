"""A consumer-group reader: :class:`StreamConsumer` (``r.stream_consumer(...)``).

It reads one stream as one consumer of a consumer group with ``XREADGROUP`` and
acknowledges with ``XACK``; it starts no task (everything runs in the caller's task, inside
its ``async with``). Delivery is at least once: an entry is delivered again only if it was
not acknowledged, and an acknowledged entry never is. See docs/streams.md.
"""

from __future__ import annotations

import math
from collections import deque
from types import TracebackType
from typing import Any, Final, Literal, Protocol, Self, cast

import trio

from .._sansio.errors import ConnectionError, RedisError, ResponseError
from .._sansio.errors import TimeoutError as RedisTimeoutError
from .._sansio.resp import CommandArg
from .._sansio.streams import StreamEntry, StreamId, parse_xread
from .._sansio.unset import Unset

__all__ = ["CommandRunner", "StreamConsumer", "StreamConsumers"]

#: Error codes after which a read or an acknowledgement is tried again (nothing ran, or
#: the node is changing role): a blocked read unblocked by a role change or a deleted or
#: migrated key (``UNBLOCKED``), a slot in the middle of a migration (``TRYAGAIN``), a
#: cluster or node not ready (``CLUSTERDOWN``, ``LOADING``, ``MASTERDOWN``), a write
#: refused by a node that became a replica (``READONLY``).
TRANSIENT_CODES: Final = frozenset(
    {"UNBLOCKED", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY"}
)


class CommandRunner(Protocol):
    """What :class:`StreamConsumer` needs of a client: ``execute_command`` as
    :class:`~trio_maint.Redis` and :class:`~trio_maint.RedisCluster` have it."""

    async def execute_command(
        self, *args: CommandArg, timeout: float | Literal[Unset.UNSET] | None = ...
    ) -> Any:
        """Run one command and return its reply."""
        ...


def _id_key(entry_id: StreamId | StreamEntry) -> bytes:
    if isinstance(entry_id, StreamEntry):
        entry_id = entry_id.id
    return entry_id.encode() if isinstance(entry_id, str) else bytes(entry_id)


def _transient(exc: RedisError) -> bool:
    if isinstance(exc, ConnectionError | RedisTimeoutError):
        return True
    return isinstance(exc, ResponseError) and exc.code in TRANSIENT_CODES


class StreamConsumer:
    """One consumer of a consumer group on one stream; get it from
    ``r.stream_consumer(...)`` (on :class:`~trio_maint.Redis` and
    :class:`~trio_maint.RedisCluster`)::

        async with r.stream_consumer("orders", "billing", "worker-1", create=True) as c:
            async for entry in c:          # StreamEntry(id, fields)
                await handle(entry.fields)
                await c.ack(entry)

    On entering, the group is created if asked (``XGROUP CREATE ... MKSTREAM``; an
    existing group is fine). Reading first re-reads this consumer's own pending entries
    (``XREADGROUP ... STREAMS key 0``: delivered earlier and never acknowledged, e.g.
    by a previous run that crashed), then waits for new ones (``XREADGROUP ... BLOCK
    ... STREAMS key >``). The iteration never ends by itself: leave it with ``break``
    or by cancelling. No task is started; nothing outlives the ``async with``.

    Maintenance and cluster changes are ridden through: the blocking read's reply wait
    is ``block`` plus the socket timeout (docs/streams.md, "Blocking commands"), relaxed
    timeouts never shorten it, and a MOVING handoff takes the connection to the new
    endpoint after the read returns; the cluster client follows ``MOVED``/``ASK``. When
    a read or an acknowledgement fails in a way that leaves nothing lost (a connection
    lost or timed out, ``UNBLOCKED``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``LOADING``,
    ``MASTERDOWN``, ``READONLY``), it is tried again after a short delay (0.05 s,
    doubling, at most 1 s), up to ``retries`` failures in a row; a read that failed
    after it was sent may have been delivered by the server without reaching the
    client, so the consumer then re-reads its pending entries first. Entries already
    handed out and not yet acknowledged are not handed out again by that re-read.

    :param client: a :class:`~trio_maint.Redis` or :class:`~trio_maint.RedisCluster`
        (anything with their ``execute_command``).
    :param stream: the stream's key (``str`` or ``bytes``).
    :param group: the consumer group's name.
    :param consumer: this consumer's name in the group.
    :param create: create the group on entering if it does not exist (with ``MKSTREAM``).
    :param start_id: where a group created here starts: ``"$"`` (new entries only,
        the default) or ``"0"`` (the whole stream) or an entry id.
    :param block: seconds (``float`` > 0) one blocking read waits for new entries before
        it is sent again; a finite wait lets a connection that must move (MOVING) be
        handed off between reads.
    :param count: at most this many entries per read (``int`` >= 1).
    :param retries: failures in a row tolerated per read or acknowledgement (``int`` >=
        0) before the last error is raised.
    :raises ValueError: ``block`` <= 0, ``count`` < 1 or ``retries`` < 0.
    """

    def __init__(
        self,
        client: CommandRunner,
        stream: str | bytes,
        group: str | bytes,
        consumer: str | bytes,
        *,
        create: bool = False,
        start_id: str | bytes = "$",
        block: float = 5.0,
        count: int = 10,
        retries: int = 10,
    ) -> None:
        if not (block > 0 and math.isfinite(block)):
            raise ValueError("block: seconds, > 0")
        if count < 1:
            raise ValueError("count: >= 1")
        if retries < 0:
            raise ValueError("retries: >= 0")
        self.client = client
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.create = create
        self.start_id = start_id
        self.block = float(block)
        self.count = int(count)
        self.retries = int(retries)
        # Re-reading our own pending entries from this id, or None: reading new ones.
        self._pending_from: StreamId | None = "0"
        self._buffer: deque[StreamEntry] = deque()
        # Ids read (buffered or handed out) and not acknowledged yet: never buffered
        # twice meanwhile.
        self._known: set[bytes] = set()
        self._entered = False
        #: Entries handed out so far (``int``).
        self.delivered = 0
        #: Entries acknowledged so far (``int``, as counted by the server's replies).
        self.acknowledged = 0
        #: Reads and acknowledgements tried again after a transient failure (``int``).
        self.recovered = 0

    def __repr__(self) -> str:
        return (
            f"<StreamConsumer {self.stream!r} group={self.group!r} "
            f"consumer={self.consumer!r} delivered={self.delivered}>"
        )

    async def __aenter__(self) -> Self:
        if self.create:
            try:
                await self._retrying(
                    ("XGROUP", "CREATE", self.stream, self.group, self.start_id, "MKSTREAM")
                )
            except ResponseError as exc:
                if exc.code != "BUSYGROUP":
                    raise
        else:
            await trio.lowlevel.checkpoint()
        self._pending_from = "0"
        self._buffer.clear()
        self._known.clear()
        self._entered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._entered = False
        self._buffer.clear()
        await trio.lowlevel.checkpoint()

    @property
    def pending_ids(self) -> list[bytes]:
        """Ids handed out and not acknowledged yet (``bytes``), oldest first."""
        buffered = {_id_key(e) for e in self._buffer}
        return sorted((k for k in self._known if k not in buffered), key=_sort_key)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEntry:
        """The next entry (a :class:`~trio_maint.StreamEntry`), waiting as long as it
        takes.

        :raises RuntimeError: used outside its ``async with``.
        :raises RedisError: a read failed ``retries + 1`` times in a row, or failed in a
            way that is not transient (e.g. ``NOGROUP``: the group does not exist).
        """
        if not self._entered:
            raise RuntimeError("use the StreamConsumer inside `async with`")
        while not self._buffer:
            await self._fill()
        self.delivered += 1
        return self._buffer.popleft()

    async def read(self) -> list[StreamEntry]:
        """The next batch (a ``list`` of :class:`~trio_maint.StreamEntry`, empty when
        nothing arrived within ``block`` seconds): what the iteration would yield next,
        or else one read (this consumer's pending entries while there are any, without
        blocking; then new entries). For batch processing instead of ``async for``.

        :raises RuntimeError: used outside its ``async with``.
        :raises RedisError: as :meth:`__anext__`.
        """
        if not self._entered:
            raise RuntimeError("use the StreamConsumer inside `async with`")
        if self._buffer:
            await trio.lowlevel.checkpoint()
        else:
            await self._fill()
        batch = list(self._buffer)
        self._buffer.clear()
        self.delivered += len(batch)
        return batch

    async def _fill(self) -> None:
        """Read into the buffer: pending entries (re-read) while there are any, else one
        blocking read of new ones; tried again after transient failures."""
        failures = 0
        while True:
            blocking = self._pending_from is None
            try:
                entries = await self._read_once()
            except trio.Cancelled:
                # The read may have been answered (entries delivered to this consumer,
                # now pending) before the cancel landed: re-read pending entries first.
                self._pending_from = "0"
                raise
            except RedisError as exc:
                failures += 1
                if not _transient(exc) or failures > self.retries:
                    raise
                self.recovered += 1
                # A read that failed after it was sent may have been delivered: re-read
                # this consumer's pending entries before waiting for new ones.
                self._pending_from = "0"
                await trio.sleep(min(0.05 * 2 ** (failures - 1), 1.0))
                continue
            failures = 0
            for entry in entries:
                key = _id_key(entry)
                if key not in self._known:
                    self._known.add(key)
                    self._buffer.append(entry)
            if self._buffer or blocking:
                return

    async def _read_once(self) -> list[StreamEntry]:
        head: tuple[CommandArg, ...] = ("XREADGROUP", "GROUP", self.group, self.consumer)
        head += ("COUNT", self.count)
        if self._pending_from is not None:
            reply = await self.client.execute_command(
                *head, "STREAMS", self.stream, self._pending_from
            )
            entries = _only_stream(reply)
            if not entries:
                self._pending_from = None
            else:
                self._pending_from = entries[-1].id
            return entries
        block_ms = max(1, round(self.block * 1000))
        reply = await self.client.execute_command(
            *head, "BLOCK", block_ms, "STREAMS", self.stream, ">"
        )
        return _only_stream(reply)

    async def ack(self, *entries: StreamEntry | StreamId) -> int:
        """Acknowledge entries (``XACK``): :class:`~trio_maint.StreamEntry` objects or
        ids. Safe to repeat (an entry acknowledged already counts 0).

        :returns: how many the server acknowledged now (``int``).
        :raises RedisError: as :meth:`__anext__` (``XACK`` tried ``retries + 1`` times).
        """
        if not entries:
            await trio.lowlevel.checkpoint()
            return 0
        ids = [e.id if isinstance(e, StreamEntry) else e for e in entries]
        done = int(await self._retrying(("XACK", self.stream, self.group, *ids)))
        for entry_id in ids:
            self._known.discard(_id_key(entry_id))
        self.acknowledged += done
        return done

    async def _retrying(self, args: tuple[CommandArg, ...]) -> Any:
        """Run ``args`` (idempotent: ``XACK``, ``XGROUP CREATE``), again after a
        transient failure, up to ``retries`` failures in a row."""
        failures = 0
        while True:
            try:
                return await self.client.execute_command(*args)
            except RedisError as exc:
                failures += 1
                if not _transient(exc) or failures > self.retries:
                    raise
                self.recovered += 1
                await trio.sleep(min(0.05 * 2 ** (failures - 1), 1.0))


def _sort_key(entry_id: bytes) -> tuple[int, int]:
    ms, _, seq = entry_id.partition(b"-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return (0, 0)


def _only_stream(reply: Any) -> list[StreamEntry]:
    """The entries of the one stream an ``XREADGROUP`` read."""
    for entries in parse_xread(reply).values():
        return entries
    return []


class StreamConsumers:
    """The :meth:`stream_consumer` method of :class:`~trio_maint.Redis` and
    :class:`~trio_maint.RedisCluster`."""

    def stream_consumer(
        self,
        stream: str | bytes,
        group: str | bytes,
        consumer: str | bytes,
        *,
        create: bool = False,
        start_id: str | bytes = "$",
        block: float = 5.0,
        count: int = 10,
        retries: int = 10,
    ) -> StreamConsumer:
        """A :class:`~trio_maint.StreamConsumer` reading ``stream`` as ``consumer`` of
        ``group`` (``XREADGROUP``, ``XACK``); arguments and errors as there::

            async with r.stream_consumer("s", "g", "c1", create=True) as c:
                async for entry in c:
                    ...
                    await c.ack(entry)
        """
        return StreamConsumer(
            cast(CommandRunner, self),
            stream,
            group,
            consumer,
            create=create,
            start_id=start_id,
            block=block,
            count=count,
            retries=retries,
        )
