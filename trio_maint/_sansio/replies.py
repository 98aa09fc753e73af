"""Reply callbacks (sans-IO): what turns a raw RESP3 reply into the value a command method
returns (``SET`` → ``bool``, ``INFO`` → ``dict``, ``ZRANGE ... WITHSCORES`` → pairs), and
:func:`parse_info`, the one parser of ``INFO`` text in trio_maint.

:class:`~trio_maint._sansio.commands.CommandsMixin` names a callback per command; the
client, pipelines and the cluster client apply it with :func:`apply_callback`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from .errors import ProtocolError

__all__ = [
    "Callback",
    "apply_callback",
    "is_ok",
    "parse_info",
    "scan_reply",
    "score_pairs",
    "set_reply",
    "to_bool",
]

#: A post-processing function for a reply.
Callback: TypeAlias = Callable[[Any], Any]


def apply_callback(callback: Callback, reply: Any, args: tuple[Any, ...]) -> Any:
    """Post-process ``reply`` with ``callback``; a reply of an unexpected shape becomes a
    :class:`~trio_maint.ProtocolError` naming the command (the connection stays usable)."""
    try:
        return callback(reply)
    except Exception as exc:
        name = args[0] if args else "?"
        raise ProtocolError(f"unexpected reply to {name!r}: {reply!r:.200} ({exc})") from exc


def scan_reply(reply: Any) -> tuple[int, list[Any]]:
    """``SCAN``'s ``[cursor, keys]`` → ``(cursor as int, keys)``."""
    if not isinstance(reply, list) or len(reply) != 2 or not isinstance(reply[1], list):
        raise ValueError("SCAN replies with [cursor, keys]")
    return int(reply[0]), reply[1]


def is_ok(reply: Any) -> bool:
    """``OK`` (simple string or RESP3 true) → ``True``."""
    return reply in (b"OK", "OK", True)


def set_reply(reply: Any) -> Any:
    """``SET``: ``OK`` → ``True``; nil or (with ``GET``) the old value unchanged."""
    # SET without GET answers OK or nil (NX/XX not met); with GET the old value.
    if reply in (b"OK", "OK"):
        return True
    return reply


def to_bool(reply: Any) -> bool:
    """An integer reply (``0``/``1``) → ``bool``."""
    return bool(reply)


def _parse_value(value: str) -> Any:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        pass
    if "," in value and "=" in value:
        out: dict[str, Any] = {}
        for item in value.split(","):
            k, sep, v = item.partition("=")
            if sep:
                out[k] = _parse_value(v)
        return out
    return value


def parse_info(reply: Any) -> dict[str, Any]:
    """Parse an ``INFO`` reply (``bytes`` or ``str``) into a ``dict``: numbers become
    ``int``/``float``, ``k=v,k=v`` values become nested dicts, section headers are dropped."""
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
    info: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if sep:
            info[key] = _parse_value(value)
    return info


def score_pairs(reply: Any) -> list[tuple[Any, float]]:
    """Members with scores (RESP3 pairs, one pair, or a flat list) → ``[(member, score)]``."""
    if not reply:
        return []
    if isinstance(reply[0], list):  # RESP3: [[member, score], ...]
        return [(m, float(s)) for m, s in reply]
    # A single pair [member, score] (ZPOPMIN without count) or a flat RESP2-style list.
    it = iter(reply)
    return [(m, float(s)) for m, s in zip(it, it, strict=True)]
