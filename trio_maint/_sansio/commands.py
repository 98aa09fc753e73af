"""Typed command methods shared by :class:`~trio_maint.Redis` (where each returns an
awaitable of the reply) and :class:`~trio_maint.Pipeline` (where each queues the command
and returns the pipeline, for chaining).

Replies are RESP3 values as hiredis parses them: ``bytes`` (``str`` with
``decode_responses``), ``int``, ``float`` (RESP3 doubles such as ``ZSCORE``), ``None``,
``list`` and ``dict`` (RESP3 maps such as ``HGETALL``). Where a method says so, a small
callback turns the reply into something handier (``SET`` → ``bool``, ``INFO`` → ``dict``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from .errors import DataError
from .replies import (
    Callback,
    is_ok,
    parse_info,
    scan_reply,
    score_pairs,
    set_reply,
    to_bool,
)
from .resp import CommandArg
from .unset import UNSET, Unset

__all__ = ["CommandsMixin", "EncodableT", "KeyT"]

#: A key or channel name.
KeyT: TypeAlias = str | bytes
#: A value that can be sent as a command argument.
EncodableT: TypeAlias = str | bytes | memoryview | int | float

T = TypeVar("T")


def _pairs(mapping: Mapping[Any, Any]) -> list[Any]:
    items: list[Any] = []
    for k, v in mapping.items():
        items.append(k)
        items.append(v)
    return items


class CommandsMixin(Generic[T]):
    """Redis command methods; see the module docstring. ``T`` is what each method returns:
    an awaitable of the reply on a client, the pipeline itself on a pipeline.

    Every method raises :class:`~trio_maint.DataError` (when awaited, or when queued) for
    an argument that cannot be encoded, and the errors listed for
    :meth:`Redis.execute_command`.
    """

    def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | Literal[Unset.UNSET] | None = UNSET,
    ) -> T:
        raise NotImplementedError

    # ------------------------------------------------------------------ server

    def ping(self, message: EncodableT | None = None) -> T:
        """``PING`` → ``True`` (or the echoed ``message``)."""
        if message is None:
            return self._command(("PING",), lambda r: r in (b"PONG", "PONG"))
        return self._command(("PING", message))

    def echo(self, message: EncodableT) -> T:
        """``ECHO message`` → the message."""
        return self._command(("ECHO", message))

    def info(self, section: str | None = None) -> T:
        """``INFO [section]`` → ``dict`` (see :func:`parse_info`)."""
        args: tuple[CommandArg, ...] = ("INFO",) if section is None else ("INFO", section)
        return self._command(args, parse_info)

    def flushdb(self, asynchronous: bool = False) -> T:
        """``FLUSHDB [ASYNC]`` → ``True``: deletes every key of the selected database."""
        args: tuple[CommandArg, ...] = ("FLUSHDB", "ASYNC") if asynchronous else ("FLUSHDB",)
        return self._command(args, is_ok)

    def dbsize(self) -> T:
        """``DBSIZE`` → ``int``."""
        return self._command(("DBSIZE",))

    def time(self) -> T:
        """``TIME`` → ``(seconds, microseconds)`` as a tuple of ``int``."""
        return self._command(("TIME",), lambda r: (int(r[0]), int(r[1])))

    def client_id(self) -> T:
        """``CLIENT ID`` → ``int``, the server's id of this connection."""
        return self._command(("CLIENT", "ID"))

    def client_getname(self) -> T:
        """``CLIENT GETNAME`` → the connection's name or ``None``."""
        return self._command(("CLIENT", "GETNAME"))

    def publish(self, channel: KeyT, message: EncodableT) -> T:
        """``PUBLISH channel message`` → number of receivers (``int``)."""
        return self._command(("PUBLISH", channel, message))

    def spublish(self, channel: KeyT, message: EncodableT) -> T:
        """``SPUBLISH shardchannel message`` → number of receivers (``int``)."""
        return self._command(("SPUBLISH", channel, message))

    # -------------------------------------------------------- strings, counters

    def get(self, name: KeyT) -> T:
        """``GET name`` → the value or ``None``."""
        return self._command(("GET", name))

    def set(
        self,
        name: KeyT,
        value: EncodableT,
        *,
        ex: float | None = None,
        px: int | None = None,
        nx: bool = False,
        xx: bool = False,
        keepttl: bool = False,
        get: bool = False,
    ) -> T:
        """``SET name value [EX s | PX ms] [NX | XX] [KEEPTTL] [GET]``.

        :param ex: expiry in seconds (``float``; fractional seconds are sent as ``PX``).
        :returns: ``True`` when set; ``None`` when NX/XX prevented it; with ``get=True``
            the old value.
        :raises DataError: both ``nx`` and ``xx``, or both ``ex`` and ``px``.
        """
        args: list[CommandArg] = ["SET", name, value]
        if ex is not None and px is not None:
            raise DataError("set(): give ex or px, not both")
        if ex is not None:
            if float(ex).is_integer():
                args += ["EX", int(ex)]
            else:
                args += ["PX", int(ex * 1000)]
        if px is not None:
            args += ["PX", px]
        if nx and xx:
            raise DataError("set(): nx and xx are mutually exclusive")
        if nx:
            args.append("NX")
        if xx:
            args.append("XX")
        if keepttl:
            args.append("KEEPTTL")
        if get:
            args.append("GET")
            return self._command(tuple(args))
        return self._command(tuple(args), set_reply)

    def setnx(self, name: KeyT, value: EncodableT) -> T:
        """``SETNX name value`` → ``bool`` (True when set)."""
        return self._command(("SETNX", name, value), to_bool)

    def setex(self, name: KeyT, seconds: int, value: EncodableT) -> T:
        """``SETEX name seconds value`` → ``True``."""
        return self._command(("SETEX", name, seconds, value), is_ok)

    def getdel(self, name: KeyT) -> T:
        """``GETDEL name`` → the value or ``None``."""
        return self._command(("GETDEL", name))

    def getset(self, name: KeyT, value: EncodableT) -> T:
        """``SET name value GET`` → the old value or ``None``."""
        return self._command(("SET", name, value, "GET"))

    def mget(self, *names: KeyT) -> T:
        """``MGET name [name ...]`` → ``list`` of values (``None`` for missing keys)."""
        return self._command(("MGET", *names))

    def mset(self, mapping: Mapping[KeyT, EncodableT]) -> T:
        """``MSET k v [k v ...]`` → ``True``."""
        return self._command(("MSET", *_pairs(mapping)), is_ok)

    def msetnx(self, mapping: Mapping[KeyT, EncodableT]) -> T:
        """``MSETNX k v [k v ...]`` → ``bool`` (True when every key was set)."""
        return self._command(("MSETNX", *_pairs(mapping)), to_bool)

    def append(self, name: KeyT, value: EncodableT) -> T:
        """``APPEND name value`` → new length (``int``)."""
        return self._command(("APPEND", name, value))

    def strlen(self, name: KeyT) -> T:
        """``STRLEN name`` → ``int``."""
        return self._command(("STRLEN", name))

    def getrange(self, name: KeyT, start: int, end: int) -> T:
        """``GETRANGE name start end`` → the substring."""
        return self._command(("GETRANGE", name, start, end))

    def setrange(self, name: KeyT, offset: int, value: EncodableT) -> T:
        """``SETRANGE name offset value`` → new length (``int``)."""
        return self._command(("SETRANGE", name, offset, value))

    def incr(self, name: KeyT, amount: int = 1) -> T:
        """``INCRBY name amount`` → the new value (``int``)."""
        return self._command(("INCRBY", name, amount))

    incrby = incr

    def decr(self, name: KeyT, amount: int = 1) -> T:
        """``DECRBY name amount`` → the new value (``int``)."""
        return self._command(("DECRBY", name, amount))

    decrby = decr

    def incrbyfloat(self, name: KeyT, amount: float = 1.0) -> T:
        """``INCRBYFLOAT name amount`` → the new value (``float``)."""
        return self._command(("INCRBYFLOAT", name, amount), float)

    # ------------------------------------------------------------ keys, expiry

    def delete(self, *names: KeyT) -> T:
        """``DEL name [name ...]`` → number of keys removed (``int``)."""
        return self._command(("DEL", *names))

    def unlink(self, *names: KeyT) -> T:
        """``UNLINK name [name ...]`` → number of keys removed (``int``)."""
        return self._command(("UNLINK", *names))

    def exists(self, *names: KeyT) -> T:
        """``EXISTS name [name ...]`` → how many of the keys exist (``int``)."""
        return self._command(("EXISTS", *names))

    def touch(self, *names: KeyT) -> T:
        """``TOUCH name [name ...]`` → ``int``."""
        return self._command(("TOUCH", *names))

    def type(self, name: KeyT) -> T:
        """``TYPE name`` → the type's name (``b"string"``, ``b"none"``, ...)."""
        return self._command(("TYPE", name))

    def rename(self, src: KeyT, dst: KeyT) -> T:
        """``RENAME src dst`` → ``True``."""
        return self._command(("RENAME", src, dst), is_ok)

    def renamenx(self, src: KeyT, dst: KeyT) -> T:
        """``RENAMENX src dst`` → ``bool``."""
        return self._command(("RENAMENX", src, dst), to_bool)

    def keys(self, pattern: KeyT = "*") -> T:
        """``KEYS pattern`` → ``list`` (blocks the server on big databases; prefer
        ``scan_iter``)."""
        return self._command(("KEYS", pattern))

    def scan(
        self,
        cursor: int = 0,
        *,
        match: KeyT | None = None,
        count: int | None = None,
        type: str | None = None,
    ) -> T:
        """``SCAN cursor [MATCH p] [COUNT n] [TYPE t]`` → ``(next_cursor: int, keys: list)``."""
        args: list[CommandArg] = ["SCAN", cursor]
        if match is not None:
            args += ["MATCH", match]
        if count is not None:
            args += ["COUNT", count]
        if type is not None:
            args += ["TYPE", type]
        return self._command(tuple(args), scan_reply)

    def expire(self, name: KeyT, seconds: int) -> T:
        """``EXPIRE name seconds`` → ``bool`` (False when the key does not exist)."""
        return self._command(("EXPIRE", name, seconds), to_bool)

    def pexpire(self, name: KeyT, milliseconds: int) -> T:
        """``PEXPIRE name ms`` → ``bool``."""
        return self._command(("PEXPIRE", name, milliseconds), to_bool)

    def expireat(self, name: KeyT, when: int) -> T:
        """``EXPIREAT name unix_seconds`` → ``bool``."""
        return self._command(("EXPIREAT", name, when), to_bool)

    def persist(self, name: KeyT) -> T:
        """``PERSIST name`` → ``bool``."""
        return self._command(("PERSIST", name), to_bool)

    def ttl(self, name: KeyT) -> T:
        """``TTL name`` → seconds (``int``); -1 without expiry, -2 when missing."""
        return self._command(("TTL", name))

    def pttl(self, name: KeyT) -> T:
        """``PTTL name`` → milliseconds (``int``); -1 without expiry, -2 when missing."""
        return self._command(("PTTL", name))

    # ------------------------------------------------------------------ hashes

    def hset(
        self,
        name: KeyT,
        key: KeyT | None = None,
        value: EncodableT | None = None,
        mapping: Mapping[KeyT, EncodableT] | None = None,
    ) -> T:
        """``HSET name field value [field value ...]`` → number of new fields (``int``).

        :raises DataError: neither ``key``/``value`` nor ``mapping`` given.
        """
        items: list[Any] = []
        if key is not None:
            items += [key, value]
        if mapping:
            items += _pairs(mapping)
        if not items:
            raise DataError("hset() needs key and value, or mapping")
        return self._command(("HSET", name, *items))

    def hsetnx(self, name: KeyT, key: KeyT, value: EncodableT) -> T:
        """``HSETNX name field value`` → ``bool``."""
        return self._command(("HSETNX", name, key, value), to_bool)

    def hget(self, name: KeyT, key: KeyT) -> T:
        """``HGET name field`` → the value or ``None``."""
        return self._command(("HGET", name, key))

    def hmget(self, name: KeyT, *keys: KeyT) -> T:
        """``HMGET name field [field ...]`` → ``list``."""
        return self._command(("HMGET", name, *keys))

    def hgetall(self, name: KeyT) -> T:
        """``HGETALL name`` → ``dict`` (a RESP3 map)."""
        return self._command(("HGETALL", name))

    def hdel(self, name: KeyT, *keys: KeyT) -> T:
        """``HDEL name field [field ...]`` → number removed (``int``)."""
        return self._command(("HDEL", name, *keys))

    def hexists(self, name: KeyT, key: KeyT) -> T:
        """``HEXISTS name field`` → ``bool``."""
        return self._command(("HEXISTS", name, key), to_bool)

    def hincrby(self, name: KeyT, key: KeyT, amount: int = 1) -> T:
        """``HINCRBY name field amount`` → ``int``."""
        return self._command(("HINCRBY", name, key, amount))

    def hincrbyfloat(self, name: KeyT, key: KeyT, amount: float = 1.0) -> T:
        """``HINCRBYFLOAT name field amount`` → ``float``."""
        return self._command(("HINCRBYFLOAT", name, key, amount), float)

    def hkeys(self, name: KeyT) -> T:
        """``HKEYS name`` → ``list``."""
        return self._command(("HKEYS", name))

    def hvals(self, name: KeyT) -> T:
        """``HVALS name`` → ``list``."""
        return self._command(("HVALS", name))

    def hlen(self, name: KeyT) -> T:
        """``HLEN name`` → ``int``."""
        return self._command(("HLEN", name))

    # ------------------------------------------------------------------- lists

    def lpush(self, name: KeyT, *values: EncodableT) -> T:
        """``LPUSH name value [value ...]`` → new length (``int``)."""
        return self._command(("LPUSH", name, *values))

    def rpush(self, name: KeyT, *values: EncodableT) -> T:
        """``RPUSH name value [value ...]`` → new length (``int``)."""
        return self._command(("RPUSH", name, *values))

    def lpop(self, name: KeyT, count: int | None = None) -> T:
        """``LPOP name [count]`` → a value (or ``list`` with ``count``), ``None`` if empty."""
        args: tuple[CommandArg, ...] = ("LPOP", name) if count is None else ("LPOP", name, count)
        return self._command(args)

    def rpop(self, name: KeyT, count: int | None = None) -> T:
        """``RPOP name [count]`` → a value (or ``list`` with ``count``), ``None`` if empty."""
        args: tuple[CommandArg, ...] = ("RPOP", name) if count is None else ("RPOP", name, count)
        return self._command(args)

    def lrange(self, name: KeyT, start: int, end: int) -> T:
        """``LRANGE name start end`` → ``list``."""
        return self._command(("LRANGE", name, start, end))

    def llen(self, name: KeyT) -> T:
        """``LLEN name`` → ``int``."""
        return self._command(("LLEN", name))

    def lindex(self, name: KeyT, index: int) -> T:
        """``LINDEX name index`` → the value or ``None``."""
        return self._command(("LINDEX", name, index))

    def lset(self, name: KeyT, index: int, value: EncodableT) -> T:
        """``LSET name index value`` → ``True``."""
        return self._command(("LSET", name, index, value), is_ok)

    def lrem(self, name: KeyT, count: int, value: EncodableT) -> T:
        """``LREM name count value`` → number removed (``int``)."""
        return self._command(("LREM", name, count, value))

    def ltrim(self, name: KeyT, start: int, end: int) -> T:
        """``LTRIM name start end`` → ``True``."""
        return self._command(("LTRIM", name, start, end), is_ok)

    def lmove(self, src: KeyT, dst: KeyT, src_side: str = "LEFT", dst_side: str = "RIGHT") -> T:
        """``LMOVE src dst LEFT|RIGHT LEFT|RIGHT`` → the moved value or ``None``."""
        return self._command(("LMOVE", src, dst, src_side, dst_side))

    def _blocking_timeout(self, timeout: float) -> float | None:
        raise NotImplementedError

    def blpop(self, keys: KeyT | Iterable[KeyT], timeout: float = 0) -> T:
        """``BLPOP key [key ...] timeout`` → ``[key, value]`` or ``None`` on timeout.

        :param timeout: seconds (``float``) the server waits; 0 waits forever (and so does
            the client: no socket timeout applies). Otherwise the client waits ``timeout``
            plus its socket timeout.
        """
        names = [keys] if isinstance(keys, str | bytes) else list(keys)
        return self._command(("BLPOP", *names, timeout), timeout=self._blocking_timeout(timeout))

    def brpop(self, keys: KeyT | Iterable[KeyT], timeout: float = 0) -> T:
        """``BRPOP key [key ...] timeout`` → ``[key, value]`` or ``None`` (see
        :meth:`blpop` for ``timeout``)."""
        names = [keys] if isinstance(keys, str | bytes) else list(keys)
        return self._command(("BRPOP", *names, timeout), timeout=self._blocking_timeout(timeout))

    def blmove(
        self,
        src: KeyT,
        dst: KeyT,
        timeout: float = 0,
        src_side: str = "LEFT",
        dst_side: str = "RIGHT",
    ) -> T:
        """``BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout`` → the value or ``None`` (see
        :meth:`blpop` for ``timeout``)."""
        return self._command(
            ("BLMOVE", src, dst, src_side, dst_side, timeout),
            timeout=self._blocking_timeout(timeout),
        )

    # -------------------------------------------------------------------- sets

    def sadd(self, name: KeyT, *values: EncodableT) -> T:
        """``SADD name member [member ...]`` → number added (``int``)."""
        return self._command(("SADD", name, *values))

    def srem(self, name: KeyT, *values: EncodableT) -> T:
        """``SREM name member [member ...]`` → number removed (``int``)."""
        return self._command(("SREM", name, *values))

    def smembers(self, name: KeyT) -> T:
        """``SMEMBERS name`` → ``set`` of members."""
        return self._command(("SMEMBERS", name), set)

    def sismember(self, name: KeyT, value: EncodableT) -> T:
        """``SISMEMBER name member`` → ``bool``."""
        return self._command(("SISMEMBER", name, value), to_bool)

    def smismember(self, name: KeyT, *values: EncodableT) -> T:
        """``SMISMEMBER name member [member ...]`` → ``list`` of ``bool``."""
        return self._command(("SMISMEMBER", name, *values), lambda r: [bool(x) for x in r])

    def scard(self, name: KeyT) -> T:
        """``SCARD name`` → ``int``."""
        return self._command(("SCARD", name))

    def spop(self, name: KeyT, count: int | None = None) -> T:
        """``SPOP name [count]`` → a member (or ``list`` with ``count``) or ``None``."""
        args: tuple[CommandArg, ...] = ("SPOP", name) if count is None else ("SPOP", name, count)
        return self._command(args)

    def srandmember(self, name: KeyT, count: int | None = None) -> T:
        """``SRANDMEMBER name [count]`` → a member (or ``list`` with ``count``)."""
        args: tuple[CommandArg, ...] = (
            ("SRANDMEMBER", name) if count is None else ("SRANDMEMBER", name, count)
        )
        return self._command(args)

    def sinter(self, *names: KeyT) -> T:
        """``SINTER key [key ...]`` → ``set``."""
        return self._command(("SINTER", *names), set)

    def sunion(self, *names: KeyT) -> T:
        """``SUNION key [key ...]`` → ``set``."""
        return self._command(("SUNION", *names), set)

    def sdiff(self, *names: KeyT) -> T:
        """``SDIFF key [key ...]`` → ``set``."""
        return self._command(("SDIFF", *names), set)

    # ------------------------------------------------------------- sorted sets

    def zadd(
        self,
        name: KeyT,
        mapping: Mapping[EncodableT, float],
        *,
        nx: bool = False,
        xx: bool = False,
        gt: bool = False,
        lt: bool = False,
        ch: bool = False,
    ) -> T:
        """``ZADD name [NX|XX] [GT|LT] [CH] score member ...`` with ``mapping`` of
        member → score → number added (or changed with ``ch``) (``int``).

        :raises DataError: an empty mapping, or both ``nx`` and ``xx``.
        """
        if not mapping:
            raise DataError("zadd() needs at least one member")
        if nx and xx:
            raise DataError("zadd(): nx and xx are mutually exclusive")
        args: list[CommandArg] = ["ZADD", name]
        for flag, on in (("NX", nx), ("XX", xx), ("GT", gt), ("LT", lt), ("CH", ch)):
            if on:
                args.append(flag)
        for member, score in mapping.items():
            args += [score, member]
        return self._command(tuple(args))

    def zrem(self, name: KeyT, *members: EncodableT) -> T:
        """``ZREM name member [member ...]`` → number removed (``int``)."""
        return self._command(("ZREM", name, *members))

    def zscore(self, name: KeyT, member: EncodableT) -> T:
        """``ZSCORE name member`` → ``float`` or ``None``."""
        return self._command(("ZSCORE", name, member))

    def zincrby(self, name: KeyT, amount: float, member: EncodableT) -> T:
        """``ZINCRBY name amount member`` → the new score (``float``)."""
        return self._command(("ZINCRBY", name, amount, member))

    def zcard(self, name: KeyT) -> T:
        """``ZCARD name`` → ``int``."""
        return self._command(("ZCARD", name))

    def zcount(self, name: KeyT, min: float | str, max: float | str) -> T:
        """``ZCOUNT name min max`` → ``int`` (``min``/``max`` may be ``"-inf"``,
        ``"(1"``, ...)."""
        return self._command(("ZCOUNT", name, min, max))

    def zrank(self, name: KeyT, member: EncodableT) -> T:
        """``ZRANK name member`` → ``int`` or ``None``."""
        return self._command(("ZRANK", name, member))

    def zrevrank(self, name: KeyT, member: EncodableT) -> T:
        """``ZREVRANK name member`` → ``int`` or ``None``."""
        return self._command(("ZREVRANK", name, member))

    def zrange(
        self, name: KeyT, start: int, end: int, *, desc: bool = False, withscores: bool = False
    ) -> T:
        """``ZRANGE name start end [REV] [WITHSCORES]`` → ``list`` of members, or of
        ``(member, score: float)`` tuples with ``withscores``."""
        args: list[CommandArg] = ["ZRANGE", name, start, end]
        if desc:
            args.append("REV")
        if withscores:
            args.append("WITHSCORES")
            return self._command(tuple(args), score_pairs)
        return self._command(tuple(args))

    def zrangebyscore(
        self, name: KeyT, min: float | str, max: float | str, *, withscores: bool = False
    ) -> T:
        """``ZRANGE name min max BYSCORE [WITHSCORES]`` → as :meth:`zrange`."""
        args: list[CommandArg] = ["ZRANGE", name, min, max, "BYSCORE"]
        if withscores:
            args.append("WITHSCORES")
            return self._command(tuple(args), score_pairs)
        return self._command(tuple(args))

    def zpopmin(self, name: KeyT, count: int | None = None) -> T:
        """``ZPOPMIN name [count]`` → ``list`` of ``(member, score)`` tuples."""
        args: tuple[CommandArg, ...] = (
            ("ZPOPMIN", name) if count is None else ("ZPOPMIN", name, count)
        )
        return self._command(args, score_pairs)

    def zpopmax(self, name: KeyT, count: int | None = None) -> T:
        """``ZPOPMAX name [count]`` → ``list`` of ``(member, score)`` tuples."""
        args: tuple[CommandArg, ...] = (
            ("ZPOPMAX", name) if count is None else ("ZPOPMAX", name, count)
        )
        return self._command(args, score_pairs)

    def bzpopmin(self, keys: KeyT | Iterable[KeyT], timeout: float = 0) -> T:
        """``BZPOPMIN key [key ...] timeout`` → ``[key, member, score]`` or ``None`` (see
        :meth:`blpop` for ``timeout``)."""
        names = [keys] if isinstance(keys, str | bytes) else list(keys)
        return self._command(("BZPOPMIN", *names, timeout), timeout=self._blocking_timeout(timeout))
