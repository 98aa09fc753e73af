"""Cluster throughput: trio_maint's cluster client against redis-py's asyncio
``redis.asyncio.cluster.RedisCluster`` (hiredis parser), on the same local cluster in the
same run.

The cluster is ``trio_maint.testing.LocalCluster``: 3 masters, no replicas, real
``redis-server`` processes in cluster mode on free loopback ports. The keys are
``bench:<n>`` for n < 3,000, which hash to slots spread over the whole range (so over all
three masters). Cases (ops = user commands):

* ``seq_get``: 1 task, sequential GET of a different key each time (latency-bound);
* ``pool50_setget``: 50 tasks, each doing SET then GET of a key, every task walking the
  keys from its own offset (pools of 50 connections per node);
* ``pipeline100``: 1 task, non-transactional pipelines of 100 GETs over 100 consecutive
  keys (about a third on each master: every pipeline is split over the three nodes and
  its replies reassembled in order);
* ``pipeline100_set``: as ``pipeline100``, with SETs.

Each round runs both clients on every case (order rotated every round), each measurement
for ``--duration`` seconds after a short warm-up; maintenance handling is disabled in
trio_maint (a plain redis-server refuses the opt-in; its cost is bench_maintenance's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

import trio_maint
from trio_maint.testing import LocalCluster

from ._common import fmt, parse_args, print_table, summarize, write_json

CASES = ("seq_get", "pool50_setget", "pipeline100", "pipeline100_set")
TASKS = 50
NKEYS = 3000
KEYS = [f"bench:{n}" for n in range(NKEYS)]
VALUE = b"v" * 16
PIPELINE = 100

#: ``(ops/s, client CPU microseconds per op)`` of one timed measurement.
Sample = tuple[float, float]

#: A case body: called with a running counter (the task's position in KEYS), returns ops.
Body = Callable[[int], Awaitable[int]]


def _ntasks(case: str) -> int:
    return TASKS if case == "pool50_setget" else 1


def _sample(done: int, start: float, cpu: float) -> Sample:
    elapsed = time.perf_counter() - start
    cpu_used = time.process_time() - cpu
    return done / elapsed, cpu_used / max(done, 1) * 1e6


def _bodies(client: Any) -> dict[str, Body]:
    """The case bodies, written once for both clients (the calls are the same)."""

    async def seq_get(i: int) -> int:
        await client.get(KEYS[i % NKEYS])
        return 1

    async def setget(i: int) -> int:
        key = KEYS[i % NKEYS]
        await client.set(key, VALUE)
        await client.get(key)
        return 2

    async def pipeline_get(i: int) -> int:
        pipe = client.pipeline()
        first = (i * PIPELINE) % NKEYS
        for key in KEYS[first : first + PIPELINE]:
            pipe.get(key)
        await pipe.execute()
        return PIPELINE

    async def pipeline_set(i: int) -> int:
        pipe = client.pipeline()
        first = (i * PIPELINE) % NKEYS
        for key in KEYS[first : first + PIPELINE]:
            pipe.set(key, VALUE)
        await pipe.execute()
        return PIPELINE

    return {
        "seq_get": seq_get,
        "pool50_setget": setget,
        "pipeline100": pipeline_get,
        "pipeline100_set": pipeline_set,
    }


async def _fill(client: Any) -> None:
    for first in range(0, NKEYS, PIPELINE):
        pipe = client.pipeline()
        for key in KEYS[first : first + PIPELINE]:
            pipe.set(key, VALUE)
        await pipe.execute()


# ---------------------------------------------------------------------------- trio_maint


async def _trio_timed(ntasks: int, duration: float, body: Body) -> Sample:
    done = 0
    deadline = 0.0

    async def worker(offset: int) -> None:
        nonlocal done
        n = 0
        i = offset
        while time.perf_counter() < deadline:
            n += await body(i)
            i += 1
        done += n

    cpu = time.process_time()
    start = time.perf_counter()
    deadline = start + duration
    async with trio.open_nursery() as nursery:
        for t in range(ntasks):
            nursery.start_soon(worker, t * (NKEYS // ntasks))
    return _sample(done, start, cpu)


async def _trio_maint_case(url: str, case: str, duration: float, fill: bool) -> Sample:
    ntasks = _ntasks(case)
    async with trio_maint.open_redis_cluster(
        url, pool_size=ntasks, maintenance=trio_maint.MaintConfig(mode="disabled")
    ) as rc:
        if fill:
            await _fill(rc)
        body = _bodies(rc)[case]
        await _trio_timed(ntasks, min(0.2, duration), body)  # warm-up: dial every node
        return await _trio_timed(ntasks, duration, body)


# ------------------------------------------------------------------------------ redis-py


def redis_py_available() -> bool:
    try:
        import redis.asyncio.cluster  # noqa: F401
    except ImportError:
        return False
    return True


def redis_py_parser() -> str:
    from redis.utils import HIREDIS_AVAILABLE

    return "hiredis" if HIREDIS_AVAILABLE else "python"


async def _redis_py_case(host: str, port: int, case: str, duration: float) -> Sample:
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    ntasks = _ntasks(case)
    rc = AsyncRedisCluster(host=host, port=port, max_connections=ntasks)
    try:
        await rc.initialize()
        body = _bodies(rc)[case]

        async def run(seconds: float) -> Sample:
            done = 0
            deadline = 0.0

            async def worker(offset: int) -> None:
                nonlocal done
                n = 0
                i = offset
                while time.perf_counter() < deadline:
                    n += await body(i)
                    i += 1
                done += n

            cpu = time.process_time()
            start = time.perf_counter()
            deadline = start + seconds
            await asyncio.gather(*(worker(t * (NKEYS // ntasks)) for t in range(ntasks)))
            return _sample(done, start, cpu)

        await run(min(0.2, duration))
        return await run(duration)
    finally:
        await rc.aclose()


# ---------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__ or "", argv)
    use_redis_py = not args.no_redis_py and redis_py_available()
    clients = ["trio_maint"] + (["redis-py"] if use_redis_py else [])
    samples: dict[tuple[str, str], list[float]] = {(c, k): [] for c in clients for k in CASES}
    cpu: dict[tuple[str, str], list[float]] = {(c, k): [] for c in clients for k in CASES}
    with LocalCluster(masters=3, replicas=0) as cluster:
        host, port = cluster.startup_nodes[0]
        fill = True
        for round_no in range(args.rounds):
            for case in CASES:
                order = clients[round_no % len(clients) :] + clients[: round_no % len(clients)]
                for client in order:
                    if client == "trio_maint":
                        rate, cpu_us = trio.run(
                            _trio_maint_case, cluster.url, case, args.duration, fill
                        )
                        fill = False
                    else:
                        rate, cpu_us = asyncio.run(_redis_py_case(host, port, case, args.duration))
                    samples[(client, case)].append(rate)
                    cpu[(client, case)].append(cpu_us)
            print(f"round {round_no + 1}/{args.rounds} done", flush=True)

    results: dict[str, Any] = {}
    rows = []
    for case in CASES:
        entry: dict[str, Any] = {}
        for client in clients:
            entry[client] = summarize(samples[(client, case)])
            entry[client]["cpu_us_per_op"] = summarize(cpu[(client, case)])
        ratios: dict[str, float | None] = {
            "trio_maint/redis-py": None,
            "cpu redis-py/trio_maint": None,
        }
        if use_redis_py:
            ours, theirs = entry["trio_maint"], entry["redis-py"]
            ratios["trio_maint/redis-py"] = round(ours["median"] / theirs["median"], 3)
            ratios["cpu redis-py/trio_maint"] = round(
                theirs["cpu_us_per_op"]["median"] / ours["cpu_us_per_op"]["median"], 3
            )
        entry["ratios"] = ratios
        results[case] = entry
        row = [case]
        for client in ("trio_maint", "redis-py"):
            s = entry.get(client)
            row.append("-" if s is None else f"{fmt(s['median'])} ±{s['spread_pct']}%")
        for client in ("trio_maint", "redis-py"):
            c = entry.get(client, {}).get("cpu_us_per_op")
            row.append("-" if c is None else f"{fmt(c['median'], 2)} ±{c['spread_pct']}%")
        row += [
            fmt(ratios["trio_maint/redis-py"], 2),
            fmt(ratios["cpu redis-py/trio_maint"], 2),
        ]
        rows.append(row)
    print_table(
        "cluster (3 masters): ops/s and client CPU µs/op (median ±spread over rounds)",
        [
            "case",
            "trio_maint ops/s",
            "redis-py ops/s",
            "trio_maint µs/op",
            "redis-py µs/op",
            "÷redis-py",
            "CPU redis-py÷",
        ],
        rows,
    )
    payload: dict[str, Any] = {
        "unit": "ops/s",
        "cluster": {"masters": 3, "replicas": 0, "keys": NKEYS},
        "clients": clients,
        "skipped": {}
        if use_redis_py
        else {
            "redis-py": "--no-redis-py"
            if args.no_redis_py
            else "not installed (it is installed only by `nox -s bench`)"
        },
        "redis_py_parser": redis_py_parser() if use_redis_py else None,
        "notes": "ratios: trio_maint/redis-py of ops/s medians; 'cpu redis-py/trio_maint' is "
        "redis-py's client CPU per op over trio_maint's (above 1: trio_maint cheaper)",
        "cases": results,
    }
    write_json("cluster", args, payload)
    return payload


if __name__ == "__main__":
    main()
