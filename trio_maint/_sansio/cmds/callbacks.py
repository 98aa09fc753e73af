"""Reply callbacks of the generated command methods that are not in ``replies`` (sans-IO):
each turns a raw RESP3 reply into the shape the method documents."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

__all__ = [
    "bool_list",
    "cast_pairs",
    "float_or_none",
    "geo_items",
    "hscan_reply",
    "pair_list",
    "parse_acl_getuser",
    "parse_client_info",
    "parse_client_list",
    "parse_command_table",
    "str_dict",
    "str_keys",
    "time_pair",
    "to_datetime",
    "to_dict",
    "to_str",
    "zscan_reply",
]


def bool_list(reply: Any) -> list[bool]:
    """A list of ``0``/``1`` → a list of ``bool``."""
    return [bool(x) for x in reply]


def float_or_none(reply: Any) -> float | None:
    """A number (bulk string or double) or nil → ``float`` or ``None``."""
    return None if reply is None else float(reply)


def pair_list(reply: Any) -> list[list[Any]]:
    """A flat ``[k1, v1, k2, v2]`` (or a map) → ``[[k1, v1], [k2, v2]]``."""
    if isinstance(reply, dict):
        return [[k, v] for k, v in reply.items()]
    it = iter(reply)
    return [[k, v] for k, v in zip(it, it, strict=True)]


def to_dict(reply: Any) -> dict[Any, Any]:
    """A RESP3 map (or a flat list of pairs) → ``dict``."""
    if isinstance(reply, dict):
        return reply
    it = iter(reply)
    return dict(zip(it, it, strict=True))


def time_pair(reply: Any) -> tuple[int, int]:
    """``TIME``'s ``[seconds, microseconds]`` → a tuple of ``int``."""
    return int(reply[0]), int(reply[1])


def _client_line(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in line.split(" "):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def parse_client_list(reply: Any) -> list[dict[str, str]]:
    """``CLIENT LIST``'s text → one ``dict`` of ``str`` per connection."""
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
    return [_client_line(line) for line in text.splitlines() if line.strip()]


def parse_client_info(reply: Any) -> dict[str, str]:
    """``CLIENT INFO``'s line → a ``dict`` of ``str``."""
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
    return _client_line(text.strip())


def cast_pairs(cast: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    """Members with scores (``[[member, score], ...]``) with each score passed to
    ``cast``."""

    def apply(reply: Any) -> list[Any]:
        if reply and not isinstance(reply[0], list):  # one flat pair
            return [reply[0], cast(reply[1])]
        return [[m, cast(s)] for m, s in reply]

    return apply


def hscan_reply(reply: Any) -> tuple[int, dict[Any, Any]]:
    """``HSCAN``'s ``[cursor, [f1, v1, ...]]`` → ``(cursor, {f1: v1, ...})``."""
    return int(reply[0]), to_dict(reply[1])


def zscan_reply(cast: Callable[[Any], Any]) -> Callable[[Any], tuple[int, list[Any]]]:
    """``ZSCAN``'s ``[cursor, [m1, s1, ...]]`` → ``(cursor, [(m1, cast(s1)), ...])``."""

    def apply(reply: Any) -> tuple[int, list[Any]]:
        it = iter(reply[1])
        return int(reply[0]), [(m, cast(s)) for m, s in zip(it, it, strict=True)]

    return apply


def _str(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def to_str(reply: Any) -> str:
    """A bulk string → ``str`` (``SCRIPT LOAD``'s sha, as redis-py)."""
    return str(_str(reply))


def str_dict(reply: Any) -> dict[str, str]:
    """A map (or flat pairs) → a ``dict`` of ``str`` (``CONFIG GET``, as redis-py)."""
    return {_str(k): _str(v) for k, v in to_dict(reply).items()}


def str_keys(reply: Any) -> dict[str, Any]:
    """A map → a ``dict`` with ``str`` keys (``MEMORY STATS``, as redis-py)."""
    return {_str(k): v for k, v in to_dict(reply).items()}


def to_datetime(reply: Any) -> datetime.datetime:
    """A Unix time → a local naive ``datetime`` (``LASTSAVE``, as redis-py)."""
    return datetime.datetime.fromtimestamp(int(reply))


def geo_items(withdist: bool, withhash: bool, withcoord: bool) -> Callable[[Any], Any]:
    """``GEORADIUS``/``GEOSEARCH`` items with ``WITHDIST`` / ``WITHHASH`` /
    ``WITHCOORD``: ``[name, dist (float), hash (int), (lon, lat)]``, only the parts
    asked for."""

    def apply(reply: Any) -> Any:
        if not isinstance(reply, list):
            return reply  # STORE: a count
        out = []
        for item in reply:
            shaped = [item[0]]
            index = 1
            if withdist:
                shaped.append(float(item[index]))
                index += 1
            if withhash:
                shaped.append(int(item[index]))
                index += 1
            if withcoord:
                lon, lat = item[index]
                shaped.append((float(lon), float(lat)))
            out.append(shaped)
        return out

    return apply


def _words(value: Any) -> list[str]:
    text = _str(value)
    return text.split() if isinstance(text, str) else []


def parse_acl_getuser(reply: Any) -> dict[str, Any] | None:
    """``ACL GETUSER``'s map → a ``dict`` with ``str`` keys and values, shaped as
    redis-py's: ``"commands"`` split into ``"categories"`` (``+@...``/``-@...``) and
    ``"commands"`` (the rest), ``"keys"`` and ``"channels"`` as lists of patterns,
    ``"enabled"`` (``bool``: ``"on"`` among the flags); ``None`` for an unknown user."""
    if reply is None:
        return None
    info: dict[str, Any] = {}
    for key, value in to_dict(reply).items():
        key = _str(key)
        if isinstance(value, list):
            value = [
                {_str(k): _str(v) for k, v in to_dict(item).items()}
                if isinstance(item, dict | list) and key == "selectors"
                else _str(item)
                for item in value
            ]
        else:
            value = _str(value)
        info[key] = value
    rules = _words(info.get("commands", ""))
    info["commands"] = [rule for rule in rules if "@" not in rule]
    info["categories"] = [rule for rule in rules if "@" in rule]
    for key in ("keys", "channels"):
        if isinstance(info.get(key), str):
            info[key] = _words(info[key])
    info["enabled"] = "on" in (info.get("flags") or [])
    return info


def parse_command_table(reply: Any) -> dict[str, dict[str, Any]]:
    """``COMMAND``'s list → ``{name: {"name", "arity", "flags" (a ``set``),
    "first_key_pos", "last_key_pos", "step_count", "acl_categories", "tips",
    "key_specifications", "subcommands"}}`` as redis-py shapes it (names and flags as
    ``str``; the rest as the server sent it)."""
    fields = (
        "acl_categories",
        "tips",
        "key_specifications",
        "subcommands",
    )
    table: dict[str, dict[str, Any]] = {}
    for item in reply:
        name = _str(item[0])
        entry: dict[str, Any] = {
            "name": name,
            "arity": item[1],
            "flags": {_str(flag) for flag in item[2]},
            "first_key_pos": item[3],
            "last_key_pos": item[4],
            "step_count": item[5],
        }
        for index, field in enumerate(fields, start=6):
            entry[field] = item[index] if len(item) > index else []
        table[name] = entry
    return table
