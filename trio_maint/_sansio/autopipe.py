"""Auto-pipelining decisions (sans-IO): which commands may share a write with other
tasks' commands, and when a command joins a batch rather than going straight out.

With ``auto_pipeline=True`` (:class:`~trio_maint.ClientOptions`), commands that several
tasks of one client send at the same time are written together, one pipeline per batch,
instead of one write and one reply wait per command on a connection each. The Trio shell
(:mod:`trio_maint._client.autopipe`) parks the tasks and runs the batches; this module
decides:

* :func:`batchable`: only commands that neither block (``BLPOP``, ``XREAD ... BLOCK``)
  nor change or depend on their connection's state (``SELECT``, ``WATCH``, ``MULTI``,
  ``CLIENT ...``, ``SUBSCRIBE``, ``AUTH``, ``HELLO``, ``READONLY``) join a batch: the
  data commands the server flags ``readonly`` or ``write`` and not ``blocking`` (from
  :mod:`~trio_maint._sansio.command_table`, the server's own ``COMMAND`` reply), plus
  ``PING``, ``ECHO``, ``TIME``, ``PUBLISH`` and ``SPUBLISH``. Scripts (``EVAL*``,
  ``FCALL*``) do not: a script call resends itself after ``NOSCRIPT``.
* :class:`BatchQueue`: a command sent while no other command of the client is in flight
  goes straight out (no batching delay for a lone task); otherwise it queues, and a free
  batch worker takes up to :data:`MAX_BATCH` queued commands, in order, as one pipeline.
  After a batch whose replies averaged over :data:`BIG_REPLY` bytes, the next
  :data:`DIRECT_AFTER_BIG` commands go straight out: big values travel better side by
  side on connections of their own than one after the other in a batch.

Replies are matched to commands by their order, as in any pipeline; an error reply fails
its own command only. A command is resent only as a pipeline's commands are (the retry
policy: what a reply proves did not run).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final, Generic, TypeVar

import attrs

from .command_table import COMMANDS
from .encode import CommandArg

__all__ = [
    "BATCHABLE_COMMANDS",
    "BIG_REPLY",
    "DIRECT_AFTER_BIG",
    "MAX_BATCH",
    "MAX_DIRECT_AFTER_BIG",
    "BatchQueue",
    "batchable",
]

#: The most commands one batch (one write, one pipeline) holds.
MAX_BATCH: Final = 256
#: Bytes per reply (``int``, averaged over a batch's string replies) past which batching
#: stops paying: a batch's big replies come one after the other through one connection,
#: where each task's own connection would carry them side by side.
BIG_REPLY: Final = 16 * 1024
#: After a batch of big replies, this many commands go straight out (``int``) before a
#: batch is tried again; twice as many after each further batch of big replies in a row,
#: up to :data:`MAX_DIRECT_AFTER_BIG`.
DIRECT_AFTER_BIG: Final = 256
#: The most commands that go straight out after batches of big replies (``int``).
MAX_DIRECT_AFTER_BIG: Final = 64 * DIRECT_AFTER_BIG

_EXTRA: Final = ("PING", "ECHO", "TIME", "PUBLISH", "SPUBLISH")
#: Flags that keep a ``readonly``/``write`` command out of batches: it blocks, is a
#: script, or is a debugging command.
_EXCLUDING: Final = frozenset({"blocking", "noscript", "admin", "pubsub", "no_multi"})


def _batchable_names() -> frozenset[str]:
    names = set(_EXTRA)
    for name, (_arity, flags, _keys) in COMMANDS.items():
        words = set(flags.split())
        if "|" in name or words & _EXCLUDING:
            continue
        if "readonly" in words or "write" in words:
            names.add(name)
    return frozenset(names)


#: Upper-case names of the commands that may join a batch (see the module doc).
BATCHABLE_COMMANDS: Final[frozenset[str]] = _batchable_names()

# The usual spellings (upper and lower case, str and bytes), for one set lookup.
_SPELLINGS: Final[frozenset[str | bytes]] = frozenset(
    spelling
    for name in BATCHABLE_COMMANDS
    for spelling in (name, name.lower(), name.encode(), name.lower().encode())
)


def batchable(args: tuple[CommandArg, ...]) -> bool:
    """Whether the command ``args`` (name first) may share a write with other tasks'
    commands (see the module doc). ``False`` for an empty tuple or a name that is not a
    ``str`` or ``bytes``."""
    if not args:
        return False
    name = args[0]
    kind = name.__class__
    if kind is not str and kind is not bytes:  # (a writable memoryview cannot be hashed)
        return False
    if name in _SPELLINGS:
        return True
    if isinstance(name, bytes):
        try:
            name = name.decode("ascii")
        except UnicodeDecodeError:
            return False
    assert isinstance(name, str)
    return name.upper() in BATCHABLE_COMMANDS


T = TypeVar("T")


@attrs.define
class BatchQueue(Generic[T]):
    """Which commands batch, and which go out now (sans-IO: no I/O, no clock).

    ``T`` is the shell's record of one queued command: each queued item must be an
    object of its own (items are told apart by ``id()``). Counters: :attr:`in_flight`
    counts the client's auto-pipelined commands between :meth:`start` and :meth:`done`
    (straight or batched); :attr:`waiting` the commands waiting for a batch worker, which
    :attr:`queue` holds in order (with withdrawn ones not yet passed over).
    """

    max_batch: int = MAX_BATCH
    #: Commands between :meth:`start` and :meth:`done`.
    in_flight: int = 0
    #: Commands waiting for a batch, oldest first, and withdrawn ones not yet passed over
    #: by :meth:`take` (see :attr:`waiting`).
    queue: deque[T] = attrs.field(factory=deque)
    #: Commands still to go straight out after a batch of big replies.
    direct_left: int = 0
    #: How many commands went straight out after the last batch of big replies (``int``;
    #: 0 once a batch was not).
    direct_after_big: int = 0
    #: ``id()`` of each item in :attr:`queue` still waiting (an item in the queue is
    #: alive, so its ``id`` is its own).
    _waiting: set[int] = attrs.field(factory=set, init=False)
    #: ``id()`` of each withdrawn item still in :attr:`queue`: :meth:`take` passes over
    #: it (a withdrawal costs O(1), not a search of the queue).
    _withdrawn: set[int] = attrs.field(factory=set, init=False)

    @property
    def waiting(self) -> int:
        """Commands waiting for a batch (``int``; withdrawn ones not counted)."""
        return len(self._waiting)

    def start(self) -> bool:
        """A command begins: ``True`` when it should go straight out (no other command
        in flight: nothing to batch it with; or big replies seen lately), ``False`` when
        it should be queued (:meth:`enqueue`). Either way it counts as in flight until
        :meth:`done`."""
        self.in_flight += 1
        if self.direct_left:
            self.direct_left -= 1
            return True
        return self.in_flight == 1

    def batch_replied(self, commands: int, reply_bytes: int) -> None:
        """A batch of ``commands`` (``int``) was answered with ``reply_bytes`` (``int``)
        bytes of string replies: past :data:`BIG_REPLY` a reply on average, the next
        :data:`DIRECT_AFTER_BIG` commands go straight out, twice as many as last time when
        the batch before was big too (up to :data:`MAX_DIRECT_AFTER_BIG`): a workload of
        big values tries a batch ever more rarely, and a switch back to small values is
        noticed after that many commands at most. A big batch that ends while a run is
        still going (taken before it began, by another worker) changes nothing."""
        if reply_bytes > BIG_REPLY * commands:
            if self.direct_left:
                return
            direct = min(self.direct_after_big * 2, MAX_DIRECT_AFTER_BIG) or DIRECT_AFTER_BIG
            self.direct_after_big = self.direct_left = direct
        else:
            self.direct_after_big = 0

    def enqueue(self, item: T) -> bool:
        """Queue ``item``; ``True`` when no other command was waiting (a batch worker must
        be woken), ``False`` when a wake-up is already due."""
        self.queue.append(item)
        waiting = self._waiting
        waiting.add(id(item))
        return len(waiting) == 1

    def requeue(self, items: list[T]) -> None:
        """Put ``items`` (taken by :meth:`take`, not sent) back at the front of the
        queue, in their order: the next batch takes them first."""
        self.queue.extendleft(reversed(items))
        self._waiting.update(map(id, items))

    def take(self) -> list[T]:
        """The next batch: up to :attr:`max_batch` waiting items, oldest first, removed
        from the queue (empty when nothing waits)."""
        queue = self.queue
        waiting = self._waiting
        withdrawn = self._withdrawn
        if not withdrawn and len(queue) <= self.max_batch:
            batch = list(queue)
            queue.clear()
            waiting.clear()
            return batch
        batch = []
        while queue and len(batch) < self.max_batch:
            item = queue.popleft()
            key = id(item)
            if key in withdrawn:
                withdrawn.discard(key)
                continue
            waiting.discard(key)
            batch.append(item)
        if not waiting:  # only withdrawn ones left, if any
            queue.clear()
            withdrawn.clear()
        return batch

    def front(self) -> T | None:
        """The oldest waiting item, left in the queue (``None`` when nothing waits);
        withdrawn ones before it are dropped."""
        queue = self.queue
        withdrawn = self._withdrawn
        while queue:
            key = id(queue[0])
            if key not in withdrawn:
                return queue[0]
            queue.popleft()
            withdrawn.discard(key)
        return None

    def expire(self, expired: Callable[[T], bool]) -> list[T]:
        """Remove and return, oldest first, the waiting items at the front of the queue
        for which ``expired(item)`` is true, up to the first for which it is not: the
        queue is in the order items came, so with a wait bound the same for every item
        the expired ones are all at the front (the shell fails them unsent)."""
        out: list[T] = []
        queue = self.queue
        waiting = self._waiting
        while (item := self.front()) is not None and expired(item):
            queue.popleft()
            waiting.discard(id(item))
            out.append(item)
        if not waiting:
            queue.clear()
            self._withdrawn.clear()
        return out

    def withdraw(self, item: T) -> bool:
        """Take ``item`` back (its task was cancelled before a batch took it: it is never
        sent), in O(1). ``False`` when a batch already took it."""
        key = id(item)
        waiting = self._waiting
        if key not in waiting:
            return False
        waiting.discard(key)
        if waiting:
            self._withdrawn.add(key)
        else:  # nothing left waiting: drop the withdrawn ones at once
            self.queue.clear()
            self._withdrawn.clear()
        return True

    def done(self, count: int = 1) -> None:
        """``count`` commands ended (replied, failed or abandoned)."""
        self.in_flight -= count
