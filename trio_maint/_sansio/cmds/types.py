"""The argument and reply types the command methods are annotated with, and the small
argument helpers the generated methods share (sans-IO)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from ..resp import CommandArg

__all__ = [
    "AbsExpiryT",
    "EncodableT",
    "ExpiryT",
    "FieldT",
    "KeyT",
    "ScoreT",
    "Value",
    "list_or_args",
    "msecs",
    "pairs",
    "secs",
    "unix_msecs",
    "unix_secs",
]

#: A key or channel name.
KeyT: TypeAlias = str | bytes
#: A value that can be sent as a command argument.
EncodableT: TypeAlias = str | bytes | memoryview | int | float
#: A hash field or set/sorted-set member.
FieldT: TypeAlias = str | bytes | memoryview | int | float
#: A score or a score bound (``"-inf"``, ``"(1.5"``, ...).
ScoreT: TypeAlias = float | int | str | bytes
#: A relative expiry: seconds (or milliseconds, as the method says) or a ``timedelta``.
ExpiryT: TypeAlias = int | float | datetime.timedelta
#: An absolute expiry: a Unix time (``int``) or a ``datetime``.
AbsExpiryT: TypeAlias = int | datetime.datetime
#: A bulk-string reply: ``bytes``, or ``str`` when the client decodes responses.
Value: TypeAlias = bytes | str


def list_or_args(first: Any, rest: tuple[Any, ...]) -> list[CommandArg]:
    """``first`` as one argument or an iterable of them (redis-py's ``mget([...])``
    form), followed by ``rest``."""
    if isinstance(first, str | bytes | memoryview | int | float):
        out: list[CommandArg] = [first]
    else:
        out = list(first)
    if rest:
        out.extend(rest)
    return out


def pairs(mapping: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> list[CommandArg]:
    """A mapping (or iterable of pairs) flattened to ``k1, v1, k2, v2, ...``."""
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    out: list[CommandArg] = []
    for k, v in items:
        out.append(k)
        out.append(v)
    return out


def secs(value: ExpiryT) -> int | float:
    """Seconds from a number or a ``timedelta`` (whole seconds as ``int``)."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds())
    return value


def msecs(value: ExpiryT) -> int | float:
    """Milliseconds from a number or a ``timedelta``."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return value


def unix_secs(value: AbsExpiryT) -> int:
    """A Unix time in seconds from an ``int`` or a ``datetime``."""
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


def unix_msecs(value: AbsExpiryT) -> int:
    """A Unix time in milliseconds from an ``int`` or a ``datetime``."""
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return value
