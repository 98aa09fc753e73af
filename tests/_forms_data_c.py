"""Calling forms, part C: sorted sets, streams. See tests/_forms.py."""

from __future__ import annotations

from typing import Any

from ._forms import AS_XREAD, KEYS_OF, LENGTH, SCAN, SHAPE, TYPE, call, family

CONSUMER_KEYS = (
    "XINFO STREAM FULL: the consumers' keys are str in every mode, as the stream's and the "
    "groups' (redis-py leaves them as the server sent them: bytes without decode_responses)"
)


def _consumer_keys_as_sent(value: Any) -> Any:
    """Our XINFO STREAM FULL reply with the consumers' keys as redis-py leaves them (bytes
    when the group names are bytes, i.e. without decode_responses)."""
    if not isinstance(value, dict):
        return value
    for group in value.get("groups") or []:
        raw = isinstance(group.get("name"), bytes)
        if raw and isinstance(group, dict):
            group["consumers"] = [
                {k.encode(): v for k, v in consumer.items()}
                for consumer in group.get("consumers") or []
            ]
    return value


Z = ("ZADD", "{t}z", "1", "a", "2", "b", "3", "c", "4", "d")
Z2 = ("ZADD", "{t}z2", "2", "b", "3", "c", "10", "x")
LEX = ("ZADD", "{t}lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e")
ZR = ("ZRANGE", "{t}z", "0", "-1", "WITHSCORES")
ZD = ("ZRANGE", "{t}d", "0", "-1", "WITHSCORES")

