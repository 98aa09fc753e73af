"""Calling forms, part A: strings, bitmaps, keys (generic). See tests/_forms.py."""

from __future__ import annotations

import datetime as dt

from ._forms import SCAN, TYPE, UNORDERED, call, family

#: a timestamp far in the future (2100-01-01 UTC), so ``EXPIRETIME`` checks are exact
AT = 4102444800
AT_DT = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)

S = ("SET", "{t}s", "hello")
N = ("SET", "{t}n", "10")
F = ("SET", "{t}f", "1.5")
S2 = ("SET", "{t}s2", "help")
TTL = ("TTL", "{t}s")
PTTL_ = ("PEXPIRETIME", "{t}s")
ET = ("EXPIRETIME", "{t}s")
GET = ("GET", "{t}s")
L = ("RPUSH", "{t}l", "3", "1", "2")
LA = ("RPUSH", "{t}la", "b", "c", "a")

STRINGS = family(
    "strings",
    [
        call("append", "{t}s", " world").given(S).then(GET),
        call("append", "{t}new", "x"),
        call("decr", "{t}n").given(N),
        call("decr", "{t}n", 5).given(N),
        call("decr", "{t}n", amount=3).given(N),
        call("decrby", "{t}n", 4).given(N),
        call("decrby", "{t}n").given(N),
        call("decr", "{t}s").given(S).raises(),
        call("get", "{t}s").given(S),
        call("get", "{t}missing"),
        call("get", "{t}l").given(L).raises(),
        call("getdel", "{t}s").given(S).then(GET),
        call("getdel", "{t}missing"),
        call("getex", "{t}s").given(S).then(TTL),
        call("getex", "{t}s", ex=100).given(S).then(TTL),
        call("getex", "{t}s", px=100000).given(S).then(TTL),
        call("getex", "{t}s", ex=dt.timedelta(seconds=100)).given(S).then(TTL),
        call("getex", "{t}s", exat=AT).given(S).then(ET),
        call("getex", "{t}s", pxat=AT * 1000).given(S).then(ET),
        call("getex", "{t}s", exat=AT_DT).given(S).then(ET),
        call("getex", "{t}s", persist=True).given(S, ("EXPIRE", "{t}s", "100")).then(TTL),
        call("getrange", "{t}s", 0, 2).given(S),
        call("getrange", "{t}s", -3, -1).given(S),
        call("getset", "{t}s", "new").given(S).then(GET),
        call("getset", "{t}missing", "new"),
        call("incr", "{t}n").given(N),
        call("incr", "{t}n", 5).given(N),
        call("incr", "{t}n", amount=2).given(N),
        call("incrby", "{t}n", 7).given(N),
        call("incrby", "{t}n").given(N),
        call("incrbyfloat", "{t}f", 0.25).given(F),
        call("incrbyfloat", "{t}f").given(F),
        call("incrbyfloat", "{t}new", 2),
        call("lcs", "{t}s", "{t}s2").given(S, S2),
        call("lcs", "{t}s", "{t}s2", len=True).given(S, S2),
        call("lcs", "{t}s", "{t}s2", idx=True).given(S, S2),
        call("lcs", "{t}s", "{t}s2", idx=True, withmatchlen=True).given(S, S2),
        call("lcs", "{t}s", "{t}s2", idx=True, minmatchlen=2).given(S, S2),
        call("mget", "{t}s", "{t}s2").given(S, S2),
        call("mget", ["{t}s", "{t}s2", "{t}missing"]).given(S, S2),
        call("mget", ("{t}s", "{t}s2")).given(S, S2),
        call("mget", ["{t}s"], "{t}s2").given(S, S2),
        call("mget", "{t}s").given(S),
        call("mset", {"{t}a": "1", "{t}b": "2"}).then(("MGET", "{t}a", "{t}b")),
        call("mset", {"{t}a": 1, "{t}b": 2.5}).then(("MGET", "{t}a", "{t}b")),
        call("msetnx", {"{t}a": "1", "{t}b": "2"}).then(("MGET", "{t}a", "{t}b")),
        call("msetnx", {"{t}a": "1", "{t}s": "2"}).given(S).then(GET),
        call("psetex", "{t}s", 100000, "v").then(GET, TTL),
        call("psetex", "{t}s", dt.timedelta(seconds=100), "v").then(TTL),
        call("set", "{t}s", "v").then(GET),
        call("set", "{t}s", b"bytes").then(GET),
        call("set", "{t}s", 12).then(GET),
        call("set", "{t}s", 1.5).then(GET),
        call("set", "{t}s", "v", ex=100).then(TTL),
        call("set", "{t}s", "v", px=100000).then(TTL),
        call("set", "{t}s", "v", ex=dt.timedelta(seconds=100)).then(TTL),
        call("set", "{t}s", "v", px=dt.timedelta(seconds=100)).then(TTL),
        call("set", "{t}s", "v", exat=AT).then(ET),
        call("set", "{t}s", "v", pxat=AT * 1000).then(ET),
        call("set", "{t}s", "v", exat=AT_DT).then(ET),
        call("set", "{t}s", "v", pxat=AT_DT).then(ET),
        call("set", "{t}s", "v", nx=True).given(S).then(GET),
        call("set", "{t}s", "v", nx=True).then(GET),
        call("set", "{t}s", "v", xx=True).given(S).then(GET),
        call("set", "{t}s", "v", xx=True).then(GET),
        call("set", "{t}s", "v", keepttl=True).given(S, ("EXPIRE", "{t}s", "100")).then(TTL),
        call("set", "{t}s", "v", get=True).given(S).then(GET),
        call("set", "{t}s", "v", get=True),
        call("set", "{t}s", "v", nx=True, get=True).given(S),
        call("set", "{t}s", "v", ex=100, xx=True).given(S).then(TTL),
        call("set", "{t}s", "v", ex=10, px=1000).raises(),
        call("setex", "{t}s", 100, "v").then(GET, TTL),
        call("setex", "{t}s", dt.timedelta(seconds=100), "v").then(TTL),
        call("setnx", "{t}s", "v").then(GET),
        call("setnx", "{t}s", "v").given(S).then(GET),
        call("setrange", "{t}s", 1, "EL").given(S).then(GET),
        call("setrange", "{t}new", 3, "x").then(("GET", "{t}new")),
        call("strlen", "{t}s").given(S),
        call("strlen", "{t}missing"),
        call("substr", "{t}s", 1, 3).given(S),
        call("substr", "{t}s", 1).given(S),
    ],
)

