"""Hand-written argument builders (sans-IO) of commands whose arguments or replies need
shaping: keys, strings, hashes, lists and server commands. Each takes the method's
parameters and returns ``(args, callback)``; the generated methods call them."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from ..errors import DataError
from ..replies import Callback, is_ok, scan_reply, set_reply
from ..resp import CommandArg
from .callbacks import hscan_reply, parse_client_list
from .types import (
    AbsExpiryT,
    EncodableT,
    ExpiryT,
    FieldT,
    KeyT,
    duration,
    list_or_args,
    msecs,
    pairs,
    secs,
    unix_msecs,
    unix_secs,
)

__all__ = [
    "build_acl_setuser",
    "build_bitfield_ro",
    "build_blpop",
    "build_brpop",
    "build_client_kill_filter",
    "build_client_list",
    "build_client_pause",
    "build_command_list",
    "build_expire",
    "build_function_flush",
    "build_hscan",
    "build_hset",
    "build_lolwut",
    "build_migrate",
    "build_module_loadex",
    "build_pexpire",
    "build_ping",
    "build_scan",
    "build_set",
    "build_slaveof",
    "build_sort",
    "build_sort_ro",
    "build_sscan",
]

#: What a builder returns: the command's arguments and its reply callback (or ``None``).
Built: TypeAlias = tuple[tuple[CommandArg, ...], Callback | None]


def build_set(
    name: KeyT,
    value: EncodableT,
    ex: ExpiryT | None,
    px: ExpiryT | None,
    nx: bool,
    xx: bool,
    keepttl: bool,
    get: bool,
    exat: AbsExpiryT | None,
    pxat: AbsExpiryT | None,
) -> Built:
    """``SET``: a fractional ``ex`` is sent as ``PX``; ``True`` when set, ``None`` when
    NX/XX prevented it, the old value with ``get``."""
    if (
        ex is None
        and px is None
        and exat is None
        and pxat is None
        and not (nx or xx or keepttl or get)
    ):
        return ("SET", name, value), set_reply  # the common plain SET, without the checks
    args: list[CommandArg] = ["SET", name, value]
    if sum(x is not None for x in (ex, px, exat, pxat)) + keepttl > 1:
        raise DataError("set(): give at most one of ex, px, exat, pxat, keepttl")
    if nx and xx:
        raise DataError("set(): nx and xx are mutually exclusive")
    if ex is not None:
        seconds = (
            ex.total_seconds() if isinstance(ex, datetime.timedelta) else duration(ex, "seconds")
        )
        if float(seconds).is_integer():
            args += ["EX", int(seconds)]
        else:
            args += ["PX", int(seconds * 1000)]
    elif px is not None:
        args += ["PX", msecs(px)]
    elif exat is not None:
        args += ["EXAT", unix_secs(exat)]
    elif pxat is not None:
        args += ["PXAT", unix_msecs(pxat)]
    elif keepttl:
        args.append("KEEPTTL")
    if nx:
        args.append("NX")
    if xx:
        args.append("XX")
    if get:
        args.append("GET")
        return tuple(args), None
    return tuple(args), set_reply


def _expiry_flags(args: list[CommandArg], nx: bool, xx: bool, gt: bool, lt: bool) -> None:
    for flag, on in (("NX", nx), ("XX", xx), ("GT", gt), ("LT", lt)):
        if on:
            args.append(flag)


def build_expire(
    name: KeyT,
    time: ExpiryT | None,
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    seconds: ExpiryT | None,
) -> Built:
    """``EXPIRE name seconds [NX|XX|GT|LT]``: ``time`` in seconds or a ``timedelta``."""
    if time is None:
        time = seconds
    if time is None:
        raise DataError("expire() needs time (seconds or a timedelta)")
    args: list[CommandArg] = ["EXPIRE", name, secs(time)]
    _expiry_flags(args, nx, xx, gt, lt)
    return tuple(args), bool


def build_pexpire(
    name: KeyT,
    time: ExpiryT | None,
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    milliseconds: ExpiryT | None,
) -> Built:
    """``PEXPIRE name ms [NX|XX|GT|LT]``: ``time`` in milliseconds or a ``timedelta``."""
    if time is None:
        time = milliseconds
    if time is None:
        raise DataError("pexpire() needs time (milliseconds or a timedelta)")
    args: list[CommandArg] = ["PEXPIRE", name, msecs(time)]
    _expiry_flags(args, nx, xx, gt, lt)
    return tuple(args), bool


def build_migrate(
    host: str,
    port: int,
    keys: KeyT | Sequence[KeyT],
    destination_db: int,
    timeout: int,
    copy: bool,
    replace: bool,
    auth: str | None,
) -> Built:
    """``MIGRATE host port "" db timeout [COPY] [REPLACE] [AUTH pw] KEYS k ...``."""
    names = list_or_args(keys, ())
    args: list[CommandArg] = ["MIGRATE", host, port, "", destination_db, timeout]
    if copy:
        args.append("COPY")
    if replace:
        args.append("REPLACE")
    if auth is not None:
        args += ["AUTH", auth]
    args += ["KEYS", *names]
    return tuple(args), None


def _scan_args(
    args: list[CommandArg], match: EncodableT | None, count: int | None
) -> list[CommandArg]:
    if match is not None:
        args += ["MATCH", match]
    if count is not None:
        args += ["COUNT", count]
    return args


def build_scan(
    cursor: int, match: EncodableT | None, count: int | None, _type: str | None, type: str | None
) -> Built:
    """``SCAN cursor [MATCH p] [COUNT n] [TYPE t]`` → ``(next cursor, keys)``."""
    args = _scan_args(["SCAN", cursor], match, count)
    kind = _type if _type is not None else type
    if kind is not None:
        args += ["TYPE", kind]
    return tuple(args), scan_reply


def build_sscan(name: KeyT, cursor: int, match: EncodableT | None, count: int | None) -> Built:
    """``SSCAN`` → ``(next cursor, members)``."""
    return tuple(_scan_args(["SSCAN", name, cursor], match, count)), scan_reply


def build_hscan(
    name: KeyT, cursor: int, match: EncodableT | None, count: int | None, no_values: bool
) -> Built:
    """``HSCAN`` → ``(next cursor, {field: value})`` (``(cursor, fields)`` with
    ``no_values``)."""
    args = _scan_args(["HSCAN", name, cursor], match, count)
    if no_values:
        args.append("NOVALUES")
        return tuple(args), scan_reply
    return tuple(args), hscan_reply


def _sort_args(
    command: str,
    name: KeyT,
    start: int | None,
    num: int | None,
    by: EncodableT | None,
    get: EncodableT | Sequence[EncodableT] | None,
    desc: bool,
    alpha: bool,
) -> list[CommandArg]:
    if (start is None) != (num is None):
        raise DataError(f"{command.lower()}(): give both start and num, or neither")
    args: list[CommandArg] = [command, name]
    if by is not None:
        args += ["BY", by]
    if start is not None:
        args += ["LIMIT", start, num]  # type: ignore[list-item]
    if get is not None:
        for pattern in list_or_args(get, ()):
            args += ["GET", pattern]
    if desc:
        args.append("DESC")
    if alpha:
        args.append("ALPHA")
    return args


def _group_by(n: int) -> Callback:
    def group(reply: Any) -> Any:
        if not isinstance(reply, list):
            return reply
        return [tuple(reply[i : i + n]) for i in range(0, len(reply), n)]

    return group


def build_sort(
    name: KeyT,
    start: int | None,
    num: int | None,
    by: EncodableT | None,
    get: EncodableT | Sequence[EncodableT] | None,
    desc: bool,
    alpha: bool,
    store: KeyT | None,
    groups: bool,
) -> Built:
    """``SORT``; with ``groups`` and several ``get`` patterns, the reply in tuples."""
    args = _sort_args("SORT", name, start, num, by, get, desc, alpha)
    if store is not None:
        args += ["STORE", store]
    if groups:
        patterns = list_or_args(get, ()) if get is not None else []
        if len(patterns) < 2:
            raise DataError("sort(groups=True) needs at least two get patterns")
        return tuple(args), _group_by(len(patterns))
    return tuple(args), None


def build_sort_ro(
    key: KeyT,
    start: int | None,
    num: int | None,
    by: EncodableT | None,
    get: EncodableT | Sequence[EncodableT] | None,
    desc: bool,
    alpha: bool,
) -> Built:
    """``SORT_RO``."""
    return tuple(_sort_args("SORT_RO", key, start, num, by, get, desc, alpha)), None


def build_hset(
    name: KeyT,
    key: FieldT | None,
    value: EncodableT | None,
    mapping: Mapping[FieldT, EncodableT] | None,
    items: Sequence[EncodableT] | None,
) -> Built:
    """``HSET name field value ...`` from ``key``/``value``, ``mapping`` and ``items`` (a
    flat ``[field, value, ...]``)."""
    args: list[CommandArg] = ["HSET", name]
    if key is not None:
        args += [key, value]  # type: ignore[list-item]
    if items:
        args.extend(items)
    if mapping:
        args.extend(pairs(mapping))
    if len(args) == 2:
        raise DataError("hset() needs key and value, mapping or items")
    return tuple(args), None


def _blocking_pop(command: str, keys: KeyT | Iterable[KeyT], timeout: float) -> Built:
    return (command, *list_or_args(keys, ()), timeout), None


def build_blpop(keys: KeyT | Iterable[KeyT], timeout: float) -> Built:
    """``BLPOP key [key ...] timeout`` (``timeout`` seconds; 0 waits forever)."""
    return _blocking_pop("BLPOP", keys, timeout)


def build_brpop(keys: KeyT | Iterable[KeyT], timeout: float) -> Built:
    """``BRPOP key [key ...] timeout``."""
    return _blocking_pop("BRPOP", keys, timeout)


def build_bitfield_ro(
    key: KeyT, encoding: str, offset: int, items: Sequence[tuple[str, int]] | None
) -> Built:
    """``BITFIELD_RO key GET encoding offset [GET encoding offset ...]``."""
    args: list[CommandArg] = ["BITFIELD_RO", key, "GET", encoding, offset]
    for enc, off in items or ():
        args += ["GET", enc, off]
    return tuple(args), None


def build_function_flush(mode: str) -> Built:
    """``FUNCTION FLUSH [ASYNC|SYNC]``."""
    return (("FUNCTION", "FLUSH", mode) if mode else ("FUNCTION", "FLUSH")), is_ok


def build_client_list(_type: str | None, client_id: Sequence[int] | None) -> Built:
    """``CLIENT LIST [TYPE t] [ID id ...]`` → one ``dict`` per connection."""
    args: list[CommandArg] = ["CLIENT", "LIST"]
    if _type is not None:
        args += ["TYPE", _type]
    if client_id:
        args += ["ID", *client_id]
    return tuple(args), parse_client_list


def build_client_pause(timeout: int, all: bool) -> Built:
    """``CLIENT PAUSE ms [WRITE|ALL]``: ``all=False`` pauses writes only."""
    return ("CLIENT", "PAUSE", timeout, "ALL" if all else "WRITE"), is_ok


def build_client_kill_filter(
    _id: int | None,
    _type: str | None,
    addr: EncodableT | None,
    skipme: bool | None,
    laddr: EncodableT | None,
    user: EncodableT | None,
    maxage: int | None,
) -> Built:
    """``CLIENT KILL [ID id] [TYPE t] [ADDR a] [SKIPME yes|no] [LADDR a] [USER u]
    [MAXAGE s]`` → the number of connections closed."""
    args: list[CommandArg] = ["CLIENT", "KILL"]
    for token, value in (("ID", _id), ("TYPE", _type), ("ADDR", addr)):
        if value is not None:
            args += [token, value]
    if skipme is not None:
        args += ["SKIPME", "yes" if skipme else "no"]
    for token, value in (("LADDR", laddr), ("USER", user), ("MAXAGE", maxage)):
        if value is not None:
            args += [token, value]
    if len(args) == 2:
        raise DataError("client_kill_filter() needs at least one filter")
    return tuple(args), None


def build_lolwut(*version_numbers: int) -> Built:
    """``LOLWUT [VERSION v [n ...]]``."""
    if version_numbers:
        return ("LOLWUT", "VERSION", *version_numbers), None
    return ("LOLWUT",), None


def _pong(reply: Any) -> bool:
    return reply in (b"PONG", "PONG")


def build_ping(message: EncodableT | None) -> Built:
    """``PING`` → ``True``; ``PING message`` → the message."""
    if message is None:
        return ("PING",), _pong
    return ("PING", message), None


def build_command_list(module: str | None, category: str | None, pattern: str | None) -> Built:
    """``COMMAND LIST [FILTERBY MODULE m | ACLCAT c | PATTERN p]``."""
    given = [
        (t, v)
        for t, v in (("MODULE", module), ("ACLCAT", category), ("PATTERN", pattern))
        if v is not None
    ]
    if len(given) > 1:
        raise DataError("command_list(): give one of module, category, pattern")
    if given:
        return ("COMMAND", "LIST", "FILTERBY", *given[0]), None
    return ("COMMAND", "LIST"), None


def build_slaveof(host: str | None, port: int | None) -> Built:
    """``SLAVEOF host port``, or ``SLAVEOF NO ONE`` without them."""
    if host is None and port is None:
        return ("SLAVEOF", "NO", "ONE"), is_ok
    return ("SLAVEOF", host, port), is_ok  # type: ignore[return-value]


def build_module_loadex(
    path: str, options: Sequence[str] | None, args: Sequence[str] | None
) -> Built:
    """``MODULE LOADEX path [CONFIG name value ...] [ARGS arg ...]``: ``options`` is a flat
    ``[name, value, ...]``."""
    out: list[CommandArg] = ["MODULE", "LOADEX", path]
    items = list(options or ())
    if len(items) % 2:
        raise DataError("module_loadex(): options is a flat list of name, value pairs")
    for i in range(0, len(items), 2):
        out += ["CONFIG", items[i], items[i + 1]]
    if args:
        out += ["ARGS", *args]
    return tuple(out), None


def _many(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def build_acl_setuser(
    username: str,
    enabled: bool,
    nopass: bool,
    passwords: str | Iterable[str] | None,
    hashed_passwords: str | Iterable[str] | None,
    categories: Iterable[str] | None,
    commands: Iterable[str] | None,
    keys: Iterable[KeyT] | None,
    channels: Iterable[KeyT] | None,
    selectors: Iterable[tuple[str, KeyT]] | None,
    reset: bool,
    reset_keys: bool,
    reset_channels: bool,
    reset_passwords: bool,
) -> Built:
    """``ACL SETUSER username rule ...`` from redis-py's keywords: ``passwords`` are
    ``+pw``/``-pw`` rules, ``hashed_passwords`` ``+hash``/``-hash`` (sent as ``#``/``!``),
    ``categories`` and ``commands`` ``+@cat``/``-cmd``..., ``keys`` patterns (``~``),
    ``channels`` patterns (``&``), ``selectors`` ``(command, key)`` pairs."""
    args: list[CommandArg] = ["ACL", "SETUSER", username]
    if reset:
        args.append("reset")
    if reset_keys:
        args.append("resetkeys")
    if reset_channels:
        args.append("resetchannels")
    if reset_passwords:
        args.append("resetpass")
    args.append("on" if enabled else "off")
    if nopass:
        args.append("nopass")
    for pw in _many(passwords):
        if pw[:1] not in ("+", "-"):
            raise DataError("acl_setuser(): a password starts with + (add) or - (remove)")
        args.append((">" if pw[0] == "+" else "<") + pw[1:])
    for hashed in _many(hashed_passwords):
        if hashed[:1] not in ("+", "-"):
            raise DataError("acl_setuser(): a hashed password starts with + or -")
        args.append(("#" if hashed[0] == "+" else "!") + hashed[1:])
    args.extend(categories or ())
    args.extend(commands or ())
    for key in keys or ():
        args.append(b"~" + key if isinstance(key, bytes) else "~" + key)
    for channel in channels or ():
        args.append(b"&" + channel if isinstance(channel, bytes) else "&" + channel)
    for command, key in selectors or ():
        text = key.decode() if isinstance(key, bytes) else key
        args.append(f"({command} ~{text})")
    return tuple(args), is_ok
