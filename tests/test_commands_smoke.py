"""One smoke test per command family of the generated surface, against the real server
(keys prefixed ``smoke:``), and the same families queued in a pipeline. Destructive server
commands run on a redis-server of their own."""

from __future__ import annotations

import datetime

import pytest
import trio

import trio_maint
from trio_maint import DataError, ResponseError
from trio_maint.testing import RedisServer

pytestmark = pytest.mark.trio

P = "smoke:"


async def test_strings(r: trio_maint.Redis) -> None:
    k = P + "s"
    assert await r.set(k, "v", ex=datetime.timedelta(seconds=100)) is True
    assert 0 < await r.ttl(k) <= 100
    assert await r.set(k, "w", nx=True) is None
    assert await r.set(k, "w", xx=True, get=True) == b"v"
    assert await r.set(k, "x", exat=datetime.datetime.now() + datetime.timedelta(hours=1))
    assert await r.set(k, "x", pxat=int(trio.current_time() * 0) + 4102444800000)
    assert await r.getex(k, persist=True) == b"x"
    assert await r.ttl(k) == -1
    assert await r.mset({P + "a": 1, P + "b": 2}) is True
    assert await r.mget([P + "a", P + "b"]) == [b"1", b"2"]
    assert await r.mget(P + "a", P + "nope") == [b"1", None]
    assert await r.incrby(P + "a", 5) == 6
    assert await r.incrbyfloat(P + "a", 0.5) == 6.5
    assert await r.append(P + "b", "x") == 2
    assert await r.getrange(P + "b", 0, 0) == b"2"
    assert await r.setex(P + "e", datetime.timedelta(seconds=5), "v") is True
    assert await r.psetex(P + "e", 5000, "v") is True
    assert await r.strlen(P + "e") == 1
    assert await r.lcs(P + "b", P + "e", len=True) == 0
    with pytest.raises(DataError):
        await r.set(k, "v", ex=1, px=1)


async def test_bitmaps(r: trio_maint.Redis) -> None:
    k = P + "bits"
    assert await r.setbit(k, 7, 1) == 0
    assert await r.getbit(k, 7) == 1
    assert await r.bitcount(k) == 1
    assert await r.bitcount(k, 0, 0) == 1
    assert await r.bitpos(k, 1) == 7
    assert await r.bitop("NOT", P + "inv", k) == 1
    assert await r.bitfield(k, "GET", "u8", 0) == [1]
    assert await r.bitfield_ro(k, "u8", 0) == [1]


async def test_keys(r: trio_maint.Redis) -> None:
    k = P + "k"
    await r.set(k, "v")
    assert await r.expire(k, 100, nx=True) is True
    assert await r.expire(k, 50, gt=True) is False
    assert await r.expire(k, datetime.timedelta(seconds=200), xx=True) is True
    assert await r.pexpire(k, 150_000, lt=True) is True
    assert await r.expire(k, seconds=100) is True  # the keyword of the hand-written method
    assert await r.expiretime(k) > 0
    assert await r.persist(k) is True
    assert await r.copy(k, P + "k2") is True
    assert await r.exists(k, P + "k2") == 2
    assert await r.type(k) == b"string"
    assert await r.object_encoding(k) == b"embstr"
    assert await r.object("encoding", k) == b"embstr"
    dump = await r.dump(k)
    assert dump is not None
    assert await r.restore(P + "k3", 0, dump) == b"OK"
    assert await r.rename(P + "k3", P + "k4") is True
    assert await r.touch(k, P + "k4") == 2
    _cursor, keys = await r.scan(0, match=P + "*", count=100, _type="string")
    assert set(keys) >= {k.encode(), b"smoke:k2", b"smoke:k4"}
    assert [x async for x in r.scan_iter(match=P + "k*", _type="string")]
    await r.rpush(P + "sortme", 3, 1, 2)
    assert await r.sort(P + "sortme") == [b"1", b"2", b"3"]
    assert await r.sort(P + "sortme", desc=True, start=0, num=1) == [b"3"]
    assert await r.sort_ro(P + "sortme", alpha=True) == [b"1", b"2", b"3"]
    assert await r.delete(k, P + "k2") == 2
    assert await r.unlink(P + "k4") == 1


