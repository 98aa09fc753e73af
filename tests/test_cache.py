"""Client-side caching against a real redis-server (docs/caching.md): hits and misses,
invalidation on a write by another client (also when the invalidation is on the socket but
no task has read it yet), eviction by entries and by bytes, TTL on a MockClock, BCAST with
prefixes, the tracking connection lost and set up again, malformed invalidations flushing,
nothing left after the client's block."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import CacheConfig, MaintConfig
from trio_maint._client.tracker import Slot
from trio_maint._sansio.cache import entry_size
from trio_maint._sansio.encode import encode_command
from trio_maint.testing import MaintenanceSimulator, RedisServer

from ._fakeserver import open_fake_server, push

pytestmark = pytest.mark.trio

OFF = MaintConfig(mode="disabled")


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
async def writer(server: RedisServer) -> AsyncIterator[trio_maint.Redis]:
    async with trio_maint.open_redis(server.url, maintenance=OFF) as w:
        await w.flushall()
        yield w


async def ready(r: trio_maint.Redis) -> trio_maint.ClientCache:
    """The client's cache once its tracking connection is up."""
    cache = r.cache
    assert cache is not None
    with trio.fail_after(5):
        while not cache.machine.serving:
            await trio.sleep(0.005)
    return cache


async def until(predicate: Any, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.002)


async def test_hits_and_misses(server: RedisServer, writer: trio_maint.Redis) -> None:
    await writer.set("k", "v1")
    await writer.hset("h", mapping={"a": "1", "b": "2"})
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        assert await r.get("k") == b"v1"
        assert await r.get("k") == b"v1"
        assert await r.get(b"k") == b"v1"  # same entry
        assert await r.hgetall("h") == {b"a": b"1", b"b": b"2"}
        h = await r.hgetall("h")
        h[b"c"] = b"3"  # a caller changing a reply does not change the cache
        assert await r.hgetall("h") == {b"a": b"1", b"b": b"2"}
        assert await r.execute_command("GET", "k") == b"v1"
        assert await r.get("missing") is None
        assert await r.get("missing") is None
        await r.set("other", "x")  # not cacheable: through the pool
        stats = cache.stats()
        assert (stats.misses, stats.hits, stats.entries) == (3, 6, 3)
        assert stats.bytes > 0 and stats.hit_ratio == pytest.approx(6 / 9)
        assert cache.connection is not None
        assert all(c is not cache.connection for c in r.pool.connections)


async def test_invalidation_on_a_write_by_another_client(
    server: RedisServer, writer: trio_maint.Redis
) -> None:
    await writer.set("k", "old")
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        assert await r.get("k") == b"old"
        assert await r.get("k") == b"old"
        await writer.set("k", "new")
        await until(lambda: cache.stats().invalidations == 1)
        assert await r.get("k") == b"new"
        await writer.delete("k")
        assert await cache.sync()  # one round trip: the invalidation is handled
        assert await r.get("k") is None
        assert cache.stats().invalidations == 2


async def test_invalidation_on_the_socket_but_not_yet_read(
    server: RedisServer, writer: trio_maint.Redis
) -> None:
    """The guarantee itself: the server has written the invalidation to the tracking
    socket, no task has read it (the event loop is blocked meanwhile), and a cached read
    that starts now returns the new value, not the cached one."""
    await writer.set("k", "old")
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        for round in range(20):
            assert await r.get("k") == (b"old" if round == 0 else f"v{round - 1}".encode())
            assert await r.get("k") is not None  # a hit
            hits = cache.stats().hits
            await writer.set("k", f"v{round}")
            # Block the event loop: the server writes the invalidation to the tracking
            # socket, and the reader task cannot run meanwhile.
            time.sleep(0.02)  # noqa: ASYNC251
            assert await r.get("k") == f"v{round}".encode()
            assert cache.stats().hits == hits  # a miss: the invalidation was read first
            assert cache.stats().invalidations == round + 1


async def test_eviction_by_entries(server: RedisServer, writer: trio_maint.Redis) -> None:
    for i in range(5):
        await writer.set(f"k{i}", i)
    config = CacheConfig(max_size=3)
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=config) as r:
        cache = await ready(r)
        for i in range(4):
            assert await r.get(f"k{i}") == b"%d" % i
        stats = cache.stats()
        assert (stats.entries, stats.evictions) == (3, 1)
        misses = stats.misses
        assert await r.get("k0") == b"0"  # the least recently used was evicted
        assert cache.stats().misses == misses + 1
        assert await r.get("k3") == b"3"
        assert cache.stats().misses == misses + 1


