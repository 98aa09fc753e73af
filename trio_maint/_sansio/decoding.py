"""Strings that do not decode, sans-IO (no Trio imports): what ``decode_responses`` does
with them.

hiredis decodes every string of a frame with the reader's ``encoding`` and ``errors``. With
``errors="strict"`` a string that does not decode makes hiredis drop the whole frame and
raise, without saying whether it was a reply or a push frame. So the parser decodes with
:data:`ERRORS`, an error handler registered here: it escapes the bytes that do not decode
as lone surrogates (as ``surrogateescape``), so no frame is ever lost, and flags the
thread whose parser met one. Only then does the parser look at the frame
(:func:`undecoded`): a push frame is handed on with those strings as ``bytes``; a reply
becomes the :class:`~trio_maint.DataError` value it always was. Frames that decode cost
nothing more: the handler only runs on bytes that do not decode.
"""

from __future__ import annotations

import codecs
from threading import get_ident
from typing import Any, Final

import hiredis

from .errors import DataError

__all__ = ["ERRORS", "flagged", "take_flag", "undecoded"]

#: The codec error handler the parser's hiredis reader decodes with (a constant: hiredis
#: keeps a pointer to the name, which must live as long as the reader).
ERRORS: Final = "trio_maint.escape"

#: Threads (``threading.get_ident()``) whose parser escaped bytes since it last looked.
#: Read as a plain truth test on the hot path: empty unless a string did not decode.
flagged: dict[int, bool] = {}

_surrogateescape = codecs.lookup_error("surrogateescape")


def _escape(exc: UnicodeError) -> tuple[str | bytes, int]:
    if isinstance(exc, UnicodeDecodeError):
        flagged[get_ident()] = True
        return _surrogateescape(exc)
    raise exc


codecs.register_error(ERRORS, _escape)


def take_flag() -> bool:
    """Whether a string decoded on this thread since the last call did not decode
    (``bool``); clears the flag."""
    return flagged.pop(get_ident(), False)


def _escaped(text: str, encoding: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return True
    return False


def _first_error(value: Any, encoding: str) -> UnicodeDecodeError | None:
    """The decoding error of the first escaped string of ``value``, in the order hiredis
    parsed them (a map's key before its value)."""
    if isinstance(value, str):
        if _escaped(value, encoding):
            try:
                value.encode(encoding, "surrogateescape").decode(encoding)
            except UnicodeDecodeError as exc:
                return exc
        return None
    if isinstance(value, list):
        for item in value:
            found = _first_error(item, encoding)
            if found is not None:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            found = _first_error(key, encoding) or _first_error(item, encoding)
            if found is not None:
                return found
    return None


def _to_bytes(value: Any, encoding: str) -> Any:
    """``value`` with every escaped string turned back into its ``bytes`` (lists are
    changed in place, so a push frame keeps its type)."""
    if isinstance(value, str):
        return value.encode(encoding, "surrogateescape") if _escaped(value, encoding) else value
    if isinstance(value, list):
        for index, item in enumerate(value):
            value[index] = _to_bytes(item, encoding)
        return value
    if isinstance(value, dict):
        return {_to_bytes(k, encoding): _to_bytes(v, encoding) for k, v in value.items()}
    return value


def undecoded(value: Any, encoding: str) -> Any:
    """What a frame parsed while a string did not decode stands for.

    :param value: the frame as hiredis returned it (escaped strings hold lone surrogates).
    :param encoding: the reader's encoding (``str``).
    :returns: a push frame (``hiredis.PushNotification``) with its escaped strings as
        ``bytes``; for a reply holding an escaped string, a :class:`DataError` value whose
        ``__cause__`` is the ``UnicodeDecodeError`` strict decoding raises (the message
        names it, as before); any other value unchanged.
    """
    if type(value) is hiredis.PushNotification:
        return _to_bytes(value, encoding)
    error = _first_error(value, encoding)
    if error is None:
        return value
    failed = DataError(f"reply could not be decoded as {encoding}: {error}")
    failed.__cause__ = error
    return failed