async def test_hashes(r: trio_maint.Redis) -> None:
    h = P + "h"
    assert await r.hset(h, "a", 1) == 1
    assert await r.hset(h, mapping={"b": 2}, items=["c", 3]) == 2
    assert await r.hmget(h, ["a", "b"]) == [b"1", b"2"]
    assert await r.hmget(h, "a", "c") == [b"1", b"3"]
    assert await r.hgetall(h) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    assert await r.hincrby(h, "a", 2) == 3
    assert await r.hincrbyfloat(h, "a", 0.5) == 3.5
    assert await r.hstrlen(h, "b") == 1
    assert await r.hexists(h, "a") is True
    assert await r.hsetnx(h, "a", 9) is False
    cursor, fields = await r.hscan(h)
    assert cursor == 0 and fields[b"b"] == b"2"
    assert sorted([x async for x in r.hscan_iter(h)]) == sorted(fields.items())
    assert len(await r.hrandfield(h, 2, withvalues=True)) == 2  # [field, value] pairs
    assert await r.hdel(h, "a", "b") == 2
    assert await r.hkeys(h) == [b"c"]
    assert await r.hvals(h) == [b"3"]
    assert await r.hlen(h) == 1


async def test_lists(r: trio_maint.Redis) -> None:
    lst = P + "l"
    assert await r.rpush(lst, "a", "b", "c") == 3
    assert await r.lpush(lst, "z") == 4
    assert await r.lrange(lst, 0, -1) == [b"z", b"a", b"b", b"c"]
    assert await r.lpos(lst, "b") == 2
    assert await r.linsert(lst, "BEFORE", "a", "y") == 5
    assert await r.lindex(lst, 1) == b"y"
    assert await r.lset(lst, 0, "q") is True
    assert await r.lrem(lst, 1, "q") == 1
    assert await r.ltrim(lst, 0, 2) is True
    assert await r.lmove(lst, P + "l2", "LEFT", "RIGHT") == b"y"
    assert await r.rpoplpush(lst, P + "l2") == b"b"
    assert await r.lmpop(2, lst, P + "l2", direction="LEFT", count=1) == [b"smoke:l", [b"a"]]
    assert await r.blpop([P + "l2"], timeout=1) == [b"smoke:l2", b"b"]
    assert await r.brpop(P + "empty", timeout=0.05) is None
    assert await r.blmove(P + "l2", lst, 1, "RIGHT", "LEFT") == b"y"
    assert await r.blmpop(1, 1, lst, direction="RIGHT") == [b"smoke:l", [b"y"]]
    assert await r.rpushx(P + "none", "x") == 0
    assert await r.llen(lst) == 0


async def test_sets(r: trio_maint.Redis) -> None:
    a, b = P + "{s}a", P + "{s}b"
    assert await r.sadd(a, 1, 2, 3) == 3
    assert await r.sadd(b, 3, 4) == 2
    assert await r.sinter([a, b]) == {b"3"}
    assert await r.sunion(a, b) == {b"1", b"2", b"3", b"4"}
    assert await r.sdiff([a], b) == {b"1", b"2"}
    assert await r.sintercard(2, [a, b]) == 1
    assert await r.sinterstore(P + "{s}c", [a, b]) == 1
    assert await r.smismember(a, [1, 9]) == [True, False]
    assert await r.sismember(a, 1) is True
    assert await r.smove(a, b, 1) is True
    assert await r.scard(a) == 2
    assert sorted([x async for x in r.sscan_iter(a)]) == [b"2", b"3"]
    assert await r.srandmember(a, 5) is not None
    assert await r.spop(a, 2) is not None
    assert await r.smembers(a) == set()


