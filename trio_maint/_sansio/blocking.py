"""How long the client waits for the reply of a blocking command (sans-IO).

A blocking command (``BLPOP``, ``BRPOP``, ``BLMOVE``, ``BRPOPLPUSH``, ``BZPOPMIN``,
``BZPOPMAX``, ``BLMPOP``, ``BZMPOP``, ``XREAD``/``XREADGROUP`` with ``BLOCK``, ``WAIT``)
carries its own timeout: the server answers when it expires (nil, or for ``WAIT`` the
replicas reached so far). The client waits for that reply **the command's timeout plus the
socket timeout**, so the server's own timeout reply always arrives before the client gives
up; a command timeout of ``0`` waits forever, and so does a client without a socket
timeout. The connection's timeout policy (relaxed timeouts during maintenance) takes the
larger of this wait and the relaxed timeout: it never shortens it.

Everything that sends a blocking command takes its reply wait from here: the command
methods (through the clients' ``_blocking_timeout`` hook), ``execute_command`` (by looking
at the arguments: :func:`command_timeout`), pipelines (:func:`pipeline_reply_timeout`) and
the cluster client. See docs/streams.md, "Blocking commands".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final, Literal, TypeAlias

from .errors import DataError
from .resp import CommandArg

__all__ = [
    "BLOCKING_COMMANDS",
    "TimeUnit",
    "command_timeout",
    "pipeline_reply_timeout",
    "reply_timeout",
    "to_seconds",
]

#: How a command counts its timeout: seconds (``BLPOP``...) or milliseconds (``BLOCK`` of
#: ``XREAD``/``XREADGROUP``, ``WAIT``).
TimeUnit: TypeAlias = Literal["s", "ms"]

# Where each command keeps its timeout: "last" (the last argument, in seconds), an index
# (seconds), or a name handled in command_timeout.
_LAST: Final = -1
_TIMEOUT_AT: Final[dict[str, int]] = {
    "BLPOP": _LAST,
    "BRPOP": _LAST,
    "BLMOVE": _LAST,
    "BRPOPLPUSH": _LAST,
    "BZPOPMIN": _LAST,
    "BZPOPMAX": _LAST,
    "BLMPOP": 1,
    "BZMPOP": 1,
}

#: The names of the commands that may block (upper case).
BLOCKING_COMMANDS: Final = frozenset({*_TIMEOUT_AT, "XREAD", "XREADGROUP", "WAIT"})

# Names as callers usually spell them, for a lookup without upper-casing.
_SPELLINGS: Final = frozenset(
    form
    for name in BLOCKING_COMMANDS
    for form in (name, name.lower(), name.encode(), name.lower().encode())
)


def to_seconds(timeout: float, unit: TimeUnit = "s") -> float:
    """``timeout`` as the command counts it (``unit``: ``"s"`` or ``"ms"``) → seconds
    (``float``).

    :raises DataError: ``timeout`` is a ``bool``, NaN, an infinity or not a number.
    :raises ValueError: an unknown ``unit``.
    """
    if unit not in ("s", "ms"):
        raise ValueError(f"unit: 's' or 'ms', not {unit!r}")
    try:
        if isinstance(timeout, bool):
            raise TypeError
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise DataError(
            f"a blocking command's timeout must be a number, got {type(timeout).__name__}"
        ) from None
    if not math.isfinite(seconds):
        raise DataError(f"a blocking command's timeout must be finite, got {timeout!r}")
    return seconds if unit == "s" else seconds / 1000.0


def reply_timeout(
    timeout: float | None, socket_timeout: float | None, unit: TimeUnit = "s"
) -> float | None:
    """The reply wait (``float`` seconds, or ``None``: forever) of a command whose own
    timeout is ``timeout``.

    :param timeout: the command's timeout as the command counts it (``unit``), or ``None``
        for a command that does not block (``XREAD`` without ``BLOCK``): then the socket
        timeout applies. ``0`` blocks forever. A negative timeout is refused by the server
        at once: the socket timeout applies.
    :param socket_timeout: the client's socket timeout (``float`` seconds or ``None``).
    :param unit: ``"s"`` (``BLPOP``...) or ``"ms"`` (``XREAD BLOCK``, ``WAIT``).
    :returns: ``timeout`` (in seconds) + ``socket_timeout``; ``None`` when the command
        blocks forever or ``socket_timeout`` is ``None``.
    :raises ValueError: an unknown ``unit``.
    """
    if timeout is None:
        return socket_timeout
    seconds = to_seconds(timeout, unit)
    if seconds < 0:
        return socket_timeout
    if seconds == 0 or socket_timeout is None:
        return None
    return seconds + socket_timeout


def _number(arg: Any) -> float | None:
    if isinstance(arg, bool):
        return None
    if isinstance(arg, int | float):
        return float(arg)
    if isinstance(arg, bytes | bytearray | memoryview | str):
        try:
            return float(bytes(arg) if not isinstance(arg, str) else arg)
        except ValueError:
            return None
    return None


def _upper(arg: Any) -> str | None:
    if isinstance(arg, str):
        return arg.upper()
    if isinstance(arg, bytes):
        return arg.decode("latin-1").upper()
    return None


def command_timeout(args: tuple[CommandArg, ...]) -> float | None:
    """The blocking timeout of the command ``args`` in seconds (``float``; ``0`` blocks
    forever), or ``None`` when it does not block (not a blocking command, ``XREAD``
    without ``BLOCK``, or a timeout argument that is not a number: the server refuses
    it at once).

    Cheap for the commands that do not block: one set lookup for the usual spellings.
    """
    if not args:
        return None
    name: Any = args[0]
    kind = name.__class__
    # (Only a str or bytes is looked up as it is: a writable memoryview cannot be hashed.)
    if (kind is not str and kind is not bytes) or name not in _SPELLINGS:
        name = _upper(name)
        if name not in BLOCKING_COMMANDS:
            return None
    else:
        name = _upper(name)
    assert name is not None
    if name == "WAIT":
        value = _number(args[2]) if len(args) == 3 else None
        return None if value is None else value / 1000.0
    if name in ("XREAD", "XREADGROUP"):
        # Options come before STREAMS (after it, only keys and ids); GROUP takes two
        # arguments (a group or consumer may be called "BLOCK"), COUNT and BLOCK one.
        index = 1
        while index < len(args) - 1:
            word = _upper(args[index])
            if word == "BLOCK":
                value = _number(args[index + 1])
                return None if value is None else value / 1000.0
            if word == "STREAMS":
                return None
            index += {"GROUP": 3, "COUNT": 2}.get(word or "", 1)
        return None
    at = _TIMEOUT_AT[name]
    if len(args) < 2 or (at != _LAST and len(args) <= at):
        return None
    return _number(args[at])


def pipeline_reply_timeout(
    commands: Iterable[tuple[CommandArg, ...]], socket_timeout: float | None
) -> float | None:
    """The reply wait (``float`` seconds, or ``None``: forever) of a pipeline of
    ``commands``: the server runs them one after the other, so each blocking command may
    hold the ones after it for its whole timeout; the wait is the sum of their timeouts
    plus ``socket_timeout`` (``None`` if one of them blocks forever, or without a socket
    timeout). Commands between ``MULTI`` and ``EXEC`` never block (the server runs them
    as if their timeout had expired): they add nothing.
    """
    total = 0.0
    blocking = False
    queued = False
    for args in commands:
        seconds = command_timeout(args)
        if seconds is None:
            word = _upper(args[0]) if args and len(args) == 1 else None
            if word == "MULTI":
                queued = True
            elif word in ("EXEC", "DISCARD"):
                queued = False
            continue
        if queued or seconds < 0:
            continue
        if seconds == 0:
            return None
        total += seconds
        blocking = True
    if not blocking:
        return socket_timeout
    return reply_timeout(total, socket_timeout)
