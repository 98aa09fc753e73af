"""Client-side caching stays coherent through maintenance (docs/caching.md): a writer
(another client) and 50 caching reader tasks through the simulator's MOVING, MIGRATING /
MIGRATED + MOVING, FAILING_OVER / FAILED_OVER, resets of the tracking connection and a
real move of the data to another redis-server (``migrate``).

What is checked, per read: the guarantee is about invalidations *delivered* to the
client's socket. The test knows a write's invalidation was delivered once a barrier run
after the write's acknowledgement completed: ``r.cache.sync()``, one round trip on the
tracking connection (replies and invalidations come in order on it; the round trip also
proves the connection is still tracked, or the cache is flushed). A task runs barriers
all along; a read that *started* after a barrier ended must return a value at least as
new as every write acknowledged before that barrier began. Reads that started between a
write's acknowledgement and the next barrier are counted (``in flight``) but may return
the previous value: the invalidation may still be on its way. Zero stale reads and zero
failed commands (writes or reads) are required, and the cache must have served hits.
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator

import attrs
import pytest
import trio

import trio_maint
from trio_maint import CacheConfig, MaintConfig
from trio_maint.testing import (
    MaintenanceSimulator,
    RedisServer,
    failover_scenario,
    maintenance_scenario,
    migrate,
    moving_scenario,
)

pytestmark = pytest.mark.trio

READERS = 50
KEYS = [f"cc:{i}" for i in range(20)]
CONFIG = MaintConfig(endpoint_type="internal-ip")


@attrs.define
class Record:
    acks: dict[str, list[tuple[float, int]]] = attrs.field(factory=lambda: defaultdict(list))
    barriers: list[tuple[float, float]] = attrs.field(factory=list)
    reads: list[tuple[str, float, int]] = attrs.field(factory=list)
    failures: list[str] = attrs.field(factory=list)

    def stale(self) -> tuple[list[str], int]:
        """The reads that broke the guarantee, and how many were in flight (allowed)."""
        ends = [end for _, end in self.barriers]
        ack_times = {k: [t for t, _ in v] for k, v in self.acks.items()}
        stale, in_flight = [], 0
        for key, started, version in self.reads:
            acks = self.acks.get(key, [])
            index = bisect.bisect_left(ends, started) - 1  # the last barrier ended before
            required = 0
            if index >= 0:
                began = self.barriers[index][0]
                n = bisect.bisect_left(ack_times.get(key, []), began)
                required = acks[n - 1][1] if n else 0
            if version < required:
                stale.append(f"{key} read v{version} at {started:.4f}, v{required} synced")
            n = bisect.bisect_left(ack_times.get(key, []), started)
            if n and version < acks[n - 1][1]:
                in_flight += 1
        return stale, in_flight


async def writer(w: trio_maint.Redis, rec: Record, stop: trio.Event) -> None:
    versions = dict.fromkeys(KEYS, 0)
    rng = random.Random(1)
    while not stop.is_set():
        key = rng.choice(KEYS)
        versions[key] += 1
        try:
            await w.set(key, versions[key])
        except Exception as exc:
            rec.failures.append(f"SET {key}: {exc!r}")
        else:
            rec.acks[key].append((trio.current_time(), versions[key]))
        await trio.sleep(0.002)


async def barriers(cache: trio_maint.ClientCache, rec: Record, stop: trio.Event) -> None:
    while not stop.is_set():
        began = trio.current_time()
        await cache.sync()
        rec.barriers.append((began, trio.current_time()))
        await trio.sleep(0.003)


async def reader(r: trio_maint.Redis, rec: Record, stop: trio.Event, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        key = rng.choice(KEYS)
        started = trio.current_time()
        try:
            value = await r.get(key)
        except Exception as exc:
            rec.failures.append(f"GET {key}: {exc!r}")
        else:
            rec.reads.append((key, started, int(value) if value is not None else 0))
        await trio.sleep(0.004)


async def run_load(
    url: str, writer_url: str, disturb: Callable[[trio_maint.Redis], Awaitable[None]]
) -> tuple[Record, trio_maint.CacheStats]:
    rec = Record()
    async with (
        trio_maint.open_redis(writer_url, maintenance=CONFIG) as w,
        trio_maint.open_redis(url, maintenance=CONFIG, cache=CacheConfig(), pool_size=READERS) as r,
    ):
        await w.delete(*KEYS)
        cache = r.cache
        assert cache is not None
        with trio.fail_after(5):
            while not cache.machine.serving:
                await trio.sleep(0.01)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer, w, rec, stop)
            nursery.start_soon(barriers, cache, rec, stop)
            for seed in range(READERS):
                nursery.start_soon(reader, r, rec, stop, seed)
            await trio.sleep(0.5)
            await disturb(r)
            await trio.sleep(0.5)
            stop.set()
        # At the end every key reads as the writer left it.
        await cache.sync()
        wrong = []
        for key in KEYS:
            expected = rec.acks[key][-1][1] if rec.acks[key] else 0
            value = await r.get(key)
            if (int(value) if value is not None else 0) != expected:
                wrong.append(f"{key}: {value!r}, v{expected} written")
        stats = cache.stats()
    stale, in_flight = rec.stale()
    print(
        f"reads={len(rec.reads)} hits={stats.hits} misses={stats.misses} "
        f"bypassed={stats.bypassed} writes={sum(map(len, rec.acks.values()))} "
        f"barriers={len(rec.barriers)} in_flight={in_flight} stale={len(stale)} "
        f"failed={len(rec.failures)} flushes={dict(stats.flushes)}"
    )
    assert rec.failures == []
    assert stale == []
    assert wrong == []
    assert len(rec.reads) > 2000 and len(rec.barriers) > 50
    assert stats.hits > len(rec.reads) / 4
    return rec, stats


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


async def test_coherent_through_moving(server: RedisServer) -> None:
    async with MaintenanceSimulator(backend=server) as a:
        async with MaintenanceSimulator(backend=server, host="127.0.0.2", port=a.port) as b:

            async def disturb(r: trio_maint.Redis) -> None:
                await moving_scenario(b, time=2, grace=0.5).run(a)

            with trio.fail_after(30):
                _, stats = await run_load(a.url, a.url, disturb)
    assert stats.flushes.get("moving", 0) >= 1 and stats.flushes.get("handoff", 0) >= 1


async def test_coherent_through_migrating_migrated_and_moving(server: RedisServer) -> None:
    async with MaintenanceSimulator(backend=server) as a:
        async with MaintenanceSimulator(backend=server, host="127.0.0.2", port=a.port) as b:

            async def disturb(r: trio_maint.Redis) -> None:
                scenario = maintenance_scenario(b, lead=0.5, work=0.5, time=2, grace=0.5)
                await scenario.run(a)

            with trio.fail_after(30):
                _, stats = await run_load(a.url, a.url, disturb)
    assert stats.flushes.get("migrating", 0) >= 1 and stats.flushes.get("migrated", 0) >= 1
    assert stats.flushes.get("moving", 0) >= 1 and stats.bypassed > 0


async def test_coherent_through_failover(server: RedisServer) -> None:
    async with MaintenanceSimulator(backend=server) as a:

        async def disturb(r: trio_maint.Redis) -> None:
            for _ in range(2):
                await failover_scenario(lead=0.5, work=0.5).run(a)
                await trio.sleep(0.3)

        with trio.fail_after(30):
            _, stats = await run_load(a.url, a.url, disturb)
    assert stats.flushes.get("failing_over", 0) >= 2 and stats.flushes.get("failed_over", 0) >= 2


async def test_coherent_through_tracking_connection_resets(server: RedisServer) -> None:
    async with MaintenanceSimulator(backend=server) as a:

        async def disturb(r: trio_maint.Redis) -> None:
            cache = r.cache
            assert cache is not None
            for _ in range(3):
                conn = cache.connection
                assert conn is not None
                peer = conn._stream.socket.getsockname()[:2]  # type: ignore[union-attr]
                ids = [c.id for c in a.connections if c.peer == peer]
                assert len(ids) == 1
                await a.drop_connections(ids)
                with trio.fail_after(5):
                    while cache.connection is conn or not cache.machine.serving:
                        await trio.sleep(0.01)
                await trio.sleep(0.4)

        with trio.fail_after(30):
            _, stats = await run_load(a.url, a.url, disturb)
    assert stats.flushes.get("tracking_lost", 0) == 3


async def test_coherent_through_a_real_move_of_the_data() -> None:
    """``migrate``: the data moves to another redis-server; at the switch the simulator
    re-points every open connection at its next command (without its tracking state),
    then MOVING sends the clients to the new endpoint."""
    async with MaintenanceSimulator() as a:
        async with MaintenanceSimulator(host="127.0.0.2", port=a.port) as b:

            async def disturb(r: trio_maint.Redis) -> None:
                await migrate(a, b, time=2, grace=0.5)

            with trio.fail_after(40):
                _, stats = await run_load(a.url, a.url, disturb)
    flushed = stats.flushes
    assert flushed.get("moving", 0) + flushed.get("server_changed", 0) >= 1
