"""Bounds on what a server may make the RESP parser hold, sans-IO (no Trio imports).

hiredis parses what it is fed with no limit of its own that matters here: an aggregate
header (``*``, ``~``, ``>``, ``|``) makes it allocate one slot per declared element at
once (``>2147483647`` is a 13-byte frame that takes gigabytes, and freeing a partial
``*2147483647`` blocks the event loop for seconds), and a bulk string is buffered until
its declared length has arrived. This module holds the caps and the pure logic that
applies them; :class:`~trio_maint.lowlevel.RespParser` decides where to apply it.

* :class:`FrameLimits`: the caps (``max_bulk_len``, ``max_aggregate_len``,
  ``max_reply_bytes``) and the one line cap, :data:`MAX_LINE_LEN`.
* :func:`parse_length`: a header's count as hiredis reads it (or ``None``).
* :class:`FrameTracker`: follows RESP framing byte by byte without building values, and
  raises :class:`LimitExceeded` at the first byte past a cap. The parser runs it over
  every byte when ``max_reply_bytes`` is set, and over a few bytes only otherwise (to
  learn what the item hiredis is still buffering is).
* :mod:`trio_maint._sansio.headers` finds where, in received bytes, an aggregate header
  hiredis must not see unchecked may start.
* :class:`DeclaredBudget`: the bound on elements declared ahead of the bytes received.
"""

from __future__ import annotations

from typing import Final

import attrs

from .errors import ProtocolError

__all__ = [
    "CHECKED_AGGREGATE",
    "DEFAULT_MAX_AGGREGATE_LEN",
    "DEFAULT_MAX_BULK_LEN",
    "MAX_LINE_LEN",
    "DeclaredBudget",
    "FrameLimits",
    "FrameTracker",
    "LimitExceeded",
    "check_cap",
    "check_optional_cap",
    "parse_length",
]

#: Default ``max_bulk_len``: 512 MiB, as Redis's own ``proto-max-bulk-len``.
DEFAULT_MAX_BULK_LEN: Final = 512 * 1024 * 1024
#: Default ``max_aggregate_len``: 2**24 elements (16,777,216): ``KEYS *`` on a database of
#: 16 million keys still fits; hiredis allocates 8 bytes a declared element at once.
DEFAULT_MAX_AGGREGATE_LEN: Final = 2**24
#: The longest line (simple string, error, number, or a header) accepted: 1 MiB. Not a
#: setting: Redis sends long text as bulk strings, and hiredis scans a partial line again
#: from its start each time bytes arrive (quadratic in the line's length).
MAX_LINE_LEN: Final = 1024 * 1024
#: Aggregates declaring fewer elements than this are not looked at in the default mode
#: (nested at most 1,024 deep, hiredis's limit, they can declare about a million
#: elements); from this many on, each header is checked before hiredis sees it.
CHECKED_AGGREGATE: Final = 1000

_LF: Final = 10
_CR: Final = 13
_LINE_TYPES: Final = frozenset(b"+-:,_#(")
_BULK_TYPES: Final = frozenset(b"$=")
_AGGREGATE_TYPES: Final = frozenset(b"*%~>|")
_PAIRED: Final = frozenset(b"%|")  # maps and attributes: two elements an entry
_KNOWN_TYPES: Final = _LINE_TYPES | _BULK_TYPES | _AGGREGATE_TYPES
#: The aggregate type bytes, as ``int`` needles for ``bytes.find`` (a memchr).
AGGREGATE_BYTES: Final = tuple(sorted(_AGGREGATE_TYPES))

# Modes of FrameTracker.
_BOUNDARY: Final = 0  # the next byte is a type byte
_LINE: Final = 1  # inside a line (its type byte consumed), until CR LF
_PAYLOAD: Final = 2  # inside a bulk string's payload and its trailing two bytes


