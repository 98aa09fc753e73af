"""RESP3 parsing, sans-IO (no Trio imports); encoding (:func:`encode_command`) lives in
:mod:`trio_maint._sansio.encode` and is re-exported here.

Replies are parsed by :class:`RespParser`, a thin typed wrapper around
:class:`hiredis.Reader` built with a ``notEnoughData`` sentinel (RESP3 ``#f`` parses to
``False``, which would otherwise collide with hiredis's default "incomplete" value).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any, Final, TypeAlias

import hiredis

from . import decoding
from .encode import CommandArg, encode_command, encode_commands
from .errors import DataError, ProtocolError, response_error
from .headers import find_candidates, header_test
from .limits import (
    DeclaredBudget,
    FrameLimits,
    FrameTracker,
    LimitExceeded,
    aggregate_too_long,
    declared_too_many,
    parse_length,
    refused_frame,
)

__all__ = [
    "NEED_DATA",
    "CommandArg",
    "PushNotification",
    "RespParser",
    "RespValue",
    "encode_command",
    "encode_commands",
    "is_push",
]

#: What a parsed RESP3 reply may be: ``bytes``/``str``, ``int``, ``float``, ``bool``,
#: ``None``, ``list`` (arrays and sets), ``dict`` (maps), a :class:`ResponseError`
#: instance (error replies are values, not raised), or a :class:`PushNotification`.
RespValue: TypeAlias = Any

#: RESP3 push frames (``>``) are returned as instances of this ``list`` subclass.
PushNotification: Final = hiredis.PushNotification


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by :meth:`RespParser.next_reply` while the buffered bytes hold no whole reply.
NEED_DATA: Final = _NeedData()

_BOUNDARY: Final = 0  # FrameTracker.mode: the next byte is a type byte
_BULKS: Final = frozenset(b"$=")
#: hiredis holding more than this of one item (a bulk string, a line) is when the parser
#: looks at that item: the caps apply, its bytes are skipped from then on.
_PENDING_LOOK: Final = 65536
#: Reads bigger than 16 of these are handed on in pieces of this size.
_PIECE: Final = 65536
#: From this max_bulk_len on, a bulk string past it cannot begin and end within a piece
#: and stay under _PENDING_LOOK in between: it is caught from what hiredis holds.
_MIN_DEFERRED_BULK: Final = 1024 * 1024


def is_push(value: RespValue) -> bool:
    """True when ``value`` is a RESP3 push frame (``>``), as hiredis returns it."""
    return isinstance(value, hiredis.PushNotification)


def _big_bulk(data: bytes, i: int) -> bool:
    """Whether the bulk string header at ``data[i]`` declares 2 KiB or more (following
    it is then cheaper than looking at its bytes)."""
    end = data.find(b"\r\n", i + 1, i + 24)
    return end > i + 4 and data[i + 1 : end].isdigit()


def _decoding_gets(
    reader_gets: Callable[[], RespValue], encoding: str, owner: weakref.ref[RespParser]
) -> Callable[[], RespValue]:
    """The hot path of a parser with an encoding: the reader's ``gets``, and one truth
    test of a dict that stays empty unless a string did not decode."""

    def gets() -> RespValue:
        value = reader_gets()
        if decoding.flagged and decoding.take_flag():
            if value is NEED_DATA:
                parser = owner()
                if parser is not None:  # the frame hiredis is building: checked later
                    parser._partial_undecoded = True
                    parser._gets = parser._slow
            else:
                value = decoding.undecoded(value, encoding)
                if value.__class__ is DataError and value.__cause__ is not None:
                    # A reply: raised as strict decoding would (its caller puts a
                    # DataError value in its place).
                    raise value.__cause__
        return value

    return gets


def _slow_gets(owner: weakref.ref[RespParser]) -> Callable[[], RespValue]:
    def gets() -> RespValue:
        parser = owner()
        if parser is None:  # pragma: no cover - only the parser calls it
            raise ProtocolError("the RESP parser is gone")
        return parser._gets_slow()

    return gets


class RespParser:
    """Incremental RESP2/RESP3 parser over ``hiredis.Reader``, within bounded memory.

    Feed each chunk as it is received with ``feed`` and drain it with ``next_reply`` (or
    ``take_replies``) until ``NEED_DATA``. Error replies are returned as
    :class:`~trio_maint.ResponseError` instances; push frames as ``PushNotification``. A
    malformed stream raises :class:`~trio_maint.ProtocolError`, and the parser then stays
    broken (``broken`` is True): the connection must be discarded.

    Bounds (``limits``, docs/robustness.md): a frame past a cap raises
    ``ProtocolError`` naming the cap, after the replies that came before it. Aggregate
    headers of :data:`~trio_maint._sansio.limits.CHECKED_AGGREGATE` elements or more are
    checked before hiredis sees them (it allocates their elements at once); the item
    hiredis still buffers between reads (a bulk string, a line) is checked from the bytes
    it holds, so the hot path (chunks of whole replies, or of a big value's payload) walks
    no byte in Python. With ``max_reply_bytes`` set, every byte's framing is followed
    (:class:`~trio_maint._sansio.limits.FrameTracker`).

    :param encoding: ``None`` to get ``bytes`` for every string type, or a codec name such
        as ``"utf-8"`` to get ``str`` (``decode_responses``). A reply holding a string
        that does not decode is a :class:`~trio_maint.DataError` value in its place
        (``next_reply`` raises its ``UnicodeDecodeError``); a push frame is returned
        with such strings as ``bytes`` (see :mod:`trio_maint._sansio.decoding`).
    :param limits: the caps (:class:`~trio_maint.lowlevel.FrameLimits`; default
        ``FrameLimits()``).
    """

    __slots__ = (
        "__weakref__",
        "_at_line_end",
        "_budget",
        "_decode_fast",
        "_digits",
        "_failure",
        "_fed",
        "_flat",
        "_flat_pos",
        "_gets",
        "_held",
        "_last",
        "_last_start",
        "_may_hold_header",
        "_older",
        "_partial_undecoded",
        "_queue",
        "_reader",
        "_reader_gets",
        "_slow",
        "_tracker",
        "broken",
        "encoding",
        "limits",
        "push_credit",
    )

    def __init__(self, encoding: str | None = None, *, limits: FrameLimits | None = None) -> None:
        self.encoding = encoding
        self.broken = False
        self.limits = limits = FrameLimits() if limits is None else limits
        kwargs: dict[str, Any] = {
            "protocolError": ProtocolError,
            "replyError": response_error,
            "notEnoughData": NEED_DATA,
        }
        if encoding is not None:
            kwargs["encoding"] = encoding
            kwargs["errors"] = decoding.ERRORS
        self._reader = hiredis.Reader(**kwargs)
        self._reader_gets: Callable[[], RespValue] = self._reader.gets
        # No bound method of the parser is kept on it (a reference cycle would keep a
        # dropped parser, and the bytes hiredis holds, alive until the cyclic GC runs):
        # these closures hold it weakly.
        owner = weakref.ref(self)
        self._decode_fast = _decoding_gets(self._reader_gets, encoding or "utf-8", owner)
        self._slow = _slow_gets(owner)
        # The hot path: the reader's bound ``gets`` (bytes) or ``_decode_fast``;
        # ``_slow`` (:meth:`_gets_slow`) while replies are queued, a failure is pending
        # or a checked aggregate is open; :meth:`_failed` once broken. Callers fetch it
        # per call.
        self._gets: Callable[[], RespValue] = (
            self._reader_gets if encoding is None else self._decode_fast
        )
        #: How many push frames may still come out: the ``>`` bytes fed, less the push
        #: frames the owner has reported with :meth:`pushes_taken`. Every push frame
        #: starts with its own ``>`` byte, so while this is 0 no reply about to be returned
        #: is a push frame (see :meth:`take_replies`). A ``>`` inside a value counts too,
        #: and is never taken back (conservative).
        self.push_credit = 0
        self._at_line_end = True  # the last byte handed to hiredis was LF (or none yet)
        self._fed = 0  # bytes handed to hiredis
        self._held = b""  # the start of an aggregate header cut by a read, not handed on
        # The item-level state at stream offset _flat_pos (in the reads kept: _older, then
        # _last, the last read handed on, from stream offset _last_start).
        self._flat = FrameTracker(limits, nested=False)
        self._flat_pos = 0
        self._last = b""
        self._last_start = 0
        self._older: list[tuple[int, bytes]] = []
        # Every byte followed (exact, and CPU per item): with max_reply_bytes, or a
        # max_bulk_len small enough that a bulk string past it could end within a read.
        self._tracker = (
            FrameTracker(limits)
            if limits.max_reply_bytes is not None or limits.max_bulk_len < _MIN_DEFERRED_BULK
            else None
        )
        self._queue: deque[RespValue] = deque()  # replies taken from hiredis early
        self._failure: ProtocolError | None = None  # raised after the queued replies
        self._budget = DeclaredBudget(limits.max_aggregate_len)
        self._digits = limits.aggregate_digits
        self._may_hold_header = header_test(self._digits)
        self._partial_undecoded = False

    # ------------------------------------------------------------------- feeding

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes to the parser's buffer.

        :raises ProtocolError: the bytes hold a frame past a cap, a RESP3 attribute frame
            (``|``, which hiredis cannot parse) or a null push frame, with no reply before
            it still to be taken (else it is raised after them); the parser is broken.
        """
        if not data:
            return
        if type(data) is not bytes:
            data = bytes(data)
        # ``62 in data`` is a memchr: the common case, no '>', costs next to nothing.
        # Counting is linear (~0.25 ns a byte), so a big chunk holding a '>' (a value of
        # HTML, say) adds its length instead: an upper bound, which keeps take_replies
        # looking at types on this connection from then on, but costs nothing per byte.
        if 62 in data:
            self.push_credit += data.count(62) if len(data) <= 4096 else len(data)
        if self.broken:
            return
        start = self._fed
        n = len(data)
        if n <= 4096 and not self._held and self._tracker is None:
            # The hot path: a read of whole small replies. The item-level state at its
            # start must be "a type byte next", and no aggregate header to check in it.
            fast = True
            flat = self._flat
            if self._flat_pos != start:
                if not self._at_line_end or self._reader.has_data():
                    fast = False
                else:
                    if flat.mode or flat.dead:
                        flat.at_boundary()
                    self._flat_pos = start
                    if self._older:
                        self._older.clear()
            elif flat.mode != _BOUNDARY:
                fast = False
            if (
                fast
                and data[-1] == 0x0A
                and (
                    not (42 in data or 62 in data or 37 in data or 126 in data or 124 in data)
                    or not self._may_hold_header(data)
                )
            ):
                self._reader.feed(data)
                self._fed = start + n
                self._at_line_end = data[-1] == 0x0A
                self._last, self._last_start = data, start
                return
        try:
            if self._held:
                data, self._held = self._held + data, b""
            if self._tracker is not None:
                self._feed_tracked(data)
            elif len(data) > _PIECE * 16:
                # Bigger than any read: in pieces, so that no bulk string past
                # max_bulk_len (>= 1 MiB here) can begin and end within one.
                for at in range(0, len(data), _PIECE):
                    self._feed_checked(data[at : at + _PIECE])
                    if self._stopped():
                        return
            else:
                self._feed_checked(data)
        except LimitExceeded as exc:
            self._stop(exc)

    def _stopped(self) -> bool:
        return self.broken

    def _hand(self, data: bytes, start: int, end: int) -> None:
        """Hand ``data[start:end]`` to hiredis."""
        if end > start:
            self._reader.feed(data if start == 0 and end == len(data) else data[start:end])
            self._fed += end - start
            self._at_line_end = data[end - 1] == 0x0A

    def _feed_tracked(self, data: bytes) -> None:
        assert self._tracker is not None
        try:
            self._tracker.walk(data)
        except LimitExceeded as exc:
            self._hand(data, 0, exc.offset)
            raise
        self._hand(data, 0, len(data))

    def _feed_checked(self, data: bytes) -> None:
        n = len(data)
        start = self._fed
        flat = self._flat
        known = self._flat_pos == start or self._settle()
        i = 0
        if known:
            if flat.mode != _BOUNDARY:
                # Finish the item hiredis is in: a bulk string's bytes are skipped, a
                # line's end found with one search.
                i = flat.walk_item(data, 0, n)
            elif n >= 4096 and data[0] in _BULKS and _big_bulk(data, 0):
                i = self._leading_bulks(data)
            self._flat_pos = start + i
            if flat.mode != _BOUNDARY:
                # The whole read is inside that item.
                self._flat_pos = start + n
                self._hand(data, 0, n)
                self._last, self._last_start = data, start
                return
        line_start = data[i - 1] == 0x0A if i else self._at_line_end
        found = find_candidates(data, i, self._digits, line_start)
        fed = self._probe(data, found, start) if found else 0
        if fed >= 0:
            held = len(self._held)
            self._hand(data, fed, n - held)
            if held < n:
                self._last = data[: n - held] if held else data
                self._last_start = start

    def _leading_bulks(self, data: bytes) -> int:
        """Follow the big bulk strings that start ``data`` (a large value, a pipeline of
        them) instead of looking at their bytes; returns where looking must start."""
        flat, n, i = self._flat, len(data), 0
        while n - i >= 4096 and data[i] in _BULKS and _big_bulk(data, i):
            i = flat.walk_item(data, i, n)
            if flat.dead or flat.mode != _BOUNDARY:
                break
        return i

    def _settle(self) -> bool:
        """Learn the item-level state at the end of the bytes handed to hiredis, when
        cheap or needed; returns whether it is known (``_flat_pos`` is then there).

        Cheap when hiredis holds nothing. Needed when it holds more than 64 KiB (a bulk
        string or a line not complete yet): then the caps apply to that item (a bulk
        string declared past ``max_bulk_len`` is caught before 128 KiB of it are held),
        and its bytes are skipped rather than looked at. In between, nothing is walked:
        the reads since the state was last known are kept (``_older`` and ``_last``),
        back to where hiredis's buffer starts.

        :raises LimitExceeded: that item is past a cap.
        """
        flat, reader, end = self._flat, self._reader, self._fed
        older = self._older
        if not reader.has_data():
            # Everything handed on was consumed: after a LF the next byte is a type byte;
            # otherwise the last byte was one (hiredis consumes the type byte of an item
            # it cannot finish yet).
            if self._at_line_end:
                flat.at_boundary()
            else:
                flat.after_type(self._last[-1])
            self._flat_pos = end
            older.clear()
            return True
        older.append((self._last_start, self._last))
        kept = end - reader.len()
        while len(older) > 1 and older[1][0] <= kept - 1:
            del older[0]  # wholly before hiredis's buffer
        if end - kept <= _PENDING_LOOK + 1024:
            return False  # the state stays known at _flat_pos, in older[0]
        # hiredis's buffer starts where it stood when it last discarded consumed bytes:
        # an item's end (after a LF), or right after a type byte, and at most 1023 bytes
        # before the item it still holds: walking from there costs a few steps.
        origin = self._flat_pos
        if kept > origin:
            # (older covers _flat_pos, so the byte before kept too)
            for first, chunk in older:
                if first <= kept - 1 < first + len(chunk):
                    origin = kept
                    last = chunk[kept - 1 - first]
                    if last == 0x0A:
                        flat.at_boundary()
                    else:
                        flat.after_type(last)
                    break
        self._flat_pos = end
        for first, chunk in older:
            if first + len(chunk) > origin:
                flat.walk(chunk, max(0, origin - first), len(chunk))
        older.clear()
        return True

    def _probe(self, data: bytes, found: list[int], start: int) -> int:
        """Ask hiredis whether each candidate in ``found`` starts a header (all bytes
        before it handed on and taken, hiredis holds nothing: it waits for a type byte),
        and check the headers. Returns how much of ``data`` was handed on, or -1 when the
        parser stopped (a failure is recorded)."""
        reader = self._reader
        fed = 0
        done = 0  # candidates before this are inside a header already checked
        for c in found:
            if c < done:
                continue
            self._hand(data, fed, c)
            fed = c
            if not self._drain():
                return -1
            if reader.has_data():
                continue  # inside an item (a bulk string's bytes, a line)
            end = data.find(b"\r\n", c + 1)
            if end < 0:
                rest = data[c:]
                body = rest[:-1] if rest[-1] == 0x0D else rest  # (its CR may be here)
                digits = body[2:] if body[1:2] == b"-" else body[1:]
                if not digits or digits.isdigit():
                    if len(digits) > 20:
                        raise aggregate_too_long(10**20, self.limits, c)
                    self._held = rest  # the header's end is in the next read
                    return fed
                continue  # not a count: hiredis refuses it
            error = self._check_header(data[c], data[c + 1 : end], start + c, c)
            if error is not None:
                raise error
            done = end
        return fed

    def _check_header(self, kind: int, raw: bytes, offset: int, index: int) -> LimitExceeded | None:
        """The error for the aggregate header ``kind raw`` at stream ``offset``, if any."""
        if kind == 0x7C:
            return refused_frame(kind, index)
        count = parse_length(raw) if len(raw) <= 21 else None
        if count is None:
            if raw.isdigit() and len(raw) > 19:
                return aggregate_too_long(10**19, self.limits, index)
            return None  # hiredis refuses it
        if kind == 0x3E and count == -1:
            return refused_frame(kind, index)
        if count > self.limits.max_aggregate_len:
            return aggregate_too_long(count, self.limits, index)
        if count >= 10 ** (self._digits - 1):
            declared = self._budget.declare(count, offset)
            if declared is not None:
                return declared_too_many(declared, self.limits, index)
            self._gets = self._slow  # to see the reply that holds it come out
        return None

    def _stop(self, error: ProtocolError) -> None:
        """Hand nothing more on; ``error`` comes out after the replies before it. Raised
        here when there are none."""
        self._failure = error
        self.broken = True
        self._gets = self._slow
        if self._drain() and not self._queue:
            raise self.failure(error)

    def _drain(self) -> bool:
        """Take the whole replies hiredis holds into the queue. Returns ``False`` when
        hiredis failed (the failure is then recorded)."""
        queue = self._queue
        while True:
            try:
                value = self._take_one()
            except Exception as exc:  # hiredis fatal states
                if self._failure is None:
                    self._failure = self._wrap(exc)
                self.broken = True
                self._gets = self._slow
                return False
            if value is NEED_DATA:
                return True
            self._budget.reply_done()
            queue.append(value)
            self._gets = self._slow

    # ------------------------------------------------------------------- taking

    def _take_one(self) -> RespValue:
        """One reply from hiredis, strings that did not decode dealt with."""
        value = self._reader_gets()
        if self.encoding is not None and (
            (decoding.flagged and decoding.take_flag()) or self._partial_undecoded
        ):
            if value is NEED_DATA:
                # The frame hiredis is building: checked when it comes out (on the slow
                # path until then, whichever path took the replies before it).
                self._partial_undecoded = True
                self._gets = self._slow
            else:
                self._partial_undecoded = False
                value = decoding.undecoded(value, self.encoding)
        return value

    def _gets_slow(self) -> RespValue:
        queue = self._queue
        if queue:
            value = queue.popleft()
        else:
            value = self._take_one()
            if value is NEED_DATA:
                if self._failure is not None:
                    raise self.failure(self._failure)
            else:
                self._budget.reply_done()
        if not (queue or self._failure or self._budget.active or self._partial_undecoded):
            self._gets = self._reader_gets if self.encoding is None else self._decode_fast
        if value.__class__ is DataError and isinstance(value.__cause__, UnicodeDecodeError):
            raise value.__cause__  # as the fast path does
        return value

    def next_reply(self) -> RespValue:
        """Return the next whole reply, or :data:`NEED_DATA` when more bytes are needed.

        :raises ProtocolError: the bytes are not valid RESP (or hiredis failed on them),
            or a frame is past a cap; the parser is broken from then on.
        :raises UnicodeDecodeError: with an ``encoding``, a string of a reply did not
            decode; the reply is skipped and the parser stays usable (a push frame is
            returned instead, with such strings as ``bytes``).
        """
        try:
            return self._gets()
        except UnicodeDecodeError:
            raise
        except Exception as exc:  # hiredis fatal states (TypeError on unhashable keys, ...)
            raise self.failure(exc)  # failure() chains the cause

    def take_replies(self, out: list[RespValue], limit: int) -> bool:
        """Append up to ``limit`` whole replies buffered to ``out``, in order (push frames
        included, and counted), and return whether push frames may be among them.

        The batch form of :meth:`next_reply` for pipelines: hiredis is called from C
        (``list.extend`` over ``iter(gets, NEED_DATA)``), with no Python frame per reply.
        When it returns ``False`` nothing appended is a :class:`PushNotification` (every
        ``>`` byte fed was a push frame already reported with :meth:`pushes_taken`); when
        ``True``, the caller must look at the types, and report the push frames it finds.
        A reply holding a string that does not decode is appended as a
        :class:`~trio_maint.DataError` value in its place; a push frame holding one, with
        such strings as ``bytes``.

        :param out: the list to append to (``list`` of :data:`RespValue`).
        :param limit: the most replies to take (``int``; ``<= 0`` takes none).
        :returns: ``bool`` — whether ``push_credit`` was above 0.
        :raises ProtocolError: as :meth:`next_reply`; replies taken before the malformed
            one are already in ``out``, and the parser is broken.
        """
        stop = len(out) + limit
        while True:
            limit = stop - len(out)
            if limit <= 0:
                return self.push_credit > 0
            gets = self._gets
            if gets is self._decode_fast:
                return self._take_decoded(out, limit)
            try:
                out.extend(islice(iter(gets, NEED_DATA), limit))
                return self.push_credit > 0
            except UnicodeDecodeError as exc:  # from the slow path: a reply's place
                out.append(DataError(f"reply could not be decoded as {self.encoding}: {exc}"))
            except Exception as exc:  # hiredis fatal states
                raise self.failure(exc)  # failure() chains the cause

    def _take_decoded(self, out: list[RespValue], limit: int) -> bool:
        # take_replies with an encoding: hiredis is called from C here too; strings that
        # did not decode are dealt with after the batch.
        first = len(out)
        try:
            out.extend(islice(iter(self._reader_gets, NEED_DATA), limit))
        except Exception as exc:  # hiredis fatal states
            if decoding.flagged:
                self._undecoded_batch(out, first, limit)
            raise self.failure(exc)  # failure() chains the cause
        if decoding.flagged:
            self._undecoded_batch(out, first, limit)
        return self.push_credit > 0

    def _undecoded_batch(self, out: list[RespValue], first: int, limit: int) -> None:
        if not decoding.take_flag():
            return
        encoding = self.encoding or "utf-8"
        for index in range(first, len(out)):
            out[index] = decoding.undecoded(out[index], encoding)
        if len(out) - first < limit:
            # The batch ended on NEED_DATA: the flag may be the next frame's.
            self._partial_undecoded = True
            self._gets = self._slow

    def pushes_taken(self, count: int) -> None:
        """Report ``count`` (``int``) push frames that this parser returned (by any method)
        and the owner has handed on, so that :meth:`take_replies` can skip looking at
        types again once every ``>`` byte fed is accounted for. Only frames this parser
        returned may be reported (reporting others could hide a push frame)."""
        self.push_credit -= count

    @staticmethod
    def _wrap(exc: Exception) -> ProtocolError:
        if isinstance(exc, ProtocolError):
            return exc
        error = ProtocolError(f"malformed RESP reply: {exc!r}")
        error.__cause__ = exc
        return error

    def failure(self, exc: Exception) -> ProtocolError:
        """Mark the parser broken after ``exc`` came out of the reader (or a cap was
        passed), and return the :class:`ProtocolError` to raise for it.

        For hot loops inside the package (the connection), which call the reader's bound
        ``gets`` (``_gets``) directly, without :meth:`next_reply`'s Python frame."""
        self.broken = True
        self._gets = self._failed
        self._queue.clear()
        return self._wrap(exc)

    @staticmethod
    def _failed() -> RespValue:
        raise ProtocolError("the RESP parser failed earlier; the connection is unusable")

    def has_data(self) -> bool:
        """True when unconsumed bytes are buffered (possibly a partial reply), or replies
        already taken from hiredis wait to be returned."""
        return bool(self._queue or self._held) or bool(self._reader.has_data())
