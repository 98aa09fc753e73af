"""The bookkeeping of a client-side cache's tracking connection (docs/caching.md): the
replies owed on it, in order (:class:`Slot`), the bytes not yet written and the writer
task (:class:`Tracker`). :class:`~trio_maint.ClientCache` decides; this only keeps
count."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Final

import trio

from .._net.connection import Connection
from .._net.tracking import output_pending, wait_writable, write_nowait
from .._sansio.cache import ReadTicket
from .._sansio.encode import encode_command

__all__ = [
    "CACHING",
    "CACHING_YES",
    "LOST",
    "READ",
    "TRACKINGINFO",
    "VERIFY",
    "Slot",
    "Tracker",
    "deliver",
    "flags_tracked",
]

#: A slot's value when its tracking connection failed before the reply came.
LOST: Final = object()
#: What a slot waits for: a cached read's reply, ``CLIENT CACHING YES``'s, a check's.
READ, CACHING, VERIFY = 0, 1, 2
CACHING_YES: Final = encode_command(("CLIENT", "CACHING", "YES"))
TRACKINGINFO: Final = encode_command(("CLIENT", "TRACKINGINFO"))


class Slot:
    """One reply owed on a tracking connection, and who waits for it.

    :ivar kind: :data:`READ`, :data:`CACHING` or :data:`VERIFY`.
    :ivar ticket: a read's :class:`~trio_maint._sansio.cache.ReadTicket`, or ``None``.
    :ivar deadline: Trio time (``float``) by which the reply is due.
    :ivar task: the waiting task, or ``None`` (nobody waits any more).
    :ivar value: the reply (or :data:`LOST`) once ``done``.
    """

    __slots__ = ("deadline", "done", "kind", "task", "ticket", "value")

    def __init__(self, kind: int, ticket: ReadTicket | None = None) -> None:
        self.kind = kind
        self.ticket = ticket
        self.deadline = math.inf
        self.task: trio.lowlevel.Task | None = None
        self.value: Any = None
        self.done = False


def deliver(slot: Slot, value: Any) -> None:
    """Give ``slot`` its reply and wake its task, if one still waits."""
    slot.value = value
    slot.done = True
    task = slot.task
    if task is not None:
        slot.task = None
        trio.lowlevel.reschedule(task)


class Tracker:
    """One tracking connection: the replies owed on it, the bytes not yet written, the
    scope of its reader and writer tasks.

    :ivar conn: the :class:`~trio_maint.lowlevel.Connection`.
    :ivar pending: the :class:`Slot` of every reply owed, oldest first.
    :ivar out: bytes the socket did not take yet (written first, in order).
    :ivar dead: closed (its slots were given :data:`LOST`).
    :ivar retired: replaced by a handoff: no new request; closed once nothing is owed.
    """

    __slots__ = ("conn", "dead", "out", "pending", "retired", "scope", "writer_wake")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.pending: deque[Slot] = deque()
        self.out = bytearray()
        self.dead = False
        self.retired = False
        self.scope = trio.CancelScope()
        self.writer_wake = trio.Event()

    async def write_loop(self) -> None:
        """Write what the socket did not take at once, when it takes more (until dead);
        over TLS, also the ciphertext of what it accepted (``output_pending``).

        :raises RedisError: the write failed.
        """
        while not self.dead:
            await self.writer_wake.wait()
            self.writer_wake = trio.Event()
            while (self.out or output_pending(self.conn)) and not self.dead:
                await wait_writable(self.conn)
                written = write_nowait(self.conn, self.out)
                del self.out[:written]


def flags_tracked(reply: Any) -> bool:
    """Whether a ``CLIENT TRACKINGINFO`` reply says ``bcast`` tracking is on."""
    if not isinstance(reply, dict):
        return False
    flags = reply.get(b"flags", reply.get("flags"))
    if not isinstance(flags, list | set | tuple):
        return False
    names = {f.decode() if isinstance(f, bytes) else str(f) for f in flags}
    return "on" in names and "bcast" in names
