"""A sans-IO RESP frame-boundary scanner (no Trio imports).

:class:`RespScanner` finds where each top-level RESP2/RESP3 frame ends in a byte stream fed
in arbitrary chunks. It never decodes values and never re-encodes anything: the proxy uses
the offsets it reports to forward the server's bytes untouched and to put injected frames
only between whole frames. Bulk payloads are skipped arithmetically, so a multi-megabyte
value costs O(1) Python work per chunk, and the whole scan is O(n) in the bytes fed.

Supported: every RESP2 and RESP3 type (``+ - : $ * _ , # ! = ( % ~ > |``), nested
aggregates, attributes (``|``, which belong to the value that follows them), streamed
strings (``$?`` with ``;n`` chunks) and streamed aggregates (``*?`` ... ``.``). In
``requests`` mode a top-level line that does not start with ``*`` is an inline command, as
redis-server accepts them.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PUSH", "FrameEnd", "RespScanError", "RespScanner"]

#: The type byte of RESP3 push frames (``>``), as reported in :data:`FrameEnd`.
PUSH: Final = 0x3E

#: ``(end, type_byte)``: the offset just after a whole top-level frame, counted from the start
#: of the chunk passed to :meth:`RespScanner.feed`, and the frame's first type byte (after any
#: attribute), e.g. ``PUSH`` for a push frame. For inline requests the type byte is ``0``
#: (``-1`` for a blank inline line, which redis-server ignores).
FrameEnd = tuple[int, int]

_SCALAR_LINE: Final = frozenset(b"+-:,#(_")
_BLOB: Final = frozenset(b"$=!")
_AGGREGATE: Final = frozenset(b"*~>%")
_STAR: Final = 0x2A
_PERCENT: Final = 0x25
_PIPE: Final = 0x7C
_DOT: Final = 0x2E
_SEMI: Final = 0x3B
_DOLLAR: Final = 0x24
_PLUS: Final = 0x2B
_COLON: Final = 0x3A
_MINUS: Final = 0x2D


class RespScanError(ValueError):
    """The bytes are not valid RESP; the scanner is unusable afterwards."""


class RespScanner:
    """Incremental RESP frame-boundary scanner.

    Feed each received chunk to :meth:`feed`; it returns where whole top-level frames end in
    that chunk. :attr:`at_boundary` says whether everything fed so far consists of whole
    frames (no frame is in progress), i.e. whether bytes may be inserted now.

    :param requests: scan a client-to-server stream: top-level lines not starting with ``*``
        are inline commands.
    :raises RespScanError: from :meth:`feed`, when the stream is not RESP.
    """

    __slots__ = (
        "_attr",
        "_counts",
        "_line",
        "_requests",
        "_skip",
        "_skip_completes",
        "_stream_str",
        "_top_type",
        "broken",
        "frames",
        "pushes",
    )

    def __init__(self, *, requests: bool = False) -> None:
        self._requests = requests
        self._counts: list[int] = []  # remaining elements of each open aggregate; -1: streamed
        self._attr: list[bool] = []  # whether each open aggregate is an attribute
        self._line: bytearray | None = None  # a partial line carried over between chunks
        self._skip = 0  # payload bytes (plus CRLF) still to skip
        self._skip_completes = False  # whether the skipped payload ends a value
        self._stream_str = False  # inside a streamed string ($?), expecting ;n chunks
        self._top_type = -1  # type byte of the top-level frame in progress
        #: Whole top-level frames seen so far (``int``).
        self.frames = 0
        #: How many of them were push frames (``int``).
        self.pushes = 0
        #: True once a :class:`RespScanError` was raised.
        self.broken = False

    @property
    def at_boundary(self) -> bool:
        """True when no frame is in progress (all bytes fed form whole frames)."""
        return (
            not self._counts
            and self._line is None
            and self._skip == 0
            and not self._stream_str
            and self._top_type == -1
        )

    def feed(self, data: bytes | bytearray) -> list[FrameEnd]:
        """Scan ``data``, the next chunk of the stream.

        :returns: one :data:`FrameEnd` per top-level frame that ends in this chunk, in order.
        :raises RespScanError: the stream is not valid RESP (the scanner stays broken).
        """
        if self.broken:
            raise RespScanError("the RESP scanner failed earlier")
        try:
            return self._feed(data)
        except RespScanError:
            self.broken = True
            raise
        except ValueError as exc:  # int() of a bad length
            self.broken = True
            raise RespScanError(f"malformed RESP length: {exc}") from None

    def _feed(self, data: bytes | bytearray) -> list[FrameEnd]:
        out: list[FrameEnd] = []
        pos = 0
        n = len(data)
        while pos < n:
            if (
                not self._requests
                and self._line is None
                and self._top_type == -1
                and not self._counts
            ):
                pos = self._simple_frames(data, pos, n, out)
                if pos >= n:
                    break
            if self._skip:
                take = min(self._skip, n - pos)
                self._skip -= take
                pos += take
                if self._skip:
                    break
                # The two bytes before pos are the payload's CRLF.
                if data[pos - 2 : pos] != b"\r\n" and take >= 2:
                    raise RespScanError("bulk payload not followed by CRLF")
                if self._skip_completes:
                    self._complete(False, pos, out)
                continue
            nl = data.find(b"\n", pos)
            if nl < 0:
                if self._line is None:
                    self._line = bytearray(data[pos:])
                else:
                    self._line += data[pos:]
                break
            if self._line is not None:
                self._line += data[pos : nl + 1]
                line = bytes(self._line)
                self._line = None
            else:
                line = bytes(data[pos : nl + 1])
            pos = nl + 1
            self._process_line(line, pos, out)
        return out

    def _simple_frames(self, data: bytes | bytearray, pos: int, n: int, out: list[FrameEnd]) -> int:
        """At a frame boundary: take the whole simple frames (``+``, ``-``, ``:``, ``$n``, as
        most replies are) starting at ``pos`` in one tight loop; return where it stopped (at
        the first frame of another kind or not whole in ``data``, for the general scan)."""
        before = len(out)
        while pos < n:
            t = data[pos]
            nl = data.find(b"\n", pos)
            if nl - pos < 2 or data[nl - 1] != 0x0D:
                break  # no whole line (nl == -1 included), or a bad one: the general scan
            if t == _DOLLAR:
                body = data[pos + 1 : nl - 1]
                if body == b"-1":
                    end = nl + 1
                elif body.isdigit():
                    end = nl + 3 + int(body)
                    if end > n or data[end - 2 : end] != b"\r\n":
                        break
                else:
                    break
            elif t in (_PLUS, _COLON, _MINUS):
                end = nl + 1
            else:
                break
            out.append((end, t))
            pos = end
        self.frames += len(out) - before
        return pos

    def _process_line(self, line: bytes, end: int, out: list[FrameEnd]) -> None:
        top = not self._counts and not self._stream_str
        if self._requests and top and (not line or line[0] != _STAR):
            # An inline command (telnet style); a blank line is ignored by redis-server.
            self.frames += 1
            out.append((end, -1 if not line.strip() else 0))
            return
        if len(line) < 3 or line[-2] != 0x0D:
            raise RespScanError(f"bad RESP line {line[:40]!r}")
        t = line[0]
        body = line[1:-2]
        if self._stream_str:
            if t != _SEMI:
                raise RespScanError(f"expected a streamed string chunk, got {line[:40]!r}")
            size = int(body)
            if size == 0:
                self._stream_str = False
                self._complete(False, end, out)
            else:
                self._skip = size + 2
                self._skip_completes = False
            return
        if top and self._top_type < 0 and t != _PIPE:
            self._top_type = t
        if t in _SCALAR_LINE:
            self._complete(False, end, out)
        elif t in _BLOB:
            if body == b"?" and t == _DOLLAR:
                self._stream_str = True
                return
            size = int(body)
            if size < 0:
                self._complete(False, end, out)  # $-1 null
            else:
                self._skip = size + 2
                self._skip_completes = True
        elif t in _AGGREGATE:
            if body == b"?":
                self._counts.append(-1)
                self._attr.append(False)
                return
            count = int(body)
            if count < 0:
                self._complete(False, end, out)  # *-1 null
                return
            if t == _PERCENT:
                count *= 2
            if count == 0:
                self._complete(False, end, out)
            else:
                self._counts.append(count)
                self._attr.append(False)
        elif t == _PIPE:
            count = int(body) * 2
            if count > 0:
                self._counts.append(count)
                self._attr.append(True)
        elif t == _DOT:
            if not self._counts or self._counts[-1] != -1:
                raise RespScanError("'.' outside a streamed aggregate")
            self._counts.pop()
            self._attr.pop()
            self._complete(False, end, out)
        else:
            raise RespScanError(f"unknown RESP type byte {bytes([t])!r} in {line[:40]!r}")

    def _complete(self, is_attr: bool, end: int, out: list[FrameEnd]) -> None:
        counts = self._counts
        while True:
            if not counts:
                if is_attr:
                    self._top_type = -2  # an attribute was read; its value is still to come
                else:
                    self.frames += 1
                    if self._top_type == PUSH:
                        self.pushes += 1
                    out.append((end, self._top_type))
                    self._top_type = -1
                return
            if is_attr:
                return  # an attribute does not count as an element of its aggregate
            remaining = counts[-1]
            if remaining == -1:
                return
            remaining -= 1
            if remaining:
                counts[-1] = remaining
                return
            counts.pop()
            is_attr = self._attr.pop()