SORTED_SETS = family(
    "sorted sets",
    [
        call("bzmpop", 1, 2, ["{t}e", "{t}z"], min=True).given(Z).then(ZR),
        call("bzmpop", 1, 1, ["{t}z"], max=True, count=2).given(Z).then(ZR),
        call("bzmpop", 0.05, 1, ["{t}e"], min=True),
        call("bzpopmax", "{t}z").given(Z).then(ZR),
        call("bzpopmax", ["{t}e", "{t}z"], 1).given(Z),
        call("bzpopmax", ["{t}e"], timeout=0.05),
        call("bzpopmin", "{t}z", 1).given(Z).then(ZR),
        call("bzpopmin", ["{t}e", "{t}z"], timeout=1).given(Z),
        call("bzpopmin", "{t}e", 0.05),
        call("zadd", "{t}z", {"a": 1, "b": 2.5}).then(ZR),
        call("zadd", "{t}z", {"a": 5, "new": 0}).given(Z).then(ZR),
        call("zadd", "{t}z", {"a": 5, "new": 0}, nx=True).given(Z).then(ZR),
        call("zadd", "{t}z", {"a": 5, "new": 0}, xx=True).given(Z).then(ZR),
        call("zadd", "{t}z", {"a": 5, "new": 0}, ch=True).given(Z).then(ZR),
        call("zadd", "{t}z", {"a": 5, "b": 0}, gt=True, ch=True).given(Z).then(ZR),
        call("zadd", "{t}z", {"a": 5, "b": 0}, lt=True).given(Z).then(ZR),
        call("zadd", "{t}z", {"a": 2}, incr=True).given(Z).then(ZR),
        call("zadd", "{t}z", {"new": 2}, incr=True),
        call("zadd", "{t}z", {"a": 2}, incr=True, xx=True).given(Z),
        call("zadd", "{t}z", {"a": 2}, incr=True, nx=True).given(Z),
        call("zadd", "{t}z", {"a": 1, "b": 2}, incr=True).raises(),
        call("zadd", "{t}z", {"a": 1}, nx=True, xx=True).raises(),
        call("zadd", "{t}z", {"a": "-inf", "b": "+inf"}).then(ZR),
        call("zcard", "{t}z").given(Z),
        call("zcard", "{t}missing"),
        call("zcount", "{t}z", 2, 3).given(Z),
        call("zcount", "{t}z", "-inf", "+inf").given(Z),
        call("zcount", "{t}z", "(1", 3).given(Z),
        call("zcount", "{t}z", 1.5, "(4").given(Z),
        call("zdiff", ["{t}z", "{t}z2"]).given(Z, Z2),
        call("zdiff", ["{t}z", "{t}z2"], withscores=True).given(Z, Z2),
        call("zdiffstore", "{t}d", ["{t}z", "{t}z2"]).given(Z, Z2).then(ZD),
        call("zincrby", "{t}z", 2, "a").given(Z).then(ZR),
        call("zincrby", "{t}z", 0.5, "new"),
        call("zinter", ["{t}z", "{t}z2"]).given(Z, Z2),
        call("zinter", ["{t}z", "{t}z2"], withscores=True).given(Z, Z2),
        call("zinter", ["{t}z", "{t}z2"], aggregate="MAX", withscores=True).given(Z, Z2),
        call("zinter", {"{t}z": 2, "{t}z2": 1}, withscores=True).given(Z, Z2),
        call("zintercard", 2, ["{t}z", "{t}z2"]).given(Z, Z2),
        call("zintercard", 2, ["{t}z", "{t}z2"], limit=1).given(Z, Z2),
        call("zinterstore", "{t}d", ["{t}z", "{t}z2"]).given(Z, Z2).then(ZD),
        call("zinterstore", "{t}d", ["{t}z", "{t}z2"], aggregate="MIN").given(Z, Z2).then(ZD),
        call("zinterstore", "{t}d", {"{t}z": 1, "{t}z2": 3}, "SUM").given(Z, Z2).then(ZD),
        call("zlexcount", "{t}lex", "-", "+").given(LEX),
        call("zlexcount", "{t}lex", "[b", "(d").given(LEX),
        call("zmpop", 2, ["{t}e", "{t}z"], min=True).given(Z).then(ZR),
        call("zmpop", 1, ["{t}z"], max=True, count=3).given(Z).then(ZR),
        call("zmpop", 1, ["{t}e"], min=True),
        call("zmscore", "{t}z", ["a", "nope", "c"]).given(Z),
        call("zmscore", "{t}z", ["b"]).given(Z),
        call("zpopmax", "{t}z").given(Z).then(ZR),
        call("zpopmax", "{t}z", 2).given(Z).then(ZR),
        call("zpopmax", "{t}z", count=1).given(Z),
        call("zpopmax", "{t}missing"),
        call("zpopmin", "{t}z").given(Z).then(ZR),
        call("zpopmin", "{t}z", 2).given(Z).then(ZR),
        call("zpopmin", "{t}z", count=10).given(Z),
        call("zpopmin", "{t}missing"),
        call("zrandmember", "{t}z").given(Z).norm(TYPE),
        call("zrandmember", "{t}z", 2).given(Z).norm(LENGTH),
        call("zrandmember", "{t}z", 2, withscores=True).given(Z).norm(SHAPE),
        call("zrandmember", "{t}z", count=-6).given(Z).norm(LENGTH),
        call("zrange", "{t}z", 0, -1).given(Z),
        call("zrange", "{t}z", 1, 2).given(Z),
        call("zrange", "{t}z", 0, -1, withscores=True).given(Z),
        call("zrange", "{t}z", 0, -1, desc=True).given(Z),
        call("zrange", "{t}z", 0, 1, desc=True, withscores=True).given(Z),
        call("zrange", "{t}z", 0, -1, withscores=True, score_cast_func=int).given(Z),
        call("zrange", "{t}z", 2, 3, byscore=True).given(Z),
        call("zrange", "{t}z", "-inf", "+inf", byscore=True, offset=1, num=2).given(Z),
        call("zrange", "{t}z", "(1", 4, byscore=True, withscores=True).given(Z),
        call("zrange", "{t}z", 4, 2, byscore=True, desc=True).given(Z),
        call("zrange", "{t}lex", "[b", "(e", bylex=True).given(LEX),
        call("zrange", "{t}lex", "-", "+", bylex=True, offset=1, num=2).given(LEX),
        call("zrange", "{t}lex", "+", "[c", bylex=True, desc=True).given(LEX),
        call("zrange", "{t}z", 0, -1, offset=1).raises(),
        call("zrange", "{t}missing", 0, -1),
        call("zrangebylex", "{t}lex", "-", "[c").given(LEX),
        call("zrangebylex", "{t}lex", "-", "+", 1, 2).given(LEX),
        call("zrangebylex", "{t}lex", "(a", "+", start=0, num=1).given(LEX),
        call("zrangebyscore", "{t}z", 2, 3).given(Z),
        call("zrangebyscore", "{t}z", "-inf", "+inf", withscores=True).given(Z),
        call("zrangebyscore", "{t}z", "(1", "+inf", 1, 2).given(Z),
        call("zrangebyscore", "{t}z", 1, 4, start=0, num=2, withscores=True).given(Z),
        call("zrangebyscore", "{t}z", 1, 4, withscores=True, score_cast_func=int).given(Z),
        call("zrangestore", "{t}d", "{t}z", 0, 1).given(Z).then(ZD),
        call("zrangestore", "{t}d", "{t}z", 2, 4, byscore=True).given(Z).then(ZD),
        call("zrangestore", "{t}d", "{t}z", 0, -1, desc=True).given(Z).then(ZD),
        call("zrangestore", "{t}d", "{t}z", 1, 4, byscore=True, offset=1, num=2).given(Z).then(ZD),
        call("zrangestore", "{t}d", "{t}lex", "[b", "[d", bylex=True).given(LEX).then(ZD),
        call("zrank", "{t}z", "c").given(Z),
        call("zrank", "{t}z", "nope").given(Z),
        call("zrem", "{t}z", "a").given(Z).then(ZR),
        call("zrem", "{t}z", "a", "b", "nope").given(Z).then(ZR),
        call("zremrangebylex", "{t}lex", "[b", "[c").given(LEX),
        call("zremrangebyrank", "{t}z", 0, 1).given(Z).then(ZR),
        call("zremrangebyscore", "{t}z", 2, "+inf").given(Z).then(ZR),
        call("zremrangebyscore", "{t}z", "(1", 3).given(Z).then(ZR),
        call("zrevrange", "{t}z", 0, -1).given(Z),
        call("zrevrange", "{t}z", 0, 1, withscores=True).given(Z),
        call("zrevrange", "{t}z", 0, 1, True).given(Z),
        call("zrevrange", "{t}z", 0, 1, withscores=True, score_cast_func=int).given(Z),
        call("zrevrangebylex", "{t}lex", "+", "-").given(LEX),
        call("zrevrangebylex", "{t}lex", "[d", "[b", 0, 2).given(LEX),
        call("zrevrangebyscore", "{t}z", "+inf", "-inf").given(Z),
        call("zrevrangebyscore", "{t}z", 4, 2, withscores=True).given(Z),
        call("zrevrangebyscore", "{t}z", 4, 1, start=1, num=2).given(Z),
        call("zrevrank", "{t}z", "a").given(Z),
        call("zrevrank", "{t}z", "nope").given(Z),
        call("zscan", "{t}z").given(Z).norm(SCAN),
        call("zscan", "{t}z", 0, match="a*").given(Z),
        call("zscan", "{t}z", 0, "*", 100).given(Z).norm(SCAN),
        call("zscan", "{t}z", count=10, score_cast_func=int).given(Z).norm(SCAN),
        call("zscore", "{t}z", "b").given(Z),
        call("zscore", "{t}z", "nope").given(Z),
        call("zscore", "{t}missing", "a"),
        call("zunion", ["{t}z", "{t}z2"]).given(Z, Z2),
        call("zunion", ["{t}z", "{t}z2"], withscores=True).given(Z, Z2),
        call("zunion", ["{t}z", "{t}z2"], aggregate="MAX", withscores=True).given(Z, Z2),
        call("zunion", {"{t}z": 1, "{t}z2": 2}, withscores=True).given(Z, Z2),
        call("zunion", ["{t}z"], withscores=True, score_cast_func=int).given(Z),
        call("zunionstore", "{t}d", ["{t}z", "{t}z2"]).given(Z, Z2).then(ZD),
        call("zunionstore", "{t}d", {"{t}z": 2, "{t}z2": 1}, aggregate="MIN").given(Z, Z2).then(ZD),
    ],
)

