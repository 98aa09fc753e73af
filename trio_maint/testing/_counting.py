"""The simulator's counting fast paths, sans-IO (no Trio imports): how many whole requests
or replies a chunk holds, in one hiredis call where the chunk allows it, so the proxy need
not walk it frame by frame with :class:`~trio_maint.testing.RespScanner`.

* :class:`RequestCounter`: client to server. Counts whole ordinary commands (ones that owe
  one reply and that the proxy neither answers nor tracks) from a frame boundary.
* :class:`ReplyCounter`: server to client. Counts a chunk of whole non-aggregate frames
  (``+ - : $ _ , # ( =``: as most replies are).

Both give up (and the caller scans the bytes the general way) whenever they cannot prove
the count: a frame cut by the end of the chunk, a type hiredis refuses, a command the proxy
must see.
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from typing import Final

import hiredis

__all__ = ["ReplyCounter", "RequestCounter"]

_first: Final = operator.itemgetter(0)
#: A frame fed to a drained reader: it comes back on its own only when the chunk left no
#: frame open (see :func:`_at_boundary`).
_PROBE: Final = b"+\r\n"
#: What the readers' ``gets()`` return for "no whole frame": a sentinel of its own, since
#: ``False`` is also a reply (RESP3 ``#f``) and ``iter(gets, False)`` would stop at any
#: reply equal to it (``:0``, ``,0``).
_NEED: Final = object()
#: Type bytes of aggregates (and attributes); a reply chunk holding any of them anywhere is
#: left to the frame scanner.
_AGGREGATE_BYTES: Final = (b"*", b">", b"%", b"~", b"|")


class RequestCounter:
    """Counts whole ordinary commands in client bytes fed at a frame boundary.

    :param special: lower-case command names the caller must see (not counted here).
    """

    __slots__ = ("_reader", "_special")

    def __init__(self, special: Collection[bytes]) -> None:
        self._special = frozenset(special)
        self._reader: hiredis.Reader | None = None

    def take(self, data: bytes) -> tuple[int, int]:
        """``(taken, commands)``: the first ``taken`` bytes of ``data`` are ``commands``
        whole ordinary commands; the rest (from a command boundary) is the caller's.

        The usual chunk, whole commands only, is taken in one step: hiredis parsed it to
        the end and holds no part of a frame (:func:`_at_boundary`). hiredis and
        redis-server then agree on the number of commands, except where redis-server
        answers a protocol error and closes the connection (an element that is not a bulk
        string, a length it refuses), which makes the count moot. Otherwise each command
        is checked against its canonical encoding (``hiredis.pack_command``), which says
        where it ends.
        """
        reader = self._reader
        if reader is None:
            reader = self._reader = hiredis.Reader(notEnoughData=_NEED)
        reader.feed(data)
        try:
            commands = list(iter(reader.gets, _NEED))
        except hiredis.ProtocolError:
            commands = []
            at_boundary = False
        else:
            at_boundary = _at_boundary(reader)
        if at_boundary:
            try:
                if self._special.isdisjoint(map(bytes.lower, map(_first, commands))):
                    return len(data), len(commands)
            except (TypeError, IndexError):  # an element that is not bytes, an empty array
                pass
        taken = count = 0
        for command in commands:
            if not isinstance(command, list) or not command:
                break
            name = command[0]
            if not isinstance(name, bytes) or name.lower() in self._special:
                break
            try:
                packed = hiredis.pack_command(tuple(command))
            except (TypeError, hiredis.HiredisError):
                break
            if not data.startswith(packed, taken):
                break
            taken += len(packed)
            count += 1
        if taken < len(data) or not at_boundary:
            self._reader = None  # it may hold a partial command: start afresh
        return taken, count


class ReplyCounter:
    """Counts server bytes fed at a frame boundary that are whole non-aggregate frames."""

    __slots__ = ("_reader",)

    def __init__(self) -> None:
        self._reader: hiredis.Reader | None = None

    def count(self, data: bytes) -> int:
        """How many frames ``data`` holds when it is whole non-aggregate frames only;
        ``-1`` otherwise (an aggregate or attribute type byte anywhere in it, even inside
        a string; a frame cut by its end; a type hiredis refuses), for the frame scanner to
        take ``data`` from the same boundary."""
        for kind in _AGGREGATE_BYTES:
            if kind in data:
                return -1
        reader = self._reader
        if reader is None:
            reader = self._reader = hiredis.Reader(notEnoughData=_NEED)
        reader.feed(data)
        try:
            frames = len(list(iter(reader.gets, _NEED)))
        except hiredis.ProtocolError:
            frames = -1
        if frames < 0 or not _at_boundary(reader):
            self._reader = None
            return -1
        return frames


def _at_boundary(reader: hiredis.Reader) -> bool:
    """Whether ``reader``, drained, holds no part of a frame: no unparsed byte, and
    :data:`_PROBE` fed to it comes back as a frame of its own (hiredis takes a lone type
    byte, or an aggregate's header, in without keeping bytes). Only a reader that holds
    nothing is left as it was."""
    if reader.has_data():
        return False
    reader.feed(_PROBE)
    try:
        return reader.gets() == b"" and not reader.has_data()
    except hiredis.ProtocolError:
        return False
