"""RESP command encoding, sans-IO (no Trio imports): commands are RESP arrays of bulk
strings, packed by :func:`hiredis.pack_command`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import hiredis

from .errors import DataError
from .redact import bad_argument_error

__all__ = ["CommandArg", "encode_command", "encode_commands"]

#: A value a command argument may have.
CommandArg: TypeAlias = str | bytes | memoryview | int | float

# hiredis's stub types the argument as a 1-tuple and leaves the result untyped.
_pack: Callable[[tuple[CommandArg, ...]], bytes] = hiredis.pack_command  # type: ignore[assignment]


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


def encode_commands(commands: Sequence[tuple[CommandArg, ...]]) -> bytes:
    """Encode several commands for one write (pipelines and transactions), in one pass:
    hiredis is called from C (``map``), with no Python frame per command.

    :raises DataError: as :func:`encode_command`, for the first command that cannot be
        encoded (nothing is returned for the others).
    """
    try:
        return b"".join(map(_pack, commands))
    except (TypeError, UnicodeError):
        pass
    # The slow path, outside the handler (hiredis's error holds the value): the first
    # command that does not encode raises its own DataError.
    for args in commands:
        encode_command(args)
    raise DataError("a command could not be encoded")  # pragma: no cover - not reached
