"""Client-side caching: cached GET against uncached, and against redis-py's own client-side
cache (sync client, RESP3, ``cache_config``), side by side on one redis-server; and the
memory each cached entry takes.

Cases (each one task, sequential, keys of 100-byte values):

* ``hit``: every GET is served by the cache (the keys were read once before timing);
* ``miss``: every GET misses (round robin over 2,000 keys, ``max_size=1000``): read through
  the cache's connection and stored, the least recently used evicted;
* ``hit_50tasks`` (trio_maint only): 50 tasks hitting the cache at once.

Per case: GETs per second, the client's CPU time per GET, and the latency of single GETs
(p50 and p99, microseconds, every call timed). ``trio_maint`` and ``redis-py`` are measured
with and without their cache in the same rounds, the order rotated every round.

redis-py refuses its cache on servers older than Redis 7.4 (``CacheProxyConnection.
MIN_ALLOWED_VERSION``, a compatibility policy); the tests' redis-server is 7.0, so the
benchmark lowers that constant to 6.0.0: what redis-py sends (``CLIENT TRACKING ON``, RESP3
invalidation pushes) exists since Redis 6, and GETs behave the same.

Memory: ``tracemalloc`` measures what 20,000 cached GET entries (100-byte values, keys
``mem:<n>``) add to each client's heap; trio_maint's own estimate (``CacheStats.bytes``, the
``max_bytes`` budget) is printed next to it.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

import trio

import trio_maint
from trio_maint.testing import RedisServer

from ._common import fmt, parse_args, percentile, print_table, summarize, write_json

CASES = ("hit", "miss", "hit_50tasks")
VALUE = b"v" * 100
HOT_KEYS = 100
COLD_KEYS = 2000
MEMORY_ENTRIES = 20_000
OFF = trio_maint.MaintConfig(mode="disabled")


def redis_py_available() -> bool:
    try:
        import redis.connection
        from redis.cache import CacheConfig  # noqa: F401
    except ImportError:
        return False
    # See the module doc: redis-py's cache on the tests' Redis 7.0.
    redis.connection.CacheProxyConnection.MIN_ALLOWED_VERSION = "6.0.0"
    return True


async def _fill(url: str) -> None:
    async with trio_maint.open_redis(url, maintenance=OFF) as r:
        await r.flushdb()
        pipe = r.pipeline(transaction=False)
        for i in range(max(HOT_KEYS, COLD_KEYS)):
            pipe.set(f"k:{i}", VALUE)
        for i in range(MEMORY_ENTRIES):
            pipe.set(f"mem:{i}", VALUE)
        await pipe.execute()


def _result(ops: int, elapsed: float, cpu: float, lat: list[int]) -> dict[str, float]:
    lat_us = [x / 1000 for x in lat]
    return {
        "ops_s": ops / elapsed,
        "cpu_us": cpu / ops * 1e6,
        "p50_us": statistics.median(lat_us) if lat_us else 0.0,
        "p99_us": percentile(lat_us, 99) or 0.0,
    }


async def _trio_case(url: str, case: str, cached: bool, duration: float) -> dict[str, float]:
    size = 1000 if case == "miss" else 10_000
    config = trio_maint.CacheConfig(max_size=size) if cached else None
    async with trio_maint.open_redis(url, maintenance=OFF, cache=config, pool_size=60) as r:
        if r.cache is not None:
            while not r.cache.machine.serving:
                await trio.sleep(0.01)
        keys = [f"k:{i}" for i in range(COLD_KEYS if case == "miss" else HOT_KEYS)]
        for key in keys[:HOT_KEYS]:
            await r.get(key)
        if case == "hit_50tasks":
            count = 0
            stop = False

            async def task(offset: int) -> None:
                nonlocal count
                i = offset
                while not stop:
                    await r.get(keys[i % HOT_KEYS])
                    i += 1
                    count += 1

            cpu0, t0 = time.process_time(), time.perf_counter()
            async with trio.open_nursery() as nursery:
                for n in range(50):
                    nursery.start_soon(task, n)
                await trio.sleep(duration)
                stop = True
            return _result(count, time.perf_counter() - t0, time.process_time() - cpu0, [])
        lat: list[int] = []
        ops = 0
        n = len(keys)
        clock = time.perf_counter_ns
        cpu0, t0 = time.process_time(), time.perf_counter()
        end = t0 + duration
        while time.perf_counter() < end:
            for _ in range(200):
                s = clock()
                await r.get(keys[ops % n])
                lat.append(clock() - s)
                ops += 1
        return _result(ops, time.perf_counter() - t0, time.process_time() - cpu0, lat)


def _redis_py_case(
    host: str, port: int, case: str, cached: bool, duration: float
) -> dict[str, float]:
    import redis
    from redis.cache import CacheConfig

    size = 1000 if case == "miss" else 10_000
    kwargs: dict[str, Any] = {"cache_config": CacheConfig(max_size=size)} if cached else {}
    client = redis.Redis(host=host, port=port, protocol=3, **kwargs)
    try:
        keys = [f"k:{i}" for i in range(COLD_KEYS if case == "miss" else HOT_KEYS)]
        for key in keys[:HOT_KEYS]:
            client.get(key)
        lat: list[int] = []
        ops = 0
        n = len(keys)
        clock = time.perf_counter_ns
        cpu0, t0 = time.process_time(), time.perf_counter()
        end = t0 + duration
        while time.perf_counter() < end:
            for _ in range(200):
                s = clock()
                client.get(keys[ops % n])
                lat.append(clock() - s)
                ops += 1
        return _result(ops, time.perf_counter() - t0, time.process_time() - cpu0, lat)
    finally:
        client.close()


async def _trio_memory(url: str) -> dict[str, float]:
    config = trio_maint.CacheConfig(max_size=MEMORY_ENTRIES * 2)
    async with trio_maint.open_redis(url, maintenance=OFF, cache=config) as r:
        cache = r.cache
        assert cache is not None
        while not cache.machine.serving:
            await trio.sleep(0.01)
        await r.get("k:0")
        cache.clear()
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for i in range(MEMORY_ENTRIES):
            await r.get(f"mem:{i}")
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
        stats = cache.stats()
        return {
            "entries": stats.entries,
            "bytes_per_entry": grown / stats.entries,
            "counted_per_entry": stats.bytes / stats.entries,
        }


def _redis_py_memory(host: str, port: int) -> dict[str, float]:
    import redis
    from redis.cache import CacheConfig

    client = redis.Redis(
        host=host, port=port, protocol=3, cache_config=CacheConfig(max_size=MEMORY_ENTRIES * 2)
    )
    try:
        client.get("k:0")
        cache = client.get_cache()
        assert cache is not None
        cache.flush()
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for i in range(MEMORY_ENTRIES):
            client.get(f"mem:{i}")
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
        return {"entries": cache.size, "bytes_per_entry": grown / cache.size}
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__ or "", argv)
    use_redis_py = not args.no_redis_py and redis_py_available()
    variants = ["trio_maint cached", "trio_maint uncached"]
    if use_redis_py:
        variants += ["redis-py cached", "redis-py uncached"]
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    memory: dict[str, dict[str, float]] = {}
    with RedisServer() as server:
        host, port = server.address
        url = f"{server.url}/0"
        trio.run(_fill, url)
        for round_no in range(args.rounds):
            for case in CASES:
                names = [v for v in variants if case != "hit_50tasks" or "trio_maint" in v]
                shift = round_no % len(names)
                for name in names[shift:] + names[:shift]:
                    cached = name.endswith(" cached")
                    if name.startswith("trio_maint"):
                        result = trio.run(_trio_case, url, case, cached, args.duration)
                    else:
                        result = _redis_py_case(host, port, case, cached, args.duration)
                    samples.setdefault((name, case), []).append(result)
            print(f"round {round_no + 1}/{args.rounds} done", flush=True)
        memory["trio_maint"] = trio.run(_trio_memory, url)
        if use_redis_py:
            memory["redis-py"] = _redis_py_memory(host, port)

    cases: dict[str, Any] = {}
    rows = []
    for case in CASES:
        entry: dict[str, Any] = {}
        for name in variants:
            runs = samples.get((name, case))
            if not runs:
                continue
            entry[name] = {k: summarize([r[k] for r in runs]) for k in runs[0]}
            s = entry[name]
            rows.append(
                [
                    case,
                    name,
                    f"{fmt(s['ops_s']['median'])} ±{s['ops_s']['spread_pct']}%",
                    fmt(s["cpu_us"]["median"], 2),
                    fmt(s["p50_us"]["median"], 1) if case != "hit_50tasks" else "-",
                    fmt(s["p99_us"]["median"], 1) if case != "hit_50tasks" else "-",
                ]
            )
        cases[case] = entry
    print_table(
        "cached GET, one redis-server (median ±spread over rounds)",
        ["case", "client", "GET/s", "CPU µs/GET", "p50 µs", "p99 µs"],
        rows,
    )
    print_table(
        f"memory per cached entry ({MEMORY_ENTRIES:,} GETs of 100-byte values, tracemalloc)",
        ["client", "bytes/entry", "counted by CacheStats"],
        [
            [
                name,
                fmt(m["bytes_per_entry"]),
                fmt(m["counted_per_entry"]) if "counted_per_entry" in m else "-",
            ]
            for name, m in memory.items()
        ],
    )
    payload: dict[str, Any] = {
        "unit": "GET/s, µs",
        "variants": variants,
        "skipped": {}
        if use_redis_py
        else {"redis-py": "not installed (it is installed only by `nox -s bench`)"},
        "cases": cases,
        "memory": memory,
    }
    write_json("cache", args, payload)
    return payload


if __name__ == "__main__":
    main()
