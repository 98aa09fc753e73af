"""Read-your-own-writes with client-side caching (docs/caching.md): a client's own
acknowledged write is never followed by a cached read of the older value from the same
client, although the server's invalidation comes on the tracking connection, which may be
slower than the pooled connection that acknowledged the write. What a command changes is
decided from the command table (``_sansio/cache_writes.py``); the client invalidates it
before the write is sent and again once its reply came (``CacheMachine.own_write``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import CacheConfig, MaintConfig
from trio_maint._client import pipeline as pipeline_module
from trio_maint._client import redis as redis_module
from trio_maint._sansio.cache_config import cache_request
from trio_maint._sansio.cache_machine import CacheMachine, Flushed
from trio_maint._sansio.cache_writes import EVERYTHING, OwnWrite, own_write, own_writes
from trio_maint.testing import RedisServer

from ._delayproxy import DelayProxy

OFF = MaintConfig(mode="disabled")


# ------------------------------------------------------------------------ sans-IO


def keys(*names: bytes) -> OwnWrite:
    return OwnWrite(names)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("SET", "k", "v"), keys(b"k")),
        ((b"set", b"k", 1), keys(b"k")),
        (("Set", "k", "v"), keys(b"k")),
        (("DEL", "a", b"b", 3), keys(b"a", b"b", b"3")),
        (("MSET", "a", 1, "b", 2), keys(b"a", b"b")),
        (("EXPIRE", "k", 10), keys(b"k")),
        (("RENAME", "a", "b"), keys(b"a", b"b")),
        (("XGROUP", "CREATE", "s", "g", "$"), keys(b"s")),
        (("SORT", "l", "STORE", "d"), keys(b"l", b"d")),
        (("PFCOUNT", "h"), keys(b"h")),  # updates the cached cardinality
        (("EVAL", "return 1", 2, "a", "b", "x"), keys(b"a", b"b")),
        (("FCALL", "f", 1, "a"), keys(b"a")),
        (("FLUSHDB",), EVERYTHING),
        (("FLUSHALL", "ASYNC"), EVERYTHING),
        (("SWAPDB", 0, 1), EVERYTHING),
        (("FUNCTION", "FLUSH"), EVERYTHING),
        (("FUNCTION", "LOAD", "#!lua name=l\n"), EVERYTHING),
        (("EVAL", "redis.call('SET', 'k', 1)", 0), EVERYTHING),
        (("EVALSHA", "0" * 40, 0), EVERYTHING),
        (("FCALL", "f", 0), EVERYTHING),
        (("MIGRATE", "h", 1, "", 0, 5, "KEYS", "a", "b"), EVERYTHING),
        (("JSON.SET", "k", "$", "1"), EVERYTHING),  # not in the table: anything
        (("GET", "k"), None),
        (("MGET", "a", "b"), None),
        (("EVAL_RO", "return 1", 1, "a"), None),
        (("FCALL_RO", "f", 1, "a"), None),
        (("PING",), None),
        (("WATCH", "k"), None),
        (("PUBLISH", "c", "m"), None),
        (("SPUBLISH", "c", "m"), None),
        (("CLIENT", "TRACKING", "ON"), None),
        (("CONFIG", "SET", "maxmemory", "0"), None),
        (("MULTI",), None),
        (("EXEC",), None),
        (("SET", "k"), None),  # the server refuses it: nothing changes
    ],
)
def test_what_a_command_may_change(args: tuple[Any, ...], expected: OwnWrite | None) -> None:
    assert own_write(args) == expected


def test_keys_compare_as_the_cache_stores_them() -> None:
    write = own_write(("SET", "é", "v"))
    request = cache_request(("GET", "é"))
    assert write is not None and request is not None
    assert write.keys == request[1] == ("é".encode(),)
    write = own_write(("SET", 7, "v"))
    request = cache_request(("GET", 7))
    assert write is not None and request is not None and write.keys == request[1]


def test_a_pipeline_changes_what_its_commands_change() -> None:
    commands = [("GET", "a"), ("SET", "b", 1), ("PING",), ("DEL", "c", "d")]
    assert own_writes(commands) == keys(b"b", b"c", b"d")
    assert own_writes([("GET", "a"), ("PING",)]) is None
    assert own_writes([("SET", "b", 1), ("FLUSHDB",), ("SET", "c", 1)]) is EVERYTHING
    assert own_writes([]) is None


def test_own_write_invalidates_entries_and_reads_in_flight() -> None:
    machine = CacheMachine(CacheConfig())
    machine.start(0.0)
    machine.connected(0.0)
    for name in (b"a", b"b"):
        ticket = machine.begin((b"GET", name), (name,))
        assert ticket is not None and machine.finish(ticket, b"old", 0.0)
    in_flight = machine.begin((b"GET", b"c"), (b"c",))
    assert in_flight is not None
    assert machine.own_write(keys(b"a", b"c")) == []
    assert (b"GET", b"a") not in machine.store and (b"GET", b"b") in machine.store
    assert not machine.finish(in_flight, b"old", 0.0)  # its reply may be older
    stats = machine.stats()
    assert (stats.invalidations, stats.not_stored, stats.flushes) == (1, 1, {})
    # Keys that cannot be known: everything, counted once per flush that did something.
    assert machine.own_write(EVERYTHING) == [Flushed("own_write", 1)]
    assert machine.own_write(EVERYTHING) == []
    assert machine.stats().flushes == {"own_write": 1}


# ------------------------------------------------------------------- real servers


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
async def writer(server: RedisServer) -> AsyncIterator[trio_maint.Redis]:
    async with trio_maint.open_redis(server.url, maintenance=OFF) as w:
        await w.flushall()
        yield w


@pytest.fixture
async def slow_tracking(server: RedisServer) -> AsyncIterator[DelayProxy]:
    """The server's invalidations (and replies) reach the tracking connection 0.2 s late."""
    proxy = DelayProxy(server.port, tracking_down=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        yield proxy
        nursery.cancel_scope.cancel()


async def cached(r: trio_maint.Redis, key: str) -> trio_maint.ClientCache:
    """``r``'s cache holding ``key``'s value."""
    cache = r.cache
    assert cache is not None
    with trio.fail_after(5):
        assert await cache.sync()
    await r.get(key)
    before = cache.stats().hits
    await r.get(key)
    assert cache.stats().hits == before + 1
    return cache


async def run_pipeline(r: trio_maint.Redis, transaction: bool) -> None:
    async with r.pipeline(transaction=transaction) as pipe:
        pipe.get("other").set("k", "v2").incr("n")
        await pipe.execute()


async def run_watched(r: trio_maint.Redis) -> None:
    async with r.pipeline() as pipe:
        await pipe.watch("n")
        await pipe.set("k", "v2")  # before multi(): runs at once, on the watching connection
        assert await r.get("k") == b"v2"
        pipe.multi()
        pipe.incr("n")
        await pipe.execute()


WRITES: dict[str, Callable[[trio_maint.Redis], Awaitable[Any]]] = {
    "set": lambda r: r.set("k", "v2"),
    "execute_command": lambda r: r.execute_command("SET", "k", "v2"),
    "pipeline": lambda r: run_pipeline(r, False),
    "transaction": lambda r: run_pipeline(r, True),
    "watched": run_watched,
    "eval with its key": lambda r: r.eval("return redis.call('SET', KEYS[1], 'v2')", 1, "k"),
    "eval without keys": lambda r: r.eval("return redis.call('SET', 'k', 'v2')", 0),
}


@pytest.mark.trio
@pytest.mark.parametrize("form", list(WRITES))
async def test_own_write_then_read_is_fresh_with_a_slow_tracking_connection(
    server: RedisServer, writer: trio_maint.Redis, slow_tracking: DelayProxy, form: str
) -> None:
    """The write is acknowledged on a pooled connection; the server's invalidation is
    still on its way to the tracking connection; the read that follows must not be
    served the older value (it was before: /tmp/adversary/r01_own_write_stale.py)."""
    await writer.set("k", "v1")
    url = f"redis://127.0.0.1:{slow_tracking.port}"
    async with trio_maint.open_redis(url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await cached(r, "k")
        with trio.fail_after(5):
            await WRITES[form](r)
            assert await r.get("k") == b"v2"
            assert await cache.sync()
            assert await r.get("k") == b"v2"


@pytest.mark.trio
@pytest.mark.parametrize("command", [("FLUSHDB",), ("DEL", "k")])
async def test_own_delete_then_read_is_fresh_with_a_slow_tracking_connection(
    server: RedisServer,
    writer: trio_maint.Redis,
    slow_tracking: DelayProxy,
    command: tuple[str, ...],
) -> None:
    await writer.set("k", "v1")
    url = f"redis://127.0.0.1:{slow_tracking.port}"
    async with trio_maint.open_redis(url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await cached(r, "k")
        with trio.fail_after(5):
            await r.execute_command(*command)
            assert await r.get("k") is None
            if command[0] == "FLUSHDB":
                assert cache.stats().flushes.get("own_write") == 1


@pytest.mark.trio
async def test_own_swapdb_flushes(server: RedisServer, writer: trio_maint.Redis) -> None:
    """The server sends no invalidation for SWAPDB: this client's own SWAPDB flushes its
    cache (another client's cannot be seen: docs/caching.md)."""
    await writer.set("k", "db0")
    async with trio_maint.open_redis(server.url + "/1", maintenance=OFF) as w1:
        await w1.set("k", "db1")
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await cached(r, "k")
        with trio.fail_after(5):
            await r.swapdb(0, 1)
            assert await r.get("k") == b"db1"
            assert cache.stats().flushes.get("own_write") == 1
            await r.swapdb(0, 1)


@pytest.mark.trio
async def test_another_clients_swapdb_is_not_seen_until_the_ttl(
    server: RedisServer, writer: trio_maint.Redis
) -> None:
    """What docs/caching.md says no client-side cache can see: the server sends no
    invalidation for another client's SWAPDB; ``ttl`` bounds how long the older value is
    served (if this fails at the first assertion, the server now invalidates on SWAPDB:
    update the docs)."""
    await writer.set("k", "db0")
    async with trio_maint.open_redis(server.url + "/1", maintenance=OFF) as w1:
        await w1.set("k", "db1")
    config = CacheConfig(ttl=0.5)
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=config) as r:
        cache = await cached(r, "k")
        with trio.fail_after(5):
            await writer.swapdb(0, 1)
            assert await cache.sync()
            assert await r.get("k") == b"db0"  # stale: nothing told the cache
            await trio.sleep(0.5)
            assert await r.get("k") == b"db1"
            await writer.swapdb(0, 1)


@pytest.mark.trio
async def test_a_read_stored_while_the_write_ran_is_dropped(
    server: RedisServer, writer: trio_maint.Redis
) -> None:
    """The write is invalidated when sent, then travels 0.3 s to the server; a read that
    starts meanwhile misses, runs before the write and stores the older value. The
    server's invalidation of it reaches the tracking connection 0.2 s after the write's
    reply: the invalidation when the reply came removed the entry already."""
    await writer.set("k", "v1")
    proxy = DelayProxy(server.port, tracking_down=0.2, pooled_up=0.3)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        url = f"redis://127.0.0.1:{proxy.port}"
        async with trio_maint.open_redis(url, maintenance=OFF, cache=CacheConfig()) as r:
            await r.ping()  # a pooled connection, before the delays matter for the test
            cache = await cached(r, "k")
            with trio.fail_after(5):
                async with trio.open_nursery() as inner:
                    inner.start_soon(r.set, "k", "v2")
                    await trio.sleep(0.05)
                    stores = cache.stats().stores
                    assert await r.get("k") == b"v1"  # ran before the write
                    assert cache.stats().stores == stores + 1  # ... and was stored
                assert await r.get("k") == b"v2"
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_read_in_flight_when_the_write_is_sent_is_not_stored(
    server: RedisServer, writer: trio_maint.Redis, slow_tracking: DelayProxy
) -> None:
    await writer.set("k", "v1")
    url = f"redis://127.0.0.1:{slow_tracking.port}"
    async with trio_maint.open_redis(url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = r.cache
        assert cache is not None
        with trio.fail_after(5):
            assert await cache.sync()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(r.get, "k")  # a miss: its reply is 0.2 s away
                await trio.sleep(0.05)
                await r.set("k", "v2")
            stats = cache.stats()
            assert (stats.stores, stats.not_stored) == (0, 1)
            assert await r.get("k") == b"v2"


@pytest.mark.trio
async def test_nothing_is_looked_up_without_a_cache(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Zero cost when caching is off: no command is classified."""

    def refuse(*args: Any) -> None:
        raise AssertionError("own_write called without a cache")

    monkeypatch.setattr(redis_module, "own_write", refuse)
    monkeypatch.setattr(pipeline_module, "own_write", refuse)
    monkeypatch.setattr(pipeline_module, "own_writes", refuse)
    async with trio_maint.open_redis(server.url, maintenance=OFF) as r:
        await r.set("k", "v")
        await run_pipeline(r, True)
        await run_watched(r)
