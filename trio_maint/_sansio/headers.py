"""Where aggregate headers may start in received bytes, sans-IO (no Trio imports): the
scan :class:`~trio_maint.lowlevel.RespParser` runs over each read so that headers of
:data:`~trio_maint._sansio.limits.CHECKED_AGGREGATE` elements or more are checked (see
:mod:`trio_maint._sansio.limits`) before hiredis allocates their elements.

* :func:`find_candidates`: the positions to look at in one read;
* :func:`header_test`: a quick test that a read of whole small replies holds none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from .limits import AGGREGATE_BYTES

__all__ = ["find_candidates", "header_test"]

_LF: Final = 10
_AGGREGATE_TYPES: Final = frozenset(AGGREGATE_BYTES)


def find_candidates(data: bytes, start: int, digits: int, line_start: bool) -> list[int]:
    """Where, in ``data[start:]``, an aggregate header to check may start: a ``*``, ``%``,
    ``~``, ``>`` or ``|`` right after a LF (or at ``start`` when ``line_start``: the byte
    before it was a LF) followed by ``digits`` digits, or by fewer digits up to the end of
    ``data`` (a header cut by the end of a read), or ``>-``, or ``|`` and a digit.

    Every aggregate header of ``digits`` digits or more is among them (a header follows
    the LF of the item before it); a position may also be inside a bulk string, which the
    caller finds out from hiredis. Cost: a memchr per type byte; a few steps per type byte
    found, or past 8 of a type, a regular expression's search (C, literal prefix) for
    that type in text, or one for all types, anchored on LF, in binary data (where type
    bytes are everywhere and LF is rare).

    :returns: the positions, in order.
    """
    n = len(data)
    found: list[int] = []
    for kind in AGGREGATE_BYTES:
        if start:
            i = data.find(kind, start)
        elif kind in data:
            i = data.find(kind)
        else:
            continue
        seen = 0
        while i >= 0:
            seen += 1
            if seen > 8:
                if not data.isascii():
                    return _binary_candidates(data, start, digits, line_start)
                per_kind = _patterns(digits)[0][kind]
                for match in per_kind.finditer(data, i):
                    j = match.start()
                    if data[j - 1] == _LF:
                        found.append(j)
                j = data.rfind(kind, max(i, n - digits - 1))  # cut by the end of the read?
                if (
                    j > i
                    and data[j - 1] == _LF
                    and _may_start_header(data, j, n, digits)
                    and j not in found
                ):
                    found.append(j)
                break
            if (data[i - 1] == _LF) if i > start else line_start:
                j = i + digits
                if j < n and kind != 0x7C and kind != 0x3E:
                    if 48 <= data[j] <= 57 and data[i + 1 : j].isdigit():
                        found.append(i)
                elif _may_start_header(data, i, n, digits):
                    found.append(i)  # (or cut by the end of the read)
            i = data.find(kind, i + 1)
    if len(found) > 1:
        found.sort()
    return found


def header_test(digits: int) -> Callable[[bytes], bool]:
    """A quick test for reads of whole small replies: ``test(data)`` is ``False`` only
    when ``data`` (read right after a LF) ends with a LF and holds no aggregate header of
    ``digits`` digits or more, no ``>-`` and no ``|`` with a digit (so
    :func:`find_candidates` would find nothing); a memchr per type byte, and one search
    (C) per type present."""
    per_kind = _patterns(digits)[0]
    star, percent, tilde, push, bar = (per_kind[kind].search for kind in b"*%~>|")

    def test(data: bytes) -> bool:
        return (
            data[-1] != _LF
            or (42 in data and star(data) is not None)
            or (62 in data and push(data) is not None)
            or (37 in data and percent(data) is not None)
            or (126 in data and tilde(data) is not None)
            or (124 in data and bar(data) is not None)
        )

    return test


def _binary_candidates(data: bytes, start: int, digits: int, line_start: bool) -> list[int]:
    n = len(data)
    found = [m.start() + 1 for m in _patterns(digits)[1].finditer(data, start)]
    if line_start and data[start] in _AGGREGATE_TYPES and _may_start_header(data, start, n, digits):
        found.insert(0, start)
    # A header cut by the end of the read: too few digits for the search above.
    for i in range(max(start + 1, n - digits - 1), n):
        if data[i] in _AGGREGATE_TYPES:
            if (
                data[i - 1] == _LF
                and _may_start_header(data, i, n, digits)
                and (not found or found[-1] < i)
            ):
                found.append(i)
            break
    return found


def _may_start_header(data: bytes, i: int, n: int, digits: int) -> bool:
    kind = data[i]
    if kind == 0x7C:
        return i + 1 >= n or 48 <= data[i + 1] <= 57
    if kind == 0x3E and i + 1 < n and data[i + 1] == 45:
        return True
    end = i + 1 + digits
    if end <= n:
        return data[i + 1 : end].isdigit()
    return i + 1 == n or data[i + 1 :].isdigit()


_Patterns = tuple[dict[int, "re.Pattern[bytes]"], "re.Pattern[bytes]"]
_PATTERNS: dict[int, _Patterns] = {}


def _patterns(digits: int) -> _Patterns:
    """For ``digits``: a search per type byte (literal prefix: SRE's fast path), and one
    for all types after a LF."""
    compiled = _PATTERNS.get(digits)
    if compiled is None:
        count = rb"[1-9][0-9]{%d}" % (digits - 1)
        per_kind = {
            kind: re.compile(
                re.escape(bytes([kind]))
                + (rb"[0-9]" if kind == 0x7C else rb"(?:-|%s)" % count if kind == 0x3E else count)
            )
            for kind in AGGREGATE_BYTES
        }
        body = rb"[*%%~]%s|>(?:-|%s)|\|[0-9]" % (count, count)
        compiled = (per_kind, re.compile(rb"\n(?=" + body + rb")"))
        _PATTERNS[digits] = compiled
    return compiled
