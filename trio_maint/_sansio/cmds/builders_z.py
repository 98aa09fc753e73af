"""Hand-written argument builders (sans-IO) of sorted-set and stream commands. Each
takes the method's parameters and returns ``(args, callback)``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import DataError
from ..resp import CommandArg
from ..streams import (
    parse_entries,
    parse_ids,
    parse_xautoclaim,
    parse_xautoclaim_justid,
    parse_xinfo_stream,
    parse_xinfo_stream_full,
    parse_xread,
)
from .builders import Built
from .callbacks import cast_pairs, zscan_reply
from .types import EncodableT, FieldT, KeyT, ScoreT, list_or_args

__all__ = [
    "build_bzmpop",
    "build_bzpopmax",
    "build_bzpopmin",
    "build_xadd",
    "build_xautoclaim",
    "build_xclaim",
    "build_xinfo_stream",
    "build_xread",
    "build_xreadgroup",
    "build_xtrim",
    "build_zadd",
    "build_zinter",
    "build_zinterstore",
    "build_zmpop",
    "build_zrange",
    "build_zrangebyscore",
    "build_zrangestore",
    "build_zrank",
    "build_zrevrange",
    "build_zrevrangebyscore",
    "build_zrevrank",
    "build_zscan",
    "build_zunion",
    "build_zunionstore",
]


def build_zadd(
    name: KeyT,
    mapping: Mapping[FieldT, ScoreT],
    nx: bool,
    xx: bool,
    ch: bool,
    incr: bool,
    gt: bool,
    lt: bool,
) -> Built:
    """``ZADD name [NX|XX] [GT|LT] [CH] [INCR] score member ...`` from ``mapping`` of
    member → score."""
    if not mapping:
        raise DataError("zadd() needs at least one member")
    if nx and xx:
        raise DataError("zadd(): nx and xx are mutually exclusive")
    if incr and len(mapping) != 1:
        raise DataError("zadd(incr=True) takes exactly one member")
    args: list[CommandArg] = ["ZADD", name]
    for flag, on in (("NX", nx), ("XX", xx), ("GT", gt), ("LT", lt), ("CH", ch), ("INCR", incr)):
        if on:
            args.append(flag)
    for member, score in mapping.items():
        args += [score, member]
    return tuple(args), None


def _scores(withscores: bool, cast: Callable[[Any], Any]) -> Callable[[Any], Any] | None:
    if not withscores or cast is float:
        return None  # RESP3 already answers [[member, score (double)], ...]
    return cast_pairs(cast)


def _range_args(
    command: str,
    dest: KeyT | None,
    name: KeyT,
    start: ScoreT,
    end: ScoreT,
    desc: bool,
    byscore: bool,
    bylex: bool,
    offset: int | None,
    num: int | None,
) -> list[CommandArg]:
    if byscore and bylex:
        raise DataError(f"{command.lower()}(): byscore and bylex are mutually exclusive")
    if (offset is None) != (num is None):
        raise DataError(f"{command.lower()}(): give both offset and num, or neither")
    if offset is not None and not (byscore or bylex):
        raise DataError(f"{command.lower()}(): offset and num need byscore or bylex")
    args: list[CommandArg] = [command] if dest is None else [command, dest]
    args += [name, start, end]  # with REV and BYSCORE/BYLEX: the high bound first
    if byscore:
        args.append("BYSCORE")
    elif bylex:
        args.append("BYLEX")
    if desc:
        args.append("REV")
    if offset is not None:
        args += ["LIMIT", offset, num]  # type: ignore[list-item]
    return args


def build_zrange(
    name: KeyT,
    start: ScoreT,
    end: ScoreT,
    desc: bool,
    withscores: bool,
    score_cast_func: Callable[[Any], Any],
    byscore: bool,
    bylex: bool,
    offset: int | None,
    num: int | None,
) -> Built:
    """``ZRANGE name start end [BYSCORE|BYLEX] [REV] [LIMIT o n] [WITHSCORES]``; with
    ``desc`` and ``byscore``/``bylex``, ``start`` is the high bound (as the server and
    redis-py take it)."""
    args = _range_args("ZRANGE", None, name, start, end, desc, byscore, bylex, offset, num)
    if withscores:
        args.append("WITHSCORES")
    return tuple(args), _scores(withscores, score_cast_func)


def build_zrangestore(
    dest: KeyT,
    name: KeyT,
    start: ScoreT,
    end: ScoreT,
    byscore: bool,
    bylex: bool,
    desc: bool,
    offset: int | None,
    num: int | None,
) -> Built:
    """``ZRANGESTORE dest name start end [BYSCORE|BYLEX] [REV] [LIMIT o n]``."""
    args = _range_args("ZRANGESTORE", dest, name, start, end, desc, byscore, bylex, offset, num)
    return tuple(args), None


def build_zrevrange(
    name: KeyT, start: int, end: int, withscores: bool, score_cast_func: Callable[[Any], Any]
) -> Built:
    """``ZREVRANGE name start end [WITHSCORES]``."""
    args: list[CommandArg] = ["ZREVRANGE", name, start, end]
    if withscores:
        args.append("WITHSCORES")
    return tuple(args), _scores(withscores, score_cast_func)


def _byscore(
    command: str,
    name: KeyT,
    low: ScoreT,
    high: ScoreT,
    start: int | None,
    num: int | None,
    withscores: bool,
    cast: Callable[[Any], Any],
) -> Built:
    if (start is None) != (num is None):
        raise DataError(f"{command.lower()}(): give both start and num, or neither")
    args: list[CommandArg] = [command, name, low, high]
    if start is not None:
        args += ["LIMIT", start, num]  # type: ignore[list-item]
    if withscores:
        args.append("WITHSCORES")
    return tuple(args), _scores(withscores, cast)


def build_zrangebyscore(
    name: KeyT,
    min: ScoreT,
    max: ScoreT,
    start: int | None,
    num: int | None,
    withscores: bool,
    score_cast_func: Callable[[Any], Any],
) -> Built:
    """``ZRANGEBYSCORE name min max [WITHSCORES] [LIMIT o n]``."""
    return _byscore("ZRANGEBYSCORE", name, min, max, start, num, withscores, score_cast_func)


def build_zrevrangebyscore(
    name: KeyT,
    max: ScoreT,
    min: ScoreT,
    start: int | None,
    num: int | None,
    withscores: bool,
    score_cast_func: Callable[[Any], Any],
) -> Built:
    """``ZREVRANGEBYSCORE name max min [WITHSCORES] [LIMIT o n]``."""
    return _byscore("ZREVRANGEBYSCORE", name, max, min, start, num, withscores, score_cast_func)


def build_zscan(
    name: KeyT,
    cursor: int,
    match: EncodableT | None,
    count: int | None,
    score_cast_func: Callable[[Any], Any],
) -> Built:
    """``ZSCAN`` → ``(next cursor, [(member, score), ...])``."""
    args: list[CommandArg] = ["ZSCAN", name, cursor]
    if match is not None:
        args += ["MATCH", match]
    if count is not None:
        args += ["COUNT", count]
    return tuple(args), zscan_reply(score_cast_func)


def _combine(
    command: str,
    dest: KeyT | None,
    keys: Sequence[KeyT] | Mapping[KeyT, float],
    aggregate: str | None,
    withscores: bool,
) -> Built:
    args: list[CommandArg] = [command] if dest is None else [command, dest]
    if isinstance(keys, Mapping):
        names = list(keys)
        args += [len(names), *names, "WEIGHTS", *keys.values()]
    else:
        args += [len(keys), *keys]
    if aggregate is not None:
        args += ["AGGREGATE", aggregate]
    if withscores:
        args.append("WITHSCORES")
    return tuple(args), None


def build_zinter(
    keys: Sequence[KeyT] | Mapping[KeyT, float], aggregate: str | None, withscores: bool
) -> Built:
    """``ZINTER numkeys key ... [WEIGHTS w ...] [AGGREGATE a] [WITHSCORES]``; a mapping
    of key → weight gives the weights."""
    return _combine("ZINTER", None, keys, aggregate, withscores)


def build_zunion(
    keys: Sequence[KeyT] | Mapping[KeyT, float],
    aggregate: str | None,
    withscores: bool,
    score_cast_func: Callable[[Any], Any],
) -> Built:
    """``ZUNION`` (as :func:`build_zinter`)."""
    args, _ = _combine("ZUNION", None, keys, aggregate, withscores)
    return args, _scores(withscores, score_cast_func)


def _rank(
    command: str, name: KeyT, value: FieldT, withscore: bool, cast: Callable[[Any], Any]
) -> Built:
    if not withscore:
        return (command, name, value), None

    def shape(reply: Any) -> Any:
        return None if reply is None else [reply[0], cast(reply[1])]

    return (command, name, value, "WITHSCORE"), shape


def build_zrank(
    name: KeyT, value: FieldT, withscore: bool, score_cast_func: Callable[[Any], Any]
) -> Built:
    """``ZRANK name member [WITHSCORE]`` (``WITHSCORE`` needs Redis 7.2)."""
    return _rank("ZRANK", name, value, withscore, score_cast_func)


def build_zrevrank(
    name: KeyT, value: FieldT, withscore: bool, score_cast_func: Callable[[Any], Any]
) -> Built:
    """``ZREVRANK name member [WITHSCORE]`` (``WITHSCORE`` needs Redis 7.2)."""
    return _rank("ZREVRANK", name, value, withscore, score_cast_func)


def build_zinterstore(
    dest: KeyT, keys: Sequence[KeyT] | Mapping[KeyT, float], aggregate: str | None
) -> Built:
    """``ZINTERSTORE dest numkeys key ... [WEIGHTS ...] [AGGREGATE a]``."""
    return _combine("ZINTERSTORE", dest, keys, aggregate, False)


def build_zunionstore(
    dest: KeyT, keys: Sequence[KeyT] | Mapping[KeyT, float], aggregate: str | None
) -> Built:
    """``ZUNIONSTORE`` (as :func:`build_zinterstore`)."""
    return _combine("ZUNIONSTORE", dest, keys, aggregate, False)


def _mpop(
    command: str,
    head: list[CommandArg],
    keys: Sequence[KeyT],
    min: bool,
    max: bool,
    count: int,
) -> Built:
    if min == max:
        raise DataError(f"{command.lower()}(): give exactly one of min and max")
    args = [command, *head, *keys, "MIN" if min else "MAX"]
    if count != 1:
        args += ["COUNT", count]
    return tuple(args), None


def build_zmpop(num_keys: int, keys: Sequence[KeyT], min: bool, max: bool, count: int) -> Built:
    """``ZMPOP numkeys key ... MIN|MAX [COUNT n]``."""
    return _mpop("ZMPOP", [num_keys], keys, min, max, count)


def build_bzmpop(
    timeout: float, numkeys: int, keys: Sequence[KeyT], min: bool, max: bool, count: int
) -> Built:
    """``BZMPOP timeout numkeys key ... MIN|MAX [COUNT n]``."""
    return _mpop("BZMPOP", [timeout, numkeys], keys, min, max, count)


def build_bzpopmin(keys: KeyT | Iterable[KeyT], timeout: float) -> Built:
    """``BZPOPMIN key [key ...] timeout``."""
    return ("BZPOPMIN", *list_or_args(keys, ()), timeout), None


def build_bzpopmax(keys: KeyT | Iterable[KeyT], timeout: float) -> Built:
    """``BZPOPMAX key [key ...] timeout``."""
    return ("BZPOPMAX", *list_or_args(keys, ()), timeout), None


# ----------------------------------------------------------------------------- streams


def _trim(
    args: list[CommandArg],
    maxlen: int | None,
    approximate: bool,
    minid: EncodableT | None,
    limit: int | None,
) -> None:
    if maxlen is not None and minid is not None:
        raise DataError("give maxlen or minid, not both")
    if maxlen is not None:
        args += ["MAXLEN", "~", maxlen] if approximate else ["MAXLEN", maxlen]
    elif minid is not None:
        args += ["MINID", "~", minid] if approximate else ["MINID", minid]
    if limit is not None:
        args += ["LIMIT", limit]


def build_xadd(
    name: KeyT,
    fields: Mapping[FieldT, EncodableT],
    id: EncodableT,
    maxlen: int | None,
    approximate: bool,
    nomkstream: bool,
    minid: EncodableT | None,
    limit: int | None,
) -> Built:
    """``XADD name [NOMKSTREAM] [MAXLEN|MINID [~] n [LIMIT c]] id field value ...``."""
    if not fields:
        raise DataError("xadd() needs at least one field")
    args: list[CommandArg] = ["XADD", name]
    if nomkstream:
        args.append("NOMKSTREAM")
    _trim(args, maxlen, approximate, minid, limit)
    args.append(id)
    for k, v in fields.items():
        args += [k, v]
    return tuple(args), None


def build_xtrim(
    name: KeyT,
    maxlen: int | None,
    approximate: bool,
    minid: EncodableT | None,
    limit: int | None,
) -> Built:
    """``XTRIM name MAXLEN|MINID [~] n [LIMIT c]``."""
    if maxlen is None and minid is None:
        raise DataError("xtrim() needs maxlen or minid")
    args: list[CommandArg] = ["XTRIM", name]
    _trim(args, maxlen, approximate, minid, limit)
    return tuple(args), None


def _streams(args: list[CommandArg], streams: Mapping[KeyT, EncodableT]) -> Built:
    if not streams:
        raise DataError("streams must name at least one stream")
    args += ["STREAMS", *streams.keys(), *streams.values()]
    return tuple(args), parse_xread


def build_xread(streams: Mapping[KeyT, EncodableT], count: int | None, block: int | None) -> Built:
    """``XREAD [COUNT n] [BLOCK ms] STREAMS key ... id ...``."""
    args: list[CommandArg] = ["XREAD"]
    if count is not None:
        args += ["COUNT", count]
    if block is not None:
        args += ["BLOCK", block]
    return _streams(args, streams)


def build_xreadgroup(
    groupname: EncodableT,
    consumername: EncodableT,
    streams: Mapping[KeyT, EncodableT],
    count: int | None,
    block: int | None,
    noack: bool,
) -> Built:
    """``XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key ... id ...``."""
    args: list[CommandArg] = ["XREADGROUP", "GROUP", groupname, consumername]
    if count is not None:
        args += ["COUNT", count]
    if block is not None:
        args += ["BLOCK", block]
    if noack:
        args.append("NOACK")
    return _streams(args, streams)


def build_xautoclaim(
    name: KeyT,
    groupname: EncodableT,
    consumername: EncodableT,
    min_idle_time: int,
    start_id: EncodableT,
    count: int | None,
    justid: bool,
) -> Built:
    """``XAUTOCLAIM name group consumer min-idle start [COUNT n] [JUSTID]``."""
    args: list[CommandArg] = ["XAUTOCLAIM", name, groupname, consumername, min_idle_time]
    args.append(start_id)
    if count is not None:
        args += ["COUNT", count]
    if justid:
        args.append("JUSTID")
        return tuple(args), parse_xautoclaim_justid
    return tuple(args), parse_xautoclaim


def build_xclaim(
    name: KeyT,
    groupname: EncodableT,
    consumername: EncodableT,
    min_idle_time: int,
    message_ids: Sequence[EncodableT],
    idle: int | None,
    time: int | None,
    retrycount: int | None,
    force: bool,
    justid: bool,
) -> Built:
    """``XCLAIM name group consumer min-idle id ... [IDLE ms] [TIME ms] [RETRYCOUNT n]
    [FORCE] [JUSTID]``."""
    args: list[CommandArg] = ["XCLAIM", name, groupname, consumername, min_idle_time]
    args += list_or_args(message_ids, ())
    for token, value in (("IDLE", idle), ("TIME", time), ("RETRYCOUNT", retrycount)):
        if value is not None:
            args += [token, value]
    if force:
        args.append("FORCE")
    if justid:
        args.append("JUSTID")
        return tuple(args), parse_ids
    return tuple(args), parse_entries


def build_xinfo_stream(name: KeyT, full: bool) -> Built:
    """``XINFO STREAM name [FULL]``."""
    if full:
        return ("XINFO", "STREAM", name, "FULL"), parse_xinfo_stream_full
    return ("XINFO", "STREAM", name), parse_xinfo_stream
