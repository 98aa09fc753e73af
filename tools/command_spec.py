"""The hand-kept half of the command surface (read by ``tools/gen_commands.py``).

For each command (``COMMAND DOCS`` name, subcommands as ``container|sub``) that needs more
than the generator derives from the server's argument table:

* ``sig``: the Python parameters in a short notation: ``name:T`` (``T`` a letter of
  ``TYPE_LETTERS`` in the generator, or a Python type), ``name:T=default`` (``=None``
  makes the type optional), ``*name:T`` (varargs), ``@name:T`` (redis-py's "one or a
  list, then more": ``name: T | Iterable[T], *args: T``), ``*`` (keyword-only after it).
  Names and order are redis-py's where redis-py has the method.
* ``emit``: the command's arguments, space-separated: ``WORD`` (a literal), ``name`` (a
  parameter; ``name~fn`` converted with ``fn``), ``*name``, ``@name``, ``%name`` (a
  mapping flattened), ``#name`` (its length, then its items), ``TOKEN?name`` (the token
  and the value when it is not ``None``; ``?name`` the value alone; ``TOKEN?a,b`` both when
  ``a`` is not ``None``), ``TOKEN!flag`` (the token when true), ``TOKEN*name`` (the token
  and the items when not empty). Omitted: the command's words then every parameter.
* ``builder``: a hand-written function of ``trio_maint/_sansio/cmds/build_*.py`` called
  with every parameter, returning ``(args, callback)``.
* ``reply``: the reply's type (after the callback); ``callback``: a function of
  ``replies``/``cmds.callbacks``/``streams`` (or a builtin) applied to the raw reply.
* ``blocking``: the parameter holding the command's own timeout (seconds; ``ms:name`` in
  milliseconds, ``None`` when it does not block): the reply wait then follows
  ``_blocking_timeout``.
* ``method``: the method name when it is not the command's (``del`` → ``delete``).

``EXCLUDED`` lists the commands that are not methods, each with its reason, and
``COMPAT`` the deliberate differences from redis-py's keyword names.
"""

from __future__ import annotations

from dataclasses import dataclass

REPLY_SHORT = {
    "V": "Value",
    "V?": "Value | None",
    "i": "int",
    "i?": "int | None",
    "b": "bool",
    "f": "float",
    "f?": "float | None",
    "lV": "list[Value]",
    "lV?": "list[Value | None]",
    "li": "list[int]",
    "lb": "list[bool]",
    "l": "list[Any]",
    "d": "dict[Any, Any]",
    "dV": "dict[Value, Value]",
    "sV": "set[Value]",
    "a": "Any",
}


@dataclass(frozen=True)
class Cmd:
    """One method's hand-kept description (see the module docstring)."""

    sig: str | None = None
    emit: str | None = None
    reply: str = "Any"
    callback: str | None = None
    builder: str | None = None
    blocking: str | None = None
    method: str | None = None
    note: str | None = None
    command: str | None = None  # for EXTRAS: the command the method sends


def c(
    sig: str | None = None,
    emit: str | None = None,
    r: str = "a",
    cb: str | None = None,
    **kw: str,
) -> Cmd:
    """A :class:`Cmd` with the reply type given by its short name (``REPLY_SHORT``)."""
    return Cmd(sig, emit, REPLY_SHORT.get(r, r), cb, **kw)


OK = {"r": "b", "cb": "is_ok"}
#: Why a few methods answer bool where redis-py passes the server's 0/1 through.
KEPT_BOOL = (
    "bool, as this method answered before the generated surface (redis-py: the 0/1"
    " integer, which compares equal)."
)
BOOL = {"r": "b", "cb": "to_bool"}
EXPIRY_FLAGS = "nx:B=False, xx:B=False, gt:B=False, lt:B=False"
EXPIRY_EMIT = "NX!nx XX!xx GT!gt LT!lt"

REPLIES_CALLBACKS = {"is_ok", "to_bool", "parse_info", "scan_reply", "set_reply", "score_pairs"}
BUILTIN_CALLBACKS = {"set", "float", "int", "bool"}
STREAM_CALLBACKS = {
    "parse_entries",
    "parse_xread",
    "parse_xpending",
    "parse_xpending_range",
    "parse_xinfo_groups",
    "parse_xinfo_consumers",
}


def callback_module(name: str) -> str:
    if name in REPLIES_CALLBACKS:
        return "..replies"
    if name in STREAM_CALLBACKS:
        return "..streams"
    return ".callbacks"


Z_BUILDERS = {
    "build_bzmpop",
    "build_bzpopmax",
    "build_bzpopmin",
    "build_xadd",
    "build_xread",
    "build_xreadgroup",
    "build_xautoclaim",
    "build_xclaim",
    "build_xinfo_stream",
    "build_xtrim",
    "build_zadd",
    "build_zinter",
    "build_zinterstore",
    "build_zmpop",
    "build_zrange",
    "build_zrangebyscore",
    "build_zrangestore",
    "build_zrank",
    "build_zrevrank",
    "build_zrevrange",
    "build_zrevrangebyscore",
    "build_zscan",
    "build_zunion",
    "build_zunionstore",
}


def builder_module(name: str) -> str:
    if name.startswith("build_geo"):
        return ".builders_geo"
    return ".builders_z" if name in Z_BUILDERS else ".builders"


