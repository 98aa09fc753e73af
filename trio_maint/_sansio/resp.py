"""RESP3 encoding and parsing, sans-IO (no Trio imports).

Commands are encoded as RESP arrays of bulk strings with :func:`hiredis.pack_command`.
Replies are parsed by :class:`RespParser`, a thin typed wrapper around
:class:`hiredis.Reader` built with a ``notEnoughData`` sentinel (RESP3 ``#f`` parses to
``False``, which would otherwise collide with hiredis's default "incomplete" value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import Any, Final, TypeAlias

import hiredis

from .errors import DataError, ProtocolError, response_error
from .redact import bad_argument_error

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

#: A value a command argument may have.
CommandArg: TypeAlias = str | bytes | memoryview | int | float

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


def _describe_bad_arg(args: Sequence[object]) -> DataError:
    # Position, type and length only: arguments may be secrets (HELLO 3 AUTH, AUTH, ...).
    return bad_argument_error(args)


def encode_command(args: tuple[CommandArg, ...]) -> bytes:
    """Encode one command as a RESP array of bulk strings.

    :param args: the command name and its arguments; each a ``str`` (UTF-8 encoded),
        ``bytes``, ``memoryview``, ``int`` or ``float``.
    :returns: the bytes to write.
    :raises DataError: an argument has another type (``bool``, ``None``, ``list``, ...);
        the message names the argument's position, type and length, never a value.
    """
    try:
        # hiredis's stub types the argument as a 1-tuple and leaves the result untyped.
        return hiredis.pack_command(args)  # type: ignore[arg-type,no-any-return]
    except (TypeError, UnicodeError):
        pass
    # Raised outside the handler: hiredis's error (which holds the value) is not kept as
    # the DataError's __context__.
    raise _describe_bad_arg(args)


def encode_commands(commands: Iterable[tuple[CommandArg, ...]]) -> bytes:
    """Encode several commands for one write (pipelines and transactions).

    :raises DataError: as :func:`encode_command`.
    """
    return b"".join([encode_command(args) for args in commands])


def is_push(value: RespValue) -> bool:
    """True when ``value`` is a RESP3 push frame (``>``), as hiredis returns it."""
    return isinstance(value, hiredis.PushNotification)


class RespParser:
    """Incremental RESP2/RESP3 parser over ``hiredis.Reader``.

    Feed each chunk as it is received with ``feed`` and drain it with ``next_reply`` until
    ``NEED_DATA`` (feeding one huge buffer is quadratic in hiredis). Error replies are
    returned as :class:`~trio_maint.ResponseError` instances; push frames as
    ``PushNotification``. A malformed stream raises :class:`~trio_maint.ProtocolError`, and the
    parser then stays broken (``broken`` is True): the connection must be discarded.

    :param encoding: ``None`` to get ``bytes`` for every string type, or a codec name such as
        ``"utf-8"`` to get ``str`` (``decode_responses``).
    """

    __slots__ = ("_at_line_end", "_gets", "_reader", "broken", "encoding", "push_credit")

    def __init__(self, encoding: str | None = None) -> None:
        self.encoding = encoding
        self.broken = False
        kwargs: dict[str, Any] = {
            "protocolError": ProtocolError,
            "replyError": response_error,
            "notEnoughData": NEED_DATA,
        }
        if encoding is not None:
            kwargs["encoding"] = encoding
            kwargs["errors"] = "strict"
        self._reader = hiredis.Reader(**kwargs)
        # The hot path: the reader's bound ``gets``, replaced by :meth:`_failed` once the
        # parser is broken (so ``next_reply`` needs no check of its own per reply).
        self._gets: Callable[[], RespValue] = self._reader.gets
        # True when the bytes fed so far end a line: the next byte fed is then a type byte
        # whenever hiredis holds nothing unconsumed (hiredis consumes the type byte of a
        # partial line reply, so a chunk boundary right after it must not be mistaken).
        self._at_line_end = True
        #: How many push frames may still come out: the ``>`` bytes fed, less the push
        #: frames the owner has reported with :meth:`pushes_taken`. Every push frame
        #: starts with its own ``>`` byte, so while this is 0 no reply about to be returned
        #: is a push frame (see :meth:`take_replies`). A ``>`` inside a value counts too,
        #: and is never taken back (conservative).
        self.push_credit = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes to the parser's buffer.

        :raises ProtocolError: ``data`` starts a RESP3 attribute frame (``|``) at a frame
            boundary. hiredis cannot parse attributes (it would return one as a reply of its
            own), so the parser is marked broken and the connection must be discarded. An
            attribute that does not start a received chunk is not detected.
        """
        if not data:
            return
        if data[0] == 0x7C and self._at_line_end and not self._reader.has_data():
            raise self.failure(
                ProtocolError(
                    "the server sent a RESP3 attribute frame, which trio_maint (like "
                    "hiredis) does not support; the connection is discarded"
                )
            )
        self._at_line_end = data[-1] == 0x0A
        # ``b">" in data`` is a memchr: the common case, no '>', costs next to nothing.
        # Counting is linear (~0.25 ns a byte), so a big chunk holding a '>' (a value of
        # HTML, say) adds its length instead: an upper bound, which keeps take_replies
        # looking at types on this connection from then on, but costs nothing per byte.
        if type(data) is memoryview:
            self.push_credit += len(data)
        elif b">" in data:
            self.push_credit += data.count(b">") if len(data) <= 4096 else len(data)
        self._reader.feed(data)  # type: ignore[arg-type]  # hiredis's stub omits buffers

    def next_reply(self) -> RespValue:
        """Return the next whole reply, or :data:`NEED_DATA` when more bytes are needed.

        :raises ProtocolError: the bytes are not valid RESP (or hiredis failed on them);
            the parser is broken from then on.
        :raises UnicodeDecodeError: with an ``encoding``, a string did not decode; the reply
            is skipped and the parser stays usable.
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

        :param out: the list to append to (``list`` of :data:`RespValue`).
        :param limit: the most replies to take (``int``; ``<= 0`` takes none).
        :returns: ``bool`` — whether ``push_credit`` was above 0.
        :raises ProtocolError: as :meth:`next_reply`; replies taken before the malformed
            one are already in ``out``, and the parser is broken.

        A string that does not decode with ``encoding`` is appended as a
        :class:`DataError` value in its reply's place (hiredis skips that reply whole, so
        the stream stays in sync), and taking goes on — unless it may have been a push
        frame (see :meth:`undecodable`), which raises :class:`ProtocolError`.
        """
        first = len(out)
        stop = first + limit
        while True:
            limit = stop - len(out)
            if limit <= 0:
                return self.push_credit > 0
            try:
                out.extend(islice(iter(self._gets, NEED_DATA), limit))
                return self.push_credit > 0
            except UnicodeDecodeError as exc:
                # The push frames taken by this call are not reported yet: not owed.
                pending = sum(type(value) is PushNotification for value in out[first:])
                out.append(self.undecodable(exc, pending))
            except Exception as exc:  # hiredis fatal states
                raise self.failure(exc)  # failure() chains the cause

    def undecodable(self, exc: UnicodeDecodeError, pending: int = 0) -> DataError:
        """The :class:`DataError` value standing in a reply's place for a frame that did
        not decode with ``encoding`` (hiredis skipped that frame whole), for a caller
        matching replies to commands.

        :param pending: push frames this parser returned that are not reported with
            :meth:`pushes_taken` yet (``int``).
        :raises ProtocolError: ``push_credit`` is above ``pending``, so the frame skipped
            may have been a push frame (hiredis does not tell which): the replies could
            then no longer be matched to their commands, so the parser is broken instead.
        """
        if self.push_credit > pending:
            raise self.failure(
                ProtocolError(
                    f"a frame could not be decoded as {self.encoding} ({exc}) while a push "
                    "frame may have been pending: whether it was a reply or a push frame "
                    "is unknown, so the connection is discarded"
                )
            )
        return DataError(f"reply could not be decoded as {self.encoding}: {exc}")

    def pushes_taken(self, count: int) -> None:
        """Report ``count`` (``int``) push frames that this parser returned (by any method)
        and the owner has handed on, so that :meth:`take_replies` can skip looking at
        types again once every ``>`` byte fed is accounted for. Only frames this parser
        returned may be reported (reporting others could hide a push frame)."""
        self.push_credit -= count

    def failure(self, exc: Exception) -> ProtocolError:
        """Mark the parser broken after ``exc`` (anything but ``UnicodeDecodeError``) came
        out of the reader, and return the :class:`ProtocolError` to raise for it.

        For hot loops inside the package (the connection), which call the reader's bound
        ``gets`` (``_gets``) directly, without :meth:`next_reply`'s Python frame."""
        self.broken = True
        self._gets = self._failed
        if isinstance(exc, ProtocolError):
            return exc
        error = ProtocolError(f"malformed RESP reply: {exc!r}")
        error.__cause__ = exc
        return error

    @staticmethod
    def _failed() -> RespValue:
        raise ProtocolError("the RESP parser failed earlier; the connection is unusable")

    def has_data(self) -> bool:
        """True when unconsumed bytes are buffered (possibly a partial reply)."""
        return bool(self._reader.has_data())
