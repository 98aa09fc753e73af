"""Typed stream replies (sans-IO): the shapes the stream commands return and the reply
callbacks that build them from RESP3 replies (see :mod:`trio_maint._sansio.replies` for the
``callback(reply) -> value`` convention; a reply of another shape raises, and
:func:`~trio_maint._sansio.replies.apply_callback` turns that into a
:class:`~trio_maint.ProtocolError`).

An entry is a :class:`StreamEntry`, a named tuple ``(id, fields)``, so it compares equal to
redis-py's ``(id, {field: value})`` tuples. Ids, field names and values are ``bytes``
(``str`` with ``decode_responses``); the keys of the dicts built from ``XINFO`` and
``XPENDING`` replies are ``str``.

``XREAD``/``XREADGROUP`` replies become ``{stream: [StreamEntry, ...]}``: redis-py's
unified shape (``legacy_responses=False``). redis-py's default RESP3 shape wraps each
stream's entry list in one more single-element list, which carries nothing; trio_maint
leaves it out (docs/streams.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, TypeAlias

__all__ = [
    "StreamEntry",
    "StreamId",
    "XAutoClaimReply",
    "XReadReply",
    "entry_fields",
    "parse_entries",
    "parse_entry",
    "parse_ids",
    "parse_xautoclaim",
    "parse_xautoclaim_justid",
    "parse_xinfo_consumers",
    "parse_xinfo_groups",
    "parse_xinfo_stream",
    "parse_xinfo_stream_full",
    "parse_xpending",
    "parse_xpending_range",
    "parse_xread",
]

#: A stream entry id as the server sends it, e.g. ``b"1700000000000-0"`` (``str`` with
#: ``decode_responses``).
StreamId: TypeAlias = bytes | str


class StreamEntry(NamedTuple):
    """One stream entry.

    :ivar id: the entry id (``bytes``, or ``str`` with ``decode_responses``).
    :ivar fields: its field → value mapping (``dict``; empty for an entry deleted while
        still pending, as ``XREADGROUP`` with id ``0`` reports it).
    """

    id: StreamId
    fields: dict[Any, Any]


#: ``XREAD``/``XREADGROUP`` reply: stream name → its entries, in stream order; ``{}`` when
#: nothing arrived (a ``BLOCK`` that timed out).
XReadReply: TypeAlias = dict[Any, list[StreamEntry]]


class XAutoClaimReply(NamedTuple):
    """``XAUTOCLAIM`` reply.

    :ivar next_id: the cursor to pass as ``start`` next time (``b"0-0"`` when the scan is
        complete).
    :ivar entries: the claimed entries (``list`` of :class:`StreamEntry`).
    :ivar deleted_ids: ids that were pending but no longer exist in the stream (they were
        removed from the pending list).
    """

    next_id: StreamId
    entries: list[StreamEntry]
    deleted_ids: list[StreamId]


def _key(name: Any) -> Any:
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else name


def _str_keys(reply: Any) -> dict[str, Any]:
    """A RESP3 map (or a flat RESP2-style list) → ``dict`` with ``str`` keys."""
    if isinstance(reply, Mapping):
        return {_key(k): v for k, v in reply.items()}
    if isinstance(reply, list):
        it = iter(reply)
        return {_key(k): v for k, v in zip(it, it, strict=True)}
    raise ValueError(f"expected a map, got {type(reply).__name__}")


def entry_fields(reply: Any) -> dict[Any, Any]:
    """An entry's fields as the server sends them (a flat ``[field, value, ...]`` list,
    a map, or nil for a deleted entry) → ``dict`` (empty for nil)."""
    if reply is None:
        return {}
    if isinstance(reply, Mapping):
        return dict(reply)
    if not isinstance(reply, list):
        raise ValueError(f"entry fields: expected a list, got {type(reply).__name__}")
    it = iter(reply)
    return dict(zip(it, it, strict=True))


def parse_entry(reply: Any) -> StreamEntry:
    """One ``[id, [field, value, ...]]`` → :class:`StreamEntry`."""
    if not isinstance(reply, list) or len(reply) != 2:
        raise ValueError("a stream entry is [id, fields]")
    entry_id, fields = reply
    if not isinstance(entry_id, bytes | str):
        raise ValueError(f"entry id: expected a string, got {type(entry_id).__name__}")
    return StreamEntry(entry_id, entry_fields(fields))


def parse_entries(reply: Any) -> list[StreamEntry]:
    """``XRANGE``/``XREVRANGE``/``XCLAIM`` reply (a list of entries) → ``list`` of
    :class:`StreamEntry`; nil → ``[]``. A nil entry (a claimed id that no longer exists,
    on servers before 7.0) is left out."""
    if reply is None:
        return []
    if not isinstance(reply, list):
        raise ValueError(f"expected a list of entries, got {type(reply).__name__}")
    return [parse_entry(item) for item in reply if item is not None]


def parse_ids(reply: Any) -> list[StreamId]:
    """A list of entry ids (``XCLAIM ... JUSTID``) → ``list`` of ids; nil → ``[]``."""
    if reply is None:
        return []
    if not isinstance(reply, list):
        raise ValueError(f"expected a list of ids, got {type(reply).__name__}")
    return list(reply)


def parse_xread(reply: Any) -> XReadReply:
    """``XREAD``/``XREADGROUP`` reply (RESP3: a map stream → entries; RESP2: a list of
    ``[stream, entries]``; nil when a ``BLOCK`` timed out) → :data:`XReadReply`
    (``{}`` for nil)."""
    if reply is None:
        return {}
    if isinstance(reply, Mapping):
        return {stream: parse_entries(entries) for stream, entries in reply.items()}
    if isinstance(reply, list):
        out: XReadReply = {}
        for item in reply:
            if not isinstance(item, list) or len(item) != 2:
                raise ValueError("XREAD (RESP2) replies with [stream, entries] pairs")
            out[item[0]] = parse_entries(item[1])
        return out
    raise ValueError(f"XREAD: expected a map, got {type(reply).__name__}")


def parse_xautoclaim(reply: Any) -> XAutoClaimReply:
    """``XAUTOCLAIM`` reply ``[next_id, entries, deleted_ids]`` → :class:`XAutoClaimReply`
    (redis-py returns a ``list`` of the same three items)."""
    if not isinstance(reply, list) or len(reply) not in (2, 3):
        raise ValueError("XAUTOCLAIM replies with [next_id, entries, deleted_ids]")
    deleted = parse_ids(reply[2]) if len(reply) == 3 else []
    return XAutoClaimReply(reply[0], parse_entries(reply[1]), deleted)


def parse_xautoclaim_justid(reply: Any) -> list[StreamId]:
    """``XAUTOCLAIM ... JUSTID`` reply → the claimed ids (as redis-py returns them)."""
    if not isinstance(reply, list) or len(reply) not in (2, 3):
        raise ValueError("XAUTOCLAIM replies with [next_id, ids, deleted_ids]")
    return parse_ids(reply[1])


def parse_xpending(reply: Any) -> dict[str, Any]:
    """``XPENDING key group`` (summary form) → ``{"pending": int, "min": id or None,
    "max": id or None, "consumers": [{"name": name, "pending": int}, ...]}``."""
    if not isinstance(reply, list) or len(reply) != 4:
        raise ValueError("XPENDING replies with [count, min, max, consumers]")
    count, low, high, consumers = reply
    return {
        "pending": int(count),
        "min": low,
        "max": high,
        "consumers": [{"name": name, "pending": int(n)} for name, n in consumers or []],
    }


def parse_xpending_range(reply: Any) -> list[dict[str, Any]]:
    """``XPENDING key group [IDLE ms] start end count [consumer]`` (extended form) →
    ``[{"message_id": id, "consumer": name, "time_since_delivered": int (ms),
    "times_delivered": int}, ...]``."""
    if not isinstance(reply, list):
        raise ValueError(f"XPENDING: expected a list, got {type(reply).__name__}")
    out: list[dict[str, Any]] = []
    for item in reply:
        message_id, consumer, idle, delivered = item
        out.append(
            {
                "message_id": message_id,
                "consumer": consumer,
                "time_since_delivered": int(idle),
                "times_delivered": int(delivered),
            }
        )
    return out


def _optional_entry(reply: Any) -> StreamEntry | None:
    if reply is None or (isinstance(reply, list) and reply and reply[0] is None):
        return None
    return parse_entry(reply)


def parse_xinfo_stream(reply: Any) -> dict[str, Any]:
    """``XINFO STREAM key`` → ``dict`` with ``str`` keys (``"length"``, ``"groups"``,
    ``"last-generated-id"``, ...); ``"first-entry"``/``"last-entry"`` become
    :class:`StreamEntry` (or ``None`` for an empty stream)."""
    info = _str_keys(reply)
    for name in ("first-entry", "last-entry"):
        if name in info:
            info[name] = _optional_entry(info[name])
    return info


def parse_xinfo_stream_full(reply: Any) -> dict[str, Any]:
    """``XINFO STREAM key FULL`` → ``dict`` with ``str`` keys; ``"entries"`` becomes
    ``{id: fields}`` and ``"groups"`` a list of dicts with ``str`` keys whose
    ``"consumers"`` are dicts with ``str`` keys too (redis-py leaves the consumers'
    keys as the server sent them)."""
    info = _str_keys(reply)
    if "entries" in info:
        info["entries"] = {e.id: e.fields for e in parse_entries(info["entries"])}
    groups = []
    for raw in info.get("groups") or []:
        group = _str_keys(raw)
        if "consumers" in group:
            group["consumers"] = [_str_keys(c) for c in group["consumers"] or []]
        groups.append(group)
    if "groups" in info:
        info["groups"] = groups
    return info


def parse_xinfo_groups(reply: Any) -> list[dict[str, Any]]:
    """``XINFO GROUPS key`` → one ``dict`` with ``str`` keys per group (``"name"``,
    ``"consumers"``, ``"pending"``, ``"last-delivered-id"``, ...)."""
    if not isinstance(reply, list):
        raise ValueError(f"XINFO GROUPS: expected a list, got {type(reply).__name__}")
    return [_str_keys(item) for item in reply]


def parse_xinfo_consumers(reply: Any) -> list[dict[str, Any]]:
    """``XINFO CONSUMERS key group`` → one ``dict`` with ``str`` keys per consumer
    (``"name"``, ``"pending"``, ``"idle"`` in ms, ...)."""
    if not isinstance(reply, list):
        raise ValueError(f"XINFO CONSUMERS: expected a list, got {type(reply).__name__}")
    return [_str_keys(item) for item in reply]