async def test_sorted_sets(r: trio_maint.Redis) -> None:
    z = P + "{z}z"
    assert await r.zadd(z, {"a": 1, "b": 2, "c": 3, "d": 4}) == 4
    assert await r.zadd(z, {"a": 5}, incr=True) == 6.0
    assert await r.zadd(z, {"a": 1}, xx=True, ch=True) == 1
    assert await r.zrange(z, 0, -1, withscores=True) == [
        [b"a", 1.0],
        [b"b", 2.0],
        [b"c", 3.0],
        [b"d", 4.0],
    ]
    assert await r.zrange(z, 2, 4, byscore=True) == [b"b", b"c", b"d"]
    assert await r.zrange(z, 4, 2, byscore=True, desc=True) == [b"d", b"c", b"b"]
    assert await r.zrange(z, "-inf", "+inf", byscore=True, offset=1, num=2) == [b"b", b"c"]
    assert await r.zrange(z, "[a", "[b", bylex=True) == [b"a", b"b"]
    assert await r.zrange(z, 0, 0, withscores=True, score_cast_func=int) == [[b"a", 1]]
    assert await r.zrevrange(z, 0, 0) == [b"d"]
    assert await r.zrangebyscore(z, 1, 2, withscores=True) == [[b"a", 1.0], [b"b", 2.0]]
    assert await r.zrevrangebyscore(z, 4, 3) == [b"d", b"c"]
    assert await r.zrangebylex(z, "-", "[b", 0, 1) == [b"a"]
    assert await r.zrangestore(P + "{z}dst", z, 0, 1) == 2
    assert await r.zscore(z, "b") == 2.0
    assert await r.zmscore(z, ["a", "x"]) == [1.0, None]
    assert await r.zrank(z, "c") == 2
    assert await r.zrevrank(z, "c") == 1
    assert await r.zcount(z, "(1", 4) == 3
    assert await r.zlexcount(z, "-", "+") == 4
    assert await r.zincrby(z, 1, "a") == 2.0
    assert await r.zunion([z, P + "{z}dst"], aggregate="MAX") == [b"a", b"b", b"c", b"d"]
    assert await r.zinter({z: 1, P + "{z}dst": 2}, withscores=True) == [[b"a", 4.0], [b"b", 6.0]]
    assert await r.zunionstore(P + "{z}u", [z]) == 4
    assert await r.zdiff([z, P + "{z}dst"]) == [b"c", b"d"]
    _cursor, pairs = await r.zscan(z)
    assert (b"a", 2.0) in pairs
    assert await r.zpopmin(z) == [b"a", 2.0]
    assert await r.zpopmax(z, 1) == [[b"d", 4.0]]
    assert await r.bzpopmin([z], 1) == [b"smoke:{z}z", b"b", 2.0]
    assert await r.zmpop(1, [z], min=True) == [b"smoke:{z}z", [[b"c", 3.0]]]
    assert await r.bzmpop(0.05, 1, [z], max=True) is None
    assert await r.zremrangebyrank(P + "{z}u", 0, 0) == 1
    assert await r.zcard(P + "{z}u") == 3


async def test_hyperloglog(r: trio_maint.Redis) -> None:
    assert await r.pfadd(P + "{h}a", "x", "y") == 1
    assert await r.pfadd(P + "{h}b", "z") == 1
    assert await r.pfcount(P + "{h}a", P + "{h}b") == 3
    assert await r.pfmerge(P + "{h}c", P + "{h}a", P + "{h}b") is True
    assert await r.pfcount(P + "{h}c") == 3


