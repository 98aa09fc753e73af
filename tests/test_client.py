"""The client API against a real redis-server: commands, pipelines, pub/sub, lifecycle."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import DataError, ResponseError, WatchError, WrongTypeError

pytestmark = pytest.mark.trio


async def test_strings_and_counters(r: trio_maint.Redis) -> None:
    assert await r.set("s", "v") is True
    assert await r.set("s", "w", nx=True) is None
    assert await r.set("s", "w", xx=True, get=True) == b"v"
    assert await r.get("s") == b"w"
    assert await r.mset({"a": 1, "b": 2}) is True
    assert await r.mget("a", "b", "zz") == [b"1", b"2", None]
    assert await r.incr("n") == 1
    assert await r.incr("n", 5) == 6
    assert await r.decr("n", 2) == 4
    assert await r.incrbyfloat("f", 1.5) == 1.5
    assert await r.append("s", "x") == 2
    assert await r.strlen("s") == 2
    assert await r.getrange("s", 0, 0) == b"w"
    assert await r.setnx("s", "q") is False
    assert await r.getdel("a") == b"1"
    assert await r.getset("b", "3") == b"2"


async def test_keys_and_expiry(r: trio_maint.Redis) -> None:
    await r.set("k", "v", ex=100)
    assert 0 < await r.ttl("k") <= 100
    assert 0 < await r.pttl("k") <= 100_000
    assert await r.persist("k") is True
    assert await r.ttl("k") == -1
    assert await r.expire("k", 50) is True
    assert await r.expire("missing", 50) is False
    await r.set("fractional", "v", ex=1.5)
    assert 1000 < await r.pttl("fractional") <= 1500
    assert await r.exists("k", "missing", "k") == 2
    assert await r.type("k") == b"string"
    assert await r.rename("k", "k2") is True
    assert await r.delete("k2", "missing") == 1
    assert await r.dbsize() == 1


async def test_hashes(r: trio_maint.Redis) -> None:
    assert await r.hset("h", "a", 1) == 1
    assert await r.hset("h", mapping={"b": 2, "c": 3}) == 2
    assert await r.hget("h", "a") == b"1"
    assert await r.hgetall("h") == {b"a": b"1", b"b": b"2", b"c": b"3"}
    assert await r.hmget("h", "a", "x") == [b"1", None]
    assert await r.hincrby("h", "a", 2) == 3
    assert await r.hexists("h", "a") is True
    assert await r.hdel("h", "a", "x") == 1
    assert sorted(await r.hkeys("h")) == [b"b", b"c"]
    assert await r.hlen("h") == 2
    with pytest.raises(DataError):
        await r.hset("h")


async def test_lists_and_blocking_pops(r: trio_maint.Redis) -> None:
    assert await r.rpush("l", "a", "b", "c") == 3
    assert await r.lpush("l", "z") == 4
    assert await r.lrange("l", 0, -1) == [b"z", b"a", b"b", b"c"]
    assert await r.lpop("l") == b"z"
    assert await r.rpop("l", 2) == [b"c", b"b"]
    assert await r.llen("l") == 1
    assert await r.blpop(["empty", "l"], 1) == [b"l", b"a"]
    assert await r.brpop("empty", 0.1) is None


async def test_sets(r: trio_maint.Redis) -> None:
    assert await r.sadd("s1", "a", "b", "c") == 3
    await r.sadd("s2", "b", "c", "d")
    assert await r.smembers("s1") == {b"a", b"b", b"c"}
    assert await r.sismember("s1", "a") is True
    assert await r.smismember("s1", "a", "z") == [True, False]
    assert await r.sinter("s1", "s2") == {b"b", b"c"}
    assert await r.sunion("s1", "s2") == {b"a", b"b", b"c", b"d"}
    assert await r.sdiff("s1", "s2") == {b"a"}
    assert await r.scard("s1") == 3
    assert await r.srem("s1", "a") == 1


async def test_sorted_sets(r: trio_maint.Redis) -> None:
    assert await r.zadd("z", {"a": 1, "b": 2, "c": 3.5}) == 3
    assert await r.zscore("z", "c") == 3.5
    assert await r.zrange("z", 0, -1) == [b"a", b"b", b"c"]
    # As redis-py on RESP3: [member, score] pairs (lists), and ZPOPMIN without count one
    # flat pair (see docs/commands.md).
    assert await r.zrange("z", 0, 0, withscores=True) == [[b"a", 1.0]]
    assert await r.zrange("z", 0, 0, desc=True) == [b"c"]
    assert await r.zrangebyscore("z", 2, "+inf") == [b"b", b"c"]
    assert await r.zincrby("z", 1, "a") == 2.0
    assert await r.zrank("z", "c") == 2
    assert await r.zcount("z", "-inf", "(3") == 2
    assert await r.zpopmin("z") == [b"a", 2.0]
    assert await r.zcard("z") == 2
    assert await r.bzpopmin("z", 1) == [b"z", b"b", 2.0]


async def test_server_commands(r: trio_maint.Redis) -> None:
    assert await r.ping() is True
    assert await r.echo("hi") == b"hi"
    info = await r.info("server")
    assert info["redis_version"].startswith(("6", "7", "8"))
    assert isinstance(info["tcp_port"], int)
    seconds, _micros = await r.time()
    assert seconds > 1_600_000_000
    assert await r.flushdb() is True


async def test_scan_iter(r: trio_maint.Redis) -> None:
    await r.mset({f"scan:{i}": i for i in range(250)})
    await r.set("other", 1)
    keys = {k async for k in r.scan_iter(match="scan:*", count=20)}
    assert keys == {f"scan:{i}".encode() for i in range(250)}


async def test_decode_responses(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, decode_responses=True) as r:
        await r.hset("dh", mapping={"ключ": "значение"})
        assert await r.hgetall("dh") == {"ключ": "значение"}
        assert await r.ping() is True
        await r.set("bin", b"\xff\xfe")
        with pytest.raises(DataError, match="decoded"):
            await r.get("bin")
        assert await r.get("dh-missing") is None  # the connection stayed in sync


async def test_bad_argument_type_sends_nothing(r: trio_maint.Redis) -> None:
    with pytest.raises(DataError, match="argument 2"):
        await r.execute_command("SET", "k", None)  # type: ignore[arg-type]
    assert await r.ping() is True
    assert r.pool.stats().removed == 0


async def test_error_subclasses(r: trio_maint.Redis) -> None:
    await r.set("str", "v")
    with pytest.raises(WrongTypeError):
        await r.lpush("str", "x")
    with pytest.raises(trio_maint.NoScriptError):
        await r.execute_command("EVALSHA", "0" * 40, 0)


# ------------------------------------------------------------------ pipelines


async def test_pipeline_without_transaction(r: trio_maint.Redis) -> None:
    async with r.pipeline(transaction=False) as p:
        p.set("a", 1).incr("a").get("a").hset("h", "f", "v").hgetall("h")
        assert len(p) == 5
        assert await p.execute() == [True, 2, b"2", 1, {b"f": b"v"}]


async def test_transaction(r: trio_maint.Redis) -> None:
    async with r.pipeline() as p:
        p.set("t", 1).incr("t").ping()
        assert await p.execute() == [True, 2, True]


async def test_pipeline_errors_raised_or_returned(r: trio_maint.Redis) -> None:
    await r.set("str", "v")
    async with r.pipeline(transaction=False) as p:
        p.set("a", 1).lpush("str", "x").get("a")
        with pytest.raises(WrongTypeError) as info:
            await p.execute()
        assert "command #2" in "".join(info.value.__notes__)
    async with r.pipeline(transaction=False) as p:
        p.set("a", 2).lpush("str", "x").get("a")
        results = await p.execute(raise_on_error=False)
        assert results[0] is True and results[2] == b"2"
        assert isinstance(results[1], WrongTypeError)
    async with r.pipeline(transaction=True) as p:
        p.set("a", 3).lpush("str", "x").get("a")
        results = await p.execute(raise_on_error=False)
        assert isinstance(results[1], WrongTypeError)
        assert results[2] == b"3"


async def test_transaction_with_invalid_command_aborts(r: trio_maint.Redis) -> None:
    async with r.pipeline() as p:
        p.set("x", 1).execute_command("NOSUCHCMD").set("y", 2)
        with pytest.raises(ResponseError, match="unknown command"):
            await p.execute()
    assert await r.exists("x", "y") == 0


async def test_watch_conflict_raises_watch_error(r: trio_maint.Redis) -> None:
    await r.set("balance", 100)
    async with r.pipeline() as p:
        await p.watch("balance")
        balance = int(await p.immediate_execute_command("GET", "balance"))
        await r.set("balance", 50)  # another client changes the watched key
        p.multi()
        p.set("balance", balance - 10)
        with pytest.raises(WatchError):
            await p.execute()
    assert await r.get("balance") == b"50"


async def test_transaction_helper_retries_on_conflict(r: trio_maint.Redis) -> None:
    await r.set("counter", 0)
    attempts = 0

    async def bump(pipe: trio_maint.Pipeline) -> None:
        nonlocal attempts
        attempts += 1
        value = int(await pipe.immediate_execute_command("GET", "counter"))
        if attempts == 1:
            await r.set("counter", 10)
        pipe.multi()
        pipe.set("counter", value + 1)

    await r.transaction(bump, "counter")
    assert attempts == 2
    assert await r.get("counter") == b"11"
    assert r.pool.stats().in_use == 0


async def test_pipeline_is_one_write(r: trio_maint.Redis) -> None:
    async with r.pipeline(transaction=False) as p:
        for i in range(1000):
            p.set(f"p{i}", i)
        results = await p.execute()
    assert results == [True] * 1000
    assert r.pool.stats().created == 1


# -------------------------------------------------------------------- pub/sub


async def test_pubsub_subscribe_and_iterate(r: trio_maint.Redis) -> None:
    async with r.pubsub() as ps:
        await ps.subscribe("news", "sport")
        await ps.psubscribe("w*")
        got = [await ps.get_message(timeout=1) for _ in range(3)]
        assert [(m.type, m.channel) for m in got if m] == [
            ("subscribe", b"news"),
            ("subscribe", b"sport"),
            ("psubscribe", b"w*"),
        ]
        assert await r.publish("news", "n1") == 1
        await r.publish("weather", "sunny")
        messages = []
        async for message in ps:
            messages.append(message)
            if len(messages) == 2:
                break
        assert messages[0] == trio_maint.Message("message", b"news", b"n1")
        assert messages[1] == trio_maint.Message("pmessage", b"weather", b"sunny", b"w*")
        await ps.unsubscribe("news")
        unsub = await ps.get_message(timeout=1)
        assert unsub is not None and unsub.type == "unsubscribe"
        assert ps.channels == {b"sport"} or ps.channels == {"sport"}


async def test_pubsub_sharded_and_ignore_confirmations(r: trio_maint.Redis) -> None:
    async with r.pubsub(ignore_subscribe_messages=True) as ps:
        await ps.ssubscribe("shard")
        await trio.sleep(0.05)
        await r.spublish("shard", "s1")
        message = await ps.get_message(timeout=1)
        assert message == trio_maint.Message("smessage", b"shard", b"s1")
        assert await ps.get_message(timeout=0.05) is None


async def test_pubsub_concurrent_reader_and_subscriber(r: trio_maint.Redis) -> None:
    async with r.pubsub(ignore_subscribe_messages=True) as ps:
        await ps.subscribe("c0")
        received: list[Any] = []

        async def reader() -> None:
            async for message in ps:
                received.append(message.data)
                if len(received) == 2:
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            await ps.subscribe("c1")  # while the reader waits
            await trio.sleep(0.05)
            await r.publish("c0", "m0")
            await r.publish("c1", "m1")
        assert received == [b"m0", b"m1"]


async def test_pubsub_messages_do_not_reach_pool_connections(r: trio_maint.Redis) -> None:
    async with r.pubsub() as ps:
        await ps.subscribe("x")
        await ps.get_message(timeout=1)
        await r.publish("x", "y")
        assert await r.get("nothing") is None
        assert (await ps.get_message(timeout=1)) == trio_maint.Message("message", b"x", b"y")


# ------------------------------------------------------------------ lifecycle


async def test_user_exception_comes_out_plain(redis_url: str) -> None:
    with pytest.raises(KeyError):
        async with trio_maint.open_redis(redis_url, min_idle_conns=1):
            raise KeyError("mine")


def _root_task() -> trio.lowlevel.Task:
    task = trio.lowlevel.current_root_task()
    assert task is not None  # inside trio.run
    return task


async def test_no_task_outlives_the_block(redis_url: str) -> None:
    before = len(_root_task().child_nurseries)
    async with trio_maint.open_redis(redis_url, min_idle_conns=2) as r:
        await r.ping()
        conns = r.pool.connections
    assert all(c.closed for c in conns)
    assert len(_root_task().child_nurseries) == before
    me = trio.lowlevel.current_task()
    assert all(not n.child_tasks for n in me.child_nurseries)


async def test_cancellation_of_the_block(redis_url: str) -> None:
    with trio.move_on_after(0.2) as scope:
        async with trio_maint.open_redis(redis_url) as r:
            await r.execute_command("BLPOP", "never", "0")
    assert scope.cancelled_caught
    assert all(c.closed for c in r.pool.connections)
