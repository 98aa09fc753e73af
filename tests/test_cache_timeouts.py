"""The timeout of a cached read (docs/caching.md): the call's ``timeout`` (default
``socket_timeout``) is one deadline for the whole call, also when the read went through
the tracking connection first; the tracking connection's health is judged by
``socket_timeout`` alone, so a tiny per-call timeout does not fail it (nor flush the
cache). The decisions are ``_sansio/cache_deadline.py``'s."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import CacheConfig, MaintConfig
from trio_maint._sansio.cache_deadline import (
    ReadDeadlines,
    Resend,
    due,
    read_deadlines,
    resend,
)
from trio_maint._sansio.unset import UNSET
from trio_maint.testing import RedisServer

from ._delayproxy import DelayProxy

OFF = MaintConfig(mode="disabled")


# ------------------------------------------------------------------------ sans-IO


class Relaxed:
    """A connection whose timeouts are relaxed to at least 10 s."""

    def effective(self, configured: float | None, now: float) -> float | None:
        return None if configured is None else max(configured, 10.0)


def test_the_two_deadlines() -> None:
    assert read_deadlines(UNSET, 5.0, 100.0, None) == ReadDeadlines(105.0, 105.0)
    assert read_deadlines(5.0, 5.0, 100.0, None) == ReadDeadlines(105.0, 105.0)
    # A per-call timeout is the caller's; the connection's health stays socket_timeout's.
    assert read_deadlines(0.5, 5.0, 100.0, None) == ReadDeadlines(100.5, 105.0)
    assert read_deadlines(30.0, 5.0, 100.0, None) == ReadDeadlines(130.0, 105.0)
    assert read_deadlines(None, 5.0, 100.0, None) == ReadDeadlines(float("inf"), 105.0)
    assert read_deadlines(0.5, None, 100.0, None) == ReadDeadlines(100.5, float("inf"))
    # Relaxed during maintenance, as every socket timeout (a floor).
    assert read_deadlines(0.5, 5.0, 100.0, Relaxed()) == ReadDeadlines(110.0, 110.0)
    assert due(None, 1.0, Relaxed()) == float("inf")


def test_what_is_left_for_the_pool() -> None:
    deadlines = ReadDeadlines(10.0, 12.0)
    assert resend(deadlines, 9.25) == Resend(0.75)
    assert resend(deadlines, 10.0) is None  # the call times out: nothing is resent
    assert resend(deadlines, 11.0) is None
    assert resend(ReadDeadlines(float("inf"), 12.0), 11.0) == Resend(None)


# ------------------------------------------------------------------- real servers


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--enable-debug-command", "yes")) as srv:
        yield srv


@pytest.fixture
async def other(server: RedisServer) -> AsyncIterator[trio_maint.Redis]:
    async with trio_maint.open_redis(server.url, maintenance=OFF) as w:
        await w.flushall()
        yield w


async def ready(r: trio_maint.Redis) -> trio_maint.ClientCache:
    cache = r.cache
    assert cache is not None
    with trio.fail_after(5):
        assert await cache.sync()
    return cache


async def timed_out(call: Callable[[], Awaitable[Any]]) -> float:
    """Seconds until ``call()`` raised TimeoutError."""
    started = trio.current_time()
    with pytest.raises(TimeoutError):
        await call()
    return trio.current_time() - started


@pytest.mark.trio
async def test_a_per_call_timeout_is_one_deadline(
    server: RedisServer, other: trio_maint.Redis
) -> None:
    """A server busy for 2 s: ``GET`` with ``timeout=0.5`` raises after 0.5 s, as without
    a cache (it took 1.0 s: 0.5 s on the tracking connection, then 0.5 s more through the
    pool), and the tracking connection is not failed (nothing is flushed)."""
    async with trio_maint.open_redis(server.url, maintenance=OFF, cache=CacheConfig()) as r:
        cache = await ready(r)
        await r.get("warm")
        await r.ping()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(other.execute_command, "DEBUG", "SLEEP", "2")
                await trio.sleep(0.3)  # the server is busy
                elapsed = await timed_out(lambda: r.execute_command("GET", "k", timeout=0.5))
            assert 0.45 <= elapsed < 0.9, elapsed
            assert await cache.sync()
        stats = cache.stats()
        assert (stats.flushes, stats.entries) == ({}, 2)  # "k"'s late reply was stored too


@pytest.mark.trio
async def test_the_default_timeout_is_socket_timeout_once(
    server: RedisServer, other: trio_maint.Redis
) -> None:
    """Without a per-call timeout the call waits ``socket_timeout`` (0.5 s), not twice."""
    async with trio_maint.open_redis(
        server.url, maintenance=OFF, cache=CacheConfig(), socket_timeout=0.5
    ) as r:
        await ready(r)
        await r.ping()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(other.execute_command, "DEBUG", "SLEEP", "2")
                await trio.sleep(0.3)  # the server is busy
                elapsed = await timed_out(lambda: r.get("k"))
            assert 0.45 <= elapsed < 0.9, elapsed


@pytest.mark.trio
async def test_a_short_timeout_does_not_flush_the_cache(server: RedisServer) -> None:
    """A healthy server whose replies to the tracking connection take 0.3 s: one ``GET``
    with a 50 ms timeout times out alone; the tracking connection is not failed and the
    cache keeps its 200 entries (one GET with a 10 µs timeout emptied it: its own miss
    failed the tracking connection)."""
    proxy = DelayProxy(server.port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        url = f"redis://127.0.0.1:{proxy.port}"
        async with trio_maint.open_redis(url, maintenance=OFF, cache=CacheConfig()) as r:
            cache = await ready(r)
            for i in range(200):
                await r.get(f"k{i}")
            proxy.tracking_down = 0.3
            with trio.fail_after(5):
                elapsed = await timed_out(lambda: r.execute_command("GET", "o", timeout=0.05))
                assert elapsed < 0.25, elapsed
                assert await r.get("k1") is None  # a hit: nothing was flushed
                assert await cache.sync()
            stats = cache.stats()
            assert (stats.entries, stats.flushes) == (201, {})
            hits = stats.hits
            assert await r.get("o") is None  # its reply came late, and was stored
            assert cache.stats().hits == hits + 1
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_read_lost_with_the_tracking_connection_gets_what_is_left(
    server: RedisServer, other: trio_maint.Redis
) -> None:
    """The read waits on the tracking connection (its replies 2 s late), which is reset
    after 0.3 s; it is sent again through the pool (whose requests are now 2 s late) with
    the 0.5 s left of its 0.8 s: it times out after 0.8 s, not 0.3 + 0.8 s."""
    proxy = DelayProxy(server.port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        url = f"redis://127.0.0.1:{proxy.port}"
        async with trio_maint.open_redis(url, maintenance=OFF, cache=CacheConfig()) as r:
            cache = await ready(r)
            await r.ping()
            proxy.tracking_down = proxy.pooled_up = 2.0
            with trio.fail_after(10):
                async with trio.open_nursery() as inner:

                    async def reset() -> None:
                        await trio.sleep(0.3)
                        await proxy.drop_tracking()

                    inner.start_soon(reset)
                    elapsed = await timed_out(lambda: r.execute_command("GET", "k", timeout=0.8))
            assert 0.75 <= elapsed < 1.0, elapsed
            assert cache.stats().flushes == {"tracking_lost": 1}
        nursery.cancel_scope.cancel()