async def test_eviction_by_bytes(server: RedisServer, writer: trio_maint.Redis) -> None:
    value = b"x" * 1000
    for i in range(5):
        await writer.set(f"b{i}", value)
    one = entry_size(("GET", b"b0"), value)
    config = CacheConfig(max_bytes=3 * one + 100)
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=config) as r:
        cache = await ready(r)
        for i in range(5):
            assert await r.get(f"b{i}") == value
        stats = cache.stats()
        assert stats.entries == 3 and stats.evictions == 2
        assert stats.bytes == 3 * one <= config.max_bytes  # type: ignore[operator]
        await writer.set("big", b"y" * 10_000)
        assert await r.get("big") == b"y" * 10_000  # larger than max_bytes: not stored
        assert cache.stats().not_stored == 1 and cache.stats().entries == 3


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_ttl_on_mock_clock(server: RedisServer, mock_clock: trio.testing.MockClock) -> None:
    """TTL in virtual time; no timer of the client runs meanwhile (no socket or connect
    timeout, no idle reaping, a health check far away), so the autojumping clock only
    moves when the test sleeps (and never while a reply is awaited)."""
    config = CacheConfig(ttl=2.5, health_check_interval=10**6)
    async with trio_maint.open_redis(
        server.url,
        maintenance=OFF,
        cache=config,
        socket_timeout=None,
        connect_timeout=None,
        conn_max_idle_time=None,
    ) as r:
        await r.set("k", "v")
        cache = r.cache
        assert cache is not None
        started = time.monotonic()
        while not cache.machine.serving:  # busy: the autojumping clock stays put
            assert time.monotonic() - started < 5
            await trio.lowlevel.checkpoint()
        assert await r.get("k") == b"v"
        stored = trio.current_time()
        await trio.sleep(2.4)
        assert trio.current_time() - stored == pytest.approx(2.4)
        assert await r.get("k") == b"v"
        assert cache.stats().hits == 1
        await trio.sleep(0.2)
        assert await r.get("k") == b"v"  # expired: read again and stored again
        stats = cache.stats()
        assert (stats.hits, stats.expirations, stats.stores) == (1, 1, 2)


async def test_bcast_with_prefixes(server: RedisServer, writer: trio_maint.Redis) -> None:
    await writer.set("user:1", "a")
    await writer.set("other", "b")
    config = CacheConfig(mode="bcast", prefixes=["user:"])
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=config) as r:
        cache = await ready(r)
        assert await r.get("user:1") == b"a"
        assert await r.get("user:1") == b"a"
        assert await r.get("other") == b"b"
        assert await r.get("other") == b"b"  # outside the prefixes: never cached
        assert cache.stats().hits == 1 and cache.stats().entries == 1
        await writer.set("user:1", "c")
        time.sleep(0.02)  # noqa: ASYNC251 (the invalidation is on the socket, unread)
        assert await r.get("user:1") == b"c"
        assert await cache.sync()


async def test_tracking_connection_lost_flushes_and_recovers(
    server: RedisServer, writer: trio_maint.Redis
) -> None:
    await writer.set("k", "v1")
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        await r.get("k")
        first = cache.connection
        assert first is not None
        await writer.client_kill_filter(_id=first.server_info[b"id"])
        await until(lambda: cache.connection is not first and cache.machine.serving)
        stats = cache.stats()
        assert stats.flushes.get("tracking_lost") == 1 and stats.entries == 0
        await writer.set("k", "v2")
        assert await r.get("k") == b"v2"
        assert await r.get("k") == b"v2"
        assert cache.stats().hits == 1


async def test_caching_refused_at_every_miss_does_not_redial_per_read(
    server: RedisServer, writer: trio_maint.Redis
) -> None:
    # An ACL that allows CLIENT TRACKING but not CLIENT CACHING: every miss is refused
    # (``server_changed``). The tracking connection used to be redialed at once each
    # time (~800 connections a second); the backoff now grows.
    await writer.execute_command(
        "ACL", "SETUSER", "nocaching", "on", ">pw", "~*", "+@all", "-client|caching"
    )

    async def accepted() -> int:
        info = await writer.execute_command("INFO", "stats")
        return int(info.split(b"total_connections_received:")[1].split(b"\r\n")[0])

    try:
        url = server.url.replace("redis://", "redis://nocaching:pw@")
        before = await accepted()
        async with trio_maint.open_redis(url, maintenance=OFF, cache=CacheConfig()) as r:
            await ready(r)
            with trio.move_on_after(1.0):
                while True:
                    assert await r.get("k") is None
            dialed = await accepted() - before
        assert r.cache is not None and r.cache.stats().flushes["server_changed"] >= 2
        assert dialed <= 12  # the pool's one, then 0, 0.1, 0.2, 0.4 s, ...
    finally:
        await writer.execute_command("ACL", "DELUSER", "nocaching")