class LimitExceeded(ProtocolError):
    """A frame went past a cap (a :class:`~trio_maint.ProtocolError`).

    :ivar offset: where, in the bytes walked, the frame went past it (``int``): the type
        byte of the offending header, or the first byte over a length cap. Bytes before
        it may be handed to hiredis; none from it on.
    """

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def check_cap(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    """attrs validator of a cap: an ``int`` >= 1 (``TypeError``/``ValueError`` naming the
    field otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value!r}")


def check_optional_cap(
    instance: object, attribute: attrs.Attribute[int | None], value: object
) -> None:
    """attrs validator of an optional cap: ``None`` or as :func:`check_cap`."""
    if value is not None:
        check_cap(instance, attribute, value)  # type: ignore[arg-type]


@attrs.frozen
class FrameLimits:
    """The caps on what one connection's parser holds (``ClientOptions`` fields of the same
    names; see docs/robustness.md).

    :param max_bulk_len: longest bulk or verbatim string accepted, in bytes (``int``,
        default 512 MiB, as Redis's ``proto-max-bulk-len``).
    :param max_aggregate_len: most elements an aggregate may declare (for a map or an
        attribute, entries), and most elements the aggregates of one reply may declare
        ahead of what arrived (``int``, default 2**24).
    :param max_reply_bytes: most bytes one reply or push frame may take on the wire,
        nested values included (``int`` or ``None``, the default: no cap of its own). Set
        (or ``max_bulk_len`` below 1 MiB), the parser follows every byte's framing in
        Python, which costs CPU on replies of many small values.
    :raises TypeError, ValueError: a cap that is not an ``int`` >= 1.
    """

    max_bulk_len: int = attrs.field(default=DEFAULT_MAX_BULK_LEN, validator=check_cap)
    max_aggregate_len: int = attrs.field(default=DEFAULT_MAX_AGGREGATE_LEN, validator=check_cap)
    max_reply_bytes: int | None = attrs.field(default=None, validator=check_optional_cap)

    @property
    def aggregate_digits(self) -> int:
        """Digits of the smallest count the default mode checks (``int``): counts with
        fewer digits are at most :data:`CHECKED_AGGREGATE` - 1 and at most the cap."""
        return min(len(str(CHECKED_AGGREGATE)), len(str(self.max_aggregate_len)))


def parse_length(raw: bytes) -> int | None:
    """The count of a bulk or aggregate header as hiredis reads it (its ``string2ll``):
    ``-`` then digits, or digits; no sign ``+``, no leading zero, at most 19 digits.

    :param raw: the header's bytes between the type byte and CR LF.
    :returns: the ``int``, or ``None`` when hiredis refuses it (then hiredis fails the
        stream itself, and no cap applies).
    """
    digits = raw[1:] if raw[:1] == b"-" else raw
    if not digits.isdigit() or len(digits) > 19 or (digits[0] == 48 and len(digits) > 1):
        return None
    value = int(raw)
    return value if -(2**63) <= value < 2**63 and raw != b"-0" else None


def _describe(count: int, unit: str) -> str:
    return f"{count:,} {unit}"


def bulk_too_long(length: int, limits: FrameLimits, offset: int) -> LimitExceeded:
    """The error for a bulk string header over ``max_bulk_len``."""
    return LimitExceeded(
        f"the server sent a bulk string of {_describe(length, 'bytes')}, over max_bulk_len "
        f"({_describe(limits.max_bulk_len, 'bytes')}; the default is Redis's own "
        "proto-max-bulk-len, 512 MiB); the connection is discarded",
        offset,
    )


def aggregate_too_long(count: int, limits: FrameLimits, offset: int) -> LimitExceeded:
    """The error for an aggregate header over ``max_aggregate_len``."""
    return LimitExceeded(
        f"the server sent an aggregate of {_describe(count, 'elements')}, over "
        f"max_aggregate_len ({limits.max_aggregate_len:,}); the connection is discarded",
        offset,
    )


def declared_too_many(declared: int, limits: FrameLimits, offset: int) -> LimitExceeded:
    """The error for nested aggregates declaring too many elements ahead of the bytes."""
    return LimitExceeded(
        f"the aggregates of one reply declared {_describe(declared, 'elements')} ahead of "
        f"the bytes received, over max_aggregate_len ({limits.max_aggregate_len:,}); the "
        "connection is discarded",
        offset,
    )


def reply_too_long(limits: FrameLimits, offset: int) -> LimitExceeded:
    """The error for a reply longer than ``max_reply_bytes``."""
    return LimitExceeded(
        f"the server sent a reply of more than max_reply_bytes "
        f"({_describe(limits.max_reply_bytes or 0, 'bytes')}); the connection is discarded",
        offset,
    )


def line_too_long(offset: int) -> LimitExceeded:
    """The error for a line (simple string, error, number, header) over
    :data:`MAX_LINE_LEN`."""
    return LimitExceeded(
        f"the server sent a line of more than {_describe(MAX_LINE_LEN, 'bytes')} without CR "
        "LF (simple strings, errors and numbers are short; long text comes as bulk "
        "strings); the connection is discarded",
        offset,
    )


def refused_frame(kind: int, offset: int) -> LimitExceeded:
    """The error for frames trio_maint refuses whatever their size: RESP3 attributes
    (``|``), which hiredis would return as a reply of their own, and null push frames
    (``>-1``), which it would return as ``None``, taken for a reply."""
    what = (
        "a RESP3 attribute frame, which trio_maint (like hiredis) does not support"
        if kind == 0x7C
        else "a null push frame ('>-1'), which is not valid RESP3"
    )
    return LimitExceeded(f"the server sent {what}; the connection is discarded", offset)


class FrameTracker:
    """Follows the framing of a RESP stream without building its values, and applies the
    caps of ``limits`` at every header.

    :param limits: the caps (:class:`FrameLimits`).
    :param nested: ``True`` to follow nesting (aggregates' elements, so reply boundaries,
        elements declared and not received, reply sizes); ``False`` to follow items only
        (an aggregate header is one item: its elements are the items after it).

    Feed it consecutive bytes with :meth:`walk`. It raises :class:`LimitExceeded` at the
    first byte past a cap; on bytes hiredis refuses (an unknown type byte, a malformed
    count) it stops following (``dead``) and raises nothing more: hiredis fails the
    stream there itself. ``frames`` counts the top-level frames completed (nested mode).
    """

    __slots__ = (
        "_acc",
        "_cr",
        "_kind",
        "_line",
        "_remaining",
        "_reply",
        "_stack",
        "dead",
        "frames",
        "limits",
        "mode",
        "nested",
        "outstanding",
    )

    def __init__(self, limits: FrameLimits, *, nested: bool = True) -> None:
        self.limits = limits
        self.nested = nested
        self.dead = False
        #: Top-level frames completed (``int``; nested mode).
        self.frames = 0
        #: Elements declared and not received yet, over the open aggregates (entries for
        #: maps and attributes; ``int``; nested mode).
        self.outstanding = 0
        self.mode = _BOUNDARY
        self._kind = 0
        self._acc = b""  # a header's bytes so far (bounded)
        self._line = 0  # the current line's length so far
        self._cr = False  # the last byte of the line so far was CR
        self._remaining = 0
        self._reply = 0  # bytes of the current top-level frame so far (nested mode)
        # Open aggregates: [elements left, paired (two elements an entry)].
        self._stack: list[list[int]] = []

    # ------------------------------------------------------------- state for recovery

    def at_boundary(self) -> None:
        """Set the state: the next byte is a type byte (flat mode)."""
        self.mode, self.dead = _BOUNDARY, False

    def after_type(self, kind: int) -> None:
        """Set the state: the type byte ``kind`` was just read (flat mode)."""
        self.dead = False
        self._begin(kind)

    @property
    def payload_left(self) -> int:
        """Bytes left in the bulk string being read (``int``; 0 outside one)."""
        return self._remaining if self.mode == _PAYLOAD else 0

    # --------------------------------------------------------------------- walking

    def walk(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        """Follow ``data[start:end]``, which comes right after the bytes walked before.

        :raises LimitExceeded: a cap was passed; its ``offset`` indexes ``data``. The
            tracker is dead from then on.
        """
        i = start
        n = len(data) if end is None else end
        limit = self.limits.max_reply_bytes if self.nested else None
        step = self._step
        while i < n and not self.dead:
            i = step(data, i, n, limit)

    def walk_item(self, data: bytes, start: int, end: int) -> int:
        """Follow the item whose type byte is ``data[start]`` (flat mode); returns where it
        ended, or ``end`` when it goes on past it.

        :raises LimitExceeded: as :meth:`walk`.
        """
        i = self._step(data, start, end, None)
        while i < end and not self.dead and self.mode != _BOUNDARY:
            i = self._step(data, i, end, None)
        return i

    def _step(self, data: bytes, i: int, n: int, limit: int | None) -> int:
        mode = self.mode
        if mode == _PAYLOAD:
            take = min(self._remaining, n - i)
            self._remaining -= take
            self._reply += take
            if self._remaining == 0:
                self._item_done()
            return i + take
        if mode == _BOUNDARY:
            kind = data[i]
            if kind not in _KNOWN_TYPES:
                self.dead = True
                return n
            if limit is not None and not self._stack:
                self._reply = 0
            self._begin(kind)
            self._reply += 1
            if limit is not None and self._reply > limit:
                self._fail(reply_too_long(self.limits, i))
            return i + 1
        return self._line_bytes(data, i, n, limit)

    def _begin(self, kind: int) -> None:
        self._kind = kind
        self.mode = _LINE
        self._line = 0
        self._cr = False
        self._acc = b""

    def _fail(self, error: LimitExceeded) -> None:
        self.dead = True
        raise error

    def _line_bytes(self, data: bytes, i: int, n: int, limit: int | None) -> int:
        """Read the current line from ``data[i:n]``; returns where reading stopped."""
        j = data.find(_LF, i, n)
        while j >= 0:
            if (data[j - 1] == _CR) if j > i else self._cr:
                break
            j = data.find(_LF, j + 1, n)  # a lone LF is content
        stop = n if j < 0 else j + 1
        length = self._line + (stop - i)
        header = self._kind not in _LINE_TYPES
        if header and len(self._acc) < 24:
            self._acc += data[i : min(stop, i + 24 - len(self._acc))]
        if length > MAX_LINE_LEN + 2:
            self._fail(line_too_long(i + MAX_LINE_LEN + 2 - self._line))
        if limit is not None and self._reply + (stop - i) > limit:
            self._fail(reply_too_long(self.limits, i + max(0, limit - self._reply)))
        self._reply += stop - i
        if j < 0:
            self._line = length
            self._cr = data[n - 1] == _CR
            return n
        self._line = 0
        if header:
            # The count is the line less its CR LF; the type byte came right before it.
            size = length - 2
            raw = self._acc[: min(size, 22)]
            count = parse_length(raw) if size <= 21 else None
            self._header(count, raw, max(0, stop - length - 1), limit)
        else:
            self._item_done()
        return stop

    def _header(self, count: int | None, raw: bytes, where: int, limit: int | None) -> None:
        kind = self._kind
        if count is None:
            if kind == 0x7C:
                self._fail(refused_frame(kind, where))
            if raw.isdigit() and len(raw) > 19:
                # 20 digits or more: over every cap (hiredis refuses it too).
                if kind in _BULK_TYPES:
                    self._fail(bulk_too_long(10**19, self.limits, where))
                self._fail(aggregate_too_long(10**19, self.limits, where))
            self.dead = True  # hiredis refuses it
            return
        if kind in _BULK_TYPES:
            if count == -1:
                self._item_done()
                return
            if count < -1:
                self.dead = True
                return
            if count > self.limits.max_bulk_len:
                self._fail(bulk_too_long(count, self.limits, where))
            if limit is not None and self._reply + count + 2 > limit:
                self._fail(reply_too_long(self.limits, where))
            self.mode = _PAYLOAD
            self._remaining = count + 2
            return
        if kind == 0x7C or (kind == 0x3E and count == -1):
            self._fail(refused_frame(kind, where))
        if count == -1:
            self._item_done()
            return
        if count < -1:
            self.dead = True
            return
        if count > self.limits.max_aggregate_len:
            self._fail(aggregate_too_long(count, self.limits, where))
        if not self.nested:
            self.mode = _BOUNDARY
            return
        if self.outstanding + count > self.limits.max_aggregate_len:
            self._fail(declared_too_many(self.outstanding + count, self.limits, where))
        if count == 0:
            self._item_done()
            return
        self.outstanding += count
        self._stack.append([count * 2 if kind in _PAIRED else count, kind in _PAIRED])
        self.mode = _BOUNDARY

    def _item_done(self) -> None:
        self.mode = _BOUNDARY
        if not self.nested:
            return
        stack = self._stack
        while stack:
            top = stack[-1]
            top[0] -= 1
            if not top[1] or top[0] % 2 == 0:
                self.outstanding -= 1
            if top[0]:
                return
            stack.pop()
        self.frames += 1


class DeclaredBudget:
    """The default mode's bound on elements declared ahead of the bytes received, over the
    checked aggregates (:data:`CHECKED_AGGREGATE` elements or more) of one reply.

    hiredis allocates every declared element at once. Every element takes at least 3
    bytes on the wire, so of the elements the checked aggregates of a reply declared,
    at most one per 3 bytes received since the first of them can have arrived; the rest,
    ``declared - received / 3``, may not exceed ``max_aggregate_len``. A reply whose
    aggregates never have more than ``max_aggregate_len`` elements declared and not yet
    received always passes (what arrived is at most what the bytes could hold).

    :param cap: ``max_aggregate_len`` (``int``).
    """

    __slots__ = ("_anchor", "_declared", "cap")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._anchor: int | None = None
        self._declared = 0

    @property
    def active(self) -> bool:
        """Whether a checked aggregate of the current reply was accepted (``bool``)."""
        return self._anchor is not None

    def declare(self, count: int, offset: int) -> int | None:
        """A checked aggregate of ``count`` elements (``int``) starts at stream ``offset``
        (``int``). Returns ``None`` when accepted, else the number of elements it would
        leave declared ahead of the bytes (the caller refuses the frame)."""
        if self._anchor is None:
            if count > self.cap:
                return count
            self._anchor, self._declared = offset, count
            return None
        ahead = self._declared + count - (offset - self._anchor) // 3
        if ahead > self.cap:
            return ahead
        self._declared += count
        return None

    def reply_done(self) -> None:
        """A reply was taken from hiredis after the accepted aggregates: the one holding
        them is complete."""
        self._anchor = None
        self._declared = 0