COMMANDS: dict[str, Cmd] = {
    # ------------------------------------------------------------------ strings
    "append": c("key:K, value:V", r="i"),
    "decr": c("name:K, amount:I=1", "DECRBY name amount", r="i"),
    "decrby": c("name:K, amount:I=1", r="i"),
    "get": c("name:K", r="V?"),
    "getdel": c("name:K", r="V?"),
    "getex": c(
        "name:K, ex:E=None, px:E=None, exat:A=None, pxat:A=None, persist:B=False",
        "GETEX name EX?ex~secs PX?px~msecs EXAT?exat~unix_secs PXAT?pxat~unix_msecs"
        " PERSIST!persist",
        r="V?",
    ),
    "getrange": c("key:K, start:I, end:I", r="V"),
    "getset": c("name:K, value:V", r="V?"),
    "incr": c("name:K, amount:I=1", "INCRBY name amount", r="i"),
    "incrby": c("name:K, amount:I=1", r="i"),
    "incrbyfloat": c("name:K, amount:D=1.0", r="f", cb="float"),
    "lcs": c(
        "key1:K, key2:K, len:B=False, idx:B=False, minmatchlen:I=None, withmatchlen:B=False",
        "LCS key1 key2 LEN!len IDX!idx MINMATCHLEN?minmatchlen WITHMATCHLEN!withmatchlen",
    ),
    "mget": c("@keys:K", r="lV?"),
    "mset": c("mapping:Mapping[KeyT, EncodableT]", "MSET %mapping", **OK),
    "msetnx": c("mapping:Mapping[KeyT, EncodableT]", "MSETNX %mapping", **BOOL),
    "psetex": c("name:K, time_ms:E, value:V", "PSETEX name time_ms~msecs value", **OK),
    "set": c(
        "name:K, value:V, ex:E=None, px:E=None, nx:B=False, xx:B=False, keepttl:B=False,"
        " get:B=False, exat:A=None, pxat:A=None",
        builder="build_set",
        r="bool | Value | None",
        note="True when set; None when NX/XX prevented it; the old value with get=True.",
    ),
    "setex": c("name:K, time:E, value:V", "SETEX name time~secs value", **OK),
    "setnx": c("name:K, value:V", **BOOL),
    "setrange": c("name:K, offset:I, value:V", r="i"),
    "strlen": c("name:K", r="i"),
    "substr": c("name:K, start:I, end:I=-1", r="V"),
    # ------------------------------------------------------------------ bitmaps
    "bitcount": c(
        "key:K, start:I=None, end:I=None, mode:S=None", "BITCOUNT key ?start,end ?mode", r="i"
    ),
    "bitfield": c(
        "key:K, *args:V, default_overflow:S=None",
        "BITFIELD key OVERFLOW?default_overflow *args",
        r="list[int | None]",
        note="The operations are given as the server takes them (GET/SET/INCRBY ...).",
    ),
    "bitfield_ro": c(
        "key:K, encoding:S, offset:I, items:Sequence[tuple[str, int]]=None",
        builder="build_bitfield_ro",
        r="li",
    ),
    "bitop": c("operation:S, dest:K, *keys:K", r="i"),
    "bitpos": c(
        "key:K, bit:I, start:I=None, end:I=None, mode:S=None",
        "BITPOS key bit ?start ?end ?mode",
        r="i",
    ),
    "getbit": c("name:K, offset:I", r="i"),
    "setbit": c("name:K, offset:I, value:I", r="i"),
    # -------------------------------------------------------------------- keys
    "copy": c(
        "source:K, destination:K, destination_db:I=None, replace:B=False",
        "COPY source destination DB?destination_db REPLACE!replace",
        **BOOL,
    ),
    "del": c("*names:K", "DEL *names", method="delete", r="i"),
    "dump": c("name:K", r="bytes | None"),
    "exists": c("*names:K", r="i"),
    "expire": c(
        f"name:K, time:E=None, {EXPIRY_FLAGS}, *, seconds:E=None",
        builder="build_expire",
        note="``seconds=`` is the older name of ``time``.",
        **BOOL,
    ),
    "expireat": c(
        f"name:K, when:A, {EXPIRY_FLAGS}", f"EXPIREAT name when~unix_secs {EXPIRY_EMIT}", **BOOL
    ),
    "expiretime": c("key:K", r="i"),
    "keys": c("pattern:K='*'", "KEYS pattern", r="lV"),
    "migrate": c(
        "host:S, port:I, keys:KeyT | Sequence[KeyT], destination_db:I, timeout:I,"
        " copy:B=False, replace:B=False, auth:S=None",
        builder="build_migrate",
        r="V",
    ),
    "move": c("name:K, db:I", **BOOL),
    "object|encoding": c("name:K", r="V?"),
    "object|freq": c("name:K", r="i"),
    "object|idletime": c("name:K", r="i"),
    "object|refcount": c("name:K", r="i"),
    "persist": c("name:K", **BOOL),
    "pexpire": c(
        f"name:K, time:E=None, {EXPIRY_FLAGS}, *, milliseconds:E=None",
        builder="build_pexpire",
        note="``milliseconds=`` is the older name of ``time``.",
        **BOOL,
    ),
    "pexpireat": c(
        f"name:K, when:A, {EXPIRY_FLAGS}", f"PEXPIREAT name when~unix_msecs {EXPIRY_EMIT}", **BOOL
    ),
    "pexpiretime": c("key:K", r="i"),
    "pttl": c("name:K", r="i"),
    "randomkey": c("", r="V?"),
    "rename": c("src:K, dst:K", **OK),
    "renamenx": c("src:K, dst:K", **BOOL),
    "restore": c(
        "name:K, ttl:I, value:bytes, replace:B=False, absttl:B=False, idletime:I=None,"
        " frequency:I=None",
        "RESTORE name ttl value REPLACE!replace ABSTTL!absttl IDLETIME?idletime FREQ?frequency",
        r="V",
    ),
    "scan": c(
        "cursor:I=0, match:V=None, count:I=None, _type:S=None, *, type:S=None",
        builder="build_scan",
        r="tuple[int, list[Value]]",
        note="``type=`` is accepted as well as redis-py's ``_type=``.",
    ),
    "sort": c(
        "name:K, start:I=None, num:I=None, by:V=None, get:EncodableT | Sequence[EncodableT]=None,"
        " desc:B=False, alpha:B=False, store:K=None, groups:B=False",
        builder="build_sort",
        r="list[Any] | int",
    ),
    "sort_ro": c(
        "key:K, start:I=None, num:I=None, by:V=None, get:EncodableT | Sequence[EncodableT]=None,"
        " desc:B=False, alpha:B=False",
        builder="build_sort_ro",
        r="l",
    ),
    "touch": c("*args:K", "TOUCH *args", r="i"),
    "ttl": c("name:K", r="i"),
    "type": c("name:K", r="V"),
    "unlink": c("*names:K", r="i"),
    "wait": c(
        "num_replicas:I, timeout:I", "WAIT num_replicas timeout", r="i", blocking="ms:timeout"
    ),
    # ------------------------------------------------------------------ hashes
    "hdel": c("name:K, *keys:F", r="i"),
    "hexists": c("name:K, key:F", **BOOL),
    "hget": c("name:K, key:F", r="V?"),
    "hgetall": c("name:K", r="dV"),
    "hincrby": c("name:K, key:F, amount:I=1", r="i"),
    "hincrbyfloat": c("name:K, key:F, amount:D=1.0", r="f", cb="float"),
    "hkeys": c("name:K", r="lV"),
    "hlen": c("name:K", r="i"),
    "hmget": c("name:K, @keys:F", "HMGET name @keys", r="lV?"),
    "hmset": c("name:K, mapping:Mapping[FieldT, EncodableT]", "HMSET name %mapping", **OK),
    "hrandfield": c(
        "key:K, count:I=None, withvalues:B=False", "HRANDFIELD key ?count WITHVALUES!withvalues"
    ),
    "hscan": c(
        "name:K, cursor:I=0, match:V=None, count:I=None, no_values:B=False",
        builder="build_hscan",
        r="tuple[int, dict[Value, Value]]",
    ),
    "hset": c(
        "name:K, key:F=None, value:V=None, mapping:Mapping[FieldT, EncodableT]=None,"
        " items:Sequence[EncodableT]=None",
        builder="build_hset",
        r="i",
    ),
    "hsetnx": c("name:K, key:F, value:V", note=KEPT_BOOL, **BOOL),
    "hstrlen": c("name:K, key:F", r="i"),
    "hvals": c("name:K", r="lV"),
    # ------------------------------------------------------------------- lists
    "blmove": c(
        "first_list:K, second_list:K, timeout:D=0, src:S='LEFT', dest:S='RIGHT'",
        "BLMOVE first_list second_list src dest timeout",
        r="V?",
        blocking="timeout",
    ),
    "blmpop": c(
        "timeout:D, numkeys:I, *args:K, direction:S, count:I=1",
        "BLMPOP timeout numkeys *args direction COUNT?count",
        r="list[Any] | None",
        blocking="timeout",
    ),
    "blpop": c(
        "keys:KeyT | Iterable[KeyT], timeout:D=0",
        builder="build_blpop",
        r="list[Value] | None",
        blocking="timeout",
    ),
    "brpop": c(
        "keys:KeyT | Iterable[KeyT], timeout:D=0",
        builder="build_brpop",
        r="list[Value] | None",
        blocking="timeout",
    ),
    "brpoplpush": c("src:K, dst:K, timeout:D=0", r="V?", blocking="timeout"),
    "lindex": c("name:K, index:I", r="V?"),
    "linsert": c("name:K, where:S, refvalue:V, value:V", r="i"),
    "llen": c("name:K", r="i"),
    "lmove": c(
        "first_list:K, second_list:K, src:S='LEFT', dest:S='RIGHT'",
        "LMOVE first_list second_list src dest",
        r="V?",
    ),
    "lmpop": c(
        "num_keys:I, *args:K, direction:S, count:I=1",
        "LMPOP num_keys *args direction COUNT?count",
        r="list[Any] | None",
    ),
    "lpop": c("name:K, count:I=None", r="Value | list[Value] | None"),
    "lpos": c(
        "name:K, value:V, rank:I=None, count:I=None, maxlen:I=None",
        "LPOS name value RANK?rank COUNT?count MAXLEN?maxlen",
        r="int | list[int] | None",
    ),
    "lpush": c("name:K, *values:V", r="i"),
    "lpushx": c("name:K, *values:V", r="i"),
    "lrange": c("name:K, start:I, end:I", r="lV"),
    "lrem": c("name:K, count:I, value:V", r="i"),
    "lset": c("name:K, index:I, value:V", **OK),
    "ltrim": c("name:K, start:I, end:I", **OK),
    "rpop": c("name:K, count:I=None", r="Value | list[Value] | None"),
    "rpoplpush": c("src:K, dst:K", r="V?"),
    "rpush": c("name:K, *values:V", r="i"),
    "rpushx": c("name:K, *values:V", r="i"),
    # -------------------------------------------------------------------- sets
    "sadd": c("name:K, *values:F", r="i"),
    "scard": c("name:K", r="i"),
    "sdiff": c("@keys:K", r="sV", cb="set"),
    "sdiffstore": c("dest:K, @keys:K", r="i"),
    "sinter": c("@keys:K", r="sV", cb="set"),
    "sintercard": c(
        "numkeys:I, keys:Sequence[KeyT], limit:I=0", "SINTERCARD numkeys *keys LIMIT?limit", r="i"
    ),
    "sinterstore": c("dest:K, @keys:K", r="i"),
    "sismember": c("name:K, value:F", note=KEPT_BOOL, **BOOL),
    "smembers": c("name:K", r="sV", cb="set"),
    "smismember": c(
        "name:K, @values:F", "SMISMEMBER name @values", r="lb", cb="bool_list", note=KEPT_BOOL
    ),
    "smove": c("src:K, dst:K, value:F", **BOOL),
    "spop": c("name:K, count:I=None", r="Value | list[Value] | None"),
    "srandmember": c("name:K, number:I=None", r="Value | list[Value] | None"),
    "srem": c("name:K, *values:F", r="i"),
    "sscan": c(
        "name:K, cursor:I=0, match:V=None, count:I=None",
        builder="build_sscan",
        r="tuple[int, list[Value]]",
    ),
    "sunion": c("@keys:K", r="sV", cb="set"),
    "sunionstore": c("dest:K, @keys:K", r="i"),
    # ------------------------------------------------------------- sorted sets
    "bzmpop": c(
        "timeout:D, numkeys:I, keys:Sequence[KeyT], min:B=False, max:B=False, count:I=1",
        builder="build_bzmpop",
        r="list[Any] | None",
        blocking="timeout",
    ),
    "bzpopmax": c(
        "keys:KeyT | Iterable[KeyT], timeout:D=0",
        builder="build_bzpopmax",
        r="list[Any] | None",
        blocking="timeout",
    ),
    "bzpopmin": c(
        "keys:KeyT | Iterable[KeyT], timeout:D=0",
        builder="build_bzpopmin",
        r="list[Any] | None",
        blocking="timeout",
    ),
    "zadd": c(
        "name:K, mapping:Mapping[FieldT, ScoreT], nx:B=False, xx:B=False, ch:B=False,"
        " incr:B=False, gt:B=False, lt:B=False",
        builder="build_zadd",
        r="int | float | None",
        note="With incr=True: the member's new score (None when NX/XX prevented it).",
    ),
    "zcard": c("name:K", r="i"),
    "zcount": c("name:K, min:N, max:N", r="i"),
    "zdiff": c(
        "keys:Sequence[KeyT], withscores:B=False", "ZDIFF #keys WITHSCORES!withscores", r="l"
    ),
    "zdiffstore": c("dest:K, keys:Sequence[KeyT]", "ZDIFFSTORE dest #keys", r="i"),
    "zincrby": c("name:K, amount:D, value:F", r="f"),
    "zinter": c(
        "keys:Sequence[KeyT] | Mapping[KeyT, float], aggregate:S=None, withscores:B=False",
        builder="build_zinter",
        r="l",
    ),
    "zintercard": c(
        "numkeys:I, keys:Sequence[KeyT], limit:I=0", "ZINTERCARD numkeys *keys LIMIT?limit", r="i"
    ),
    "zinterstore": c(
        "dest:K, keys:Sequence[KeyT] | Mapping[KeyT, float], aggregate:S=None",
        builder="build_zinterstore",
        r="i",
    ),
    "zlexcount": c("name:K, min:V, max:V", r="i"),
    "zmpop": c(
        "num_keys:I, keys:Sequence[KeyT], min:B=False, max:B=False, count:I=1",
        builder="build_zmpop",
        r="list[Any] | None",
    ),
    "zmscore": c("key:K, members:Sequence[FieldT]", "ZMSCORE key *members", r="list[float | None]"),
    "zpopmax": c("name:K, count:I=None", r="l"),
    "zpopmin": c("name:K, count:I=None", r="l"),
    "zrandmember": c(
        "key:K, count:I=None, withscores:B=False", "ZRANDMEMBER key ?count WITHSCORES!withscores"
    ),
    "zrange": c(
        "name:K, start:N, end:N, desc:B=False, withscores:B=False, score_cast_func:Any=float,"
        " byscore:B=False, bylex:B=False, offset:I=None, num:I=None",
        builder="build_zrange",
        r="l",
    ),
    "zrangebylex": c(
        "name:K, min:V, max:V, start:I=None, num:I=None",
        "ZRANGEBYLEX name min max LIMIT?start,num",
        r="lV",
    ),
    "zrangebyscore": c(
        "name:K, min:N, max:N, start:I=None, num:I=None, withscores:B=False,"
        " score_cast_func:Any=float",
        builder="build_zrangebyscore",
        r="l",
    ),
    "zrangestore": c(
        "dest:K, name:K, start:N, end:N, byscore:B=False, bylex:B=False, desc:B=False,"
        " offset:I=None, num:I=None",
        builder="build_zrangestore",
        r="i",
    ),
    "zrank": c(
        "name:K, value:F, withscore:B=False, score_cast_func:Any=float",
        builder="build_zrank",
        r="int | list[Any] | None",
    ),
    "zrem": c("name:K, *values:F", r="i"),
    "zremrangebylex": c("name:K, min:V, max:V", r="i"),
    "zremrangebyrank": c("name:K, min:I, max:I", r="i"),
    "zremrangebyscore": c("name:K, min:N, max:N", r="i"),
    "zrevrange": c(
        "name:K, start:I, end:I, withscores:B=False, score_cast_func:Any=float",
        builder="build_zrevrange",
        r="l",
    ),
    "zrevrangebylex": c(
        "name:K, max:V, min:V, start:I=None, num:I=None",
        "ZREVRANGEBYLEX name max min LIMIT?start,num",
        r="lV",
    ),
    "zrevrangebyscore": c(
        "name:K, max:N, min:N, start:I=None, num:I=None, withscores:B=False,"
        " score_cast_func:Any=float",
        builder="build_zrevrangebyscore",
        r="l",
    ),
    "zrevrank": c(
        "name:K, value:F, withscore:B=False, score_cast_func:Any=float",
        builder="build_zrevrank",
        r="int | list[Any] | None",
    ),
    "zscan": c(
        "name:K, cursor:I=0, match:V=None, count:I=None, score_cast_func:Any=float",
        builder="build_zscan",
        r="tuple[int, list[Any]]",
    ),
    "zscore": c("name:K, value:F", r="f?"),
    "zunion": c(
        "keys:Sequence[KeyT] | Mapping[KeyT, float], aggregate:S=None, withscores:B=False,"
        " score_cast_func:Any=float",
        builder="build_zunion",
        r="l",
    ),
    "zunionstore": c(
        "dest:K, keys:Sequence[KeyT] | Mapping[KeyT, float], aggregate:S=None",
        builder="build_zunionstore",
        r="i",
    ),
    # ------------------------------------------------------------- hyperloglog
    "pfadd": c("name:K, *values:V", r="i"),
    "pfcount": c("*sources:K", r="i"),
    "pfmerge": c("dest:K, *sources:K", **OK),
    # --------------------------------------------------------------------- geo
    "geoadd": c(
        "name:K, values:Sequence[EncodableT], nx:B=False, xx:B=False, ch:B=False",
        builder="build_geoadd",
        r="i",
    ),
    "geodist": c("name:K, place1:V, place2:V, unit:S=None", r="f?", cb="float_or_none"),
    "geohash": c("name:K, *values:V", r="list[Value | None]"),
    "geopos": c("name:K, *values:V", r="list[list[float] | None]"),
    "georadius": c(
        "name:K, longitude:D, latitude:D, radius:D, unit:S=None, withdist:B=False,"
        " withcoord:B=False, withhash:B=False, count:I=None, sort:S=None, store:K=None,"
        " store_dist:K=None, any:B=False",
        builder="build_georadius",
        r="l",
    ),
    "georadiusbymember": c(
        "name:K, member:V, radius:D, unit:S=None, withdist:B=False, withcoord:B=False,"
        " withhash:B=False, count:I=None, sort:S=None, store:K=None, store_dist:K=None,"
        " any:B=False",
        builder="build_georadiusbymember",
        r="l",
    ),
    "geosearch": c(
        "name:K, member:V=None, longitude:D=None, latitude:D=None, unit:S='m', radius:D=None,"
        " width:D=None, height:D=None, sort:S=None, count:I=None, any:B=False,"
        " withcoord:B=False, withdist:B=False, withhash:B=False",
        builder="build_geosearch",
        r="l",
    ),
    "geosearchstore": c(
        "dest:K, name:K, member:V=None, longitude:D=None, latitude:D=None, unit:S='m',"
        " radius:D=None, width:D=None, height:D=None, sort:S=None, count:I=None, any:B=False,"
        " storedist:B=False",
        builder="build_geosearchstore",
        r="i",
    ),
    # ---------------------------------------------------------------- pub/sub
    "publish": c("channel:K, message:V", r="i"),
    "spublish": c("shard_channel:K, message:V", r="i"),
    "pubsub|channels": c("pattern:V='*'", "PUBSUB CHANNELS pattern", r="lV"),
    "pubsub|numpat": c("", r="i"),
    "pubsub|numsub": c("*args:K", "PUBSUB NUMSUB *args", r="l", cb="pair_list"),
    "pubsub|shardchannels": c("pattern:V='*'", "PUBSUB SHARDCHANNELS pattern", r="lV"),
    "pubsub|shardnumsub": c("*args:K", "PUBSUB SHARDNUMSUB *args", r="l", cb="pair_list"),
    # -------------------------------------------------------------- scripting
    "eval": c("script:V, numkeys:I, *keys_and_args:V", r="a"),
    "eval_ro": c("script:V, numkeys:I, *keys_and_args:V", "EVAL_RO script numkeys *keys_and_args"),
    "evalsha": c("sha:V, numkeys:I, *keys_and_args:V"),
    "evalsha_ro": c("sha:V, numkeys:I, *keys_and_args:V", "EVALSHA_RO sha numkeys *keys_and_args"),
    "fcall": c("function:V, numkeys:I, *keys_and_args:V"),
    "fcall_ro": c(
        "function:V, numkeys:I, *keys_and_args:V", "FCALL_RO function numkeys *keys_and_args"
    ),
    "script|exists": c("*args:V", "SCRIPT EXISTS *args", r="lb", cb="bool_list"),
    "script|flush": c("sync_type:S=None", "SCRIPT FLUSH ?sync_type", **OK),
    "script|kill": c("", **OK),
    "script|load": c("script:V", r="str", cb="to_str"),
    "script|debug": c("*args:V", "SCRIPT DEBUG *args", r="V"),
    "function|delete": c("library:V", **OK),
    "function|dump": c("", r="bytes"),
    "function|flush": c("mode:S=''", "FUNCTION FLUSH ?mode", builder="build_function_flush", **OK),
    "function|kill": c("", r="V"),
    "function|list": c(
        "library:V='*', withcode:B=False",
        "FUNCTION LIST LIBRARYNAME?library WITHCODE!withcode",
        r="l",
    ),
    "function|load": c("code:V, replace:B=False", "FUNCTION LOAD REPLACE!replace code", r="V"),
    "function|restore": c(
        "payload:bytes, policy:S='APPEND'", "FUNCTION RESTORE payload ?policy", **OK
    ),
    "function|stats": c("", r="d"),
    # ----------------------------------------------------------------- server
    "bgrewriteaof": c("", r="V"),
    "bgsave": c("schedule:B=True", "BGSAVE SCHEDULE!schedule", r="V"),
    "client|getname": c("", r="V?"),
    "client|getredir": c("", r="i"),
    "client|id": c("", r="i"),
    "client|info": c("", r="d", cb="parse_client_info"),
    "client|kill": c("address:V", r="V"),
    "client|list": c(
        "_type:S=None, client_id:Sequence[int]=None",
        builder="build_client_list",
        r="list[dict[str, str]]",
    ),
    "client|no-evict": c("mode:S", r="V"),
    "client|pause": c("timeout:I, all:B=True", builder="build_client_pause", **OK),
    "client|setname": c("name:V", **OK),
    "client|unblock": c(
        "client_id:I, error:B=False", "CLIENT UNBLOCK client_id ERROR!error", **BOOL
    ),
    "client|unpause": c("", r="V"),
    "client|trackinginfo": c("", r="d"),
    "config|get": c(
        "pattern:V='*', *args:V",
        "CONFIG GET pattern *args",
        r="dict[str, str]",
        cb="str_dict",
        note="Names and values as str, as redis-py answers (whatever decode_responses).",
    ),
    "config|resetstat": c("", **OK),
    "config|rewrite": c("", r="V"),
    "config|set": c("name:V, value:V, *args:V", "CONFIG SET name value *args", **OK),
    "dbsize": c("", r="i"),
    "echo": c("value:V", r="V"),
    "flushall": c("asynchronous:B=False", "FLUSHALL ASYNC!asynchronous", **OK),
    "flushdb": c("asynchronous:B=False", "FLUSHDB ASYNC!asynchronous", **OK),
    "info": c(
        "section:S=None, *args:S", "INFO ?section *args", r="dict[str, Any]", cb="parse_info"
    ),
    "lastsave": c("", r="datetime.datetime", cb="to_datetime"),
    "lolwut": c("*version_numbers:I", builder="build_lolwut", r="V"),
    "memory|doctor": c("", r="V"),
    "memory|help": c("", r="l"),
    "memory|malloc-stats": c("", r="V"),
    "memory|purge": c("", **OK),
    "memory|stats": c("", r="dict[str, Any]", cb="str_keys"),
    "memory|usage": c("key:K, samples:I=None", "MEMORY USAGE key SAMPLES?samples", r="i?"),
    "ping": c(
        "message:V=None",
        builder="build_ping",
        r="Any",
        note="True (PONG), or the message echoed when one is given.",
    ),
    "role": c("", r="l"),
    "save": c("", **OK),
    "shutdown": c(
        "save:B=False, nosave:B=False, now:B=False, force:B=False, abort:B=False",
        "SHUTDOWN SAVE!save NOSAVE!nosave NOW!now FORCE!force ABORT!abort",
        **OK,
    ),
    "slowlog|get": c("num:I=None", "SLOWLOG GET ?num", r="l"),
    "slowlog|len": c("", r="i"),
    "slowlog|reset": c("", **OK),
    "swapdb": c("first:I, second:I", **OK),
    "time": c("", r="tuple[int, int]", cb="time_pair"),
    "acl|cat": c("category:S=None", "ACL CAT ?category", r="lV"),
    "acl|deluser": c("*username:V", "ACL DELUSER *username", r="i"),
    "acl|dryrun": c("username:V, *args:V", r="V"),
    "acl|genpass": c("bits:I=None", "ACL GENPASS ?bits", r="V"),
    "acl|getuser": c("username:V", r="dict[str, Any] | None", cb="parse_acl_getuser"),
    "acl|list": c("", r="lV"),
    "acl|load": c("", **OK),
    "acl|log": c("count:I=None", "ACL LOG ?count", r="l"),
    "acl|save": c("", **OK),
    "acl|users": c("", r="lV"),
    "acl|whoami": c("", r="V"),
    "command|count": c("", r="i"),
    "command|docs": c("*args:V", "COMMAND DOCS *args", r="d"),
    "command|getkeys": c("*args:V", "COMMAND GETKEYS *args", r="lV"),
    "command|getkeysandflags": c("*args:V", "COMMAND GETKEYSANDFLAGS *args", r="l"),
    "command|info": c("*command_name:V", "COMMAND INFO *command_name", r="l"),
    "command|list": c(
        "module:S=None, category:S=None, pattern:S=None",
        "COMMAND LIST FILTERBY?module,category,pattern",
        builder="build_command_list",
        r="lV",
    ),
    "module|list": c("", r="l"),
    "module|load": c("path:S, *args:V", "MODULE LOAD path *args", **OK),
    "module|unload": c("name:S", **OK),
    "module|loadex": c(
        "path:S, options:Sequence[str]=None, args:Sequence[str]=None",
        builder="build_module_loadex",
        r="V",
    ),
    "acl|setuser": c(
        "username:S, enabled:B=False, nopass:B=False, passwords:str | Iterable[str]=None,"
        " hashed_passwords:str | Iterable[str]=None, categories:Iterable[str]=None,"
        " commands:Iterable[str]=None, keys:Iterable[KeyT]=None, channels:Iterable[KeyT]=None,"
        " selectors:Iterable[tuple[str, KeyT]]=None, reset:B=False, reset_keys:B=False,"
        " reset_channels:B=False, reset_passwords:B=False",
        builder="build_acl_setuser",
        **OK,
    ),
    "replicaof": c("*args:V", "REPLICAOF *args", r="V"),
    "slaveof": c("host:S=None, port:I=None", builder="build_slaveof", **OK),
    "latency|history": c("event:S", r="l"),
    "latency|latest": c("", r="l"),
    "latency|reset": c("*events:S", "LATENCY RESET *events", r="i"),
    "latency|doctor": c("", r="V"),
    "latency|graph": c("event:S", r="V"),
    "latency|histogram": c("*args:S", "LATENCY HISTOGRAM *args", r="d"),
    # ----------------------------------------------------------------- cluster
    "cluster|keyslot": c("key:K", r="i"),
    **{
        f"cluster|{sub}": c(**OK)
        for sub in [
            "addslots",
            "addslotsrange",
            "delslots",
            "delslotsrange",
            "failover",
            "forget",
            "meet",
            "replicate",
            "reset",
            "saveconfig",
            "set-config-epoch",
            "setslot",
        ]
    },
    "cluster|countkeysinslot": c("slot_id:I", r="i"),
    "cluster|getkeysinslot": c("slot_id:I, num_keys:I", r="lV"),
    # ----------------------------------------------------------------- streams
    # Typed stream replies: the callbacks of trio_maint/_sansio/streams.py.
    "xack": c("name:K, groupname:V, *ids:V", r="i"),
    "xadd": c(
        "name:K, fields:Mapping[FieldT, EncodableT], id:V='*', maxlen:I=None,"
        " approximate:B=True, nomkstream:B=False, minid:V=None, limit:I=None",
        builder="build_xadd",
        r="V?",
    ),
    "xautoclaim": c(
        "name:K, groupname:V, consumername:V, min_idle_time:I, start_id:V='0-0',"
        " count:I=None, justid:B=False",
        builder="build_xautoclaim",
        r="XAutoClaimReply | list[StreamId]",
    ),
    "xclaim": c(
        "name:K, groupname:V, consumername:V, min_idle_time:I,"
        " message_ids:Sequence[EncodableT], idle:I=None, time:I=None, retrycount:I=None,"
        " force:B=False, justid:B=False",
        builder="build_xclaim",
        r="list[StreamEntry] | list[StreamId]",
    ),
    "xdel": c("name:K, *ids:V", r="i"),
    "xgroup|create": c(
        "name:K, groupname:V, id:V='$', mkstream:B=False, entries_read:I=None",
        "XGROUP CREATE name groupname id MKSTREAM!mkstream ENTRIESREAD?entries_read",
        **OK,
    ),
    "xgroup|createconsumer": c("name:K, groupname:V, consumername:V", r="i"),
    "xgroup|delconsumer": c("name:K, groupname:V, consumername:V", r="i"),
    "xgroup|destroy": c("name:K, groupname:V", **BOOL),
    "xgroup|setid": c(
        "name:K, groupname:V, id:V, entries_read:I=None",
        "XGROUP SETID name groupname id ENTRIESREAD?entries_read",
        **OK,
    ),
    "xinfo|consumers": c(
        "name:K, groupname:V", r="list[dict[str, Any]]", cb="parse_xinfo_consumers"
    ),
    "xinfo|groups": c("name:K", r="list[dict[str, Any]]", cb="parse_xinfo_groups"),
    "xinfo|stream": c("name:K, full:B=False", builder="build_xinfo_stream", r="dict[str, Any]"),
    "xlen": c("name:K", r="i"),
    "xpending": c("name:K, groupname:V", r="dict[str, Any]", cb="parse_xpending"),
    "xrange": c(
        "name:K, min:V='-', max:V='+', count:I=None",
        "XRANGE name min max COUNT?count",
        r="list[StreamEntry]",
        cb="parse_entries",
    ),
    "xread": c(
        "streams:Mapping[KeyT, EncodableT], count:I=None, block:I=None",
        builder="build_xread",
        r="XReadReply",
        blocking="ms:block",
    ),
    "xreadgroup": c(
        "groupname:V, consumername:V, streams:Mapping[KeyT, EncodableT], count:I=None,"
        " block:I=None, noack:B=False",
        builder="build_xreadgroup",
        r="XReadReply",
        blocking="ms:block",
    ),
    "xrevrange": c(
        "name:K, max:V='+', min:V='-', count:I=None",
        "XREVRANGE name max min COUNT?count",
        r="list[StreamEntry]",
        cb="parse_entries",
    ),
    "xtrim": c(
        "name:K, maxlen:I=None, approximate:B=True, minid:V=None, limit:I=None",
        builder="build_xtrim",
        r="i",
    ),
}