async def test_tracking_turned_off_is_found_by_the_check(
    server: RedisServer, writer: trio_maint.Redis
) -> None:
    """A tracking connection that stops being tracked (as one a proxy re-points to
    another server) fails ``CLIENT CACHING YES``: the cache flushes and sets up again."""
    await writer.set("k", "v")
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        await r.get("k")
        conn, tracker = cache.connection, cache._tracker
        assert conn is not None and tracker is not None
        # Turn tracking off behind the cache's back, on its own connection.
        cache._send(tracker, encode_command(("CLIENT", "TRACKING", "OFF")), [Slot(0)], math.inf)
        await writer.set("k2", "w")
        assert await r.get("k2") == b"w"  # CLIENT CACHING YES refused: read through the pool
        await until(lambda: cache.machine.serving and cache.connection is not conn)
        assert conn.closed
        assert cache.stats().flushes.get("server_changed") == 1
        assert await r.get("k") == b"v"
        assert await r.get("k") == b"v"


async def test_malformed_invalidations_flush(
    server: RedisServer, writer: trio_maint.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """An ``invalidate`` frame of another shape: which keys it meant is unknown, so the
    cache is flushed (``malformed_invalidation``), logged at a bounded rate."""
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        tracker = cache._tracker
        assert tracker is not None
        await writer.set("k", "v")
        with caplog.at_level(logging.WARNING, logger="trio_maint.cache"):
            for frame in ([b"invalidate", 5], [b"invalidate", [1, 2]], [b"invalidate"]):
                await r.get("k")
                assert cache.stats().entries == 1
                cache._push(tracker, frame)
                assert cache.stats().entries == 0
        assert cache.machine.serving
        assert cache.stats().flushes == {"malformed_invalidation": 3}
        lines = [r for r in caplog.records if "malformed invalidation" in r.getMessage()]
        assert len(lines) == 1  # rate-limited
        await r.get("k")
        cache._push(tracker, [b"invalidate", [b"k"]])
        assert cache.stats().entries == 0


MALFORMED = {
    "no key list": b">1\r\n$10\r\ninvalidate\r\n",
    "an integer": push("invalidate", 5),
    "nested lists": push("invalidate", [["k"]]),
    "a map": b">2\r\n$10\r\ninvalidate\r\n%1\r\n$1\r\nk\r\n$1\r\nv\r\n",
    "three items": push("invalidate", ["k"], "x"),
    "a double key": b">2\r\n$10\r\ninvalidate\r\n*1\r\n,1.5\r\n",
    "a null key": b">2\r\n$10\r\ninvalidate\r\n*1\r\n_\r\n",
}


@pytest.mark.parametrize("shape", list(MALFORMED))
async def test_a_malformed_invalidation_is_not_trusted(shape: str) -> None:
    """A buggy server (or proxy) changes a key and sends an invalidation the client cannot
    read: the cached value is not served again (it was: the frame was ignored)."""
    async with open_fake_server() as srv:
        srv.data[b"k"] = b"v1"
        async with trio_maint.open_redis(srv.url, cache=CacheConfig()) as r:
            cache = await ready(r)
            with trio.fail_after(5):
                assert await r.get("k") == b"v1"
                assert await r.get("k") == b"v1"
                assert cache.stats().hits == 1
                tracking = [
                    c
                    for c in srv.connections.values()
                    if (b"CLIENT", b"TRACKING") in [cmd[:2] for cmd in c.commands]
                ]
                assert len(tracking) == 1
                srv.data[b"k"] = b"v2"
                await srv.push(MALFORMED[shape], tracking)
                assert await cache.sync()  # the frame came before the reply of this
                assert await r.get("k") == b"v2"
                assert cache.stats().flushes == {"malformed_invalidation": 1}


class LongestStep(trio.abc.Instrument):
    """The longest step of trio_maint's tasks (seconds of this process's CPU time, which
    other processes on the machine do not inflate): how long they block the loop."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._began = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.process_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith("trio_maint."):
            self.longest = max(self.longest, time.process_time() - self._began)


async def test_a_huge_invalidation_blocks_the_loop_briefly() -> None:
    """One invalidation frame naming 1,000,000 keys (14 MiB: a buggy or hostile server).
    Its bytes are read and parsed over many steps; the frame itself is handled in one
    (rule 1: a value whose invalidation is on the socket is never served), its keys
    checked and matched against the cache in C: some 20 ms on a quiet machine, where the
    key-by-key loops took about 90 ms (docs/caching.md, Bounds). Asserted: the longest
    step of CPU time stays under half of what one Python step per key (building the key
    names) takes in the same process."""
    began = time.process_time()
    names = [b"k%08d" % i for i in range(1_000_000)]
    # This machine's pace now: one Python step per key, as the old loops took.
    per_key_loop = time.process_time() - began
    frame = b">2\r\n$10\r\ninvalidate\r\n*%d\r\n" % len(names)
    frame += b"".join([b"$9\r\n%s\r\n" % name for name in names])
    async with open_fake_server() as srv:
        for name in names[:1000]:
            srv.data[name] = b"x"
        async with trio_maint.open_redis(srv.url, cache=CacheConfig()) as r:
            cache = await ready(r)
            with trio.fail_after(20):
                for name in names[:1000]:
                    await r.get(name)
                assert cache.stats().entries == 1000
                tracking = [
                    c
                    for c in srv.connections.values()
                    if (b"CLIENT", b"TRACKING") in [cmd[:2] for cmd in c.commands]
                ]
                steps = LongestStep()
                trio.lowlevel.add_instrument(steps)
                try:
                    await srv.push(frame, tracking)
                    assert await cache.sync()
                finally:
                    trio.lowlevel.remove_instrument(steps)
            stats = cache.stats()
            assert (stats.entries, stats.invalidations) == (0, 1000)
            print(
                f"longest step {steps.longest * 1000:.1f} ms; a Python step per key "
                f"{per_key_loop * 1000:.1f} ms"
            )
            # Relative to this machine's pace at the time: a fixed 60 ms failed in CI
            # (90 ms while other tests ran); here it measured 30-55 ms against 190-350.
            assert steps.longest < per_key_loop / 2


async def test_cache_config_alias_and_refusals(server: RedisServer) -> None:
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache_config=CacheConfig()) as r:
        assert r.cache is not None
    assert trio_maint.ClientOptions(ssl=True, cache=CacheConfig()).cache is not None  # TLS too
    with pytest.raises(TypeError, match="CacheConfig"):
        trio_maint.ClientOptions(cache={"max_size": 1})  # type: ignore[arg-type]
    async with trio_maint.open_redis(server.url, maintenance=OFF) as plain:
        assert plain.cache is None


async def test_nothing_outlives_the_block(server: RedisServer, writer: trio_maint.Redis) -> None:
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        await writer.set("k", "v")
        await r.get("k")
        conn = cache.connection
    assert conn is not None and conn.closed
    assert cache.connection is None
    clients = await writer.client_list()
    assert len(clients) == 1  # only the writer


async def test_cancelled_reads_leave_the_cache_usable(
    server: RedisServer, writer: trio_maint.Redis
) -> None:
    for i in range(50):
        await writer.set(f"c{i}", i)
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        for i in range(50):
            with trio.move_on_after(0):
                await r.get(f"c{i}")  # cancelled at its first checkpoint
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(r.get, f"c{i}")
            await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()  # some cancelled while their reply is owed
        for i in range(50):
            assert await r.get(f"c{i}") == b"%d" % i
        assert cache.machine.serving and cache.connection is not None
        assert cache.machine.store.reads_in_flight() == 0


async def test_a_stalled_tracking_connection_times_out(server: RedisServer) -> None:
    """Replies that stop coming on the tracking connection: the oldest owed reply's
    deadline (``socket_timeout``) fails it; the read's own deadline (``socket_timeout``
    too: one for the whole call, not one more through the pool) has passed, so it times
    out; tracking is set up again afterwards."""
    async with MaintenanceSimulator(backend=server) as sim:
        async with trio_maint.open_redis(
            sim.url, maintenance=OFF, cache=CacheConfig(), socket_timeout=0.5
        ) as r:
            cache = await ready(r)
            await r.set("stalled", "v")
            first = cache.connection
            sim.stall()
            started = trio.current_time()
            with pytest.raises(trio_maint.TimeoutError):
                await r.get("stalled")
            assert trio.current_time() - started == pytest.approx(0.5, abs=0.2)
            assert cache.stats().flushes.get("tracking_lost") == 1
            sim.unstall()
            await until(lambda: cache.machine.serving and cache.connection is not first)
            assert await r.get("stalled") == b"v"
            assert await r.get("stalled") == b"v"
            assert cache.stats().hits == 1