async def test_geo(r: trio_maint.Redis) -> None:
    g = P + "g"
    places: list[str | float] = [13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania"]
    assert await r.geoadd(g, places) == 2
    with pytest.raises(DataError):
        await r.geoadd(g, [1, 2])
    dist = await r.geodist(g, "Palermo", "Catania", unit="km")
    assert dist is not None and 166 < dist < 167
    assert len(await r.geohash(g, "Palermo")) == 1
    pos = await r.geopos(g, "Palermo", "nowhere")
    assert pos[1] is None and pos[0] is not None
    near = await r.georadius(g, 15, 37, 200, unit="km", withdist=True, sort="ASC")
    assert near[0][0] == b"Catania" and isinstance(near[0][1], float)
    found = await r.geosearch(g, member="Palermo", radius=200, unit="km", withcoord=True)
    assert isinstance(found[0][1], tuple)
    assert (
        await r.geosearchstore(P + "g2", g, longitude=15, latitude=37, radius=200, unit="km") == 2
    )
    assert await r.georadiusbymember(g, "Palermo", 10, unit="km") == [b"Palermo"]


async def test_transactions(r: trio_maint.Redis) -> None:
    async with r.pipeline() as pipe:
        pipe.set(P + "t", 1).incr(P + "t").expire(P + "t", datetime.timedelta(seconds=9))
        pipe.zadd(P + "tz", {"a": 1}).zrange(P + "tz", 0, -1, withscores=True)
        assert await pipe.execute() == [True, 2, True, 1, [[b"a", 1.0]]]
    async with r.pipeline() as pipe:
        await pipe.watch(P + "t")
        pipe.multi()
        pipe.get(P + "t")
        assert await pipe.execute() == [b"2"]


async def test_server_and_connection(r: trio_maint.Redis) -> None:
    assert await r.ping() is True
    assert await r.ping("hi") == b"hi"
    assert await r.echo("x") == b"x"
    assert isinstance(await r.client_id(), int)
    assert await r.client_setname("smoke") is True
    assert await r.client_getname() in (b"smoke", None)  # another pooled connection: None
    assert any("id" in c for c in await r.client_list())
    assert "id" in await r.client_info()
    assert (await r.config_get("maxmemory")) == {"maxmemory": "0"}
    assert await r.config_set("slowlog-max-len", 128) is True
    assert "redis_version" in await r.info("server")
    assert isinstance(await r.lastsave(), datetime.datetime)
    assert isinstance((await r.time())[0], int)
    assert isinstance(await r.dbsize(), int)
    assert "peak.allocated" in await r.memory_stats()
    assert await r.memory_usage(P + "none") is None
    assert await r.command_count() > 200
    assert await r.command_getkeys("GET", "k") == [b"k"]
    assert b"get" in await r.command_list(pattern="ge*")
    assert isinstance(await r.slowlog_get(1), list)
    assert await r.acl_whoami() == b"default"
    assert await r.acl_cat()
    assert await r.client_no_evict("off") == b"OK"
    assert await r.pubsub_numsub("nochan") == [[b"nochan", 0]]
    assert await r.publish("nochan", "x") == 0
    assert await r.wait(0, 10) == 0
    assert len(await r.script_load("return 1")) == 40
    assert await r.script_exists("0" * 40) == [False]
    assert await r.eval("return ARGV[1]", 0, "a") == b"a"
    with pytest.raises(ResponseError):
        await r.execute_command("NO-SUCH-COMMAND")


async def test_destructive_server_commands() -> None:
    async with RedisServer() as server, trio_maint.open_redis(server.url) as r:
        await r.set("k", 1)
        assert await r.swapdb(0, 1) is True
        assert await r.dbsize() == 0
        assert await r.flushall() is True
        assert await r.config_resetstat() is True
        assert await r.acl_setuser("smoke", enabled=True, passwords=["+pw"], keys=["k*"])
        assert b"smoke" in await r.acl_users()
        assert await r.acl_deluser("smoke") == 1
        assert await r.function_flush() is True
        assert await r.script_flush() is True
        assert await r.latency_reset() == 0
        assert await r.slowlog_reset() is True
        assert await r.save() is True


async def test_pipeline_families(r: trio_maint.Redis) -> None:
    async with r.pipeline(transaction=False) as pipe:
        pipe.set(P + "p", "v", px=datetime.timedelta(seconds=10)).get(P + "p")
        pipe.setbit(P + "pb", 1, 1).bitcount(P + "pb")
        pipe.hset(P + "ph", mapping={"a": 1}).hgetall(P + "ph")
        pipe.rpush(P + "pl", 1, 2).lrange(P + "pl", 0, -1)
        pipe.sadd(P + "ps", 1).smembers(P + "ps")
        pipe.zadd(P + "pz", {"m": 1}).zpopmin(P + "pz")
        pipe.pfadd(P + "pp", 1).pfcount(P + "pp")
        pipe.geoadd(P + "pg", [1, 2, "x"]).geopos(P + "pg", "x")
        pipe.expire(P + "p", 100, gt=True).scan(0, match=P + "p", _type="string")
        pipe.ping().echo("e").config_get("maxmemory")
        got = await pipe.execute()
    assert got[:13] == [
        True,
        b"v",
        0,
        1,
        1,
        {b"a": b"1"},
        2,
        [b"1", b"2"],
        1,
        {b"1"},
        1,
        [b"m", 1.0],
        1,
    ]
    assert got[13:16] == [1, 1, got[15]] and got[15][0] is not None
    assert got[16] is True and got[17] == (0, [b"smoke:p"])
    assert got[18:] == [True, b"e", {"maxmemory": "0"}]


async def test_cluster_families(r: trio_maint.Redis) -> None:
    del r  # the same methods on the cluster client: see the redis-py forms harness
    assert trio_maint.RedisCluster.zrange is trio_maint.Redis.zrange