#: Methods beyond one-per-command: redis-py's helpers that send a command of the table.
EXTRAS: dict[str, Cmd] = {
    "command": Cmd(
        "", "COMMAND", "dict[str, dict[str, Any]]", "parse_command_table", command="command|info"
    ),
    "object": Cmd("infotype:S, key:K", "OBJECT infotype key", "Any", command="object|encoding"),
    "cluster": Cmd(
        "cluster_arg:S, *args:V", "CLUSTER cluster_arg *args", "Any", command="cluster|info"
    ),
    "xpending_range": Cmd(
        "name:K, groupname:V, min:V, max:V, count:I, consumername:V=None, idle:I=None",
        "XPENDING name groupname IDLE?idle min max count ?consumername",
        "list[dict[str, Any]]",
        "parse_xpending_range",
        command="xpending",
    ),
    "acl_log_reset": Cmd("", "ACL LOG RESET", "bool", "is_ok", command="acl|log"),
    "client_kill_filter": Cmd(
        "_id:I=None, _type:S=None, addr:V=None, skipme:B=None, laddr:V=None, user:V=None,"
        " maxage:I=None",
        builder="build_client_kill_filter",
        reply="int",
        command="client|kill",
    ),
}

#: Commands that are not methods, and why.
EXCLUDED: dict[str, str] = {
    "monitor": "streams every command the server runs for ever on its connection; use "
    "redis-cli monitor (a pooled connection cannot be lent for good).",
    "sync": "replication protocol, for replicas, not clients.",
    "psync": "replication protocol, for replicas, not clients.",
    "replconf": "replication protocol, for replicas, not clients.",
    "restore-asking": "internal to cluster slot migration (MIGRATE sends it).",
    "asking": "sent by the cluster client itself before a command redirected by ASK; alone "
    "it would apply to a random pooled connection.",
    "readonly": "per-connection cluster state: the cluster client manages it "
    "(read_from_replicas); alone it would apply to a random pooled connection.",
    "readwrite": "per-connection cluster state (see READONLY).",
    "subscribe": "owned by PubSub (r.pubsub()): it switches its connection to push mode.",
    "psubscribe": "owned by PubSub (r.pubsub()).",
    "ssubscribe": "owned by PubSub (r.pubsub()) and ClusterPubSub.",
    "unsubscribe": "owned by PubSub (r.pubsub()).",
    "punsubscribe": "owned by PubSub (r.pubsub()).",
    "sunsubscribe": "owned by PubSub (r.pubsub()) and ClusterPubSub.",
    "multi": "transactions are pipelines: r.pipeline() sends MULTI/EXEC around its commands.",
    "exec": "transactions are pipelines: Pipeline.execute() sends EXEC.",
    "discard": "transactions are pipelines: Pipeline.reset() drops queued commands.",
    "watch": "only meaningful on the connection of a transaction: Pipeline.watch().",
    "unwatch": "only meaningful on the connection of a transaction: Pipeline.unwatch().",
    "quit": "would close a pooled connection under the pool; leave the client's async with "
    "block instead.",
    "reset": "would reset a pooled connection's state (database, name, protocol) under the pool.",
    "hello": "the connection's handshake (RESP3, credentials, name) is done by the client "
    "on every new connection (ClientOptions).",
    "auth": "credentials are given once in the URL or ClientOptions and sent on every new "
    "connection; AUTH on one pooled connection would leave the others unauthenticated.",
    "select": "the database is ClientOptions.db, selected on every new connection; SELECT "
    "on one pooled connection would split the pool.",
    "client|reply": "OFF/SKIP make the server stop answering, which breaks the pairing of "
    "requests and replies on a pooled connection.",
    "client|tracking": "client-side caching needs its own connection and invalidation "
    "handling, which trio_maint does not provide yet.",
    "client|caching": "only meaningful with CLIENT TRACKING (see there).",
    "client|no-touch": "not in this server version.",
    "debug": "disabled by default (enable-debug-command) and able to crash the server; "
    "use execute_command('DEBUG', ...) in tests.",
    "pfdebug": "internal test command of the HyperLogLog implementation.",
    "pfselftest": "internal test command of the HyperLogLog implementation.",
}