X = ("XADD", "{t}x", "1-1", "f", "v1", "g", "w")
X2 = ("XADD", "{t}x", "1-2", "f", "v2")
X3 = ("XADD", "{t}x", "2-0", "f", "v3")
G = ("XGROUP", "CREATE", "{t}x", "g1", "0")
RG = ("XREADGROUP", "GROUP", "g1", "c1", "STREAMS", "{t}x", ">")
XR = ("XRANGE", "{t}x", "-", "+")
XS = (X, X2, X3)
XPR = ("XPENDING", "{t}x", "g1", "-", "+", "10")
XPS = ("XPENDING", "{t}x", "g1")
#: docs/commands.md and docs/streams.md: stream replies are typed (StreamEntry)
TYPED = "typed stream entries (StreamEntry); redis-py nests (id, fields) pairs in a list"

STREAMS = family(
    "streams",
    [
        call("xack", "{t}x", "g1", "1-1").given(*XS, G, RG).then(("XPENDING", "{t}x", "g1")),
        call("xack", "{t}x", "g1", "1-1", "1-2", "9-9").given(*XS, G, RG),
        call("xack", "{t}x", "g1", "1-1").given(*XS, G),
        call("xadd", "{t}x", {"f": "v"}).norm(TYPE).then(("XLEN", "{t}x")),
        call("xadd", "{t}x", {"f": "v"}, id="5-1").then(XR),
        call("xadd", "{t}x", {"f": 1, "g": 2.5}, "5-1").then(XR),
        call("xadd", "{t}x", {"f": "v"}, id="3-0", maxlen=2, approximate=False).given(*XS).then(XR),
        call("xadd", "{t}x", {"f": "v"}, id="3-0", maxlen=2).given(*XS).then(("XLEN", "{t}x")),
        call("xadd", "{t}x", {"f": "v"}, id="3-0", minid="2-0", approximate=False)
        .given(*XS)
        .then(XR),
        call("xadd", "{t}x", {"f": "v"}, id="3-0", maxlen=1, limit=10)
        .given(*XS)
        .then(("XLEN", "{t}x")),
        call("xadd", "{t}missing", {"f": "v"}, nomkstream=True).then(("EXISTS", "{t}missing")),
        call("xadd", "{t}x", {"f": "v"}, id="1-1").given(X).raises(),
        call("xautoclaim", "{t}x", "g1", "c2", 0).given(*XS, G, RG),
        call("xautoclaim", "{t}x", "g1", "c2", 0, start_id="1-2", count=1).given(*XS, G, RG),
        call("xautoclaim", "{t}x", "g1", "c2", 0, justid=True).given(*XS, G, RG),
        call("xclaim", "{t}x", "g1", "c2", 0, ["1-1"]).given(*XS, G, RG).then(XPR),
        call("xclaim", "{t}x", "g1", "c2", 0, ["1-1", "1-2"], justid=True).given(*XS, G, RG),
        call("xclaim", "{t}x", "g1", "c2", 0, ["1-1"], idle=0, retrycount=5, force=True).given(
            *XS, G, RG
        ),
        call("xclaim", "{t}x", "g1", "c2", 0, ("2-0",), time=1000).given(*XS, G, RG),
        call("xdel", "{t}x", "1-1").given(*XS).then(XR),
        call("xdel", "{t}x", "1-1", "2-0", "9-9").given(*XS).then(XR),
        call("xgroup_create", "{t}x", "g2").given(*XS).then(("XINFO", "GROUPS", "{t}x")),
        call("xgroup_create", "{t}x", "g2", id="0").given(*XS),
        call("xgroup_create", "{t}new", "g2", "$", mkstream=True).then(("XLEN", "{t}new")),
        call("xgroup_create", "{t}x", "g2", "0", entries_read=1)
        .given(*XS)
        .then(("XINFO", "GROUPS", "{t}x")),
        call("xgroup_create", "{t}x", "g1").given(*XS, G).raises(),
        call("xgroup_createconsumer", "{t}x", "g1", "c9").given(*XS, G),
        call("xgroup_delconsumer", "{t}x", "g1", "c1").given(*XS, G, RG),
        call("xgroup_destroy", "{t}x", "g1").given(*XS, G),
        call("xgroup_destroy", "{t}x", "nope").given(*XS),
        call("xgroup_setid", "{t}x", "g1", "1-2").given(*XS, G).then(("XINFO", "GROUPS", "{t}x")),
        call("xgroup_setid", "{t}x", "g1", "0", entries_read=0).given(*XS, G),
        call("xinfo_consumers", "{t}x", "g1").given(*XS, G, RG).norm(KEYS_OF),
        call("xinfo_groups", "{t}x").given(*XS, G, RG),
        call("xinfo_stream", "{t}x").given(*XS),
        call("xinfo_stream", "{t}x", full=True)
        .given(*XS, G, RG)
        .norm(SHAPE)
        .differs(CONSUMER_KEYS, _consumer_keys_as_sent),
        call("xlen", "{t}x").given(*XS),
        call("xlen", "{t}missing"),
        call("xpending", "{t}x", "g1").given(*XS, G, RG),
        call("xpending", "{t}x", "g1").given(*XS, G),
        call("xpending_range", "{t}x", "g1", "-", "+", 10).given(*XS, G, RG).norm(SHAPE),
        call("xpending_range", "{t}x", "g1", min="-", max="+", count=1, consumername="c1")
        .given(*XS, G, RG)
        .norm(SHAPE),
        call("xpending_range", "{t}x", "g1", "-", "+", 5, idle=100000).given(*XS, G, RG),
        call("xrange", "{t}x").given(*XS),
        call("xrange", "{t}x", "1-2", "+").given(*XS),
        call("xrange", "{t}x", min="-", max="1-2", count=1).given(*XS),
        call("xrange", "{t}missing"),
        call("xread", {"{t}x": "0"}).given(*XS).differs(TYPED, AS_XREAD),
        call("xread", {"{t}x": "1-1"}, count=1).given(*XS).differs(TYPED, AS_XREAD),
        call("xread", {"{t}x": "0-0", "{t}y": "0"})
        .given(*XS, ("XADD", "{t}y", "1-0", "a", "b"))
        .differs(TYPED, AS_XREAD),
        call("xread", {"{t}x": "$"}, block=50).given(*XS),
        call("xread", {"{t}x": "2-0"}).differs(TYPED, AS_XREAD),
        call("xreadgroup", "g1", "c1", {"{t}x": ">"})
        .given(*XS, G)
        .then(XPS)
        .differs(TYPED, AS_XREAD),
        call("xreadgroup", "g1", "c1", {"{t}x": ">"}, count=1)
        .given(*XS, G)
        .differs(TYPED, AS_XREAD),
        call("xreadgroup", "g1", "c1", {"{t}x": ">"}, noack=True)
        .given(*XS, G)
        .then(("XPENDING", "{t}x", "g1"))
        .differs(TYPED, AS_XREAD),
        call("xreadgroup", "g1", "c1", {"{t}x": "0"}).given(*XS, G, RG).differs(TYPED, AS_XREAD),
        call("xreadgroup", "g1", "c1", {"{t}x": ">"}, block=50).given(*XS, G, RG),
        call("xrevrange", "{t}x").given(*XS),
        call("xrevrange", "{t}x", "1-2", "-").given(*XS),
        call("xrevrange", "{t}x", max="+", min="-", count=2).given(*XS),
        call("xtrim", "{t}x", 1, approximate=False).given(*XS).then(XR),
        call("xtrim", "{t}x", maxlen=2).given(*XS).then(("XLEN", "{t}x")),
        call("xtrim", "{t}x", minid="1-2", approximate=False).given(*XS).then(XR),
        call("xtrim", "{t}x", maxlen=0, approximate=True, limit=100).given(*XS),
    ],
)

FORMS = [*SORTED_SETS, *STREAMS]
