"""Client-side caching in the cluster client (docs/caching.md): one cache and one tracking
connection per node; a cacheable read goes to the cache of its slot's master. Hits,
invalidations by another client's writes, and coherence through a real slot migration
there and back (MIGRATE deletes the moved keys on the source, which invalidates them; the
reads follow ASK and MOVED through the pool), checked as tests/test_cache_coherence.py
checks it."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest
import trio

import trio_maint
from trio_maint import CacheConfig
from trio_maint._sansio.slots import key_slot
from trio_maint.testing import LocalCluster

from .test_cache_coherence import KEYS, Record

pytestmark = pytest.mark.trio


@pytest.fixture
async def writer(redis_cluster: LocalCluster) -> AsyncIterator[trio_maint.RedisCluster]:
    async with trio_maint.open_redis_cluster(redis_cluster.url) as w:
        for key in KEYS:
            await w.delete(key)
        yield w


def caches(rc: trio_maint.RedisCluster) -> list[trio_maint.ClientCache]:
    return [c.cache for c in rc.nodes.values() if c.cache is not None]


async def test_one_cache_per_node(
    redis_cluster: LocalCluster, writer: trio_maint.RedisCluster
) -> None:
    for key in KEYS:
        await writer.set(key, 1)
    async with trio_maint.open_redis_cluster(redis_cluster.url, cache=CacheConfig()) as rc:
        for key in KEYS:
            assert await rc.get(key) == b"1"
        with trio.fail_after(5):
            while sum(c.stats().entries for c in caches(rc)) < len(KEYS):
                for key in KEYS:  # the first reads may come before a tracking connection
                    await rc.get(key)
        for key in KEYS:
            assert await rc.get(key) == b"1"
        nodes = {rc.node_for_key(k) for k in KEYS}
        assert len(caches(rc)) == len(nodes) >= 2
        assert sum(c.stats().hits for c in caches(rc)) >= len(KEYS)
        for key in KEYS:
            await writer.set(key, 2)
        for cache in caches(rc):
            assert await cache.sync()
        for key in KEYS:
            assert await rc.get(key) == b"2"
        assert sum(c.stats().invalidations for c in caches(rc)) == len(KEYS)


async def test_coherent_through_a_slot_migration(
    redis_cluster: LocalCluster, writer: trio_maint.RedisCluster
) -> None:
    rec = Record()
    source = redis_cluster.master_of_slot(key_slot(KEYS[0]))
    target = next(m for m in redis_cluster.masters if m is not source)
    slots = sorted({key_slot(k) for k in KEYS} & set(redis_cluster.slots_of(source)))
    assert slots
    versions = dict.fromkeys(KEYS, 0)

    async with trio_maint.open_redis_cluster(
        redis_cluster.url, cache=CacheConfig(), pool_size=50
    ) as rc:
        stop = trio.Event()

        async def write() -> None:
            rng = random.Random(2)
            while not stop.is_set():
                key = rng.choice(KEYS)
                versions[key] += 1
                try:
                    await writer.set(key, versions[key])
                except Exception as exc:
                    rec.failures.append(f"SET {key}: {exc!r}")
                else:
                    rec.acks[key].append((trio.current_time(), versions[key]))
                await trio.sleep(0.002)

        async def barrier() -> None:
            while not stop.is_set():
                began = trio.current_time()
                for cache in caches(rc):
                    await cache.sync()
                rec.barriers.append((began, trio.current_time()))
                await trio.sleep(0.003)

        async def read(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                key = rng.choice(KEYS)
                started = trio.current_time()
                try:
                    value = await rc.get(key)
                except Exception as exc:
                    rec.failures.append(f"GET {key}: {exc!r}")
                else:
                    rec.reads.append((key, started, int(value) if value is not None else 0))
                await trio.sleep(0.004)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                nursery.start_soon(barrier)
                for seed in range(50):
                    nursery.start_soon(read, seed)
                await trio.sleep(0.5)
                await redis_cluster.migrate_slots_async(slots, source, target, pause=0.3)
                await trio.sleep(0.5)
                await redis_cluster.migrate_slots_async(slots, target, source, pause=0.3)
                await trio.sleep(0.5)
                stop.set()
        for cache in caches(rc):
            await cache.sync()
        wrong = []
        for key in KEYS:
            value = await rc.get(key)
            if (int(value) if value is not None else 0) != versions[key]:
                wrong.append(f"{key}: {value!r}, v{versions[key]} written")
        hits = sum(c.stats().hits for c in caches(rc))
        invalidations = sum(c.stats().invalidations for c in caches(rc))
    stale, in_flight = rec.stale()
    print(
        f"reads={len(rec.reads)} hits={hits} invalidations={invalidations} "
        f"writes={sum(map(len, rec.acks.values()))} barriers={len(rec.barriers)} "
        f"in_flight={in_flight} stale={len(stale)} failed={len(rec.failures)} "
        f"moved={rc.redirections['moved']} ask={rc.redirections['ask']}"
    )
    assert rec.failures == []
    assert stale == []
    assert wrong == []
    assert hits > len(rec.reads) / 4
    assert rc.redirections["moved"] > 0


@contextmanager
def unread(*caches: trio_maint.ClientCache) -> Iterator[None]:
    """The caches' tracking sockets are not read, as if their bytes were late: a write's
    invalidation sent by the server stays there until the block ends."""
    for cache in caches:
        setattr(cache, "_drain", lambda tracker: True)  # noqa: B010
    try:
        yield
    finally:
        for cache in caches:
            delattr(cache, "_drain")


async def own_writes(rc: trio_maint.RedisCluster, form: str) -> None:
    if form == "set":
        await rc.set("{ow}a", "v2")
        await rc.set("{ow2}b", "v2")
    else:
        async with rc.pipeline(transaction=form == "transaction") as pipe:
            if form == "transaction":
                await pipe.set("{ow}a", "v2").incr("{ow}n").execute()
                await rc.set("{ow2}b", "v2")
            else:
                await pipe.set("{ow}a", "v2").set("{ow2}b", "v2").execute()


def cache_of(rc: trio_maint.RedisCluster, key: str) -> trio_maint.ClientCache:
    cache = rc.nodes[rc.node_for_key(key)].cache
    assert cache is not None
    return cache


async def holding(rc: trio_maint.RedisCluster, names: list[str]) -> None:
    """Read ``names`` until the cache of each one's node holds it (a node's client and
    its tracking connection start with the first command routed there)."""

    def held(key: str) -> bool:
        client = rc.nodes.get(rc.node_for_key(key))
        cache = None if client is None else client.cache
        return cache is not None and ("GET", key.encode()) in cache.machine.store

    while not all(held(k) for k in names):
        for key in names:
            await rc.get(key)
        await trio.sleep(0.01)


@pytest.mark.parametrize("form", ["set", "pipeline", "transaction"])
async def test_own_writes_are_read_back(
    redis_cluster: LocalCluster, writer: trio_maint.RedisCluster, form: str
) -> None:
    """Read-your-own-writes: an acknowledged write of this client removed its key's entry
    from the cache of its slot's master, although the server's invalidation has not been
    read yet."""
    names = ["{ow}a", "{ow2}b"]
    assert len({redis_cluster.master_of_slot(key_slot(k)).port for k in names}) == 2
    for key in names:
        await writer.set(key, "v1")
    async with trio_maint.open_redis_cluster(redis_cluster.url, cache=CacheConfig()) as rc:
        with trio.fail_after(10):
            await holding(rc, names)
            with unread(*caches(rc)):
                await own_writes(rc, form)
                for key in names:
                    assert ("GET", key.encode()) not in cache_of(rc, key).machine.store
            for key in names:
                assert await rc.get(key) == b"v2"


async def test_own_write_without_keys_flushes_every_node(
    redis_cluster: LocalCluster, writer: trio_maint.RedisCluster
) -> None:
    for key in KEYS:
        await writer.set(key, 1)
    async with trio_maint.open_redis_cluster(redis_cluster.url, cache=CacheConfig()) as rc:
        with trio.fail_after(10):
            await holding(rc, KEYS)
            assert len(caches(rc)) >= 2
            await rc.eval("return 1", 0)  # may write any key of its node
            for cache in caches(rc):
                stats = cache.stats()
                assert stats.entries == 0 and stats.flushes.get("own_write") == 1