#: redis-py keyword names a method deliberately does not accept, and why (the signature
#: compatibility test skips them).
#: What docs/commands.md says about deliberate differences.
NOTES = [
    "Replies are RESP3 values as redis-py returns them on RESP3: members with scores are"
    " `[member, score]` lists (`zrange(..., withscores=True)` → `[[b'a', 1.0]]`; before"
    " the generated surface trio_maint answered tuples), `zpopmin`/`zpopmax` without"
    " count one flat `[member, score]`, `config_get` a dict of `str`, `lastsave` a"
    " `datetime`.",
    "`sismember`, `smismember` and `hsetnx` answer `bool` (as they did before); redis-py"
    " passes the server's 0/1 through, which compares equal.",
    "Keyword names now follow redis-py where the hand-written methods differed:"
    " `append(key=)`, `getrange(key=)`, `echo(value=)`, `spublish(shard_channel=)`,"
    " `srandmember(number=)`, `setex(time=)`, `zscore/zincrby/zrank/zrevrank(value=)`,"
    " `lmove/blmove(first_list=, second_list=, src=, dest=)` (positional calls are"
    " unchanged). `expire(seconds=)`, `pexpire(milliseconds=)` and `scan(type=)` are"
    " still accepted besides redis-py's `time=` and `_type=`.",
    "Stream replies are the typed values of `trio_maint/_sansio/streams.py`"
    " (`StreamEntry`, `XReadReply`, ...); see there for their shapes.",
    "Blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN, BZPOPMAX, BLMPOP,"
    " BZMPOP, XREAD/XREADGROUP with block, WAIT) wait for their reply the command's own"
    " timeout plus the socket timeout (0: forever).",
]

NEWER = "a Redis 8 option; the server these methods are generated from (7.0) lacks it"
COMPAT: dict[str, dict[str, str]] = {
    "set": {k: NEWER for k in ("ifeq", "ifne", "ifdeq", "ifdne")},
    "xadd": {k: NEWER for k in ("ref_policy", "idmpauto", "idmp")},
    "xtrim": {"ref_policy": NEWER},
    "xread": {k: NEWER for k in ("max_count", "max_size")},
    "xreadgroup": {k: NEWER for k in ("claim_min_idle_time", "max_count", "max_size")},
    "pipeline": {"shard_hint": "unused by redis-py itself; pipelines need no hint here"},
}
