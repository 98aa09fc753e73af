"""The argument and reply types the command methods are annotated with, and the small
argument helpers the generated methods share (sans-IO)."""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from ..errors import DataError
from ..resp import CommandArg

__all__ = [
    "AbsExpiryT",
    "EncodableT",
    "ExpiryT",
    "FieldT",
    "KeyT",
    "ScoreT",
    "Value",
    "duration",
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


def duration(value: object, unit: str) -> int | float:
    """``value`` checked as a time in ``unit`` (``"seconds"``, ...): an ``int`` or a finite
    ``float`` (a ``bool`` is an ``int`` to Python, and NaN or an infinity has no integer
    form: neither is a time).

    :raises DataError: otherwise, naming the type or the value."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(
            f"a time in {unit} must be a number or a timedelta, got {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise DataError(f"a time in {unit} must be finite, got {value!r}")
    return value


def secs(value: ExpiryT) -> int | float:
    """Seconds from a number or a ``timedelta`` (whole seconds as ``int``).

    :raises DataError: a ``bool``, NaN, an infinity or another type."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds())
    return duration(value, "seconds")


def msecs(value: ExpiryT) -> int | float:
    """Milliseconds from a number or a ``timedelta``.

    :raises DataError: a ``bool``, NaN, an infinity or another type."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return duration(value, "milliseconds")


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