B = ("SET", "{t}b", "foobar")
B2 = ("SET", "{t}b2", "abcdef")

BITMAPS = family(
    "bitmaps",
    [
        call("bitcount", "{t}b").given(B),
        call("bitcount", "{t}b", 1, 1).given(B),
        call("bitcount", "{t}b", 0, -1).given(B),
        call("bitcount", "{t}b", 5, 30, mode="BIT").given(B),
        call("bitcount", "{t}b", 1, 2, "BYTE").given(B),
        call("bitcount", "{t}missing"),
        call("bitfield_ro", "{t}b", "u8", 0).given(B),
        call("bitfield_ro", "{t}b", "u8", 0, items=[("u4", 8), ("i8", 16)]).given(B),
        call("bitop", "AND", "{t}d", "{t}b", "{t}b2").given(B, B2).then(("GET", "{t}d")),
        call("bitop", "OR", "{t}d", "{t}b", "{t}b2").given(B, B2).then(("GET", "{t}d")),
        call("bitop", "XOR", "{t}d", "{t}b", "{t}b2").given(B, B2).then(("GET", "{t}d")),
        call("bitop", "NOT", "{t}d", "{t}b").given(B).then(("STRLEN", "{t}d")),
        call("bitpos", "{t}b", 1).given(B),
        call("bitpos", "{t}b", 0).given(B),
        call("bitpos", "{t}b", 1, 2).given(B),
        call("bitpos", "{t}b", 1, 2, -1).given(B),
        call("bitpos", "{t}b", 1, 7, 15, mode="bit").given(B),
        call("getbit", "{t}b", 1).given(B),
        call("getbit", "{t}b", 100).given(B),
        call("setbit", "{t}b", 7, 1).given(B).then(("GET", "{t}b")),
        call("setbit", "{t}new", 10, 1).then(("STRLEN", "{t}new")),
        call("setbit", "{t}b", 1, 0).given(B),
    ],
)

