"""Building maintenance-notification push frames as RESP3 bytes (sans-IO).

The layouts follow the wire formats of docs/maintenance.md and the reference study: every
notification is a RESP3 push frame (``>``) whose first element is the name and whose second
is the sequence id (an integer). Variants seen in the wild are selectable: names and texts
as bulk (``$``) or simple (``+``) strings, and MOVING's null endpoint as RESP3 ``_``, as
RESP2 ``$-1``, or omitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from .._sansio.endpoint import format_host_port

__all__ = [
    "FrameValue",
    "NullStyle",
    "Simple",
    "StringStyle",
    "encode_value",
    "failed_over_frame",
    "failing_over_frame",
    "format_endpoint",
    "migrated_frame",
    "migrating_frame",
    "moving_frame",
    "push_frame",
    "smigrated_frame",
    "smigrating_frame",
]


class Simple(str):
    """A ``str`` that :func:`encode_value` always writes as a RESP simple string (``+``)."""

    __slots__ = ()


#: A value :func:`encode_value` can write: ``str``/``bytes`` (strings), ``int`` (``:``),
#: ``None`` (a null) or a sequence of those (``*`` array).
FrameValue: TypeAlias = "str | bytes | int | Sequence[FrameValue] | None"

#: How texts are written: ``"bulk"`` (``$5\r\nhello\r\n``) or ``"simple"`` (``+hello\r\n``).
StringStyle: TypeAlias = Literal["bulk", "simple"]

#: How a null is written: ``"_"`` (RESP3 null), ``"$-1"`` (RESP2 null bulk string), or
#: ``"omit"`` (MOVING only: leave the endpoint element out).
NullStyle: TypeAlias = Literal["_", "$-1", "omit"]


def _text(value: str | bytes, strings: StringStyle) -> bytes:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if isinstance(value, Simple) or (strings == "simple" and not isinstance(value, bytes)):
        if b"\r" in raw or b"\n" in raw:
            raise ValueError(f"a simple string cannot contain CR or LF: {value!r}")
        return b"+" + raw + b"\r\n"
    return b"$%d\r\n%s\r\n" % (len(raw), raw)


def encode_value(value: FrameValue, *, strings: StringStyle = "bulk", null: str = "_") -> bytes:
    """Encode one RESP value.

    :param value: see :data:`FrameValue`; ``bool`` is rejected.
    :param strings: :data:`StringStyle` for ``str`` values (``bytes`` are always bulk;
        :class:`Simple` always simple).
    :param null: ``"_"`` or ``"$-1"``.
    :raises TypeError: an unsupported type.
    :raises ValueError: a simple string containing CR/LF.
    """
    if value is None:
        return b"_\r\n" if null != "$-1" else b"$-1\r\n"
    if isinstance(value, bool):
        raise TypeError("bool is not a supported frame value")
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, str | bytes):
        return _text(value, strings)
    if isinstance(value, Sequence):
        parts = [b"*%d\r\n" % len(value)]
        parts += [encode_value(v, strings=strings, null=null) for v in value]
        return b"".join(parts)
    raise TypeError(f"unsupported frame value {value!r}")


def push_frame(
    elements: Sequence[FrameValue], *, strings: StringStyle = "bulk", null: str = "_"
) -> bytes:
    """Encode a RESP3 push frame ``>N`` of ``elements``.

    :raises TypeError, ValueError: as :func:`encode_value`.
    """
    parts = [b">%d\r\n" % len(elements)]
    parts += [encode_value(v, strings=strings, null=null) for v in elements]
    return b"".join(parts)


def moving_frame(
    seq_id: int,
    time: int,
    endpoint: str | None,
    *,
    strings: StringStyle = "bulk",
    null: NullStyle = "_",
) -> bytes:
    """``MOVING seq time endpoint``: the endpoint moves; reconnect within ``time`` seconds.

    :param seq_id: the sequence id.
    :param time: whole seconds (``int``) before the old endpoint goes away.
    :param endpoint: ``"host:port"``, or ``None`` for the null endpoint (written per ``null``).
    :param null: ``"_"``, ``"$-1"`` or ``"omit"`` (a 3-element frame).
    """
    if endpoint is None and null == "omit":
        return push_frame(["MOVING", seq_id, time], strings=strings)
    return push_frame(["MOVING", seq_id, time, endpoint], strings=strings, null=null)


def _with_extras(
    name: str, seq_id: int, extras: Sequence[FrameValue], strings: StringStyle
) -> bytes:
    return push_frame([name, seq_id, *extras], strings=strings)


def migrating_frame(
    seq_id: int,
    *,
    time: int | None = None,
    shard_ids: str | None = None,
    strings: StringStyle = "bulk",
) -> bytes:
    """``MIGRATING seq [time] [shard_ids]``: the shard will migrate within ``time`` seconds.

    Elements left as ``None`` are omitted (the minimal frame is ``MIGRATING seq``).
    """
    extras = [v for v in (time, shard_ids) if v is not None]
    return _with_extras("MIGRATING", seq_id, extras, strings)


def migrated_frame(
    seq_id: int, *, shard_ids: str | None = None, strings: StringStyle = "bulk"
) -> bytes:
    """``MIGRATED seq [shard_ids]``: the migration finished."""
    return _with_extras("MIGRATED", seq_id, [] if shard_ids is None else [shard_ids], strings)


def failing_over_frame(
    seq_id: int,
    *,
    time: int | None = None,
    shard_ids: str | None = None,
    strings: StringStyle = "bulk",
) -> bytes:
    """``FAILING_OVER seq [time] [shard_ids]``: a failover starts within ``time`` seconds."""
    extras = [v for v in (time, shard_ids) if v is not None]
    return _with_extras("FAILING_OVER", seq_id, extras, strings)


def failed_over_frame(
    seq_id: int, *, shard_ids: str | None = None, strings: StringStyle = "bulk"
) -> bytes:
    """``FAILED_OVER seq [shard_ids]``: the failover finished."""
    return _with_extras("FAILED_OVER", seq_id, [] if shard_ids is None else [shard_ids], strings)


def smigrating_frame(
    seq_id: int, slots: str | Sequence[str], *, strings: StringStyle = "bulk"
) -> bytes:
    """``SMIGRATING seq slots...``: cluster slots are about to migrate.

    :param slots: one text (``"123,789-1000"``) or several slot specs (``["1000",
        "2000-3000"]``), each written as its own element.
    """
    specs = [slots] if isinstance(slots, str) else list(slots)
    return _with_extras("SMIGRATING", seq_id, specs, strings)


def smigrated_frame(
    seq_id: int,
    entries: Sequence[tuple[str, str, str] | tuple[str, str]],
    *,
    strings: StringStyle = "bulk",
) -> bytes:
    """``SMIGRATED seq [[source, target, slots], ...]``: cluster slots moved.

    :param entries: triplets ``(source "host:port", target "host:port", slots)`` (the current
        shape), or pairs ``(endpoint, slots)`` (the older shape still seen in the wild).
    """
    return _with_extras("SMIGRATED", seq_id, [[list(e) for e in entries]], strings)


def format_endpoint(address: tuple[str, int], endpoint_type: str | None, fqdn: str) -> str | None:
    """Write a MOVING endpoint for a client that asked for ``endpoint_type``.

    :param address: the target's ``(ip, port)``.
    :param endpoint_type: one of :data:`ENDPOINT_TYPES`, or ``None`` (bare ``ON``: the server
        chooses; the simulator writes the IP form).
    :param fqdn: the host name written for the ``*-fqdn`` types (e.g. ``"localhost"``).
    :returns: ``"host:port"``, or ``None`` (the null endpoint) for type ``none``.
    """
    if endpoint_type == "none":
        return None
    host, port = address
    if endpoint_type is not None and endpoint_type.endswith("fqdn"):
        host = fqdn
    return format_host_port(host, port)