K = ("SET", "{t}k", "v")
K2 = ("SET", "{t}k2", "w")
H = ("HSET", "{t}h", "f", "v")
KTTL = ("TTL", "{t}k")
KET = ("EXPIRETIME", "{t}k")
KPET = ("PEXPIRETIME", "{t}k")
EXP = ("EXPIRE", "{t}k", "1000")
EXPAT = ("EXPIREAT", "{t}k", str(AT - 1000))
#: DUMP of the string "v" (redis-server 7.0, RDB version 10)
DUMPED = b"\x00\x01v\n\x00\x91\x08\xce\xb2\x198\x8a\xce"

KEYS = family(
    "keys",
    [
        call("copy", "{t}k", "{t}c").given(K).then(("GET", "{t}c")),
        call("copy", "{t}k", "{t}k2").given(K, K2).then(("GET", "{t}k2")),
        call("copy", "{t}k", "{t}k2", replace=True).given(K, K2).then(("GET", "{t}k2")),
        call("copy", "{t}missing", "{t}c"),
        call("delete", "{t}k").given(K).then(("EXISTS", "{t}k")),
        call("delete", "{t}k", "{t}k2", "{t}missing").given(K, K2),
        call("delete", "{t}missing"),
        call("unlink", "{t}k", "{t}k2").given(K, K2),
        call("unlink", "{t}missing"),
        call("dump", "{t}k").given(K).raw(),
        call("dump", "{t}missing"),
        call("exists", "{t}k").given(K),
        call("exists", "{t}k", "{t}k2", "{t}missing").given(K, K2),
        call("exists", "{t}k", "{t}k").given(K),
        call("expire", "{t}k", 100).given(K).then(KTTL),
        call("expire", "{t}k", dt.timedelta(seconds=100)).given(K).then(KTTL),
        call("expire", "{t}k", dt.timedelta(minutes=2)).given(K).then(KTTL),
        call("expire", "{t}missing", 100),
        call("expire", "{t}k", 100, nx=True).given(K).then(KTTL),
        call("expire", "{t}k", 100, nx=True).given(K, EXP).then(KTTL),
        call("expire", "{t}k", 100, xx=True).given(K).then(KTTL),
        call("expire", "{t}k", 100, xx=True).given(K, EXP).then(KTTL),
        call("expire", "{t}k", 100, gt=True).given(K, EXP).then(KTTL),
        call("expire", "{t}k", 2000, gt=True).given(K, EXP).then(KTTL),
        call("expire", "{t}k", 100, lt=True).given(K, EXP).then(KTTL),
        call("expire", "{t}k", 100, nx=True, xx=True).given(K).raises(),
        call("expireat", "{t}k", AT).given(K).then(KET),
        call("expireat", "{t}k", AT_DT).given(K).then(KET),
        call("expireat", "{t}k", AT, nx=True).given(K).then(KET),
        call("expireat", "{t}k", AT, xx=True).given(K).then(KET),
        call("expireat", "{t}k", AT, gt=True).given(K, EXPAT).then(KET),
        call("expireat", "{t}k", AT, lt=True).given(K, EXPAT).then(KET),
        call("expiretime", "{t}k").given(K, ("EXPIREAT", "{t}k", str(AT))),
        call("expiretime", "{t}k").given(K),
        call("expiretime", "{t}missing"),
        call("keys").given(K, K2).norm(UNORDERED),
        # KEYS is for every master: RedisCluster.keys() asks them all; a cluster pipeline
        # sends it to one node (any), so that mode's reply depends on the node drawn
        call("keys", "{t}k*").given(K, K2, H).norm(UNORDERED).no_cluster_pipeline(),
        call("keys", pattern="*2").given(K, K2),
        call("keys", "nothing*"),
        call("move", "{t}k", 5).given(K).then(("EXISTS", "{t}k")).nocluster(),
        call("object", "encoding", "{t}k").given(K),
        call("object", "refcount", "{t}n").given(N),
        call("object", "idletime", "{t}k").given(K),
        call("object", "encoding", "{t}missing"),
        call("persist", "{t}k").given(K, EXP).then(KTTL),
        call("persist", "{t}k").given(K),
        call("pexpire", "{t}k", 100000).given(K).then(KTTL),
        call("pexpire", "{t}k", dt.timedelta(seconds=100)).given(K).then(KTTL),
        call("pexpire", "{t}k", 100000, nx=True).given(K).then(KTTL),
        call("pexpire", "{t}k", 100000, xx=True).given(K, EXP).then(KTTL),
        call("pexpire", "{t}k", 100000, gt=True).given(K, EXP).then(KTTL),
        call("pexpire", "{t}k", 100000, lt=True).given(K, EXP).then(KTTL),
        call("pexpireat", "{t}k", AT * 1000).given(K).then(KPET),
        call("pexpireat", "{t}k", AT_DT).given(K).then(KPET),
        call("pexpireat", "{t}k", AT * 1000, nx=True).given(K).then(KPET),
        call("pexpireat", "{t}k", AT * 1000, gt=True).given(K, EXPAT).then(KPET),
        call("pexpiretime", "{t}k").given(K, ("EXPIREAT", "{t}k", str(AT))),
        call("pexpiretime", "{t}k").given(K),
        call("pttl", "{t}k").given(K, ("PEXPIREAT", "{t}k", str(AT * 1000))).norm(TYPE),
        call("pttl", "{t}k").given(K),
        call("pttl", "{t}missing"),
        call("randomkey").given(K),
        call("randomkey"),
        call("rename", "{t}k", "{t}r").given(K).then(("GET", "{t}r")),
        call("rename", "{t}missing", "{t}r").raises(),
        call("renamenx", "{t}k", "{t}r").given(K),
        call("renamenx", "{t}k", "{t}k2").given(K, K2),
        call("restore", "{t}r", 0, DUMPED).then(("GET", "{t}r")),
        call("restore", "{t}k", 0, DUMPED).given(K).raises(),
        call("restore", "{t}k", 0, DUMPED, replace=True).given(K),
        call(
            "restore",
            "{t}r",
            AT * 1000,
            DUMPED,
            absttl=True,
        ).then(("EXPIRETIME", "{t}r")),
        call("restore", "{t}r", 0, DUMPED, idletime=100).then(("OBJECT", "IDLETIME", "{t}r")),
        call("scan").given(K, K2).norm(SCAN).nocluster(),
        call("scan", 0).given(K, K2).norm(SCAN).nocluster(),
        call("scan", 0, match="{t}k*").given(K, K2, H).norm(SCAN).nocluster(),
        call("scan", 0, "*", 100).given(K, K2).norm(SCAN).nocluster(),
        call("scan", count=1000).given(K, K2).norm(SCAN).nocluster(),
        call("scan", _type="hash").given(K, K2, H).norm(SCAN).nocluster(),
        call("scan", 0, match="*", count=10, _type="string").given(K, H).norm(SCAN).nocluster(),
        call("sort", "{t}l").given(L),
        call("sort", "{t}l", desc=True).given(L),
        call("sort", "{t}l", start=1, num=2).given(L),
        call("sort", "{t}la", alpha=True).given(LA),
        call("sort", "{t}l", store="{t}d").given(L).then(("LRANGE", "{t}d", "0", "-1")),
        call("sort", "{t}l", by="nosort").given(L),
        # a cluster refuses BY and GET patterns (the server's rule, not the client's)
        call("sort", "{t}l", by="{t}w_*", get=["#", "{t}w_*"], alpha=True)
        .given(L, ("MSET", "{t}w_1", "c", "{t}w_2", "b", "{t}w_3", "a"))
        .nocluster(),
        call("sort", "{t}l", get=["#", "{t}w_*"], groups=True)
        .given(L, ("MSET", "{t}w_1", "c", "{t}w_2", "b", "{t}w_3", "a"))
        .nocluster(),
        call("sort_ro", "{t}l").given(L),
        call("sort_ro", "{t}la", alpha=True, desc=True).given(LA),
        call("sort_ro", "{t}l", start=0, num=1).given(L),
        call("touch", "{t}k", "{t}k2", "{t}missing").given(K, K2),
        call("touch", "{t}k").given(K),
        call("ttl", "{t}k").given(K, EXP),
        call("ttl", "{t}k").given(K),
        call("ttl", "{t}missing"),
        call("type", "{t}k").given(K),
        call("type", "{t}h").given(H),
        call("type", "{t}l").given(L),
        call("type", "{t}missing"),
        call("wait", 0, 10).nocluster(),
    ],
)

FORMS = [*STRINGS, *BITMAPS, *KEYS]
